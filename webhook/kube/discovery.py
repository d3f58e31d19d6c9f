"""Fetch the API server's discovery documents into a :class:`~webhook.informer.gvr.DiscoverySnapshot`.

The aggregated-less discovery walk of client-go's
``discovery.ServerGroupsAndResources``: ``GET /api`` and ``GET /apis``, then
``GET /api/v1`` and ``GET /apis/G/V`` for every served group version,
concurrently. As client-go does, a group version that fails (an aggregated
API server that is down answers 503) is left out and reported, not fatal;
only ``/api`` or ``/apis`` failing is an error. Resolution of rules against
the snapshot is pure and lives in ``webhook.informer.gvr``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client

from webhook.informer.errors import ApiStatusError, ConnectError, StreamError
from webhook.informer.gvr import DiscoverySnapshot, group_versions, snapshot_from_documents
from webhook.kube.listwatch import status_error

log = logging.getLogger("tollgate.discovery")

DISCOVERY_TIMEOUT = 30.0


async def get_json(api_client: client.ApiClient, path: str, *, timeout: float = DISCOVERY_TIMEOUT) -> dict[str, Any]:
    """``GET path`` and decode the JSON body.

    Raises:
        ApiStatusError: a non-2xx answer.
        ConnectError / StreamError: transport failures or a body that is not a JSON object.
    """
    try:
        resp = await api_client.call_api(
            path, "GET", header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
            _preload_content=False, _return_http_data_only=True,
            _request_timeout=aiohttp.ClientTimeout(total=timeout))
    except aiohttp.ClientConnectorError as e:
        raise ConnectError(str(e)) from e
    except (TimeoutError, aiohttp.ClientError) as e:
        raise StreamError(f"GET {path}: {e!r}") from e
    try:
        body = await resp.read()
    except (TimeoutError, aiohttp.ClientError) as e:
        raise StreamError(f"GET {path}: {e!r}") from e
    finally:
        resp.release()
    try:
        data = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError as e:
        if resp.status >= 300:
            raise status_error(resp.status, {}) from e
        raise StreamError(f"GET {path}: body is not JSON") from e
    if resp.status >= 300:
        raise status_error(resp.status, data if isinstance(data, dict) else {})
    if not isinstance(data, dict):
        raise StreamError(f"GET {path}: body is not a JSON object")
    return data


class Discovery:
    """Discovery client for one API server.

    Args:
        api_client: a configured kubernetes_asyncio ApiClient (not closed here).

    Attributes:
        failed: group versions (``"G/V"``) whose resource list failed on the last :meth:`snapshot`.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client
        self.failed: dict[str, str] = {}

    async def snapshot(self) -> DiscoverySnapshot:
        """Fetch every discovery document and build a snapshot.

        Raises:
            ApiStatusError / ConnectError / StreamError: ``/api`` or ``/apis`` could not be read.
        """
        core, groups = await asyncio.gather(get_json(self._api, "/api"), get_json(self._api, "/apis"))
        gvs = group_versions(core, groups)

        async def fetch(gv: tuple[str, str]) -> tuple[tuple[str, str], dict[str, Any] | Exception]:
            group, version = gv
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                return gv, await get_json(self._api, path)
            except (ApiStatusError, ConnectError, StreamError) as e:
                return gv, e

        lists: dict[tuple[str, str], dict[str, Any]] = {}
        failed: dict[str, str] = {}
        for gv, doc in await asyncio.gather(*(fetch(gv) for gv in gvs)):
            if isinstance(doc, Exception):
                failed["/".join(p for p in gv if p)] = str(doc)
            else:
                lists[gv] = doc
        if failed:
            log.warning("discovery: %d group version(s) unavailable: %s", len(failed), sorted(failed))
        self.failed = failed
        return snapshot_from_documents(core, groups, lists)
