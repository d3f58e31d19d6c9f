"""Keep the imported policies in step with the source objects' informer notifications (pure; no I/O).

:class:`ImportEventHandler` is a client-go ``ResourceEventHandler`` for the informers of the imported
kinds (:mod:`.kinds`). It holds the source objects in a :class:`~webhook.formats.catalog.Catalog`
and, on every add, update or delete, converts again what depends on the object (a binding; a policy's
bindings; a Kyverno policy) and passes the resulting ``ClusterAdmissionPolicy`` objects on as policy
notifications to the handlers a policy informer feeds (the index's
:class:`~webhook.policy.events.PolicyEventHandler`, the references, the background audit): an
imported policy is filed, compiled and evaluated like any other. Each change is passed on once: an
unchanged conversion is not repeated. Problems and notes are logged when they change (the source
objects belong to the API server or to Kyverno: no status is written to them).

Off the event loop: converting compiles every expression (to find the libraries it calls), and the
index compiles the result; with 160 validations that held the loop 9.5 s. So each notification is
handled in three steps: :meth:`ImportEventHandler.changed` / :meth:`~ImportEventHandler.removed`
(the catalog, on the loop), :meth:`~ImportEventHandler.convert` (pure, run in a thread by
:class:`~webhook.server.policy_events.ImportOffLoop`) and :meth:`~ImportEventHandler.apply` (what
to pass on, on the loop, to handlers that may be async: the index's compiles off the loop). The
synchronous ``on_add``/``on_update``/``on_delete`` run the three in line (tests, sync handlers).

Last good version: a change that makes a source's match rules unreadable (a typo the API server
would refuse, ``operator: Notin``, ``spec: []``, ``matchResources: "x"``:
:attr:`~webhook.formats.imported.Imported.match_unreadable`) does not replace what is served: the
source's last conversion whose match rules could be read keeps serving, and the problem is logged
and reported (:meth:`ImportEventHandler.imported`, :attr:`ImportEventHandler.kept`), as a ``--local``
file that stops parsing keeps its last good objects (:mod:`webhook.files.local_source`). With no such
version (the first one read is malformed), the conversion itself is served: it selects what can be
read, every request when nothing can, answered per its failurePolicy. Never fail open.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from webhook.formats.catalog import Catalog
from webhook.formats.imported import Imported, SourceRef

__all__ = ["ImportEventHandler", "Notification", "PolicyHandler"]

log = logging.getLogger("tollgate.imports")


class PolicyHandler(Protocol):
    """What a policy informer's handlers implement (client-go ``ResourceEventHandler``)."""

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> object:
        """A policy object appeared (an async handler returns an awaitable)."""

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> object:
        """A policy object changed."""

    def on_delete(self, obj: Any) -> object:
        """A policy object went away."""


@dataclass(frozen=True, slots=True)
class Notification:
    """One policy notification to pass on: the handler method (``on_add``, ``on_update``, ``on_delete``), its args."""

    method: Literal["on_add", "on_update", "on_delete"]
    args: tuple[Any, ...]


class ImportEventHandler:
    """Source notifications in, imported-policy notifications out.

    Args:
        handlers: receive the imported policies' notifications (more with :meth:`add_handler`).

    Not thread-safe: one writer (the informers' handler tasks on one event loop).
    """

    #: Runs on the event loop (the informer's ``sync_calls``): its handlers maintain the index the request
    #: path reads.
    sync_calls = "loop"

    def __init__(self, handlers: Iterable[PolicyHandler] = ()) -> None:
        self.catalog = Catalog()
        self._handlers: list[PolicyHandler] = list(handlers)
        self._served: dict[str, dict[str, Any]] = {}  # key → the object passed on
        self._imported: dict[str, Imported] = {}
        self._key_of: dict[SourceRef, str] = {}  # a binding or Kyverno policy → the key it gives
        self._readable: dict[SourceRef, Imported] = {}  # its last conversion served whose match rules were read
        #: Keys serving their last good version (their current conversion's match rules cannot be read).
        self.kept: set[str] = set()

    def add_handler(self, handler: PolicyHandler) -> None:
        """Pass notifications to ``handler`` too (from now on; add handlers before the informers start)."""
        self._handlers.append(handler)

    def objects(self) -> list[dict[str, Any]]:
        """Every imported policy object currently served, by key (what a policy informer's store would list)."""
        return [self._served[k] for k in sorted(self._served)]

    def imported(self) -> list[Imported]:
        """Every current conversion, by key (problems and notes included)."""
        return [self._imported[k] for k in sorted(self._imported)]

    @property
    def handlers(self) -> tuple[PolicyHandler, ...]:
        """The handlers notifications are passed on to, in order."""
        return tuple(self._handlers)

    # -- in three steps: what changed (on the loop), converting (pure: anywhere), what to pass on (on the loop) --

    def changed(self, obj: dict[str, Any]) -> list[SourceRef]:
        """Record an added or updated source object; the sources whose conversion depends on it, in order."""
        ref = self.catalog.put(obj)
        return sorted(self.catalog.affected(ref)) if ref is not None else []

    def removed(self, obj: Any) -> list[SourceRef]:
        """Forget a deleted source object (a tombstone's last known state is used); the sources to convert again."""
        final = obj if isinstance(obj, dict) else getattr(obj, "obj", None)
        if not isinstance(final, dict):
            return []
        ref = self.catalog.remove(final)
        return sorted(self.catalog.affected(ref)) if ref is not None else []

    def convert(self, sources: list[SourceRef]) -> list[tuple[SourceRef, Imported | None]]:
        """Each source's conversion (None: it gives no policy now). Reads the catalog only.

        The costly step (each expression is compiled to find the libraries it calls): a caller may run it
        in a thread as long as nothing changes the catalog meanwhile
        (:class:`~webhook.server.policy_events.ImportOffLoop` holds a lock over all three steps).
        """
        return [(source, self.catalog.convert(source)) for source in sources]

    def apply(self, converted: list[tuple[SourceRef, Imported | None]], *, initial: bool) -> list[Notification]:
        """File the conversions; the policy notifications to pass on, in order (each change once)."""
        out: list[Notification] = []
        for source, imported in converted:
            previous_key = self._key_of.get(source)
            if previous_key is not None and (imported is None or imported.key != previous_key):
                out += self._withdraw(source, previous_key)
            if imported is not None and imported.match_unreadable and self._keep(source, imported):
                continue
            if imported is not None:
                out += self._serve(source, imported, initial=initial)
        return out

    def deliver(self, notifications: list[Notification]) -> None:
        """Pass ``notifications`` on to every handler, synchronously.

        Handlers that return awaitables need :class:`~webhook.server.policy_events.ImportOffLoop` instead.
        """
        for n in notifications:
            for h in self._handlers:
                getattr(h, n.method)(*n.args)

    # -- a synchronous ResourceEventHandler: the three steps in line -------------------------------------------

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        """A source object appeared: convert what depends on it."""
        self.deliver(self.apply(self.convert(self.changed(obj)), initial=is_in_initial_list))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """A source object changed: convert what depends on it (a binding's old policy name, too)."""
        self.deliver(self.apply(self.convert(self.changed(new)), initial=False))

    def on_delete(self, obj: Any) -> None:
        """A source object went away (a tombstone's last known state is used): withdraw or convert again."""
        self.deliver(self.apply(self.convert(self.removed(obj)), initial=False))

    def _keep(self, source: SourceRef, imported: Imported) -> bool:
        """Keep serving the last good version of ``source`` instead of ``imported``, if there is one."""
        last = self._readable.get(source)
        if last is None or last.key != imported.key:
            return False
        key = imported.key
        before = self._imported.get(key)
        self._imported[key] = imported
        if key not in self.kept or before is None or before.problems != imported.problems:
            log.warning("imported policy keeps its last good version: its match rules cannot be read: %s",
                        "; ".join(str(p) for p in imported.problems), extra={"policy": key})
        self.kept.add(key)
        return True

    def _withdraw(self, source: SourceRef, key: str) -> list[Notification]:
        self._key_of.pop(source, None)
        self._readable.pop(source, None)
        self.kept.discard(key)
        self._imported.pop(key, None)
        gone = self._served.pop(key, None)
        if gone is None:
            return []
        log.info("imported policy withdrawn", extra={"policy": key})
        return [Notification("on_delete", (gone,))]

    def _serve(self, source: SourceRef, imported: Imported, *, initial: bool) -> list[Notification]:
        key = imported.key
        self._key_of[source] = key
        if imported.missing_policy:
            self._readable.pop(source, None)  # deleted on purpose: nothing to keep (as on the API server)
        elif not imported.match_unreadable:
            self._readable[source] = imported
        if key in self.kept:
            self.kept.discard(key)
            log.info("imported policy: its match rules read again", extra={"policy": key})
        before = self._imported.get(key)
        self._imported[key] = imported
        old = self._served.get(key)
        if old == imported.obj:
            return []
        self._served[key] = imported.obj
        if before is None or before.notes != imported.notes:
            for note in imported.notes:
                log.info("imported policy: %s", note, extra={"policy": key})
        if old is None:
            return [Notification("on_add", (imported.obj, initial))]
        return [Notification("on_update", (old, imported.obj))]
