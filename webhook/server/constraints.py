"""Gatekeeper's constraint kinds for ``serve --import gatekeeper``: one dynamic informer per served kind.

Gatekeeper's controller creates one CRD per ConstraintTemplate (``<kind lower>.constraints.gatekeeper.sh``)
and deletes it with the template, so the constraint kinds are not known in advance. Discovery
(:func:`constraint_kinds`) lists the resources the API server serves in ``constraints.gatekeeper.sh``;
:class:`ConstraintInformers` watches each through the app's
:class:`~webhook.informer.dynamic.DynamicInformerFactory` (one budget and one LIST/WATCH per GVR with
``spec.references`` and the background audit) from the discovery that finds it, and stops it at the
first discovery that no longer does, after telling the import handler that its constraints are gone
(their policies leave the index with them).
"""

from __future__ import annotations

import inspect
import logging

from webhook.formats.kinds import CONSTRAINT_GROUP, ImportKind, constraint_import_kind
from webhook.informer import SharedInformer
from webhook.informer.dynamic import BudgetExceededError, DynamicInformerFactory
from webhook.informer.gvr import GVR, DiscoverySnapshot
from webhook.informer.handlers import HandlerRegistration, ResourceEventHandler

__all__ = ["OWNER", "ConstraintInformers", "constraint_kinds"]

log = logging.getLogger("tollgate.imports")

#: The holder name of the constraint informers in the dynamic factory.
OWNER = "imports:gatekeeper-constraints"


def constraint_kinds(snapshot: DiscoverySnapshot) -> dict[ImportKind, str]:
    """Every constraint kind the API server serves with list and watch, in its first served version."""
    out: dict[ImportKind, str] = {}
    for version in snapshot.versions.get(CONSTRAINT_GROUP, ()):
        for r in snapshot.resources.get((CONSTRAINT_GROUP, version), ()):
            kind = constraint_import_kind(r.kind)
            if {"list", "watch"} <= r.verbs and kind not in out and r.name == kind.plural:
                out[kind] = version
    return out


class ConstraintInformers:
    """The constraint kinds' informers, held in a dynamic informer factory while their kind is served.

    Args:
        factory: the app's dynamic informer factory.
        handler: the import handler (receives every constraint's notifications).
    """

    def __init__(self, factory: DynamicInformerFactory, handler: ResourceEventHandler) -> None:
        self.factory = factory
        self.handler = handler
        self._running: dict[str, tuple[GVR, SharedInformer, HandlerRegistration]] = {}

    @property
    def kinds(self) -> list[str]:
        """The constraint kinds watched."""
        return sorted(self._running)

    def synced(self) -> bool:
        """Every watched kind's informer has synced and delivered its list to the import handler."""
        return all(inf.has_synced() and reg.has_synced() for _, inf, reg in self._running.values())

    async def start(self, kind: ImportKind, version: str) -> SharedInformer | None:
        """Watch ``kind`` in ``version`` (None: the factory's budget refused it; it is logged)."""
        if kind.kind in self._running:
            return self._running[kind.kind][1]
        gvr = GVR(kind.group, version, kind.plural)
        try:
            inf = await self.factory.acquire(gvr, OWNER)
        except BudgetExceededError as e:
            log.error("constraint kind %s is not imported: %s", kind.kind, e)
            return None
        reg = inf.add_event_handler(self.handler, name="imports")
        self._running[kind.kind] = (gvr, inf, reg)
        return inf

    async def retire(self, served: set[str]) -> list[str]:
        """Stop watching every kind not in ``served``; its constraints are deleted from the import handler first.

        Returns:
            The kinds stopped.
        """
        gone = [k for k in self._running if k not in served]
        for kind in gone:
            gvr, inf, reg = self._running.pop(kind)
            await inf.remove_event_handler(reg)
            for obj in inf.indexer.list():
                result = self.handler.on_delete(obj)
                if inspect.isawaitable(result):
                    await result
            await self.factory.release(gvr, OWNER)
            log.info("constraint kind %s is no longer served: its informer stopped", kind)
        return gone
