"""A pool of evaluation worker processes, each killable at a review's deadline.

Every review is evaluated in a worker (:mod:`webhook.admission.isolation.worker`),
one review per worker at a time, so a costly review occupies one worker and
never the event loop that serves other reviews and the probes. Past its
deadline the worker is killed (SIGKILL) and replaced in the background; the
caller gets :class:`EvaluationAborted` and answers per failurePolicy.
Workers read the server's caches through :class:`LookupCall` round trips, so
the informers stay single-copy in the server process.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import socket
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from webhook.admission.handler import AdmissionDecision
from webhook.admission.isolation.ipc import FrameTooLarge, ProtocolError, encode, read_frame
from webhook.admission.isolation.messages import (
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
    UnknownLookup,
    Warm,
    Warmed,
)
from webhook.admission.limits import OutputLimits
from webhook.policy.lookups import CONFIGMAPS, NAMESPACES, POLICIES, Lookups

log = logging.getLogger("tollgate.admission")

#: A worker resident above this after a review is replaced (its answer is still used): CPython keeps
#: the memory of a big review otherwise.
DEFAULT_RECYCLE_RSS = 512 * 1024 * 1024
#: Policy versions a replacement worker compiles before serving (the most recently used).
MAX_WARM = 256
#: Largest reply frame accepted from a worker (the AdmissionDecision is already bounded by OutputLimits).
MAX_REPLY_BYTES = 16 * 1024 * 1024
#: The directory that holds the ``webhook`` package, put on the workers' PYTHONPATH.
_ROOT = Path(__file__).resolve().parents[3]


class EvaluationAborted(RuntimeError):
    """The review could not be evaluated in time or the worker failed.

    Attributes:
        reason: ``timeout`` (deadline passed while evaluating), ``busy`` (no
            worker free before the deadline), ``worker_died`` (crashed, e.g.
            out of memory), ``worker_error`` (the worker reported an exception
            or broke the protocol).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def prefetch(request: dict[str, Any], lookups: Lookups) -> dict[LookupCall, Any]:
    """Lookup answers nearly every review needs, sent with it to save round trips.

    The request's Namespace (``namespaceObject``, ``namespaceSelector``) and
    the sync state of the three caches.
    """
    answers: dict[LookupCall, Any] = {
        LookupCall.of("is_synced", cache): lookups.is_synced(cache) for cache in (NAMESPACES, CONFIGMAPS, POLICIES)}
    namespace = request.get("namespace")
    if namespace:
        answers[LookupCall.of("get_namespace", namespace)] = lookups.get_namespace(namespace)
    return answers


class _Reported(RuntimeError):
    """The worker caught an exception and reported it (the worker itself is fine)."""


@dataclass(eq=False)
class _Proc:
    process: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    known: set[str] = field(default_factory=set)
    retire: bool = False


class EvaluationPool:
    """``workers`` evaluation processes and a queue of idle ones.

    Args:
        workers: number of processes (each evaluates one review at a time).
        memory_limit_bytes: ``RLIMIT_AS`` per worker (0: unlimited).
        limits: output caps each worker applies to its AdmissionDecision.
        on_restart: called with the reason (``timeout``, ``worker_died``, ``cancelled``, ``recycled``,
            ``worker_error``) whenever a worker is replaced.
        start_timeout: seconds a new worker gets to import and say ready.
        recycle_rss_bytes: a worker whose resident memory exceeds this after a
            review is replaced (reason ``recycled``) once it has answered;
            CPython keeps the memory of a big review otherwise. 0: never.
    """

    def __init__(self, *, workers: int, memory_limit_bytes: int, limits: OutputLimits | None = None,
                 on_restart: Callable[[str], None] | None = None, start_timeout: float = 60.0,
                 recycle_rss_bytes: int = DEFAULT_RECYCLE_RSS) -> None:
        if workers < 1:
            raise ValueError("an evaluation pool needs at least one worker")
        self.workers = workers
        self.memory_limit_bytes = memory_limit_bytes
        self.limits = limits or OutputLimits()
        self.start_timeout = start_timeout
        self.recycle_rss_bytes = recycle_rss_bytes
        self._on_restart = on_restart
        self._idle: asyncio.Queue[_Proc] = asyncio.Queue()
        self._all: set[_Proc] = set()
        self._spawning: set[asyncio.Task[None]] = set()
        self._closed = False
        # Policy versions recent reviews used, so a replacement worker compiles them before it serves.
        self._recent: OrderedDict[str, dict[str, Any]] = OrderedDict()

    async def start(self) -> None:
        """Start every worker and wait until each is ready.

        Raises:
            RuntimeError: a worker did not start (its stderr is inherited).
        """
        procs = await asyncio.gather(*(self._spawn() for _ in range(self.workers)))
        for p in procs:
            self._idle.put_nowait(p)

    async def _spawn(self) -> _Proc:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "webhook.admission.isolation.worker", str(child.fileno()),
                pass_fds=(child.fileno(),), env=env, stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
        finally:
            child.close()
        reader, writer = await asyncio.open_connection(sock=parent)
        proc = _Proc(process, reader, writer)
        self._all.add(proc)
        try:
            level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
            writer.write(encode(Configure(self.memory_limit_bytes, self.limits, level, self.recycle_rss_bytes)))
            async with asyncio.timeout(self.start_timeout):
                reply = await read_frame(reader, 1024)
            if not isinstance(reply, Ready):
                raise RuntimeError(f"evaluation worker said {reply!r}")
            if self._recent:
                warm = list(self._recent.items())
                writer.write(encode(Warm(warm)))
                async with asyncio.timeout(self.start_timeout):
                    reply = await read_frame(reader, 1024)
                if not isinstance(reply, Warmed):
                    raise RuntimeError(f"evaluation worker said {reply!r}")
                proc.known.update(token for token, _ in warm)
        except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError, RuntimeError, ProtocolError) as e:
            await self._kill(proc)
            raise RuntimeError(f"evaluation worker did not start: {e!r}") from e
        return proc

    async def _kill(self, proc: _Proc) -> None:
        self._all.discard(proc)
        with contextlib.suppress(ProcessLookupError):
            proc.process.kill()
        proc.writer.close()
        await proc.process.wait()

    def _replace(self, proc: _Proc, reason: str) -> None:
        """Kill ``proc`` and start a replacement in the background."""
        log.warning("replacing evaluation worker", extra={"pid": proc.process.pid, "reason": reason})
        if self._on_restart is not None:
            self._on_restart(reason)

        async def replace() -> None:
            await self._kill(proc)
            delay = 0.1
            while not self._closed:
                try:
                    new = await self._spawn()
                except RuntimeError:
                    log.exception("evaluation worker failed to start; retrying")
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                if self._closed:
                    await self._kill(new)
                else:
                    self._idle.put_nowait(new)
                return

        task = asyncio.get_running_loop().create_task(replace())
        self._spawning.add(task)
        task.add_done_callback(self._spawning.discard)

    async def close(self) -> None:
        """Stop every worker (EOF, then SIGKILL after one second) and cancel pending restarts."""
        self._closed = True
        for task in list(self._spawning):
            task.cancel()
        await asyncio.gather(*self._spawning, return_exceptions=True)
        procs = list(self._all)
        for p in procs:
            p.writer.close()
        for p in procs:
            try:
                async with asyncio.timeout(1.0):
                    await p.process.wait()
            except TimeoutError:
                await self._kill(p)
            self._all.discard(p)

    async def evaluate(self, endpoint: str, request: dict[str, Any], policies: list[tuple[str, dict[str, Any]]],
                       lookups: Lookups, timeout: float, *, exceptions: list[dict[str, Any]] | None = None,
                       now: datetime.datetime | None = None) -> AdmissionDecision:
        """Evaluate one review in a worker within ``timeout`` seconds.

        Args:
            endpoint: ``validate`` or ``mutate``.
            request: the AdmissionRequest (picklable JSON values).
            policies: the candidate policies as ``(token, policy_object)``;
                the token names one version of a policy (a content hash), so a
                worker compiles each version once.
            lookups: the caches workers read through (answered on this loop).
            timeout: seconds, including the wait for a free worker.
            exceptions: source objects of the exceptions naming a candidate (see :class:`Evaluate`).
            now: the decision's time for exceptions' ``expiresAt`` (aware UTC).

        Returns:
            The handler's AdmissionDecision, already bounded by ``limits``.

        Raises:
            EvaluationAborted: deadline passed, no worker free in time, or the
                worker died or failed.
        """
        if self._closed:
            raise EvaluationAborted("busy", "the evaluation pool is closed")
        for token, obj in policies:
            self._recent[token] = obj
            self._recent.move_to_end(token)
        while len(self._recent) > MAX_WARM:
            self._recent.popitem(last=False)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        engine_deadline = time.monotonic() + timeout  # the worker's engine reads CLOCK_MONOTONIC
        try:
            async with asyncio.timeout_at(deadline):
                proc = await self._idle.get()
        except TimeoutError:
            raise EvaluationAborted("busy", f"no evaluation worker free within {timeout:.1f}s") from None
        try:
            async with asyncio.timeout_at(deadline):
                decision = await self._converse(proc, endpoint, request, policies, lookups, engine_deadline,
                                                exceptions or [], now)
        except _Reported as e:
            self._release(proc)  # the worker caught the exception itself
            raise EvaluationAborted("worker_error", str(e)) from None
        except TimeoutError:
            self._replace(proc, "timeout")
            raise EvaluationAborted("timeout", f"evaluation did not finish within {timeout:.1f}s") from None
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            self._replace(proc, "worker_died")
            raise EvaluationAborted("worker_died", f"evaluation worker died: {type(e).__name__}") from None
        except (FrameTooLarge, ProtocolError, EvaluationAborted) as e:
            self._replace(proc, "worker_error")
            raise EvaluationAborted("worker_error", str(e)) from None
        except BaseException:
            # Cancelled (client gone, shutdown) mid-conversation: the protocol state is unknown.
            self._replace(proc, "cancelled")
            raise
        self._release(proc)
        return decision

    def _release(self, proc: _Proc) -> None:
        """Back to the idle queue, or replaced when the worker asked to retire."""
        if proc.retire:
            self._replace(proc, "recycled")
        else:
            self._idle.put_nowait(proc)

    async def _converse(self, proc: _Proc, endpoint: str, request: dict[str, Any],
                        policies: list[tuple[str, dict[str, Any]]], lookups: Lookups,
                        deadline: float | None = None, exceptions: list[dict[str, Any]] | None = None,
                        now: datetime.datetime | None = None) -> AdmissionDecision:
        entries: list[PolicyEntry] = [(token, None if token in proc.known else obj) for token, obj in policies]
        prefetched = prefetch(request, lookups)
        request_json = orjson.dumps(request)  # far cheaper to send than the pickled dict
        for _attempt in range(2):
            # CLOCK_MONOTONIC is system-wide: the worker's engine stops evaluating more policies past it.
            proc.writer.write(encode(Evaluate(endpoint, request_json, entries, prefetched, deadline,
                                              exceptions or [], now)))
            proc.known.update(token for token, _ in policies)
            reply = await read_frame(proc.reader, MAX_REPLY_BYTES)
            while isinstance(reply, LookupCall):
                proc.writer.write(encode(self._answer(reply, lookups)))
                reply = await read_frame(proc.reader, MAX_REPLY_BYTES)
            if isinstance(reply, Done):
                proc.retire = proc.retire or reply.retire
                return reply.admission_decision()
            if isinstance(reply, Missing):
                missing = set(reply.tokens)
                proc.known -= missing
                entries = [(token, obj if token in missing else None) for token, obj in policies]
                continue
            if isinstance(reply, Failed):
                proc.retire = reply.retire
                raise _Reported(f"evaluation failed in the worker: {reply.text}")
            raise EvaluationAborted("worker_error", f"unexpected worker reply {type(reply).__name__}")
        raise EvaluationAborted("worker_error", "evaluation worker kept asking for policies")

    @staticmethod
    def _answer(call: LookupCall, lookups: Lookups) -> LookupValue | LookupRaised:
        """Run a worker's cache read on the server's caches.

        Raises:
            EvaluationAborted: the worker asked for something that is not a lookup (``worker_error``).
        """
        try:
            return LookupValue(call.apply(lookups))
        except UnknownLookup as e:
            raise EvaluationAborted("worker_error", str(e)) from None
        except Exception as e:
            log.exception("lookup for an evaluation worker failed", extra={"method": call.method})
            return LookupRaised(f"{call.method} failed: {type(e).__name__}: {e}"[:1024])
