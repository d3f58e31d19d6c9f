"""KubeListerWatcher: LIST and WATCH of one resource through kubernetes_asyncio's ApiClient.

Uses ``ApiClient.call_api(..., _preload_content=False)`` and decodes JSON
itself into plain dicts (model deserialization costs ~27x more), and does
**not** use ``kubernetes_asyncio.watch.Watch`` (docs/design/informer.md §B: it swallows
410s, yields garbage lines as strings and has no read timeout). It adds what
the Reflector needs (docs/design/informer.md §B, "What the informer must add"):

* the HTTP status is checked and ``Status`` bodies become
  :class:`ApiStatusError` (with ``Retry-After`` and ``details.causes``);
* watch lines are split here, capped (16 MiB; a longer line is
  :class:`LineTooLongError`), and an unterminated tail at EOF is dropped;
* a watch's socket read timeout (``sock_read``) and total deadline are both
  ``timeoutSeconds + 30`` s by default: longer than the server-side timeout,
  so an idle watch (a 1.20 server sends no bookmark to a watch that saw no
  change) ends cleanly by the server's ``timeoutSeconds`` instead of being
  cut by ours (issue 20: a 90 s read timeout reopened idle watches every
  90 s), while a half-open connection is still bounded;
* transport failures map to ConnectError (refused → back off, re-watch) and
  StreamError (cut, timeout, garbage → re-watch).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import orjson
from kubernetes_asyncio import client

from webhook.informer.errors import ApiStatusError, ConnectError, LineTooLongError, StreamError
from webhook.informer.types import ListOptions, ListResult, WatchEvent

MAX_LINE_BYTES = 16 * 1024 * 1024
#: Seconds past a watch's ``timeoutSeconds`` before the client gives up on it (read timeout and deadline).
WATCH_DEADLINE_MARGIN = 30.0
#: ``timeoutSeconds`` assumed for a watch that sends none (the Reflector always sends one).
DEFAULT_WATCH_TIMEOUT = 300
LIST_TIMEOUT = 60.0


def _query(options: ListOptions, *, watch: bool) -> list[tuple[str, Any]]:
    q: list[tuple[str, Any]] = []
    if watch:
        q.append(("watch", "true"))
    if options.resource_version is not None:
        q.append(("resourceVersion", options.resource_version))
    if options.resource_version_match:
        q.append(("resourceVersionMatch", options.resource_version_match))
    if options.limit:
        q.append(("limit", options.limit))
    if options.continue_token:
        q.append(("continue", options.continue_token))
    if options.label_selector:
        q.append(("labelSelector", options.label_selector))
    if options.field_selector:
        q.append(("fieldSelector", options.field_selector))
    if options.timeout_seconds:
        q.append(("timeoutSeconds", options.timeout_seconds))
    if options.allow_watch_bookmarks:
        q.append(("allowWatchBookmarks", "true"))
    if options.send_initial_events is not None:
        q.append(("sendInitialEvents", "true" if options.send_initial_events else "false"))
    return q


def _retry_after(resp: aiohttp.ClientResponse, status: dict[str, Any]) -> float | None:
    header = resp.headers.get("Retry-After")
    if header and header.isdigit():
        return float(header)
    details = status.get("details") or {}
    value = details.get("retryAfterSeconds")
    return float(value) if isinstance(value, (int, float)) else None


def status_error(code: int, status: dict[str, Any], retry_after: float | None = None) -> ApiStatusError:
    """An :class:`ApiStatusError` from a ``Status`` object."""
    causes = tuple(str(c.get("reason", "")) for c in ((status.get("details") or {}).get("causes") or [])
                   if isinstance(c, dict))
    return ApiStatusError(int(status.get("code") or code), str(status.get("reason") or ""),
                          str(status.get("message") or ""), retry_after=retry_after, causes=causes)


async def open_response(api: Any, method: str, path: str, *, timeout: aiohttp.ClientTimeout,
                        query: list[tuple[str, Any]] | None = None, body: Any = None) -> aiohttp.ClientResponse:
    """Send one request through the ApiClient without decoding it; the caller reads and releases the body.

    Transport failures and non-2xx answers are mapped as the Reflector expects them.

    Raises:
        ApiStatusError: a non-2xx answer, with its ``metav1.Status`` and ``Retry-After``.
        ConnectError: the API server could not be reached.
        StreamError: the request did not complete.
    """
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        resp = await api.call_api(
            path, method, query_params=query or [], body=body, header_params=headers,
            auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
            _request_timeout=timeout,
        )
    except aiohttp.ClientConnectorError as e:
        raise ConnectError(str(e)) from e
    except (TimeoutError, aiohttp.ClientError) as e:
        raise StreamError(f"{method} {path}: {e!r}") from e
    if resp.status >= 300:
        try:
            raw = await resp.read()
            status = orjson.loads(raw) if raw else {}
        except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError):
            status = {}
        finally:
            resp.release()
        if not isinstance(status, dict):
            status = {}
        raise status_error(resp.status, status, _retry_after(resp, status))
    return cast(aiohttp.ClientResponse, resp)


class KubeListerWatcher:
    """A :class:`~webhook.informer.types.ListerWatcher` for one resource.

    Args:
        api_client: a configured kubernetes_asyncio ApiClient (not closed here).
        group: API group, ``""`` for core (``/api/v1``).
        version: e.g. ``v1``, ``v1alpha1``.
        plural: resource name, e.g. ``configmaps``.
        namespace: restrict to one namespace (None: all namespaces, or cluster-scoped).
        watch_read_timeout: seconds without any byte before a watch is declared dead; None (the
            default): the watch's ``timeoutSeconds`` + :data:`WATCH_DEADLINE_MARGIN`, so only the
            server's timeout ends an idle watch. Tests pass a short one.
        max_line_bytes: longest watch line accepted (default 16 MiB); a longer one raises
            :class:`LineTooLongError`, which makes the Reflector relist instead of re-watching
            into the same line forever.
    """

    def __init__(self, api_client: client.ApiClient, *, group: str, version: str, plural: str,
                 namespace: str | None = None, watch_read_timeout: float | None = None,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._api = api_client
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        self.path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
        self._read_timeout = watch_read_timeout
        self._max_line = max_line_bytes

    async def _open(self, query: list[tuple[str, Any]], timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        return await open_response(self._api, "GET", self.path, query=query, timeout=timeout)

    async def list(self, options: ListOptions) -> ListResult:
        """One LIST page as raw dicts.

        Raises:
            ApiStatusError: non-2xx (410 Expired, 504 too large, 429, ...).
            ConnectError / StreamError: transport failures.
        """
        resp = await self._open(_query(options, watch=False), aiohttp.ClientTimeout(total=LIST_TIMEOUT))
        try:
            body = await resp.read()
        except (TimeoutError, aiohttp.ClientError) as e:
            raise StreamError(f"list body: {e!r}") from e
        finally:
            resp.release()
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise StreamError(f"list body is not JSON: {e}") from e
        meta = data.get("metadata") or {}
        return ListResult(items=data.get("items") or [], resource_version=str(meta.get("resourceVersion", "")),
                          continue_token=meta.get("continue") or None, handed_over=True)

    async def watch(self, options: ListOptions) -> AsyncIterator[WatchEvent]:
        """Yield decoded watch events until the server ends the stream.

        Raises:
            ApiStatusError: the watch could not be opened (e.g. 403, 404, 429).
            ConnectError: connection refused.
            StreamError: cut mid-line, read timeout, or a line that is not a watch event.
            LineTooLongError: a line over 16 MiB.
        """
        total = (options.timeout_seconds or DEFAULT_WATCH_TIMEOUT) + WATCH_DEADLINE_MARGIN
        read = self._read_timeout if self._read_timeout is not None else total
        resp = await self._open(_query(options, watch=True), aiohttp.ClientTimeout(total=total, sock_read=read))
        tail = b""
        try:
            while True:
                try:
                    chunk = await resp.content.readany()
                except (TimeoutError, aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                        aiohttp.ClientOSError) as e:
                    raise StreamError(f"watch stream broke: {e!r}") from e
                if not chunk:
                    return  # clean end; an unterminated tail is a fragment and is dropped
                # One split per chunk (WatchList streams ~250 KB chunks of ~350 lines each).
                lines = (tail + chunk).split(b"\n") if tail else chunk.split(b"\n")
                tail = lines.pop()
                for line in lines:
                    if line.strip():
                        yield _decode(line)
                if len(tail) > self._max_line:
                    raise LineTooLongError(f"watch line over {self._max_line} bytes")
        finally:
            resp.close()


def _decode(line: bytes) -> WatchEvent:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise StreamError(f"watch line is not JSON: {line[:80]!r}") from e
    if not isinstance(data, dict) or not isinstance(data.get("type"), str) or not isinstance(data.get("object"), dict):
        raise StreamError(f"watch line is not an event: {line[:80]!r}")
    return WatchEvent(data["type"], data["object"])
