"""Start and stop the admission server's moving parts inside an aiohttp app (wiring helpers).

Two pieces for ``create_app`` and the CLI, so their wiring stays a few lines:

* :func:`evaluation_pool_ctx`: a ``cleanup_ctx`` step that starts an
  :class:`EvaluationPool`, points the server at an :class:`IsolatedEvaluator`
  (with the abort and restart metrics), and closes the pool at cleanup;
* :func:`graceful_stop`: the SIGTERM sequence ``begin_shutdown`` → ``drain``
  → ``AppRunner.cleanup``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from webhook.admission.isolation.evaluators import Evaluator, InlineEvaluator, IsolatedEvaluator, SizeRoutedEvaluator
from webhook.admission.isolation.pool import DEFAULT_RECYCLE_RSS, EvaluationPool
from webhook.admission.limits import OutputLimits
from webhook.admission.server import AdmissionServer
from webhook.aio import cancel_and_wait
from webhook.metrics import Metrics


def evaluation_pool_ctx(server: AdmissionServer, metrics: Metrics, *, workers: int, memory_limit_bytes: int,
                        limits: OutputLimits | None = None,
                        recycle_rss_bytes: int = DEFAULT_RECYCLE_RSS, isolate_above_bytes: int = 0,
                        inline_work_budget: int | None = None,
                        ) -> Callable[[web.Application], AsyncIterator[None]]:
    """A ``cleanup_ctx`` generator running ``server``'s reviews in worker processes.

    Args:
        server: its ``evaluator`` is replaced while the app runs (and restored after).
        metrics: receives ``tollgate_evaluation_aborted_total`` and
            ``tollgate_evaluation_worker_restarts_total``.
        workers: evaluation processes (each evaluates one review at a time; ``Settings.eval_workers``).
        memory_limit_bytes: ``RLIMIT_AS`` per worker (``Settings.eval_memory_limit_bytes``); workers x
            limit plus the server's own memory should fit the container's memory limit.
        limits: output caps (patch size, message and warning lengths).
        recycle_rss_bytes: replace a worker resident above this after a review.
        isolate_above_bytes: only bodies larger than this go to the workers; smaller
            ones stay inline (0: every review is isolated). See :class:`SizeRoutedEvaluator`.
        inline_work_budget: a review kept inline goes to the workers anyway when its estimated
            evaluation work exceeds this (:mod:`webhook.policy.budget`); None: no estimate.

    Returns:
        ``async def ctx(app)`` for ``app.cleanup_ctx.append(...)``.

    Raises:
        RuntimeError: at start-up, if a worker does not start.
    """

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        pool = EvaluationPool(workers=workers, memory_limit_bytes=memory_limit_bytes, limits=limits,
                              recycle_rss_bytes=recycle_rss_bytes,
                              on_restart=lambda reason: metrics.eval_worker_restarts.labels(reason).inc())
        await pool.start()
        previous = server.evaluator
        isolated = IsolatedEvaluator(
            server.handler, pool, on_abort=lambda endpoint, reason: metrics.eval_aborted.labels(endpoint, reason).inc())
        inline: Evaluator = previous
        if inline_work_budget is not None and isinstance(previous, InlineEvaluator):
            inline = InlineEvaluator(previous.handler, previous.limits, work_budget=inline_work_budget,
                                     overflow=isolated,
                                     on_overflow=lambda endpoint: metrics.eval_over_budget.labels(endpoint).inc())
        server.evaluator = (SizeRoutedEvaluator(inline, isolated, isolate_above_bytes) if isolate_above_bytes > 0
                            else isolated)
        try:
            yield
        finally:
            server.evaluator = previous
            await pool.close()

    return ctx


async def graceful_stop(server: AdmissionServer, runner: web.BaseRunner, *, delay: float, timeout: float,
                        hurry: asyncio.Event | None = None) -> bool:
    """Stop serving without cutting off a review: the SIGTERM sequence.

    1. :meth:`AdmissionServer.begin_shutdown` (``Connection: close`` on every
       response; ``/readyz`` should answer 503 from now on);
    2. :meth:`AdmissionServer.drain` (``delay`` seconds of service, then up to
       ``timeout`` seconds for reviews in flight);
    3. ``runner.cleanup()`` (stop listening, close connections, run ``cleanup_ctx``).

    Args:
        server: the app's AdmissionServer.
        runner: the app's runner.
        delay: seconds to keep serving after SIGTERM, so the endpoint leaves the
            Service and kept-alive clients reconnect elsewhere (a kubelet
            ``preStop`` sleep does the same from outside; ``Settings.shutdown_delay``).
        timeout: most seconds to then wait for reviews in flight (``Settings.shutdown_timeout``).
        hurry: when set (a second SIGINT/SIGTERM), step 2 ends at once; step 3 still runs whole, so
            every ``cleanup_ctx`` step (worker processes, informers) is stopped.

    Returns:
        True when no review was in flight when the runner was cleaned up.
    """
    server.begin_shutdown()
    drain = asyncio.ensure_future(server.drain(delay=delay, timeout=timeout))
    waits: set[asyncio.Future[Any]] = {drain}
    if hurry is not None:
        waits.add(asyncio.ensure_future(hurry.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits - {drain}:
            w.cancel()
    drained = drain.done() and drain.result()
    if not drain.done():
        await cancel_and_wait(drain)
    await runner.cleanup()
    return drained
