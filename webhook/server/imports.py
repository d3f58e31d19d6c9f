"""The informers of the imported kinds for ``tollgate serve``: which ones, in what order, and where they deliver.

Kubernetes' admission policies and bindings and Kyverno's CEL policies
(:mod:`webhook.formats`) are watched like Tollgate's own policies, and their
:class:`~webhook.formats.events.ImportEventHandler` passes the Tollgate policies they amount to
on to the handlers a policy informer feeds: the index (compiling off the event loop), the
``spec.references`` informers, the background audit (the last two through queues of their own, as
an informer delivers to them). Converting runs off the event loop too, in order
(:class:`~webhook.server.policy_events.ImportOffLoop`).

Which kinds: in a cluster, discovery says which the API server serves, and in which version (the
first of the kind's versions it serves, :data:`~webhook.formats.kinds.IMPORT_KINDS`). A kind
it does not serve (a 1.20 server has no ValidatingAdmissionPolicy, a cluster without Kyverno no
ValidatingPolicy) is not watched, and nothing fails; a kind whose LIST is refused (RBAC) is not
watched either, and is said at error level and in ``/readyz``. Discovery is repeated every
``discovery_interval`` (every minute while a group ``--import`` asked for has no kind watched yet), so a
kind served later (Kyverno installed) is watched from then on. With
``--local`` every kind is read from the directory. In a cluster only the owners ``serve --import`` names
(``admission``, ``kyverno``; :data:`~webhook.formats.kinds.IMPORT_SOURCES`) are imported, none by
default: the API server and Kyverno enforce their own policies, and a second enforcement repeats them.
No status is ever written to these objects: they
belong to the API server or to Kyverno; their problems are the imported policies' Ready conditions
(``/readyz``, logs, ``tollgate_policies_ready``).

Order: the policy kinds are started first, the binding kinds once the policy informers have synced,
so a binding is not seen without its policy merely because its list arrived first. Gatekeeper's
constraint kinds (one CRD per ConstraintTemplate) are bindings of their templates, found by discovery
and watched through dynamic informers (:mod:`webhook.server.constraints`) that stop when the kind goes.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from webhook.aio import cancel_and_wait
from webhook.formats.events import ImportEventHandler
from webhook.formats.kinds import CONSTRAINT_GROUP, IMPORT_EXCEPTION_KINDS, IMPORT_KINDS, TEMPLATE_GROUP, ImportKind
from webhook.informer import InformerKey, ListerWatcher, SharedInformer, SharedInformerFactory
from webhook.informer.handlers import HandlerRegistration, ResourceEventHandler
from webhook.server.constraints import ConstraintInformers, constraint_kinds
from webhook.server.policy_events import ImportOffLoop
from webhook.server.sources import import_informer_key

__all__ = ["ImportSources", "QueuedHandler", "cluster_discovery", "cluster_probe", "local_discovery"]

log = logging.getLogger("tollgate.imports")

#: What is served: importable kind → the version to watch.
Served = dict[ImportKind, str]
#: Seconds to wait for the policy informers before starting the binding informers anyway.
POLICY_SYNC_WAIT = 30.0
#: Seconds between discoveries while a group ``serve --import`` asked for has no kind watched yet.
PENDING_INTERVAL = 60.0
#: Seconds the app's start waits for the first discovery before going on with it in the background.
FIRST_DISCOVERY_WAIT = 10.0
_RETRY_MIN, _RETRY_MAX = 1.0, 60.0


class QueuedHandler:
    """A policy handler (sync or async) behind a queue and a task of its own, fed synchronously.

    The import handler calls its handlers in line, on the event loop; one that awaits (the
    references, the background audit) gets its notifications through this queue instead, in
    order, as an informer would deliver them. Imported policies are few: the queue is unbounded.

    Attributes:
        failures: calls that raised (each logged).
    """

    def __init__(self, handler: ResourceEventHandler, name: str) -> None:
        self.handler = handler
        self.name = name
        self.failures = 0
        self._queue: asyncio.Queue[tuple[str, tuple[Any, ...]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        """Queue an add."""
        self._queue.put_nowait(("on_add", (obj, is_in_initial_list)))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Queue an update."""
        self._queue.put_nowait(("on_update", (old, new)))

    def on_delete(self, obj: Any) -> None:
        """Queue a delete."""
        self._queue.put_nowait(("on_delete", (obj,)))

    def start(self) -> None:
        """Start delivering (on the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"imports-{self.name}")

    async def stop(self) -> None:
        """Stop delivering; queued notifications are dropped."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            method, args = await self._queue.get()
            try:
                result = getattr(self.handler, method)(*args)
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                log.exception("%s: imported-policy handler failed on %s", self.name, method)


async def local_discovery() -> Served:
    """``--local``: every importable kind (the directory's documents of the kind, whatever their version)."""
    return {k: k.versions[0] for k in IMPORT_KINDS}


def cluster_discovery(api_client: Any, groups: frozenset[str]) -> Callable[[], Awaitable[Served]]:
    """The importable kinds of ``groups`` the API server serves with list and watch, each in its first served version.

    Args:
        api_client: the cluster's ApiClient.
        groups: the API groups imported (``IMPORT_SOURCES`` values chosen by ``serve --import``); the kinds
            of other groups are never watched, whatever the API server serves.
    """
    async def discover() -> Served:
        from webhook.informer.gvr import GVR
        from webhook.kube.discovery import Discovery

        snapshot = await Discovery(api_client).snapshot()
        served: Served = {}
        for kind in (k for k in IMPORT_KINDS + IMPORT_EXCEPTION_KINDS if k.group in groups):
            for version in kind.versions:
                r = snapshot.resource(GVR(kind.group, version, kind.plural))
                if r is not None and {"list", "watch"} <= r.verbs:
                    served[kind] = version
                    break
        if TEMPLATE_GROUP in groups:
            served.update(constraint_kinds(snapshot))
        return served

    return discover


def cluster_probe(lister_watcher_for: Callable[[InformerKey], ListerWatcher]) -> Callable[[InformerKey],
                                                                                          Awaitable[str | None]]:
    """One LIST of one object: why the kind cannot be watched (RBAC refuses it, it is gone), or None."""
    async def probe(key: InformerKey) -> str | None:
        from webhook.informer.errors import ApiStatusError
        from webhook.informer.types import ListOptions

        try:
            await lister_watcher_for(key).list(ListOptions(limit=1))
        except ApiStatusError as e:
            if e.code in (401, 403, 404):
                return str(e)
        except Exception as e:  # noqa: BLE001 - anything else is transient: the informer retries with backoff
            log.debug("probe of %s failed: %s", key.resource, e)
        return None

    return probe


class ImportSources:
    """The imported kinds' informers, started as discovery finds them; synced when their policies are loaded.

    Args:
        factory: the app's informer factory (their caches appear in ``/readyz`` with the others).
        handler: receives every imported object's notifications.
        discover: what to watch (:func:`cluster_discovery`, :func:`local_discovery`).
        probe: why a kind cannot be listed, or None (:func:`cluster_probe`); None: never probed.
        interval: seconds between discoveries (0: discover once).
        queued: handlers fed through queues (started and stopped with this object).
        wanted_groups: the API groups ``serve --import`` asked for; while one of them has no kind watched yet
            (Kyverno's CRDs not installed yet), discovery is repeated every ``min(interval,``
            :data:`PENDING_INTERVAL` ``)`` instead, so they are picked up within a minute of appearing.
        serving: whether reviews are answered yet: from then on every conversion runs off the event loop
            (:class:`~webhook.server.policy_events.ImportOffLoop`), a later-discovered kind's initial list too.
        exceptions: receives the imported exception kinds' notifications (Kyverno's CEL PolicyException:
            :data:`~webhook.formats.kinds.IMPORT_EXCEPTION_KINDS`), the server's exception cache; None: they are
            not watched. ``--local`` discovers none: the directory's PolicyException documents of either
            group reach the cache through Tollgate's own PolicyException source.
    """

    def __init__(self, factory: SharedInformerFactory, handler: ImportEventHandler, *,
                 discover: Callable[[], Awaitable[Served]],
                 probe: Callable[[InformerKey], Awaitable[str | None]] | None = None, interval: float = 0.0,
                 queued: list[QueuedHandler] | None = None, wanted_groups: frozenset[str] = frozenset(),
                 serving: Callable[[], bool] | None = None, exceptions: ResourceEventHandler | None = None) -> None:
        self.factory = factory
        self.exceptions = exceptions
        self.handler = handler
        self._delivery = ImportOffLoop(handler, serving=serving)  # every kind's informer: one lock, in order
        self._discover = discover
        self._probe = probe
        self.interval = interval
        self.wanted_groups = wanted_groups
        self.queued = list(queued or [])
        #: kind → the apiVersion watched.
        self.watching: dict[str, str] = {}
        #: kind → why it is served but not watched (its LIST was refused).
        self.refused: dict[str, str] = {}
        self.discovery_error: str | None = None
        self._informers: list[SharedInformer] = []
        self._registrations: list[HandlerRegistration] = []
        self._discovered = False
        self._task: asyncio.Task[None] | None = None
        #: Gatekeeper's constraint kinds' informers (set by the app when it has a dynamic informer factory).
        self.constraints: ConstraintInformers | None = None

    @property
    def delivery(self) -> ImportOffLoop:
        """The off-loop delivery every imported kind's informer notifies (constraint kinds' too)."""
        return self._delivery

    def synced(self) -> bool:
        """Discovery has run, and every watched kind's informer has synced and delivered its list."""
        return self._discovered and all(i.has_synced() for i in self._informers) and all(
            r.has_synced() for r in self._registrations) and (self.constraints is None or self.constraints.synced())

    def status(self) -> dict[str, Any]:
        """For ``/readyz``: what is watched, what is refused, the last discovery error, the policies' problems.

        ``keptLastGood``: the imported policies serving their last good version, their sources' current
        match rules being unreadable (:class:`~webhook.formats.events.ImportEventHandler`).
        """
        out: dict[str, Any] = {"watching": dict(sorted(self.watching.items()))}
        if self.refused:
            out["refused"] = dict(sorted(self.refused.items()))
        if self.discovery_error:
            out["discoveryError"] = self.discovery_error
        problems = {i.key: [str(p) for p in i.problems] for i in self.handler.imported() if i.problems}
        if problems:
            out["problems"] = problems
        if self.handler.kept:
            out["keptLastGood"] = sorted(self.handler.kept)  # their match rules cannot be read: the last good serves
        return out

    async def start(self) -> None:
        """Start the queued handlers, discover, start the policy kinds' informers; the rest goes on in a task.

        Call after the factory started its own informers. The first discovery is awaited (at most
        :data:`FIRST_DISCOVERY_WAIT` seconds), so the app starts with what it imports; the binding
        informers start in the task once the policy informers have synced.
        """
        for q in self.queued:
            q.start()
        first: Served | None = None
        try:
            first = await asyncio.wait_for(self._discover(), FIRST_DISCOVERY_WAIT)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - retried in the task; reviews wait (policiesLoaded is false)
            self._failed(e, _RETRY_MIN)
        started: list[SharedInformer] = []
        if first is not None:
            started = [inf for kind in self._new(first, bindings=False)
                       if (inf := await self._start(kind, first[kind])) is not None]
            if not self._new(first, bindings=True):
                self._discovered = True  # no binding kind waits for them
        self._task = asyncio.get_running_loop().create_task(self._run(first, started), name="imports-discovery")

    async def stop(self) -> None:
        """Stop discovering and delivering (the informers are the factory's: it stops them)."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        for q in self.queued:
            await q.stop()

    def _failed(self, e: Exception, retry: float) -> None:
        self.discovery_error = str(e) or type(e).__name__
        log.warning("discovery of the imported kinds failed (retrying in %.0f s): %s", retry, self.discovery_error)

    def _new(self, served: Served, *, bindings: bool) -> list[ImportKind]:
        return [k for k in served if k.is_binding == bindings and k.kind not in self.watching
                and (self.exceptions is not None or k not in IMPORT_EXCEPTION_KINDS)]

    async def _bindings(self, served: Served, started: list[SharedInformer]) -> None:
        """Once the policy informers just started have synced, start the binding kinds' informers."""
        for inf in started:
            await inf.wait_for_sync(POLICY_SYNC_WAIT)
        for kind in self._new(served, bindings=True):
            await self._start(kind, served[kind])
        self._discovered = True

    def next_discovery(self) -> float:
        """Seconds until the next discovery: :data:`PENDING_INTERVAL` while a wanted group is not watched yet."""
        watched = {v.rpartition("/")[0] for v in self.watching.values()}
        if self.wanted_groups - watched:
            return min(self.interval, PENDING_INTERVAL)
        return self.interval

    async def _run(self, first: Served | None, started: list[SharedInformer]) -> None:
        if first is not None:
            await self._bindings(first, started)
            if self.interval <= 0:
                return
            await asyncio.sleep(self.next_discovery())
        retry = _RETRY_MIN
        while True:
            try:
                served = await self._discover()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - discovery is retried; reviews wait (policiesLoaded is false)
                self._failed(e, retry)
                await asyncio.sleep(retry)
                retry = min(retry * 2, _RETRY_MAX)
                continue
            retry, self.discovery_error = _RETRY_MIN, None
            policies = [inf for kind in self._new(served, bindings=False)
                        if (inf := await self._start(kind, served[kind])) is not None]
            await self._bindings(served, policies)
            if self.constraints is not None:  # a constraint kind no longer served (its template went)
                for gone in await self.constraints.retire({k.kind for k in served if k.group == CONSTRAINT_GROUP}):
                    self.watching.pop(gone, None)
            if self.interval <= 0:
                return
            await asyncio.sleep(self.next_discovery())

    async def _start(self, kind: ImportKind, version: str) -> SharedInformer | None:
        if kind.group == CONSTRAINT_GROUP:
            inf = await self.constraints.start(kind, version) if self.constraints is not None else None
            if inf is not None:
                self.watching[kind.kind] = f"{kind.group}/{version}"
            return inf
        key = import_informer_key(kind, version)
        reason = await self._probe(key) if self._probe is not None else None
        if reason is not None:
            if self.refused.get(kind.kind) != reason:
                log.error("%s is served but cannot be listed, so it is not imported: %s", kind.kind, reason)
            self.refused[kind.kind] = reason
            return None
        self.refused.pop(kind.kind, None)
        inf = self.factory.informer(key)
        if kind in IMPORT_EXCEPTION_KINDS and self.exceptions is not None:  # compiled by the exception cache
            self._registrations.append(inf.add_event_handler(self.exceptions, name="imported-exceptions"))
        else:
            self._registrations.append(inf.add_event_handler(self._delivery, name="imports"))
        self._informers.append(inf)
        self.watching[kind.kind] = f"{kind.group}/{version}"
        await inf.start()
        log.info("importing %s", kind.kind, extra={"apiVersion": f"{kind.group}/{version}"})
        return inf
