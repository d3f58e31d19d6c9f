"""HTTP transport of the webhook: ``POST /validate`` and ``POST /mutate``.

Bounds every input before the decision core sees it: a body cap (413,
counted after ``Content-Encoding: gzip``/``deflate`` decoding, so a zip
bomb stops at the cap; other encodings 415, undecodable bodies 400), a
``Content-Type: application/json`` check (415), a deadline taken from the
``timeout`` query parameter the API server appends (e.g. ``?timeout=10s``,
capped at 30 s as Kubernetes caps ``timeoutSeconds``) covering the body read
and the evaluation, and AdmissionReview validation (400 with a reason).
Whatever happens inside evaluation, the reply is an AdmissionResponse
echoing ``request.uid`` (answered per failurePolicy when evaluation fails or
runs out of time), never a bare 500.

Large bodies take turns (:class:`LoopTurns`): reviews of :data:`LARGE_REVIEW_BYTES` or more start their
work on the loop (parse, cost estimate, inline evaluation or the hand-over to a worker) at most
:data:`LARGE_BYTES_PER_ITERATION` bytes' worth per event-loop iteration, in arrival order, so a flood of
reviews just under ``--isolate-above-bytes`` cannot fill one iteration with their work while a cheap review
or a probe waits behind all of them (issue #29 item 8).

Also enforces a verified client certificate on the admission paths when the
TLS layer asks for one (``--client-ca``: the handshake uses CERT_OPTIONAL so
probes need none), answers 503 until an optional readiness gate opens, and
after :meth:`AdmissionServer.begin_shutdown` marks every response
``Connection: close``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from webhook.admission.events import EventRecorder
from webhook.admission.handler import AdmissionHandler
from webhook.admission.isolation.evaluators import Evaluator, InlineEvaluator
from webhook.admission.review import ReviewError, parse_review, review_body
from webhook.metrics import Metrics
from webhook.policy import Decision, Result
from webhook.policy.vocabulary import Endpoint

log = logging.getLogger("tollgate.admission")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
#: Answer this many seconds before the API server's own deadline.
DEADLINE_MARGIN = 0.5
#: Longest honoured ``?timeout=``: the API server caps a webhook's ``timeoutSeconds`` at 30 s.
MAX_TIMEOUT = 30.0
#: Seconds a review may take when the API server sends no ``?timeout=``: a webhook's default ``timeoutSeconds``.
DEFAULT_TIMEOUT = 10.0
#: Status counted (``tollgate_admission_bad_requests_total{status="499"}``) for a client that closed its
#: connection before its body arrived; nginx's name for it. Nobody is left to receive it.
CLIENT_CLOSED = 499
#: Content-Encodings aiohttp decodes before the body cap is counted.
ACCEPTED_ENCODINGS = frozenset({"", "identity", "gzip", "deflate"})
#: Bodies from this size (bytes) take turns on the event loop (:class:`LoopTurns`); smaller reviews (a typical
#: Pod: 1-4 KiB) never wait for one.
LARGE_REVIEW_BYTES = 8 * 1024
#: Bytes of large reviews whose work starts in one event-loop iteration (the first one always starts): one
#: review just under the default ``--isolate-above-bytes`` (32 KiB), or four of 8 KiB.
LARGE_BYTES_PER_ITERATION = 32 * 1024
#: Distinct query strings whose deadline budget :class:`AdmissionServer` remembers (the API server sends one
#: ``?timeout=`` per webhook); further ones are parsed on every request, so the memory stays bounded.
MAX_REMEMBERED_QUERIES = 64


class LoopTurns:
    """Large reviews start their synchronous work at most ``bytes_per_iteration`` per event-loop iteration.

    asyncio runs, in one iteration, every callback that became ready before it: each review whose body
    completed meanwhile is parsed, estimated and evaluated or handed over back to back, and a cheap review
    or ``/healthz`` that arrived with them waits behind all of that work. A large review calls :meth:`take`
    before its work: the first of an iteration goes on at once (and further ones while their bytes fit);
    the others wait, first come first served, and are let go one iteration's worth at a time, each in a
    later iteration, so every iteration in between serves whatever else is ready.

    Args:
        bytes_per_iteration: body bytes of large reviews let go per iteration.
        large_bytes: bodies smaller than this never wait.
    """

    def __init__(self, bytes_per_iteration: int = LARGE_BYTES_PER_ITERATION,
                 large_bytes: int = LARGE_REVIEW_BYTES) -> None:
        self.bytes_per_iteration = bytes_per_iteration
        self.large_bytes = large_bytes
        self._spent = 0
        self._reset_scheduled = False
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Large reviews waiting for their turn now."""
        return sum(1 for _size, future in self._waiting if not future.done())

    async def take(self, size: int) -> None:
        """Wait until a review of ``size`` body bytes may start its work (at once when small, or its turn now)."""
        if size < self.large_bytes:
            return
        if not self._waiting and (not self._spent or self._spent + size <= self.bytes_per_iteration):
            self._charge(size)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((size, future))
        await future  # cancelled while waiting: dropped from the queue when its turn would come

    def _charge(self, size: int) -> None:
        self._spent += size
        if not self._reset_scheduled:
            # call_soon from a callback of this iteration runs in the next one: a new iteration, new turns.
            asyncio.get_running_loop().call_soon(self._next_iteration)
            self._reset_scheduled = True

    def _next_iteration(self) -> None:
        self._spent = 0
        self._reset_scheduled = False
        while self._waiting:
            size, future = self._waiting[0]
            if future.done():  # its request was cancelled
                self._waiting.popleft()
                continue
            if self._spent and self._spent + size > self.bytes_per_iteration:
                break
            self._waiting.popleft()
            self._charge(size)  # it resumes in the next iteration, which this charge is for
            future.set_result(None)


def parse_go_duration(text: str | None) -> float | None:
    """``"10s"`` → 10.0, ``"1m30s"`` → 90.0 (Go ``time.Duration`` strings); None if absent or invalid."""
    if not text:
        return None
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def request_budget(timeout_param: str | None, default: float) -> float:
    """Seconds the server may spend on a review, from ``?timeout=`` (Go duration).

    Follows the API server: ``timeoutSeconds`` is 1..30 s, and the API server
    appends it as ``?timeout=<n>s``. Absent or invalid values give
    ``default``; values are capped at :data:`MAX_TIMEOUT`; then
    :data:`DEADLINE_MARGIN` is taken off so the answer arrives before the API
    server gives up (never below 0.1 s).
    """
    budget = parse_go_duration(timeout_param) or default
    return max(min(budget, MAX_TIMEOUT) - DEADLINE_MARGIN, 0.1)


def peer_certificate(request: web.BaseRequest) -> dict[str, Any] | None:
    """The verified client certificate of ``request``'s TLS connection, or None.

    Returns None on plain HTTP or when the client sent none. A certificate
    that does not verify never gets here: the handshake fails first.
    """
    transport = request.transport
    if transport is None:
        return None
    cert = transport.get_extra_info("peercert")
    return cert or None


def asks_for_client_certificate(request: web.BaseRequest) -> bool:
    """Whether the connection's TLS context requests client certificates (``--client-ca``)."""
    return context_asks_for_client_certificate(tls_context(request))


def context_asks_for_client_certificate(context: ssl.SSLContext | None) -> bool:
    """Whether ``context`` requests client certificates; False for None (plain HTTP)."""
    return context is not None and context.verify_mode != ssl.CERT_NONE


def tls_context(request: web.BaseRequest) -> ssl.SSLContext | None:
    """The TLS context of ``request``'s connection; None on plain HTTP."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    return None if ssl_object is None else ssl_object.context


class AdmissionServer:
    """aiohttp handlers around an :class:`AdmissionHandler`.

    Args:
        handler: decides reviews (its ``index`` and ``lookups`` are read per request).
        metrics: where counters go.
        max_request_bytes: body cap after decoding, bytes (413 above it).
        default_timeout: seconds when the API server sends no ``?timeout=``.
        clock: monotonic seconds (tests).
        evaluator: how the handler runs; default :class:`InlineEvaluator`
            (on the event loop, deadline not enforced). Production passes an
            :class:`~webhook.admission.isolation.evaluators.IsolatedEvaluator`.
        ready: a readiness gate; while it returns False every review is
            answered HTTP 503 (a failed webhook call: the API server applies
            the webhook configuration's failurePolicy). None: always open.
        require_client_certificate: demand a verified client certificate on
            ``/validate`` and ``/mutate`` (401 without one). None (default):
            demand one exactly when the connection's TLS context requests
            client certificates, i.e. when served with ``--client-ca``.
        turns: how large reviews share the event loop (default :class:`LoopTurns` with its defaults).
        events: where denials and warnings go as Kubernetes Events (queued, never awaited:
            :mod:`webhook.admission.events`); None: no Events.
    """

    def __init__(self, handler: AdmissionHandler, metrics: Metrics, *, max_request_bytes: int,
                 default_timeout: float = DEFAULT_TIMEOUT, clock: Callable[[], float] = time.perf_counter,
                 evaluator: Evaluator | None = None, ready: Callable[[], bool] | None = None,
                 require_client_certificate: bool | None = None, turns: LoopTurns | None = None,
                 events: EventRecorder | None = None) -> None:
        self.handler = handler
        self.turns = turns or LoopTurns()
        self.events = events
        self.metrics = metrics
        self.max_request_bytes = max_request_bytes
        self.default_timeout = default_timeout
        self.evaluator: Evaluator = evaluator or InlineEvaluator(handler)
        self.ready = ready
        self.require_client_certificate = require_client_certificate
        self._clock = clock
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._budgets: dict[str, float] = {}  # raw query string → seconds (see _budget)
        # The last TLS context seen and whether it requests client certificates: a context's verify_mode is
        # set before it serves (a certificate reload builds a new context), and reading it costs an enum
        # conversion per request.
        self._asks_context: ssl.SSLContext | None = None
        self._asks = False
        self._shutting_down = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def _child(self, metric: Any, *labels: str) -> Any:
        # prometheus-client's labels() takes a lock and validates on every call; the request path
        # resolves each label set once.
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def routes(self) -> list[web.RouteDef]:
        """The two admission routes."""
        return [web.post(Endpoint.VALIDATE.path, self.validate), web.post(Endpoint.MUTATE.path, self.mutate)]

    @property
    def shutting_down(self) -> bool:
        """True after :meth:`begin_shutdown` (``/readyz`` should then answer 503)."""
        return self._shutting_down

    def begin_shutdown(self) -> None:
        """Start draining: from now on every response carries ``Connection: close``.

        Call it on SIGTERM, then ``await drain(...)``, then
        ``AppRunner.cleanup()``. Each kept-alive client gets its next answer in
        full and then reconnects (to another replica once the endpoint is
        removed), instead of finding its idle connection closed under a
        request it just sent; in-flight requests finish normally. Go's
        ``http.Server.Shutdown`` closes idle connections the same way, but the
        API server does not retry a POST that hit a closed connection.
        Applies to the admission routes; add :meth:`on_response_prepare` to
        ``app.on_response_prepare`` to cover every route (probes, metrics).
        """
        self._shutting_down = True

    @property
    def in_flight(self) -> int:
        """Admission requests being read, evaluated or answered right now."""
        return self._in_flight

    async def drain(self, *, delay: float, timeout: float) -> bool:
        """After :meth:`begin_shutdown`: keep serving ``delay`` seconds, then wait for in-flight reviews.

        Run it between :meth:`begin_shutdown` and ``AppRunner.cleanup()``.
        ``delay`` lets the endpoint leave the Service (``/readyz`` answers 503)
        and lets kept-alive clients pick up ``Connection: close``. Then it waits
        (up to ``timeout`` seconds) until no admission request is in flight:
        ``AppRunner.cleanup()`` stops reading from open connections at once
        (aiohttp drops data that arrives after it starts closing), so a review
        whose body is still arriving would otherwise be cut off.

        Returns:
            True when no review was in flight at the end; False on timeout.
        """
        await asyncio.sleep(delay)
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            log.warning("shutdown: reviews still in flight after the drain timeout",
                        extra={"in_flight": self._in_flight})
            return False
        return True

    async def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """``app.on_response_prepare`` signal: ``Connection: close`` while shutting down.

        aiohttp runs this hook after it has computed the headers, so the
        header is set here as well as the connection's keep-alive flag.
        """
        if self._shutting_down:
            response.force_close()
            response.headers["Connection"] = "close"

    async def validate(self, request: web.Request) -> web.StreamResponse:
        """``POST /validate``."""
        return await self._tracked(request, Endpoint.VALIDATE)

    async def mutate(self, request: web.Request) -> web.StreamResponse:
        """``POST /mutate``."""
        return await self._tracked(request, Endpoint.MUTATE)

    async def _tracked(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        if not self._in_flight:
            self._idle.clear()
        self._in_flight += 1
        try:
            response = await self._serve(request, endpoint)
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()
        if self._shutting_down:
            response.force_close()
            response.headers["Connection"] = "close"
        return response

    def _reject(self, endpoint: str, status: int, reason: str) -> web.Response:
        self.metrics.bad_requests.labels(endpoint, str(status)).inc()
        log.info("bad admission request", extra={"endpoint": endpoint, "status": status, "reason": reason})
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                  "message": reason}, status=status)

    async def _read_body(self, request: web.Request) -> bytes:
        """The whole (decoded) body, or the first ``max_request_bytes + 1`` bytes of a longer one.

        ``StreamReader.read(n)`` returns whatever is buffered (one TLS record,
        often 16 KiB), not n bytes, so a single read would cut a large
        AdmissionReview short and answer a valid request with "malformed JSON".
        aiohttp decodes gzip/deflate in bounded chunks as we read, so the cap
        applies to the decoded size.

        Raises:
            ReviewError: 400 when the body cannot be decoded; :data:`CLIENT_CLOSED` when the
                connection was lost before the body arrived.
        """
        chunks: list[bytes] = []
        size = 0
        while size <= self.max_request_bytes:
            try:
                chunk = await request.content.read(self.max_request_bytes + 1 - size)
            except HttpProcessingError as e:
                raise ReviewError(400, f"request body could not be read: {e.message}"[:200]) from None
            except RequestPayloadError as e:  # aiohttp wraps a decoding failure (e.g. corrupt gzip) in this
                raise ReviewError(400, f"request body could not be read: {e}".replace("\n", " ")[:200]) from None
            except ConnectionError:  # gone mid-body (or evicted by the listener): nothing to answer, nothing to trace
                raise ReviewError(CLIENT_CLOSED, "the client closed the connection before its body arrived") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)

    def _budget(self, request: web.Request) -> float:
        """Seconds for ``request`` (:func:`request_budget` of its ``?timeout=``), remembered per query string.

        ``request.query`` parses the query string into a new MultiDict on every request; the API server
        sends the same ``timeout=<n>s`` on every call of one webhook, so the answer is kept per raw query
        string (the first :data:`MAX_REMEMBERED_QUERIES` seen; others are parsed each time).
        """
        raw = request.rel_url.raw_query_string
        budget = self._budgets.get(raw)
        if budget is None:
            budget = request_budget(request.query.get("timeout"), self.default_timeout)
            if len(self._budgets) < MAX_REMEMBERED_QUERIES:
                self._budgets[raw] = budget
        return budget

    def _gate(self, request: web.Request, endpoint: str) -> web.Response | None:
        """Checks before the body is read: client certificate, readiness, headers."""
        require = self.require_client_certificate
        if require is None:
            context = tls_context(request)
            if context is not self._asks_context:
                self._asks_context, self._asks = context, context_asks_for_client_certificate(context)
            require = self._asks
        if require and peer_certificate(request) is None:
            return self._reject(endpoint, 401, "a client certificate signed by the --client-ca is required "
                                               "on /validate and /mutate")
        if self.ready is not None and not self.ready():
            return self._reject(endpoint, 503, "tollgate is not ready: policy caches have not synced")
        headers = request.headers
        # The API server's exact header needs no parsing; anything else (parameters, case) is parsed as before.
        if headers.get("Content-Type") != "application/json" and request.content_type != "application/json":
            return self._reject(endpoint, 415, f"Content-Type must be application/json, got {request.content_type!r}")
        encoding = headers.get("Content-Encoding")
        if encoding is not None and (encoding := encoding.strip().lower()) not in ACCEPTED_ENCODINGS:
            return self._reject(endpoint, 415, f"Content-Encoding {encoding!r} is not supported (gzip, deflate)"[:200])
        content_length = request.content_length  # parsed from the header on every read
        if content_length is not None and content_length > self.max_request_bytes:
            return self._reject(endpoint, 413, f"body exceeds {self.max_request_bytes} bytes")
        return None

    async def _serve(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        started = self._clock()
        rejected = self._gate(request, endpoint)
        if rejected is not None:
            return rejected
        budget = self._budget(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        content = request.content
        if (content.is_eof() and content.exception() is None and content.total_bytes <= self.max_request_bytes
                and "Content-Encoding" not in request.headers):
            # The whole body arrived with its head (a typical review: one TLS record): nothing to wait for,
            # so no deadline timer and no read loop. An encoded body takes the loop below, which decodes it
            # in bounded chunks against the cap.
            body = content.read_nowait()
        else:
            try:
                async with asyncio.timeout_at(deadline):
                    body = await self._read_body(request)
            except TimeoutError:
                return self._reject(endpoint, 408, "request body not received before the deadline")
            except ReviewError as e:
                # The rest of an undecodable body cannot be skipped: aiohttp would hit the same decoding error
                # while discarding it and log a traceback. Mark the body consumed, answer, close the connection.
                request.content.feed_eof()
                response = self._reject(endpoint, e.http_status, e.reason)
                response.force_close()
                return response
        if len(body) > self.max_request_bytes:
            return self._reject(endpoint, 413, f"body exceeds {self.max_request_bytes} bytes")
        if len(body) >= self.turns.large_bytes:  # a small review never waits: no coroutine for it
            await self.turns.take(len(body))  # a large review's work waits for its turn on the loop
        try:
            api_version, admission_request = parse_review(body)
        except ReviewError as e:
            return self._reject(endpoint, e.http_status, e.reason)
        size = len(body)
        del body
        uid = admission_request["uid"]
        try:
            decision = await self.evaluator(endpoint, admission_request, max(deadline - loop.time(), 0.05),
                                            size=size)
        except ReviewError as e:  # e.g. 503 before the policy caches synced: the webhook's failurePolicy applies
            return self._reject(endpoint, e.http_status, e.reason)
        self.metrics.policy_results.record(decision.results)
        self.metrics.policy_durations.record(endpoint, decision.durations)
        for exempted in decision.exempted:  # () unless a PolicyException applied
            self.metrics.exceptions_applied.labels(exempted.policy, exempted.exception, exempted.result).inc()
        if self.events is not None and (decision.decision is not Decision.ALLOWED or "warnings" in decision.response):
            self.events.record(admission_request, decision.results)  # a bounded queue: never waits
        elapsed = self._clock() - started
        self._child(self.metrics.requests, endpoint, decision.decision).inc()
        self._child(self.metrics.latency, endpoint, decision.decision).observe(elapsed)
        if decision.decision is not Decision.ALLOWED or log.isEnabledFor(logging.DEBUG):
            log.info("admission decision", extra={
                "uid": uid, "endpoint": endpoint, "decision": decision.decision,
                "kind": gvk.get("kind") if (gvk := admission_request.get("kind")) else None,
                "namespace": admission_request.get("namespace"), "object_name": admission_request.get("name"),
                "operation": admission_request.get("operation"),
                "policies": [r.policy for r in decision.results if r.result in (Result.FAIL, Result.ERROR)],
                "dryRun": bool(admission_request.get("dryRun")),
            })
        return web.Response(body=review_body(api_version, decision.response), content_type="application/json")
