"""Per-request state every policy shares: coordinates, cache answers, activations, the deadline.

One cel-expr-python Activation is built per request and object view and shared
by every policy; ``variables`` and ``params`` are per policy through
:class:`~webhook.policy.cel.env.VariableScope`. With a compiled plan, ``object``
and ``oldObject`` are bound pruned to what the plan's programs can read
(``Plan.projections``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from webhook.policy.cel.authz import authorizer_value
from webhook.policy.cel.env import environment
from webhook.policy.lookups import Lookups
from webhook.policy.matching import View
from webhook.policy.pruning import Projection, json_size
from webhook.policy.request import RequestCoordinates

__all__ = ["RequestContext", "ephemeral_as_pod", "synthesize_pod"]


def synthesize_pod(workload: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """A Pod from a workload's pod template (template metadata + spec, workload namespace)."""
    node: Any = workload
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    if not isinstance(node, dict):
        return None
    meta = dict(node.get("metadata") or {})
    ns = (workload.get("metadata") or {}).get("namespace")
    if ns and "namespace" not in meta:
        meta["namespace"] = ns
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": node.get("spec") or {}}


def ephemeral_as_pod(obj: Any) -> Any:
    """A ``pods/ephemeralcontainers`` object as the Pod policies expect.

    Before Kubernetes 1.22 the API server sends that subresource's requests with an
    ``EphemeralContainers`` object (``metadata`` and ``ephemeralContainers``) instead of the Pod; it is
    read as a Pod whose ``spec`` holds only ``ephemeralContainers``, so policies written for the Pod
    (Pod Security's) judge the ephemeral containers. Anything else is returned as it is.
    """
    if not isinstance(obj, dict) or obj.get("kind") != "EphemeralContainers":
        return obj
    return {"apiVersion": "v1", "kind": "Pod", "metadata": obj.get("metadata") or {},
            "spec": {"ephemeralContainers": obj.get("ephemeralContainers") or []}}


class RequestContext:
    """Per-request state shared by every policy: coordinates, cache answers, activations, deadline.

    Args:
        request: the AdmissionRequest (never mutated).
        lookups: the caches.
        deadline: ``time.monotonic()`` value after which remaining policies are
            answered as evaluation errors (the webhook's ``?timeout=``); None for none.
        clock: monotonic clock (tests).
    """

    def __init__(self, request: dict[str, Any], lookups: Lookups, *, deadline: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.request = request
        # VAP's `request` variable is the AdmissionRequest without object and oldObject (the API server's
        # CreateAdmissionRequest); they are the separate `object`/`oldObject` variables. Leaving them out
        # also spares cel-expr-python converting the object a second time (it converts a variable whole).
        self.request_variable = {k: v for k, v in request.items() if k not in ("object", "oldObject")}
        self.lookups = lookups
        self.coords = RequestCoordinates.of(request)
        self.deadline = deadline
        self.clock = clock
        self._activations: dict[View, Any] = {}
        self._view_objects: dict[View, tuple[Any, Any]] = {}
        self._projections: dict[View, Projection | None] = {}
        self._projected: dict[View, tuple[Any, Any]] = {}
        self._sizes: dict[View, tuple[int, int, int]] = {}
        self._synced: dict[str, bool] = {}
        self._namespace_obj: Any = ...

    def is_synced(self, cache: str) -> bool:
        """Whether ``cache`` has synced, asked once per request so every policy sees one answer."""
        synced = self._synced.get(cache)
        if synced is None:
            synced = self._synced[cache] = self.lookups.is_synced(cache)
        return synced

    def namespace_object(self) -> dict[str, Any] | None:
        """The cached Namespace of the request (None for cluster-scoped requests or when not cached).

        None for a Namespace's own requests too, as the API server's policy dispatcher unsets the
        namespace of a Namespace object (it carries its own name).
        """
        if self._namespace_obj is ...:
            ns = self.coords.namespace if self.coords.namespaced else ""
            self._namespace_obj = self.lookups.get_namespace(ns) if ns else None
        return self._namespace_obj  # type: ignore[no-any-return]

    def past_deadline(self) -> bool:
        """Whether the request's deadline has passed."""
        return self.deadline is not None and self.clock() > self.deadline

    def _new_activation(self, obj: Any, old: Any) -> Any:
        return environment().Activation({
            "object": obj,
            "oldObject": old,
            "request": self.request_variable,
            "namespaceObject": self.namespace_object(),
            "params": None,
            "variables": None,
            "authorizer": authorizer_value(self.request.get("userInfo"), self.request),
        })

    def project(self, projections: dict[View, Projection | None] | None) -> None:
        """Bind each view's ``object``/``oldObject`` pruned by its projection (a plan's, see ``Plan.projections``).

        cel-expr-python converts a variable whole on its first access; a projection keeps only what the
        plan's programs can read (:mod:`webhook.policy.projection`). Call before the first activation.
        """
        self._projections = projections or {}
        self._projected.clear()
        self._sizes.clear()

    def view_objects(self, view: View, *, projected: bool = True) -> tuple[Any, Any]:
        """``(object, oldObject)`` of ``view``: the request's, or its templates' Pods.

        Pruned by the view's projection when one is set and ``projected`` (pruned once per request and view;
        shared, not to be modified).
        """
        if projected:
            pruned = self._projected.get(view)
            if pruned is None:
                pruned = self._projected[view] = self._pruned_sized(view, *self.view_objects(view, projected=False))
            return pruned
        whole = self._view_objects.get(view)
        if whole is None:
            if view is View.OBJECT:
                whole = (self.request.get("object"), self.request.get("oldObject"))
                if self.coords.sub_resource == "ephemeralcontainers":
                    whole = (ephemeral_as_pod(whole[0]), ephemeral_as_pod(whole[1]))
            else:
                template = self.coords.template
                assert template is not None
                obj, old = (synthesize_pod(o, template) if isinstance(o, dict) else None
                            for o in (self.request.get("object"), self.request.get("oldObject")))
                whole = (obj, old)
            self._view_objects[view] = whole
        return self._pruned(view, *whole) if projected else whole

    def is_projected(self, view: View) -> bool:
        """Whether ``view`` has a projection (then :meth:`view_size` comes with its pruning, without a walk)."""
        return self._projections.get(view) is not None

    def view_size(self, view: View) -> tuple[int, int, int]:
        """What :func:`webhook.policy.pruning.json_size` gives for :meth:`view_objects` of ``view``.

        Counted while pruning the view (:meth:`Projection.apply_sized`, once per request and view); an
        unprojected view's whole objects are walked once.

        Returns:
            ``(bytes, largest_collection, longest_string)``, as :func:`webhook.policy.budget.measure` counts them.
        """
        objects = self.view_objects(view)
        size = self._sizes.get(view)
        if size is None:
            size = self._sizes[view] = json_size(objects)
        return size

    def _pruned_sized(self, view: View, obj: Any, old: Any) -> tuple[Any, Any]:
        """:meth:`_pruned`, the pruned pair's size kept for :meth:`view_size`."""
        projection = self._projections.get(view)
        if projection is None:
            return obj, old
        pruned_obj, pruned_old, self._sizes[view] = projection.apply_sized(obj, old)
        return pruned_obj, pruned_old

    def _pruned(self, view: View, obj: Any, old: Any) -> tuple[Any, Any]:
        projection = self._projections.get(view)
        return (obj, old) if projection is None else projection.apply(obj, old)

    def activation(self, view: View) -> Any:
        """The shared activation over the request's object (or the Pods of its templates), projected if set."""
        act = self._activations.get(view)
        if act is None:
            act = self._activations[view] = self._new_activation(*self.view_objects(view))
        return act

    def activation_for(self, obj: Any) -> Any:
        """A fresh activation over an intermediate object (mutation chains), projected as the object view is."""
        return self._new_activation(*self._pruned(View.OBJECT, obj, self.request.get("oldObject")))
