"""The background auditor: policies with ``spec.background`` × dynamic informer caches → PolicyReports.

The incremental, informer-driven side of background audit (``tollgate audit``
is the one-shot side; both decide and evaluate through
``webhook.audit.evaluate``): policy CR events come in through
:meth:`Auditor.policy_handler` and are decided by ``audit_policy``; each
audited policy's rules go to :class:`~webhook.informer.discovered.DynamicInformers`,
which runs one informer per resolved GVR; every cached object those informers
hold is evaluated with ``evaluate_policy`` (the admission engine on a
synthesized CREATE); rows are grouped per namespace, built into reports by
``webhook.audit.reports`` and handed to a sink (``PolicyReportWriter.submit``
in a cluster, a dict in tests).

Re-evaluation, as Kyverno's background controller does it:
* an object's add/update/delete (including relist tombstones after a watch
  cut) re-evaluates that object against every background policy holding its
  GVR; changes are coalesced per object key, so a burst of updates costs one
  evaluation of the latest state;
* any change of a policy (spec, annotations, deletion) or of the GVRs it
  resolves to (a CRD came or went) re-evaluates every object of its GVRs
  and drops the results of objects it no longer covers;
* a Namespace change re-evaluates that namespace's objects for the policies
  that read Namespaces; a params ConfigMap change re-evaluates the policies
  with a ``paramRef`` (see :meth:`Auditor.context_handler`);
* an informer stopped (no policy needs it, or over budget) drops its results;
  a GVR refused by the budget is reported as a ``skip`` result about the
  policy, saying why.

Nothing is evaluated until ``lookups`` reports its caches synced, so a
result never depends on a half-filled Namespace or ConfigMap cache. One
task does all the work; handlers only mark keys dirty.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from webhook.aio import cancel_and_wait, yield_to_loop
from webhook.audit.auditable import reads_namespace_object
from webhook.audit.evaluate import (
    AuditedPolicy,
    AuditResult,
    NotAudited,
    StoredObject,
    audit_policy,
    audit_rules,
    evaluate_policy,
    policy_note,
)
from webhook.audit.reports import build_report
from webhook.informer import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    ResourceEventHandlerFuncs,
    SharedInformer,
    meta_namespace_key,
)
from webhook.informer.discovered import DynamicInformers
from webhook.informer.gvr import GVR
from webhook.policy import policy_key
from webhook.policy.exceptions import ExceptionSet
from webhook.policy.lookups import CONFIGMAPS, NAMESPACES, POLICIES, Lookups

log = logging.getLogger("tollgate.audit")

ReportSink = Callable[[str | None, dict[str, Any] | None], object]
_Entry = tuple[str, GVR, str]  # (policy key, GVR, object key)


def _resource_version(obj: dict[str, Any] | None) -> Any:
    """``metadata.resourceVersion``, or None."""
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


def _same_version(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A resync (``old is new``) or an update that did not change the resourceVersion."""
    rv = _resource_version(new)
    return old is new or (rv is not None and rv == _resource_version(old))


class Auditor:
    """Evaluates background policies on cached objects and keeps per-namespace reports.

    Args:
        dynamic: the dynamic informers (not started or stopped here).
        lookups: the caches policies read (Namespaces, ConfigMaps, policies' sync state).
        sink: called with ``(namespace, report)`` when a namespace's report
            changes; ``namespace`` None is the ClusterPolicyReport, ``report``
            None means "no results any more".
        clock: Unix seconds, for result timestamps (and the time PolicyExceptions expire against).
        yield_every: evaluations between yields to the event loop.
        exceptions: returns the Ready PolicyExceptions now (:mod:`webhook.policy.exceptions`): an exempted
            object's row is ``skip`` naming the exception; None for none. Tell :meth:`exceptions_changed`
            when they change.

    Attributes:
        evaluations: objects evaluated (object × policy) so far.
    """

    def __init__(self, dynamic: DynamicInformers, lookups: Lookups, sink: ReportSink, *,
                 clock: Callable[[], float] = time.time, yield_every: int = 200,
                 exceptions: Callable[[], ExceptionSet] | None = None) -> None:
        self._exceptions = exceptions
        self._dynamic = dynamic
        self._lookups = lookups
        self._sink = sink
        self._clock = clock
        self._yield_every = yield_every
        self._policy_events: dict[str, dict[str, Any] | None] = {}
        self._audited: dict[str, AuditedPolicy] = {}
        self._notes: dict[str, tuple[str | None, AuditResult]] = {}
        self._dirty_policies: set[str] = set()
        #: objects to re-evaluate whatever their resourceVersion (a Namespace they live in changed).
        self._dirty_objects: dict[GVR, set[str]] = {}
        #: objects an informer event named: re-evaluated only where the resourceVersion differs from the
        #: one last evaluated (a full pass may already have seen it; relists repeat unchanged objects).
        self._changed_objects: dict[GVR, set[str]] = {}
        #: per policy, the resourceVersion each object was last evaluated at.
        self._evaluated_rv: dict[str, dict[tuple[GVR, str], Any]] = {}
        self._dirty_ns: set[str | None] = set()
        self._by_ns: dict[str | None, dict[_Entry, tuple[AuditResult, ...]]] = {}
        self._ns_of: dict[_Entry, str | None] = {}
        self._by_policy: dict[str, set[tuple[GVR, str]]] = {}
        self._informers: dict[GVR, SharedInformer] = {}
        self._context_namespaces: set[str] = set()
        self._context_params = False
        #: GVRs whose objects changed: policies whose spec.references name one are re-evaluated.
        self._context_references: set[GVR] = set()
        self._wake = asyncio.Event()
        self._busy = False
        self._task: asyncio.Task[None] | None = None
        self.evaluations = 0
        dynamic.add_listener(self._on_owner_change)
        dynamic.factory.add_listener(self._on_informer_start, self._on_informer_stop)

    # -- inputs (synchronous: they only record what changed) ------------------------------------------
    def policy_handler(self) -> ResourceEventHandlerFuncs:
        """A handler for the ClusterAdmissionPolicy and AdmissionPolicy informers.

        Resyncs (same resourceVersion) are ignored: re-auditing is driven by real changes.
        """
        return ResourceEventHandlerFuncs(
            add=lambda obj, _initial: self.upsert_policy(obj),
            update=lambda old, new: None if _same_version(old, new) else self.upsert_policy(new),
            delete=lambda obj: self.remove_policy(obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj),
            sync_calls="loop")

    def upsert_policy(self, obj: dict[str, Any]) -> None:
        """A policy CR was added or changed."""
        self._policy_events[policy_key(obj)] = obj
        self._wake.set()

    def remove_policy(self, obj: dict[str, Any]) -> None:
        """A policy CR was deleted."""
        self._policy_events[policy_key(obj)] = None
        self._wake.set()

    def context_handler(self, cache: str) -> ResourceEventHandlerFuncs:
        """A handler for the Namespace (``cache="namespaces"``) or params ConfigMap (``"configmaps"``) informer.

        A Namespace event re-evaluates, for every background policy that reads
        Namespaces (a ``namespaceSelector`` or ``namespaceObject`` in its CEL),
        the objects of that namespace only; a ConfigMap event re-evaluates every
        object of the policies with a ``paramRef``. Initial-list adds are
        ignored (nothing is evaluated before the caches have synced anyway).
        """

        def touched(obj: dict[str, Any] | DeletedFinalStateUnknown) -> None:
            raw = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
            if cache == NAMESPACES:
                self._context_namespaces.add(str((raw.get("metadata") or {}).get("name", "")))
            else:
                self._context_params = True
            self._wake.set()

        return ResourceEventHandlerFuncs(
            add=lambda obj, initial: None if initial else touched(obj),
            update=lambda old, new: None if old is new else touched(new), delete=touched, sync_calls="loop")

    def exceptions_changed(self, policies: frozenset[str]) -> None:
        """PolicyExceptions naming ``policies`` came, changed, went or expired: re-evaluate those policies."""
        dirty = policies & self._audited.keys()
        if dirty:
            self._dirty_policies |= dirty
            self._wake.set()

    def _current_exceptions(self) -> ExceptionSet | None:
        return self._exceptions() if self._exceptions is not None else None

    def _on_owner_change(self, owner: str, _gvrs: frozenset[GVR]) -> None:
        if owner in self._audited:
            self._dirty_policies.add(owner)
            self._wake.set()

    def _on_informer_start(self, gvr: GVR, informer: SharedInformer) -> None:
        self._informers[gvr] = informer

        def touch(obj: dict[str, Any] | DeletedFinalStateUnknown) -> None:
            self._changed_objects.setdefault(gvr, set()).add(meta_namespace_key(obj))
            # The same factory runs spec.references' informers: a change there may change any verdict
            # of the policies reading it.
            self._context_references.add(gvr)
            self._wake.set()

        informer.add_event_handler(ResourceEventHandlerFuncs(
            add=lambda obj, _initial: touch(obj), update=lambda _old, new: touch(new), delete=touch,
            sync_calls="loop"))

    def _on_informer_stop(self, gvr: GVR) -> None:
        self._informers.pop(gvr, None)
        self._dirty_objects.pop(gvr, None)
        self._changed_objects.pop(gvr, None)
        for entry in [e for e in self._ns_of if e[1] == gvr]:
            self._set(entry, ())
        self._wake.set()

    # -- state ------------------------------------------------------------------------------------------
    def results(self, namespace: str | None) -> list[AuditResult]:
        """Every current result for ``namespace`` (None: cluster-scoped), notes included."""
        out = [r for rs in self._by_ns.get(namespace, {}).values() for r in rs]
        out += [r for ns, r in self._notes.values() if ns == namespace]
        return out

    def namespaces(self) -> list[str | None]:
        """Namespaces that currently have results."""
        return sorted({*self._by_ns, *(ns for ns, _ in self._notes.values())}, key=lambda n: n or "")

    def report(self, namespace: str | None) -> dict[str, Any] | None:
        """The report for ``namespace`` as it would be written (None when it has no results)."""
        results = self.results(namespace)
        return build_report(namespace, results) if results else None

    def idle(self) -> bool:
        """No pending work and every dynamic informer's handlers have caught up."""
        return (not self._busy and not self._policy_events and not self._dirty_policies
                and not any(self._dirty_objects.values()) and not any(self._changed_objects.values())
                and not self._dirty_ns
                and all(i.handlers_idle() for i in self._informers.values()))

    def _set(self, entry: _Entry, results: tuple[AuditResult, ...]) -> None:
        known = entry in self._ns_of
        old_ns = self._ns_of.get(entry)
        old = self._by_ns.get(old_ns, {}).get(entry) if known else None
        if not results:
            if known:
                self._drop(entry, old_ns)
            return
        ns = results[0].resource.namespace
        if old is not None and old_ns == ns and len(old) == len(results) and \
                all(a.same_as(b) for a, b in zip(old, results, strict=True)):
            return  # unchanged: keep the old timestamps, no report change
        if known and old_ns != ns:
            self._drop(entry, old_ns)
        self._by_ns.setdefault(ns, {})[entry] = results
        self._ns_of[entry] = ns
        self._by_policy.setdefault(entry[0], set()).add((entry[1], entry[2]))
        self._dirty_ns.add(ns)

    def _drop(self, entry: _Entry, ns: str | None) -> None:
        bucket = self._by_ns.get(ns)
        if bucket is not None:
            bucket.pop(entry, None)
            if not bucket:
                del self._by_ns[ns]
        self._ns_of.pop(entry, None)
        keys = self._by_policy.get(entry[0])
        if keys is not None:
            keys.discard((entry[1], entry[2]))
            if not keys:
                del self._by_policy[entry[0]]
        self._dirty_ns.add(ns)

    def _note(self, key: str, note: tuple[str | None, AuditResult] | None) -> None:
        old = self._notes.get(key)
        if note is None:
            if old is not None:
                del self._notes[key]
                self._dirty_ns.add(old[0])
            return
        if old is not None and old[0] == note[0] and old[1].same_as(note[1]):
            return
        if old is not None:
            self._dirty_ns.add(old[0])
        self._notes[key] = note
        self._dirty_ns.add(note[0])

    # -- work -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the work task (returns at once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="auditor")

    async def stop(self) -> None:
        """Stop the work task."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    def _synced(self) -> bool:
        return all(self._lookups.is_synced(c) for c in (POLICIES, NAMESPACES, CONFIGMAPS))

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._busy = True
            try:
                await self.process()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("audit round failed")
                await asyncio.sleep(1.0)
                self._wake.set()
            finally:
                self._busy = False

    async def process(self) -> None:
        """Apply pending policy changes, re-evaluate what is dirty, and publish changed reports."""
        while self._policy_events:
            key = next(iter(self._policy_events))
            obj = self._policy_events.pop(key)
            await self._apply_policy(key, obj)
        while not self._synced():
            await asyncio.sleep(0.05)
        self._expand_context_changes()
        count = 0
        while self._dirty_policies:
            key = min(self._dirty_policies)
            self._dirty_policies.discard(key)
            count = await self._full_pass(key, count)
        dirty, self._dirty_objects = self._dirty_objects, {}
        changed, self._changed_objects = self._changed_objects, {}
        policies_by_gvr: dict[GVR, list[str]] = {}
        for key in sorted(self._audited):
            for gvr in self._dynamic.gvrs(key):
                policies_by_gvr.setdefault(gvr, []).append(key)
        for gvr, keys in dirty.items():
            inf = self._informers.get(gvr)
            for obj_key in keys:
                obj = inf.indexer.get_by_key(obj_key) if inf is not None else None
                for key in policies_by_gvr.get(gvr, ()):
                    count = await self._evaluate(key, gvr, obj_key, obj, count)
        for gvr, keys in changed.items():
            inf = self._informers.get(gvr)
            forced = dirty.get(gvr, set())
            for obj_key in keys - forced:
                obj = inf.indexer.get_by_key(obj_key) if inf is not None else None
                rv = _resource_version(obj)
                for key in policies_by_gvr.get(gvr, ()):
                    if not rv or self._evaluated_rv.get(key, {}).get((gvr, obj_key)) != rv:
                        count = await self._evaluate(key, gvr, obj_key, obj, count)
        self._publish()

    def _expand_context_changes(self) -> None:
        """Turn Namespace / ConfigMap / referenced-object changes into dirty policies and objects."""
        namespaces, self._context_namespaces = self._context_namespaces, set()
        params, self._context_params = self._context_params, False
        referenced, self._context_references = self._context_references, set()
        for key, audited in self._audited.items():
            spec = audited.policy.spec
            if params and spec.param_ref is not None:
                self._dirty_policies.add(key)
            if referenced and any(GVR(r.group, r.version, r.resource) in referenced for r in spec.references):
                self._dirty_policies.add(key)
            if namespaces and (not spec.namespace_selector.empty or reads_namespace_object(audited.policy)):
                for gvr in self._dynamic.gvrs(key):
                    inf = self._informers.get(gvr)
                    if inf is None:
                        continue
                    for ns in namespaces:
                        self._dirty_objects.setdefault(gvr, set()).update(inf.indexer.index_keys(NAMESPACE_INDEX, ns))
                    if gvr.resource == "namespaces" and gvr.group == "":
                        self._dirty_objects.setdefault(gvr, set()).update(namespaces)

    def _kind(self, gvr: GVR, obj: dict[str, Any]) -> str:
        snapshot = self._dynamic.snapshot
        return (snapshot.kind(gvr) if snapshot is not None else None) or str(obj.get("kind") or "")

    async def _evaluate(self, key: str, gvr: GVR, obj_key: str, obj: dict[str, Any] | None, count: int) -> int:
        audited = self._audited.get(key)
        if obj is None or audited is None:
            self._evaluated_rv.get(key, {}).pop((gvr, obj_key), None)
            self._set((key, gvr, obj_key), ())
            return count
        for stored, results in evaluate_policy(audited, [StoredObject(gvr, self._kind(gvr, obj), obj)],
                                               self._lookups, now=int(self._clock()),
                                               exceptions=self._current_exceptions()):
            count = await self._record(key, gvr, obj_key, stored, results, count)
        return count

    async def _record(self, key: str, gvr: GVR, obj_key: str, stored: StoredObject,
                      results: tuple[AuditResult, ...], count: int) -> int:
        """Keep one object's rows (and the resourceVersion they were computed at); yield to the loop now and then."""
        rv = _resource_version(stored.obj)
        if rv:
            self._evaluated_rv.setdefault(key, {})[(gvr, obj_key)] = rv
        self.evaluations += 1
        self._set((key, gvr, obj_key), results)
        count += 1
        if count % self._yield_every == 0:
            await yield_to_loop()
        return count

    async def _full_pass(self, key: str, count: int) -> int:
        seen: set[tuple[GVR, str]] = set()
        audited = self._audited.get(key)
        self._evaluated_rv.pop(key, None)
        if audited is not None:
            refused = self._dynamic.refused(key)
            reason = "; ".join(f"informer {g} refused: {why}" for g, why in sorted(refused.items()))
            self._note(key, (audited.policy.spec.namespace, policy_note(
                audited.policy_object, reason, now=int(self._clock()))) if refused else None)
            for gvr in sorted(self._dynamic.gvrs(key)):
                inf = self._informers.get(gvr)
                if inf is None:
                    continue
                cached = (inf.indexer.get_by_key(k) for k in inf.indexer.list_keys())
                stored = (StoredObject(gvr, self._kind(gvr, o), o) for o in cached if o is not None)
                for one, results in evaluate_policy(audited, stored, self._lookups, now=int(self._clock()),
                                                    exceptions=self._current_exceptions()):
                    obj_key = meta_namespace_key(one.obj)
                    seen.add((gvr, obj_key))
                    count = await self._record(key, gvr, obj_key, one, results, count)
        for gvr, obj_key in sorted(self._by_policy.get(key, set()) - seen):
            self._set((key, gvr, obj_key), ())
        return count

    async def _apply_policy(self, key: str, obj: dict[str, Any] | None) -> None:
        decision = audit_policy(obj) if obj is not None else None
        if not isinstance(decision, AuditedPolicy):
            if key in self._audited:
                del self._audited[key]
                await self._dynamic.forget(key)
            self._dirty_policies.add(key)  # drops its results
            if isinstance(decision, NotAudited) and decision.reported:
                self._note(key, (decision.namespace, decision.note(now=int(self._clock()))))
                log.info("policy %s is not audited: %s: %s", key, decision.why, decision.reason)
            else:
                self._note(key, None)
            return
        self._note(key, None)
        self._audited[key] = decision
        self._dirty_policies.add(key)
        await self._dynamic.want(key, audit_rules(decision.policy.spec))

    def _publish(self) -> None:
        dirty, self._dirty_ns = self._dirty_ns, set()
        for ns in sorted(dirty, key=lambda n: n or ""):
            self._sink(ns, self.report(ns))
