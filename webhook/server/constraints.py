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
from collections.abc import Awaitable, Callable

from webhook.files.local_source import LocalDirectory
from webhook.formats.events import ImportEventHandler
from webhook.formats.kinds import CONSTRAINT_GROUP, IMPORT_KINDS, ImportKind, constraint_import_kind, import_kind_of
from webhook.informer import SharedInformer
from webhook.informer.dynamic import BudgetExceededError, DynamicInformerFactory
from webhook.informer.gvr import GVR, DiscoverySnapshot
from webhook.informer.handlers import HandlerRegistration
from webhook.server.policy_events import ImportOffLoop

__all__ = ["OWNER", "ConstraintInformers", "constraint_kinds", "local_discovery_with_constraints"]

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


def local_discovery_with_constraints(directory: Callable[[], LocalDirectory], max_age: float
                                     ) -> Callable[[], Awaitable[dict[ImportKind, str]]]:
    """``--local``: every importable kind, and each constraint kind of the directory's documents in its version.

    Args:
        directory: the ``--local`` directory's reader (shared with every file source).
        max_age: seconds a listing another source made may be reused.
    """
    async def discover() -> dict[ImportKind, str]:
        served = {k: k.versions[0] for k in IMPORT_KINDS}
        documents, _ = await directory().listing_yielding(max_age)
        for _path, doc in documents:
            kind = import_kind_of(doc)
            if kind is not None and kind.group == CONSTRAINT_GROUP and kind not in served:
                served[kind] = str(doc.get("apiVersion")).rpartition("/")[2]
        return served

    return discover


class ConstraintInformers:
    """The constraint kinds' informers, held in a dynamic informer factory while their kind is served.

    Args:
        factory: the app's dynamic informer factory.
        handler: the import handler (a retired kind's constraints are withdrawn from it).
        delivery: what the informers notify: the imported kinds' off-loop delivery around ``handler``
            (:class:`~webhook.server.policy_events.ImportOffLoop`: converted and compiled in a thread, in
            order with every other imported kind); None: ``handler`` itself.
    """

    def __init__(self, factory: DynamicInformerFactory, handler: ImportEventHandler,
                 delivery: ImportOffLoop | None = None) -> None:
        self.factory = factory
        self.handler = handler
        self.delivery: ImportEventHandler | ImportOffLoop = delivery if delivery is not None else handler
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
        reg = inf.add_event_handler(self.delivery, name="imports")
        self._running[kind.kind] = (gvr, inf, reg)
        return inf

    async def retire(self, served: set[str]) -> list[str]:
        """Stop watching every kind not in ``served``; its constraints are withdrawn from the import handler.

        The handler's registration goes first (a notification still queued for it is dropped), then every
        constraint of the kind the handler holds is deleted from it, so none outlives its kind.

        Returns:
            The kinds stopped.
        """
        gone = [k for k in self._running if k not in served]
        for kind in gone:
            gvr, inf, reg = self._running.pop(kind)
            await inf.remove_event_handler(reg)
            await self.factory.release(gvr, OWNER)
            for imported in self.handler.imported():
                if imported.binding is not None and imported.binding.kind == kind:
                    # Through the delivery, in order behind the notifications it still holds (the template's
                    # deletion): a direct delete could be overtaken and the constraint filed again.
                    done = self.delivery.on_delete({"apiVersion": f"{CONSTRAINT_GROUP}/{gvr.version}", "kind": kind,
                                                    "metadata": {"name": imported.binding.name}})
                    if inspect.isawaitable(done):
                        await done
            log.info("constraint kind %s is no longer served: its informer stopped", kind)
        return gone
