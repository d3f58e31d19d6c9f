"""The serving process reads the API server's version at start and says when it is older than supported."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient

from tests.fakeapi.server import FakeApiServer
from webhook.server.app import api_server_version_ctx


async def _start(api: ApiClient) -> dict[str, Any]:
    components: Any = SimpleNamespace(api_server={})
    ctx = api_server_version_ctx(components, api)(web.Application())
    await anext(ctx)
    await ctx.aclose()
    return dict(components.api_server)


async def test_an_older_api_server_is_named_at_error_level(
        fake_api: FakeApiServer, api: ApiClient, caplog: pytest.LogCaptureFixture) -> None:
    fake_api.version = {"major": "1", "minor": "20", "gitVersion": "v1.20.2"}
    found = await _start(api)
    assert found["version"] == "v1.20.2" and "matchConditions" in found["unsupported"]
    [record] = [r for r in caplog.records if "v1.20.2" in r.getMessage()]
    assert record.levelno == logging.ERROR and "older than 1.30" in record.getMessage()


async def test_a_supported_api_server_is_only_noted(
        fake_api: FakeApiServer, api: ApiClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    assert await _start(api) == {"version": "v1.36.0"}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_an_unreadable_version_does_not_stop_serving(
        fake_api: FakeApiServer, api: ApiClient, caplog: pytest.LogCaptureFixture) -> None:
    fake_api.version = {"gitVersion": "unknown"}
    assert await _start(api) == {}
    assert any("could not read the API server version" in r.getMessage() for r in caplog.records)
