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

from kubernetes_asyncio import client

from webhook.informer.errors import ApiStatusError, ConnectError, StreamError
from webhook.informer.gvr import DiscoverySnapshot, group_versions, snapshot_from_documents
from webhook.kube.api import request_json

log = logging.getLogger("tollgate.discovery")

DISCOVERY_TIMEOUT = 30.0


async def get_json(api_client: Any, path: str, *, timeout: float = DISCOVERY_TIMEOUT) -> dict[str, Any]:
    """``GET path`` and decode the JSON body (see :func:`webhook.kube.api.request_json` for the errors)."""
    return await request_json(api_client, "GET", path, timeout=timeout)


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
