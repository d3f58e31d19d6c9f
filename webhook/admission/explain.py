"""``POST /explain``: explain one AdmissionReview on demand (``serve --explain``; off by default).

The body is an AdmissionReview, as the API server sends to ``/validate``; the answer is the
:mod:`webhook.policy.explain` explanation of the decision the server would make from its caches, as
JSON (``kind: Explanation``) or, with ``?format=text`` or ``Accept: text/plain``, the text tree
``tollgate test --explain`` prints. ``?endpoint=mutate`` explains ``/mutate`` instead of ``/validate``;
``?policy=<key>`` (repeatable) explains those policies whatever their rules select, instead of the
index's candidates for the request.

An explanation shows what the policies read: params ConfigMaps, cached objects of ``spec.references``,
Namespace labels. So the route is guarded more than a review:

* never unauthenticated when the server has ``--client-ca``: a verified client certificate is
  required (401), as on ``/validate`` — unlike the probes (``serve`` refuses ``--explain`` in a cluster
  without ``--client-ca``);
* rate-limited: a token bucket of :data:`RATE` explanations per second, bursts of :data:`BURST`
  (429 with ``Retry-After``), since each one evaluates more than a review;
* size-limited: bodies over :data:`MAX_BODY_BYTES` are refused (413);
* budgeted: a request whose explanation is estimated over the work budget
  (:func:`webhook.policy.explain.explain_work` against the inline budget, :mod:`webhook.policy.budget`)
  is refused before anything is evaluated (413, with the estimate and the budget); what the evaluation
  leaves of it pays for splitting expressions and compiling their operands
  (:func:`webhook.policy.explain.operand_work`: operands beyond it are listed without a value);
* off the event loop: the explanation (compiling operands, evaluating, rendering) runs in a thread, one
  at a time, as policies are compiled (:mod:`webhook.server.policy_events`): it is mostly Python, so
  the loop gets the GIL back every switch interval (5 ms) and reviews and probes are answered meanwhile.
  Its cache reads run on the loop (:class:`LoopLookups`), where the informers write.

Errors are ``metav1.Status`` JSON with a one-line message; 503 until the policy caches have synced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from webhook.admission.handler import AdmissionHandler
from webhook.admission.isolation.messages import LOOKUP_METHODS
from webhook.admission.review import ReviewError, parse_review
from webhook.admission.server import DEFAULT_TIMEOUT, asks_for_client_certificate, peer_certificate
from webhook.metrics import Metrics
from webhook.policy.budget import INLINE_WORK_BUDGET, OverBudget
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.explain import explain, render_explanation
from webhook.policy.explain.trace import Explanation
from webhook.policy.lookups import POLICIES, Lookups
from webhook.policy.request import RequestCoordinates
from webhook.policy.vocabulary import API_VERSION, Endpoint

__all__ = ["BURST", "MAX_BODY_BYTES", "PATH", "RATE", "ExplainEndpoint", "LoopLookups", "TokenBucket"]

log = logging.getLogger("tollgate.explain")

#: The route.
PATH = "/explain"
#: Largest body explained (an AdmissionReview of one ordinary object and its old version fits easily).
MAX_BODY_BYTES = 1024 * 1024
#: Explanations per second, sustained.
RATE = 1.0
#: Explanations in a burst.
BURST = 5


class TokenBucket:
    """A token bucket: ``burst`` tokens, refilled at ``rate`` per second.

    Args:
        rate: tokens per second.
        burst: most tokens held.
        clock: monotonic seconds (tests).
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> float:
        """Take a token; 0.0 when one was taken, else the seconds until one is available."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.rate


class LoopLookups:
    """The server's caches read from another thread: each :class:`Lookups` call runs on the event loop.

    The informers write their stores on the loop; a thread that iterated one meanwhile could see it change
    size. A call from the loop's own thread runs directly.

    Args:
        lookups: the caches (read on the loop only).
        loop: the server's event loop.
        timeout: seconds a call waits for the loop (:class:`TimeoutError` after).
    """

    def __init__(self, lookups: Lookups, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._lookups = lookups
        self._loop = loop
        self._timeout = timeout
        self._loop_thread = threading.get_ident()

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method not in LOOKUP_METHODS:
            raise AttributeError(method)
        target = getattr(self._lookups, method)
        return lambda *args: self._call(target, args)

    def _call(self, target: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if threading.get_ident() == self._loop_thread:
            return target(*args)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(target(*args))
            except Exception as e:  # noqa: BLE001 - re-raised in the explaining thread
                future.set_exception(e)

        self._loop.call_soon_threadsafe(run)
        return future.result(self._timeout)


class ExplainEndpoint:
    """The ``/explain`` route over the admission handler's index and caches.

    Args:
        handler: the admission handler (its ``index`` and ``lookups`` are read per request).
        metrics: rejections are counted in ``tollgate_admission_bad_requests_total{endpoint="explain"}``.
        work_budget: the most :func:`~webhook.policy.explain.explain_work` an explanation may have (the
            server's inline budget); None or 0: :data:`~webhook.policy.budget.INLINE_WORK_BUDGET`.
        max_body_bytes: body cap (413 above it).
        limiter: the rate limit (default :data:`RATE` per second, bursts of :data:`BURST`).
        require_client_certificate: demand a verified client certificate; None (default): exactly when
            the connection's TLS context requests one (``--client-ca``).
        timeout: seconds an explanation may take before the remaining policies are errors.
    """

    def __init__(self, handler: AdmissionHandler, metrics: Metrics, *, work_budget: int | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES, limiter: TokenBucket | None = None,
                 require_client_certificate: bool | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.handler = handler
        self.metrics = metrics
        self.work_budget = work_budget or INLINE_WORK_BUDGET
        self.max_body_bytes = max_body_bytes
        self.limiter = limiter or TokenBucket(RATE, BURST)
        self.require_client_certificate = require_client_certificate
        self.timeout = timeout
        self._one_at_a_time = asyncio.Semaphore(1)

    def routes(self) -> list[web.RouteDef]:
        """``POST /explain``."""
        return [web.post(PATH, self.explain)]

    def _reject(self, status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
        self.metrics.bad_requests.labels("explain", str(status)).inc()
        log.info("explain refused", extra={"status": status, "reason": message})
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                  "message": message}, status=status, headers=headers)

    def _gate(self, request: web.Request) -> web.Response | None:
        require = self.require_client_certificate
        if require is None:
            require = asks_for_client_certificate(request)
        if require and peer_certificate(request) is None:
            return self._reject(401, "a client certificate signed by the --client-ca is required on /explain")
        wait = self.limiter.take()
        if wait:
            return self._reject(429, f"too many explanations: at most {self.limiter.rate:g} per second "
                                     f"(bursts of {self.limiter.burst})", {"Retry-After": str(max(1, round(wait)))})
        if not self.handler.lookups.is_synced(POLICIES):
            return self._reject(503, "tollgate is not ready: policy caches have not synced")
        if request.content_type != "application/json":
            return self._reject(415, f"Content-Type must be application/json, got {request.content_type!r}"[:200])
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            return self._reject(413, f"body exceeds {self.max_body_bytes} bytes (the /explain limit)")
        return None

    async def _body(self, request: web.Request) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while size <= self.max_body_bytes:
            chunk = await request.content.read(self.max_body_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)

    def _policies(self, request: web.Request, coords: RequestCoordinates) -> list[CompiledPolicy] | web.Response:
        keys = request.query.getall("policy", [])
        if not keys:
            return self.handler.index.candidates(coords)
        out = []
        for key in keys:
            state = self.handler.index.state(key)
            if state is None:
                return self._reject(404, f"no policy {key!r} (a ClusterAdmissionPolicy by name, an AdmissionPolicy "
                                         "as namespace/name)"[:300])
            if state.result.matchable is None:
                return self._reject(422, f"policy {key}: its match rules cannot be read: "
                                         f"{state.result.condition.get('message', '')}"[:300])
            out.append(state.result.matchable)
        return out

    async def explain(self, request: web.Request) -> web.StreamResponse:
        """``POST /explain`` (see the module docstring)."""
        rejected = self._gate(request)
        if rejected is not None:
            return rejected
        endpoint = request.query.get("endpoint", str(Endpoint.VALIDATE))
        if endpoint not in (Endpoint.VALIDATE, Endpoint.MUTATE):
            return self._reject(400, f"endpoint must be validate or mutate, got {endpoint!r}"[:200])
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._body(request)
        except TimeoutError:
            return self._reject(408, "request body not received before the deadline")
        except (HttpProcessingError, RequestPayloadError, ConnectionError) as e:
            request.content.feed_eof()
            response = self._reject(400, f"request body could not be read: {e}".replace("\n", " ")[:200])
            response.force_close()
            return response
        if len(body) > self.max_body_bytes:
            return self._reject(413, f"body exceeds {self.max_body_bytes} bytes (the /explain limit)")
        try:
            _api_version, admission_request = parse_review(body)
        except ReviewError as e:
            return self._reject(e.http_status, e.reason)
        req = cast(dict[str, Any], admission_request)
        policies = self._policies(request, RequestCoordinates.of(req))
        if isinstance(policies, web.Response):
            return policies
        text = request.query.get("format") == "text" or (
            "text/plain" in request.headers.get("Accept", "") and "json" not in request.headers.get("Accept", ""))
        note = "only the policies named by ?policy= are explained: the decision is theirs alone" \
            if request.query.getall("policy", []) else ""
        try:
            answer = await self._off_loop(endpoint, req, policies, note, text)
        except OverBudget as e:
            return self._reject(413, f"explaining this request is estimated at {e.work:,} units of work, over the "
                                     f"budget of {e.budget:,} (an explanation evaluates every expression and the "
                                     "operands of failed ones); explain fewer policies (?policy=) or a smaller object")
        except Exception as e:  # logged with its traceback; the client gets one line
            log.exception("explain failed", extra={"uid": req.get("uid")})
            return self._reject(500, f"tollgate: explaining failed: {type(e).__name__}: {e}"[:300])
        log.info("explained", extra={"uid": req.get("uid"), "endpoint": endpoint, "policies": len(policies)})
        if text:
            return web.Response(text=answer.decode(), content_type="text/plain")
        return web.Response(body=answer, content_type="application/json")

    async def _off_loop(self, endpoint: str, req: dict[str, Any], policies: list[CompiledPolicy], note: str,
                        text: bool) -> bytes:
        """The explanation's body, computed in a thread (one explanation at a time); its cache reads on the loop.

        Raises:
            OverBudget: estimated over ``work_budget`` (nothing evaluated).
        """
        loop = asyncio.get_running_loop()
        lookups = cast(Lookups, LoopLookups(self.handler.lookups, loop, self.timeout))

        def compute() -> bytes:
            explanation: Explanation = explain(endpoint, req, policies, lookups,
                                               deadline=time.monotonic() + self.timeout, work_budget=self.work_budget)
            explanation.note = note
            if text:
                return render_explanation(explanation).encode()
            return orjson.dumps({"apiVersion": API_VERSION, "kind": "Explanation", **explanation.as_dict()})

        await self._one_at_a_time.acquire()
        try:
            future = loop.run_in_executor(None, compute)
        except BaseException:
            self._one_at_a_time.release()
            raise
        # Released when the thread is done, even if this request is cancelled first (the thread runs on).
        future.add_done_callback(lambda _f: self._one_at_a_time.release())
        return await asyncio.shield(future)
