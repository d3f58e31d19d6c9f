"""HTTP transport of the webhook: ``POST /validate`` and ``POST /mutate``.

Bounds every input before the decision core sees it: a body cap (413), a
``Content-Type: application/json`` check (415), a read deadline taken from
the ``timeout`` query parameter the API server appends (e.g. ``?timeout=10s``),
and AdmissionReview validation (400 with a reason). Whatever happens inside
evaluation, the reply is an AdmissionResponse echoing ``request.uid``
(``errored`` under failurePolicy semantics), never a bare 500.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from webhook.admission.handler import AdmissionDecision, AdmissionHandler
from webhook.admission.review import ReviewError, errored, parse_review, review_body
from webhook.metrics import Metrics
from webhook.policy import Decision, Result

log = logging.getLogger("tollgate.admission")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
#: Answer this many seconds before the API server's own deadline.
DEADLINE_MARGIN = 0.5


def parse_go_duration(text: str | None) -> float | None:
    """``"10s"`` → 10.0, ``"1m30s"`` → 90.0 (Go ``time.Duration`` strings); None if absent or invalid."""
    if not text:
        return None
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


class AdmissionServer:
    """aiohttp handlers around an :class:`AdmissionHandler`."""

    def __init__(self, handler: AdmissionHandler, metrics: Metrics, *, max_request_bytes: int,
                 default_timeout: float = 10.0, clock: Callable[[], float] = time.perf_counter) -> None:
        self.handler = handler
        self.metrics = metrics
        self.max_request_bytes = max_request_bytes
        self.default_timeout = default_timeout
        self._clock = clock
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

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
        return [web.post("/validate", self.validate), web.post("/mutate", self.mutate)]

    async def validate(self, request: web.Request) -> web.StreamResponse:
        """``POST /validate``."""
        return await self._serve(request, "validate", self.handler.validate)

    async def mutate(self, request: web.Request) -> web.StreamResponse:
        """``POST /mutate``."""
        return await self._serve(request, "mutate", self.handler.mutate)

    def _reject(self, endpoint: str, status: int, reason: str) -> web.Response:
        self.metrics.bad_requests.labels(endpoint, str(status)).inc()
        log.info("bad admission request", extra={"endpoint": endpoint, "status": status, "reason": reason})
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                  "message": reason}, status=status)

    async def _read_body(self, request: web.Request) -> bytes:
        """The whole body, or the first ``max_request_bytes + 1`` bytes of a longer one.

        ``StreamReader.read(n)`` returns whatever is buffered (one TLS record,
        often 16 KiB), not n bytes, so a single read would cut a large
        AdmissionReview short and answer a valid request with "malformed JSON".
        """
        chunks: list[bytes] = []
        size = 0
        while size <= self.max_request_bytes:
            chunk = await request.content.read(self.max_request_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)

    async def _serve(self, request: web.Request, endpoint: str, decide: Callable[..., AdmissionDecision]) -> web.StreamResponse:
        started = self._clock()
        if request.content_type != "application/json":
            return self._reject(endpoint, 415, f"Content-Type must be application/json, got {request.content_type!r}")
        if request.content_length is not None and request.content_length > self.max_request_bytes:
            return self._reject(endpoint, 413, f"body exceeds {self.max_request_bytes} bytes")
        budget = parse_go_duration(request.query.get("timeout")) or self.default_timeout
        try:
            async with asyncio.timeout(max(budget - DEADLINE_MARGIN, 0.1)):
                body = await self._read_body(request)
        except TimeoutError:
            return self._reject(endpoint, 408, "request body not received before the deadline")
        if len(body) > self.max_request_bytes:
            return self._reject(endpoint, 413, f"body exceeds {self.max_request_bytes} bytes")
        try:
            api_version, admission_request = parse_review(body)
        except ReviewError as e:
            return self._reject(endpoint, e.http_status, e.reason)
        uid = admission_request["uid"]
        try:
            decision = decide(admission_request, time.monotonic() + max(budget - DEADLINE_MARGIN, 0.1))
        except ReviewError as e:  # e.g. 503 before the policy caches synced: the webhook's failurePolicy applies
            return self._reject(endpoint, e.http_status, e.reason)
        except Exception as e:
            log.exception("evaluation failed", extra={"uid": uid, "endpoint": endpoint})
            decision = AdmissionDecision(errored(uid, f"tollgate: evaluation failed: {e}"), Decision.ERROR, ())
        for result in decision.results:
            self._child(self.metrics.policy_evaluations, result.policy, result.result).inc()
            if result.result is Result.ERROR:
                self._child(self.metrics.policy_errors, result.policy).inc()
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
