"""One policy's read-only view of the caches its ``spec.references`` declares (``resource.Get``/``List``)."""

from __future__ import annotations

from typing import Any

from webhook.policy.cel.library._decl import LibraryError
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.lookups import Lookups
from webhook.policy.model import Reference
from webhook.policy.vocabulary import PolicyKind

__all__ = ["References"]


class References:
    """One policy's read-only view of the caches its ``spec.references`` declares (``resource.Get``/``List``).

    Implements :class:`~webhook.policy.cel.scope.ReferenceReader` over :class:`Lookups`; never calls the API server.
    An AdmissionPolicy (a tenant's) reads only its own namespace, as its paramRef does.

    Args:
        policy: the policy whose references these are.
        lookups: the caches.
    """

    __slots__ = ("declared", "lookups", "tenant")

    def __init__(self, policy: CompiledPolicy, lookups: Lookups) -> None:
        self.declared = {(r.api_version, r.resource): r for r in policy.spec.references}
        self.lookups = lookups
        self.tenant = policy.spec.namespace if policy.spec.kind is PolicyKind.NAMESPACED else None

    def _reference(self, function: str, api_version: str, resource: str, namespace: str | None) -> Reference:
        """The declared reference; a tenant's read of another ``namespace`` (None: not a namespace read) errors."""
        ref = self.declared.get((api_version, resource))
        if ref is None:
            raise LibraryError(f"{function}: {api_version} {resource} is not in spec.references")
        if self.tenant is not None and namespace is not None and namespace != self.tenant:
            raise LibraryError(f"{function}: an AdmissionPolicy may only read its own namespace "
                                      f"{self.tenant!r}, not {namespace or 'every namespace'!r}")
        return ref

    def get(self, api_version: str, resource: str, namespace: str, name: str) -> Any:
        """See :meth:`ReferenceReader.get`: the object, or null when it is not cached."""
        ref = self._reference("resource.Get", api_version, resource, namespace)
        return self.lookups.get_object(ref, namespace, name)

    def list(self, api_version: str, resource: str, namespace: str, labels: Any) -> Any:
        """See :meth:`ReferenceReader.list`: ``{"items": [...]}`` sorted by namespace/name.

        Raises:
            LibraryError: ``labels`` is not a map of strings to strings.
        """
        ref = self._reference("resource.List", api_version, resource, namespace)
        if labels is None:
            labels = {}
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in labels.items()):
            raise LibraryError("resource.List: labels must be a map(string, string)")
        return {"items": self.lookups.list_objects(ref, namespace, labels)}

    def by_index(self, api_version: str, resource: str, index: str, value: str) -> Any:
        """See :meth:`ReferenceReader.by_index`: ``{"items": [...]}`` sorted by namespace/name.

        An AdmissionPolicy sees only the objects of its own namespace.

        Raises:
            LibraryError: the index is undeclared or not installed on the cache yet.
        """
        ref = self._reference("resource.ByIndex", api_version, resource, None)  # a tenant's results are filtered
        definition = next((i for i in ref.indexes if i.name == index), None)
        if definition is None:
            raise LibraryError(f"resource.ByIndex: {ref.cache} declares no index {index!r}")
        try:
            found = self.lookups.by_index(ref, definition, value)
        except LookupError as e:
            raise LibraryError(f"resource.ByIndex: {e}") from None
        if self.tenant is not None:
            found = [o for o in found if (o.get("metadata") or {}).get("namespace") == self.tenant]
        return {"items": found}
