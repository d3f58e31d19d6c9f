"""Fixtures for the status writer and leader elector component tests.

``FaultyAPI`` is a small resourceVersion-faithful stand-in for the parts of the
API server these two use (GET, POST, PUT with 409 on a stale
``resourceVersion``, PUT on ``/status``), served by aiohttp on 127.0.0.1 port
0, plus what a general fake need not have: a log of every request and
injectable failures (``fail(method, path_suffix, status, times)``).
A real ``kubernetes_asyncio`` ``ApiClient`` talks to it over HTTP.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration


@dataclass
class _Fault:
    method: str
    suffix: str
    status: int
    times: int


@dataclass
class FaultyAPI:
    """In-memory objects keyed by URL path, with a request log and fault injection."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    faults: list[_Fault] = field(default_factory=list)
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def put_object(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` at ``path`` (as if written by someone else); bumps resourceVersion."""
        stored = copy.deepcopy(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
        self.objects[path] = stored
        return copy.deepcopy(stored)

    def fail(self, method: str, suffix: str, *, status: int = 500, times: int = 1) -> None:
        """Answer the next ``times`` ``method`` requests on paths ending in ``suffix`` with ``status``."""
        self.faults.append(_Fault(method, suffix, status, times))

    def count(self, method: str, suffix: str = "") -> int:
        """How many ``method`` requests were made to paths ending in ``suffix``."""
        return sum(1 for m, p in self.requests if m == method and p.endswith(suffix))

    def _fault_for(self, method: str, path: str) -> int | None:
        for fault in self.faults:
            if fault.method == method and path.endswith(fault.suffix) and fault.times > 0:
                fault.times -= 1
                return fault.status
        return None

    async def handle(self, request: web.Request) -> web.Response:
        """Serve one request."""
        path, method = request.path, request.method
        self.requests.append((method, path))
        status = self._fault_for(method, path)
        if status is not None:
            return _status(status, "Injected")
        if method == "GET":
            obj = self.objects.get(path)
            return web.json_response(obj) if obj is not None else _status(404, "NotFound")
        body = await request.json()
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            if target in self.objects:
                return _status(409, "AlreadyExists")
            return web.json_response(self.put_object(target, body), status=201)
        if method == "PUT":
            subresource = path.endswith("/status")
            target = path.removesuffix("/status")
            current = self.objects.get(target)
            if current is None:
                return _status(404, "NotFound")
            if body.get("metadata", {}).get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return _status(409, "Conflict")
            if subresource:
                # /status ignores everything but status, as the API server does.
                new = copy.deepcopy(current)
                new["status"] = body.get("status")
            else:
                new = body
            return web.json_response(self.put_object(target, new))
        return _status(405, "MethodNotAllowed")


def _status(code: int, reason: str) -> web.Response:
    return web.json_response(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}, status=code
    )


@pytest.fixture()
async def faulty_api() -> AsyncIterator[tuple[FaultyAPI, ApiClient]]:
    """A running :class:`FaultyAPI` and an ``ApiClient`` pointed at it."""
    fake = FaultyAPI()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    configuration = Configuration(host=f"http://127.0.0.1:{port}")
    client = ApiClient(configuration)
    try:
        yield fake, client
    finally:
        await client.close()
        await runner.cleanup()
