"""Owners' resource rules → GVRs through discovery → the informers of a :class:`DynamicInformerFactory`.

The discovery-driven restart controller-runtime and Kyverno build on client-go's dynamic informers:
:class:`DynamicInformers` maps owners (a policy) to admission resource rules, resolves them through a
discovery snapshot into GVRs, and reconciles the factory (:mod:`webhook.informer.dynamic`). Discovery
is refreshed on a timer and, debounced, on every CustomResourceDefinition event, so a CRD that
appears starts the informers rules already asked for, and a CRD that goes away stops them.

Pure of transports: the ListerWatcher per GVR and the discovery fetch are injected
(``webhook.kube.listwatch`` and ``webhook.kube.discovery``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace

from webhook.aio import cancel_and_wait
from webhook.informer.backoff import Backoff
from webhook.informer.dynamic import BudgetExceededError, DynamicInformerFactory
from webhook.informer.gvr import GVR, DiscoverySnapshot, RuleLike, resolve_rules
from webhook.informer.handlers import ResourceEventHandlerFuncs
from webhook.informer.informer import SharedInformer
from webhook.informer.reflector import ReflectorOptions
from webhook.informer.types import ListerWatcher

log = logging.getLogger("tollgate.informer.discovered")

#: The resource whose events trigger a discovery refresh.
CRDS = GVR("apiextensions.k8s.io", "v1", "customresourcedefinitions")

#: ``(group, resource)`` never informed dynamically by default: high-churn objects no policy should
#: scan in the background and the reports the audit itself writes (as Kyverno's default
#: ``resourceFilters`` leave out Events, Leases and its own reports).
DEFAULT_EXCLUDE = frozenset({
    ("", "events"), ("events.k8s.io", "events"), ("coordination.k8s.io", "leases"),
    ("wgpolicyk8s.io", "policyreports"), ("wgpolicyk8s.io", "clusterpolicyreports"),
})


OwnerListener = Callable[[str, frozenset[GVR]], object]


class DynamicInformers:
    """Owners' resource rules → GVRs through discovery → informers of a :class:`DynamicInformerFactory`.

    Args:
        factory: where informers come from.
        discover: fetches a fresh :class:`DiscoverySnapshot` (e.g.
            ``webhook.kube.discovery.Discovery(api).snapshot``); may raise.
        refresh_interval: seconds between discovery refreshes (0 disables the timer).
        crd_informer: an informer of CustomResourceDefinitions; each event
            triggers a refresh after ``debounce`` seconds (it is started and
            stopped here).
        debounce: seconds to gather CRD events into one refresh.
        backoff_factory: backoff between failed discoveries.
        exclude: ``(group, resource)`` pairs never resolved, even when a rule names them
            (default :data:`DEFAULT_EXCLUDE`).

    Listeners added with :meth:`add_listener` hear ``(owner, gvrs)`` whenever
    an owner's resolved set of *running* GVRs changes.
    """

    def __init__(self, factory: DynamicInformerFactory, discover: Callable[[], Awaitable[DiscoverySnapshot]], *,
                 refresh_interval: float = 300.0, crd_informer: SharedInformer | None = None,
                 debounce: float = 0.5, backoff_factory: Callable[[], Backoff] = Backoff,
                 exclude: frozenset[tuple[str, str]] = DEFAULT_EXCLUDE) -> None:
        self.factory = factory
        self._exclude = exclude
        self._discover = discover
        self._interval = refresh_interval
        self._crd_informer = crd_informer
        self._debounce = debounce
        self._backoff = backoff_factory()
        self.snapshot: DiscoverySnapshot | None = None
        self._rules: dict[str, tuple[RuleLike, ...]] = {}
        self._held: dict[str, frozenset[GVR]] = {}
        self._running: dict[str, frozenset[GVR]] = {}
        self._listeners: list[OwnerListener] = []
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()
        self.refreshes = 0
        if crd_informer is not None:
            crd_informer.add_event_handler(ResourceEventHandlerFuncs(
                add=lambda _o, initial: None if initial else self._kick.set(),
                update=lambda old, new: None if old is new else self._kick.set(),
                delete=lambda _o: self._kick.set()), name="dynamic-discovery-crds", sync_calls="loop")

    def request_refresh(self) -> None:
        """Refresh discovery soon (after the debounce delay), e.g. on an external hint."""
        self._kick.set()

    def add_listener(self, listener: OwnerListener) -> None:
        """Hear ``(owner, running_gvrs)`` when an owner's running GVRs change."""
        self._listeners.append(listener)

    def gvrs(self, owner: str) -> frozenset[GVR]:
        """The GVRs ``owner`` holds whose informers are running."""
        return self._running.get(owner, frozenset())

    def wanted(self, owner: str) -> frozenset[GVR]:
        """Every GVR ``owner``'s rules resolve to (running or refused)."""
        return self._held.get(owner, frozenset())

    def refused(self, owner: str) -> dict[GVR, str]:
        """GVRs ``owner`` wants that are not running, with the reason."""
        return {g: r for g, r in self.factory.refused.items() if g in self._held.get(owner, ())}

    def owners(self) -> list[str]:
        """Every owner with rules."""
        return sorted(self._rules)

    async def want(self, owner: str, rules: Iterable[RuleLike]) -> frozenset[GVR]:
        """Set ``owner``'s rules and reconcile its informers now; returns its running GVRs.

        Before the first discovery succeeds nothing starts; the rules are
        kept and resolved by the first refresh.
        """
        async with self._lock:
            self._rules[owner] = tuple(rules)
            await self._reconcile(owner)
            return self.gvrs(owner)

    async def forget(self, owner: str) -> None:
        """Drop ``owner`` and release everything it held."""
        async with self._lock:
            self._rules.pop(owner, None)
            await self._reconcile(owner)

    async def _reconcile(self, owner: str) -> None:
        rules = self._rules.get(owner)
        if rules is None:
            want: frozenset[GVR] = frozenset()
        elif self.snapshot is None:
            return
        else:
            want = frozenset(g for g in resolve_rules(rules, self.snapshot)
                             if (g.group, g.resource) not in self._exclude)
        held = self._held.get(owner, frozenset())
        for gvr in sorted(held - want):
            await self.factory.release(gvr, owner)
        for gvr in sorted(want):
            if gvr not in held or self.factory.informer(gvr) is None:
                with contextlib.suppress(BudgetExceededError):
                    await self.factory.acquire(gvr, owner)
        if want:
            self._held[owner] = want
        else:
            self._held.pop(owner, None)
        self._publish(owner)

    def _publish(self, owner: str) -> None:
        running = frozenset(g for g in self._held.get(owner, ()) if self.factory.informer(g) is not None)
        if running == self._running.get(owner, frozenset()) and owner in self._running:
            return
        if running or owner in self._rules:
            self._running[owner] = running
        else:
            self._running.pop(owner, None)
        for listener in self._listeners:
            listener(owner, running)

    async def refresh(self) -> DiscoverySnapshot:
        """Fetch discovery and re-resolve every owner (starting and stopping informers).

        Raises:
            Exception: whatever ``discover`` raised (nothing is changed then).
        """
        snapshot = await self._discover()
        async with self._lock:
            self.snapshot = snapshot
            self.refreshes += 1
            for owner in sorted(set(self._rules) | set(self._held)):
                await self._reconcile(owner)
        return snapshot

    async def enforce_budget(self) -> None:
        """Apply :meth:`DynamicInformerFactory.enforce_budget` and tell owners what stopped."""
        async with self._lock:
            stopped = await self.factory.enforce_budget()
            for owner in sorted(o for o, held in self._held.items() if held & set(stopped)):
                self._publish(owner)

    # -- tasks --------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the refresh loop (first discovery at once) and the CRD informer; returns at once."""
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._refresh_loop(), name="dynamic-discovery"))
        self._tasks.append(loop.create_task(self._budget_loop(), name="dynamic-budget"))
        if self._crd_informer is not None:
            await self._crd_informer.start()

    async def wait_discovered(self, timeout: float | None = None) -> bool:
        """Wait for the first successful discovery; False on timeout (seconds)."""
        try:
            async with asyncio.timeout(timeout):
                while self.snapshot is None:
                    await asyncio.sleep(0.01)
        except TimeoutError:
            return False
        return True

    async def _refresh_loop(self) -> None:
        while True:
            try:
                await self.refresh()
                await self.factory.retry_refused()
                async with self._lock:
                    for owner in sorted(self._held):
                        self._publish(owner)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a failed discovery keeps the last snapshot
                log.warning("discovery failed: %s", e)
                await asyncio.sleep(self._backoff.next_delay())
                continue
            self._kick.clear()
            try:
                async with asyncio.timeout(self._interval or None):
                    await self._kick.wait()
                await asyncio.sleep(self._debounce)  # gather a burst of CRD events into one refresh
            except TimeoutError:
                pass

    async def _budget_loop(self) -> None:
        while True:
            await self.factory.wait_over_budget()
            await self.enforce_budget()

    async def stop(self) -> None:
        """Stop the loops, the CRD informer and every dynamic informer."""
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks.clear()
        if self._crd_informer is not None:
            await self._crd_informer.stop()
        await self.factory.stop()


def crd_informer(lister_watcher_for: Callable[[GVR], ListerWatcher],
                 reflector_options: ReflectorOptions | None = None) -> SharedInformer:
    """An informer of CustomResourceDefinitions, for :class:`DynamicInformers`' refresh trigger."""
    return SharedInformer(lister_watcher_for(CRDS), name=str(CRDS),
                          reflector_options=replace(reflector_options or ReflectorOptions()))
