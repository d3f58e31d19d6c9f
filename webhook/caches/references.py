"""The informers behind ``spec.references``: one per referenced resource, held while a policy names it.

A policy's ``spec.references`` (see :class:`~webhook.policy.model.Reference`)
names the resources its CEL reads with ``resource.Get``/``resource.List``.
:class:`ReferenceInformers` is a handler on the policy informers: when a policy
is added or edited it acquires a dynamic informer per reference from a
:class:`~webhook.informer.dynamic.DynamicInformerFactory` (owner:
``references:<policy key>``), and releases what the policy no longer names, or everything when the
policy is deleted. The factory reference-counts owners, so two policies reading
Ingresses share one LIST/WATCH, which stops when the last of them goes. The indexes a
reference declares (``spec.references[].indexes``) are installed on the informer's Indexer
(client-go ``AddIndexers``) for ``resource.ByIndex``, and removed when no policy declares them. The
engine reads those caches through :class:`~webhook.caches.lookups.InformerLookups`;
a cache that has not synced (not started yet, refused by the budget, or its
LIST failing, e.g. for lack of RBAC) answers per the policy's ``onUnsynced``.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from webhook.informer import DeletedFinalStateUnknown, ResourceEventHandlerFuncs, SharedInformer, meta_namespace_key
from webhook.informer.dynamic import BudgetExceededError, DynamicInformerFactory
from webhook.informer.gvr import GVR
from webhook.informer.store import IndexFunc
from webhook.policy.model import PolicySpecError, Reference, ReferenceIndex, authorizer_references, parse_references
from webhook.policy.reference_indexes import index_values

log = logging.getLogger("tollgate.references")

#: Owner names in the shared factory (the background audit holds GVRs under bare policy keys).
OWNER_PREFIX = "references:"


@functools.lru_cache(maxsize=4096)
def gvr_of(reference: Reference) -> GVR:
    """The informer's GVR for a reference (the declared version is the one watched).

    Cached (a pure function of a frozen value): requests look references' informers up on every
    ``resource.Get`` and sync check, and building the GVR cost more than the lookup.
    """
    return GVR(reference.group, reference.version, reference.resource)


def _with_indexes(refs: frozenset[Reference]) -> frozenset[tuple[Reference, tuple[ReferenceIndex, ...]]]:
    return frozenset((r, r.indexes) for r in refs)


def references_of(obj: dict[str, Any]) -> frozenset[Reference]:
    """The references a raw policy object declares; none when its spec is unreadable.

    A policy whose references do not parse is not Ready and is answered per its
    failurePolicy without reading any cache, so nothing needs to run for it. A policy that names
    ``authorizer`` also reads the four RBAC kinds (:func:`~webhook.policy.model.authorizer_references`).
    """
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return frozenset()
    try:
        return frozenset(parse_references(spec)) | frozenset(authorizer_references(spec))
    except PolicySpecError:
        return frozenset()


class ReferenceInformers:
    """Acquire and release reference informers as policies come, change and go.

    Args:
        factory: where the informers come from (its budget applies; see
            :class:`~webhook.informer.dynamic.Budget`).
    """

    def __init__(self, factory: DynamicInformerFactory) -> None:
        self.factory = factory
        self._held: dict[str, frozenset[Reference]] = {}
        #: GVR → indexer names installed on its running informer.
        self._installed: dict[GVR, set[str]] = {}
        factory.add_listener(on_start=self._on_start, on_stop=lambda gvr: self._installed.pop(gvr, None))

    def informer(self, reference: Reference) -> SharedInformer | None:
        """The running informer of ``reference``, or None."""
        return self.factory.informer(gvr_of(reference))

    def wanted(self) -> frozenset[Reference]:
        """Every reference some loaded policy declares."""
        return frozenset(r for refs in self._held.values() for r in refs)

    def status(self) -> dict[str, str]:
        """``cache → synced | syncing | refused: <reason> | not running`` for every wanted reference (/readyz)."""
        out = {}
        for ref in sorted(self.wanted()):
            gvr = gvr_of(ref)
            inf = self.factory.informer(gvr)
            if inf is not None:
                out[ref.cache] = "synced" if inf.has_synced() else "syncing"
            elif gvr in self.factory.refused:
                out[ref.cache] = f"refused: {self.factory.refused[gvr]}"
            else:
                out[ref.cache] = "not running"
        return out

    def handler(self) -> ResourceEventHandlerFuncs:
        """The handler to register on the ClusterAdmissionPolicy and AdmissionPolicy informers.

        Its callbacks are async: the informer awaits them in its handler task, in event order.
        """
        async def add(obj: dict[str, Any], _initial: bool) -> None:
            await self._set(OWNER_PREFIX + meta_namespace_key(obj), references_of(obj))

        async def update(_old: dict[str, Any], new: dict[str, Any]) -> None:
            await self._set(OWNER_PREFIX + meta_namespace_key(new), references_of(new))

        async def delete(obj: dict[str, Any] | DeletedFinalStateUnknown) -> None:
            await self._set(OWNER_PREFIX + meta_namespace_key(obj), frozenset())

        return ResourceEventHandlerFuncs(add=add, update=update, delete=delete)

    async def _set(self, owner: str, references: frozenset[Reference]) -> None:
        held = self._held.get(owner, frozenset())
        if _with_indexes(references) == _with_indexes(held):
            return
        # Recorded first: an informer starting below installs the indexes its owners want (_on_start).
        if references:
            self._held[owner] = references
        else:
            self._held.pop(owner, None)
        for ref in sorted(held - references):
            await self.factory.release(gvr_of(ref), owner)
        for ref in sorted(references - held):
            try:
                await self.factory.acquire(gvr_of(ref), owner)
            except BudgetExceededError as e:
                log.warning("policy %s: reference %s not cached: %s", owner, ref.cache, e)
        for gvr in {gvr_of(r) for r in held | references}:
            inf = self.factory.informer(gvr)
            if inf is not None:
                self._sync_indexes(gvr, inf)

    def _on_start(self, gvr: GVR, informer: SharedInformer) -> None:
        self._installed[gvr] = set()
        self._sync_indexes(gvr, informer)

    def _sync_indexes(self, gvr: GVR, informer: SharedInformer) -> None:
        """Make the informer's Indexer hold exactly the indexes the loaded policies declare for ``gvr``.

        Adding an index to a running informer indexes every cached object at once (the policy's
        CEL per object, synchronously); until then ``resource.ByIndex`` errors (failurePolicy).
        """
        want = {i.indexer_name: i for refs in self._held.values() for r in refs if gvr_of(r) == gvr
                for i in r.indexes}
        have = self._installed.setdefault(gvr, set())
        for name in have - want.keys():
            informer.indexer.remove_indexer(name)
        new: dict[str, IndexFunc] = {name: functools.partial(index_values, want[name])
                                     for name in want.keys() - have}
        if new:
            informer.indexer.add_indexers(new)
        self._installed[gvr] = set(want)

    async def retry_refused(self) -> None:
        """Try again to start references the budget refused (e.g. after others were released)."""
        await self.factory.retry_refused()

    async def stop(self) -> None:
        """Stop every reference informer."""
        self._held.clear()
        await self.factory.stop()
