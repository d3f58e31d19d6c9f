"""The evaluation worker process: runs ``AdmissionHandler`` on reviews the server sends it.

Started by :class:`webhook.admission.isolation.pool.EvaluationPool` as
``python -m webhook.admission.isolation.worker FD`` with one end of a socketpair
as file descriptor FD. cel-expr-python holds the GIL for the whole of an
``Expression.eval``, so a thread cannot keep a costly review from stalling the
event loop; a process can, and can be killed at the review's deadline. Memory
is bounded with ``RLIMIT_AS``.

The conversation (messages of :mod:`webhook.admission.isolation.messages`), the
parent speaks first:

* :class:`Configure` → :class:`Ready`;
* :class:`Warm` → :class:`Warmed`: compile ahead (a replacement worker gets the
  policies recent reviews used);
* :class:`Evaluate` → any number of :class:`LookupCall` (cache reads the
  prefetched answers do not cover), each answered with :class:`LookupValue` or
  :class:`LookupRaised`; then :class:`Done` (the decision), :class:`Missing`
  (policies this worker has not compiled: the parent resends them with their
  objects) or :class:`Failed`. ``retire`` on Done and Failed asks the parent to
  replace this worker: its RSS passed ``recycle_rss_bytes`` (a big review's
  memory is not returned to the OS) or it ran out of memory.

Compiled policies are cached by token (a hash of the policy object), at most
:data:`MAX_COMPILED` of them.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

import orjson

from webhook import logs
from webhook.admission.handler import AdmissionDecision, AdmissionHandler
from webhook.admission.isolation.ipc import recv_frame, send_frame
from webhook.admission.isolation.messages import (
    LOOKUP_METHODS,
    Configure,
    Done,
    Evaluate,
    Failed,
    LookupCall,
    LookupRaised,
    LookupValue,
    Missing,
    PolicyEntry,
    Ready,
    Warm,
    Warmed,
)
from webhook.admission.limits import OutputLimits, bound_decision
from webhook.admission.review import AdmissionRequest
from webhook.formats.kyverno.exceptions import compile_any_exception
from webhook.policy import PolicyIndex, RequestCoordinates, compile_policy
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.exceptions import ExceptionCompileResult, ExceptionSet
from webhook.policy.plan import Plan, build_plan

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
    """The engine's :class:`Lookups`, every read a round trip to the server's informer caches.

    Each method of the :class:`Lookups` protocol (:data:`LOOKUP_METHODS`) is
    forwarded as a :class:`LookupCall`, unless the server sent its answer ahead.
    """

    def __init__(self, sock: socket.socket, prefetched: dict[LookupCall, Any] | None = None) -> None:
        self._sock = sock
        self._prefetched = prefetched or {}

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method not in LOOKUP_METHODS:
            raise AttributeError(method)
        return lambda *args: self._call(LookupCall.of(method, *args))

    def _call(self, call: LookupCall) -> Any:
        try:
            if call in self._prefetched:
                return self._prefetched[call]
        except TypeError:  # an unhashable argument: never prefetched
            pass
        send_frame(self._sock, call)
        answer = recv_frame(self._sock)
        if isinstance(answer, LookupRaised):
            raise LookupFailed(answer.text)
        if not isinstance(answer, LookupValue):
            raise RuntimeError(f"unexpected answer to a lookup: {type(answer).__name__}")
        return answer.value


class Worker:
    """State of one worker: the compiled-policy cache and the output limits."""

    def __init__(self, sock: socket.socket, limits: OutputLimits, recycle_rss_bytes: int = 0) -> None:
        self.sock = sock
        self.limits = limits
        self.recycle_rss_bytes = recycle_rss_bytes
        self.compiled: OrderedDict[str, CompiledPolicy | None] = OrderedDict()
        self.plans: OrderedDict[tuple[Any, ...], Plan] = OrderedDict()
        #: compiled exceptions by their source object's canonical JSON
        self.exceptions: dict[bytes, ExceptionCompileResult] = {}

    def learn(self, entries: list[PolicyEntry] | list[tuple[str, dict[str, Any]]]) -> None:
        """Compile every policy object sent whose token is new (a broken one is kept with its error)."""
        for token, obj in entries:
            if obj is not None and token not in self.compiled:
                # A broken policy answers per its failurePolicy, as in the server.
                self.compiled[token] = compile_policy(obj).matchable
                self.plans.clear()
                while len(self.compiled) > MAX_COMPILED:
                    self.compiled.popitem(last=False)

    def missing(self, entries: list[PolicyEntry]) -> list[str]:
        """The tokens of ``entries`` this worker has not compiled."""
        return [token for token, _obj in entries if token not in self.compiled]

    def compiled_policies(self, entries: list[PolicyEntry]) -> list[CompiledPolicy]:
        """The compiled policies of ``entries``, in order (each token must be known: see :meth:`missing`)."""
        policies: list[CompiledPolicy] = []
        for token, _obj in entries:
            self.compiled.move_to_end(token)
            policy = self.compiled[token]
            if policy is not None:
                policies.append(policy)
        return policies

    def exception_set(self, sources: list[dict[str, Any]]) -> ExceptionSet:
        """The exceptions of a review, each source version compiled once (the last 256 versions kept)."""
        compiled = []
        for source in sources:
            key = orjson.dumps(source, option=orjson.OPT_SORT_KEYS)
            result = self.exceptions.get(key)
            if result is None:
                result = self.exceptions[key] = compile_any_exception(source)  # Kyverno's too
                while len(self.exceptions) > 256:
                    del self.exceptions[next(iter(self.exceptions))]
            if result.exception is not None:
                compiled.append(result.exception)
        return ExceptionSet.of(compiled)

    def evaluate(self, message: Evaluate) -> AdmissionDecision | Missing:
        """One review: its decision, or the tokens to send again with their objects."""
        self.learn(message.policies)
        missing = self.missing(message.policies)
        if missing:
            return Missing(missing)
        policies = self.compiled_policies(message.policies)
        request = cast(AdmissionRequest, orjson.loads(message.request_json))
        exceptions = self.exception_set(message.exceptions)
        now = message.now
        handler = AdmissionHandler(cast(PolicyIndex, _FixedCandidates(policies, self.plans)),
                                   RemoteLookups(self.sock, message.prefetched),
                                   max_patch_bytes=self.limits.max_patch_bytes,
                                   exceptions=(lambda: exceptions) if exceptions else None,
                                   clock=(lambda: now) if now is not None else None)
        decision = handler.decide(message.endpoint, request, message.deadline)
        uid = request["uid"]
        return bound_decision(decision, self.limits, lambda e: AdmissionHandler.engine_failed(uid, policies, e))

    def serve(self) -> None:
        """Answer :class:`Warm` and :class:`Evaluate` until the parent closes the socket."""
        while True:
            try:
                message = recv_frame(self.sock)
            except EOFError:
                return
            if isinstance(message, Warm):
                self.learn(message.policies)
                send_frame(self.sock, Warmed(len(self.compiled)))
                continue
            if not isinstance(message, Evaluate):
                send_frame(self.sock, Failed(f"unexpected message {type(message).__name__}"))
                continue
            reply: Done | Missing | Failed
            try:
                outcome = self.evaluate(message)
                reply = outcome if isinstance(outcome, Missing) else Done.of(outcome, retire=self.should_retire())
            except MemoryError:
                send_frame(self.sock, Failed("evaluation exceeded the worker's memory limit", retire=True))
                raise
            except Exception as e:  # noqa: BLE001 - any failure is reported, the worker survives
                reply = Failed(f"{type(e).__name__}: {e}"[:1024], retire=self.should_retire())
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


def main(argv: list[str]) -> int:
    """Entry point: ``python -m webhook.admission.isolation.worker FD``."""
    # Ctrl-C in a terminal signals the whole process group: the server decides when its workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[0]))
    try:
        config = recv_frame(sock)
    except EOFError:
        return 0  # the server stopped (e.g. a signal during its start-up) before configuring this worker
    if not isinstance(config, Configure):
        return 2
    logs.setup(config.log_level)  # JSON lines on the inherited stderr, as in the server
    if config.memory_limit_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (config.memory_limit_bytes, config.memory_limit_bytes))
    try:
        send_frame(sock, Ready(os.getpid()))
    except OSError:
        return 0  # the server is gone already
    try:
        Worker(sock, config.limits, config.recycle_rss_bytes).serve()
    except MemoryError:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
