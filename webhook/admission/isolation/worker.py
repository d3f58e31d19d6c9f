"""The evaluation worker process: runs ``AdmissionHandler`` on reviews the server sends it.

Started by :class:`webhook.admission.isolation.pool.EvaluationPool` as
``python -m webhook.admission.isolation.worker FD`` with one end of a socketpair
as file descriptor FD. cel-expr-python holds the GIL for a whole
``Expression.eval`` (measured: see docs/server.md), so a thread cannot keep a
costly review from stalling the event loop; a process can, and can be
killed at the review's deadline. Memory is bounded with ``RLIMIT_AS``.

Protocol (frames of :mod:`webhook.admission.isolation.ipc`), the parent speaks first:

* ``("config", memory_limit_bytes, OutputLimits, log_level, recycle_rss_bytes)``
  → ``("ready", pid)``
* ``("warm", [(token, policy_obj), ...])`` → ``("warmed", n)``: compile
  ahead (a replacement worker gets the policies recent reviews used).
* ``("eval", endpoint, request_json, [(token, policy_obj | None), ...], prefetched)``
  (``prefetched`` maps ``(method, *args)`` to lookup answers the server sent
  ahead: the request's Namespace and the sync states) → any number of
  ``("lookup", method, args)``, each answered with ``("value", result)`` or
  ``("raise", text)`` if the read failed; then one of
  ``("done", *flatten(AdmissionDecision), retire)``, ``("missing", [token, ...])``
  (policies this worker has not compiled: the parent resends them with
  objects) or ``("error", text, retire)``. ``retire`` asks the parent to
  replace this worker: its RSS passed ``recycle_rss_bytes`` (a big review's
  memory is not returned to the OS) or it ran out of memory.

Compiled policies are cached by token (a hash of the policy object), at most
:data:`MAX_COMPILED` of them.
"""

from __future__ import annotations

import os
import resource
import socket
import sys
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import orjson

from webhook import logs
from webhook.admission.handler import AdmissionDecision, AdmissionHandler
from webhook.admission.isolation.ipc import recv_frame, send_frame
from webhook.admission.limits import OutputLimits, bound_decision
from webhook.policy import Decision, PolicyResult, RequestCoordinates, Result, compile_policy
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.model import Reference, ReferenceIndex
from webhook.policy.plan import Plan, build_plan
from webhook.policy.selectors import LabelSelector

#: Compiled policies kept per worker (least recently used dropped first).
MAX_COMPILED = 4096


class _FixedCandidates:
    """Stands in for the PolicyIndex: the parent already chose the candidates; plans are cached per worker."""

    def __init__(self, policies: list[CompiledPolicy], plans: OrderedDict[tuple[Any, ...], Plan]) -> None:
        self.policies = policies
        self._plans = plans

    def plan(self, coords: RequestCoordinates) -> Plan:
        key = (tuple(id(p) for p in self.policies), coords)
        plan = self._plans.get(key)
        if plan is None:
            # Compiled right away: the worker is off the event loop, so fused programs cost no stall here.
            plan = self._plans[key] = build_plan(coords, self.policies).compile_all()
            while len(self._plans) > MAX_COMPILED:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan


class LookupFailed(RuntimeError):
    """The server's cache read raised; the engine answers it like any engine failure."""


class RemoteLookups:
    """A ``Lookups`` whose every read is a round trip to the server's informer caches."""

    def __init__(self, sock: socket.socket, prefetched: dict[tuple[Any, ...], Any] | None = None) -> None:
        self._sock = sock
        self._prefetched = prefetched or {}

    def _call(self, method: str, *args: Any) -> Any:
        key = (method, *args)
        try:
            if key in self._prefetched:
                return self._prefetched[key]
        except TypeError:  # an unhashable argument (a labels map): never prefetched
            pass
        send_frame(self._sock, ("lookup", method, args))
        kind, value = recv_frame(self._sock)
        if kind == "raise":
            raise LookupFailed(value)
        if kind != "value":
            raise RuntimeError(f"unexpected lookup answer {kind!r}")
        return value

    def get_namespace(self, name: str) -> dict[str, Any] | None:
        """The server's cached Namespace ``name``."""
        return self._call("get_namespace", name)  # type: ignore[no-any-return]

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The server's cached ConfigMap ``namespace/name``."""
        return self._call("get_configmap", namespace, name)  # type: ignore[no-any-return]

    def list_configmaps(self, namespace: str | None, selector: LabelSelector) -> list[dict[str, Any]]:
        """The server's cached ConfigMaps matching ``selector``."""
        return self._call("list_configmaps", namespace, selector)  # type: ignore[no-any-return]

    def get_object(self, reference: Reference, namespace: str, name: str) -> dict[str, Any] | None:
        """The server's cached object of a ``spec.references`` entry."""
        return self._call("get_object", reference, namespace, name)  # type: ignore[no-any-return]

    def list_objects(self, reference: Reference, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The server's cached objects of a ``spec.references`` entry with ``labels``."""
        return self._call("list_objects", reference, namespace, dict(labels))  # type: ignore[no-any-return]

    def by_index(self, reference: Reference, index: ReferenceIndex, value: str) -> list[dict[str, Any]]:
        """The server's ``ByIndex`` on a declared index of a ``spec.references`` entry."""
        return self._call("by_index", reference, index, value)  # type: ignore[no-any-return]

    def is_synced(self, cache: str) -> bool:
        """Whether the server's ``cache`` has synced."""
        return bool(self._call("is_synced", cache))


class Worker:
    """State of one worker: the compiled-policy cache and the output limits."""

    def __init__(self, sock: socket.socket, limits: OutputLimits, recycle_rss_bytes: int = 0) -> None:
        self.sock = sock
        self.limits = limits
        self.recycle_rss_bytes = recycle_rss_bytes
        self.compiled: OrderedDict[str, CompiledPolicy | None] = OrderedDict()
        self.plans: OrderedDict[tuple[Any, ...], Plan] = OrderedDict()

    def _policies(self, entries: list[tuple[str, dict[str, Any] | None]]) -> list[CompiledPolicy] | list[str]:
        missing: list[str] = []
        policies: list[CompiledPolicy] = []
        for token, obj in entries:
            if obj is not None and token not in self.compiled:
                # A broken policy is kept with its error: it answers per its failurePolicy, as in the server.
                self.compiled[token] = compile_policy(obj).matchable
                self.plans.clear()
                while len(self.compiled) > MAX_COMPILED:
                    self.compiled.popitem(last=False)
            if token not in self.compiled:
                missing.append(token)
                continue
            self.compiled.move_to_end(token)
            policy = self.compiled[token]
            if policy is not None:
                policies.append(policy)
        return missing or policies

    def evaluate(self, endpoint: str, request: dict[str, Any], entries: list[tuple[str, dict[str, Any] | None]],
                 prefetched: dict[tuple[Any, ...], Any] | None = None,
                 deadline: float | None = None) -> tuple[str, Any]:
        """One review: ``("done", AdmissionDecision)`` or ``("missing", tokens)``."""
        found = self._policies(entries)
        if found and isinstance(found[0], str):
            return "missing", found
        policies: list[CompiledPolicy] = found  # type: ignore[assignment]
        handler = AdmissionHandler(_FixedCandidates(policies, self.plans),  # type: ignore[arg-type]
                                   RemoteLookups(self.sock, prefetched))
        decide = handler.validate if endpoint == "validate" else handler.mutate
        decision: AdmissionDecision = decide(request, deadline)  # type: ignore[arg-type]
        uid = request["uid"]
        return "done", bound_decision(decision, self.limits,
                                      lambda e: AdmissionHandler.engine_failed(uid, policies, e))

    def serve(self) -> None:
        """Answer ``eval`` frames until the parent closes the socket."""
        while True:
            try:
                message = recv_frame(self.sock)
            except EOFError:
                return
            if message[0] == "warm":
                self._policies(message[1])
                send_frame(self.sock, ("warmed", len(self.compiled)))
                continue
            _kind, endpoint, request_json, entries, prefetched, deadline = message
            reply: tuple[Any, ...]
            try:
                reply = self.evaluate(endpoint, orjson.loads(request_json), entries, prefetched, deadline)
                if reply[0] == "done":
                    reply = ("done", *flatten(reply[1]), self.should_retire())
            except MemoryError:
                send_frame(self.sock, ("error", "evaluation exceeded the worker's memory limit", True))
                raise
            except Exception as e:  # noqa: BLE001 - any failure is reported, the worker survives
                reply = ("error", f"{type(e).__name__}: {e}"[:1024], self.should_retire())
            send_frame(self.sock, reply)

    def should_retire(self) -> bool:
        """True when this process holds more than ``recycle_rss_bytes`` (CPython keeps freed memory)."""
        return bool(self.recycle_rss_bytes) and rss_bytes() > self.recycle_rss_bytes


def rss_bytes() -> int:
    """Resident set size of this process now (Linux ``/proc/self/statm``; else the peak from getrusage)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def flatten(decision: AdmissionDecision) -> tuple[Any, str, list[tuple[str, str, str, tuple[str, ...]]]]:
    """A AdmissionDecision as plain builtins (pickling the dataclasses costs ~20x more): see :func:`unflatten`."""
    return (decision.response, decision.decision,
            [(r.policy, r.result, r.message, tuple(r.actions)) for r in decision.results])


def unflatten(response: Any, decision: str, results: list[tuple[str, str, str, tuple[str, ...]]]) -> AdmissionDecision:
    """Inverse of :func:`flatten`."""
    return AdmissionDecision(response, Decision(decision),
                             tuple(PolicyResult(policy, Result(result), message, frozenset(actions))
                                   for policy, result, message, actions in results))


def main(argv: list[str]) -> int:
    """Entry point: ``python -m webhook.admission.isolation.worker FD``."""
    sock = socket.socket(fileno=int(argv[0]))
    _kind, memory_limit, limits, log_level, recycle_rss_bytes = recv_frame(sock)
    logs.setup(log_level)  # JSON lines on the inherited stderr, as in the server
    if memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    send_frame(sock, ("ready", os.getpid()))
    try:
        Worker(sock, limits, recycle_rss_bytes).serve()
    except MemoryError:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
