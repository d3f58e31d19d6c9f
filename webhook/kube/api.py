"""One JSON call to the API server through kubernetes_asyncio's ``ApiClient.call_api``.

Every writer in ``webhook.kube`` (leader election, status, webhook
configurations, certificates) goes through :func:`call_json`: the same
headers, authentication (``BearerToken``, which kubernetes_asyncio fills from
the in-cluster token or the kubeconfig), timeout and error type everywhere.
Paths are the API server's REST paths (``/api/v1/...``, ``/apis/G/V/...``), so
no generated per-kind client is needed for custom resources.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from webhook.informer.errors import StreamError
from webhook.kube.listwatch import open_response

__all__ = [
    "JSON",
    "JSON_PATCH",
    "MERGE_PATCH",
    "ApiException",
    "call_json",
    "collection_path",
    "describe",
    "object_path",
]

#: ``Content-Type`` of a full object (POST, PUT).
JSON = "application/json"
#: RFC 7386 JSON merge patch: objects merge, ``null`` deletes, lists replace.
MERGE_PATCH = "application/merge-patch+json"
#: RFC 6902 JSON patch: a list of operations (``test`` makes it conditional).
JSON_PATCH = "application/json-patch+json"


def describe(exc: BaseException) -> str:
    """One line saying why a call failed, for logs.

    ``HTTP 404 Not Found: <the Status message>`` for an ``ApiException`` (whose ``repr`` is a bare
    ``ApiException()``), ``<type>: <first line of its message>`` otherwise; never a traceback.
    """
    if isinstance(exc, ApiException):
        message = ""
        body = getattr(exc, "body", None)
        if body:
            try:
                status = orjson.loads(body)
                message = str(status.get("message") or "") if isinstance(status, dict) else ""
            except orjson.JSONDecodeError:
                message = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
        text = f"HTTP {exc.status} {exc.reason or ''}".rstrip()
        return f"{text}: {message.splitlines()[0]}" if message.strip() else text
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def collection_path(group: str, version: str, plural: str, namespace: str | None = None) -> str:
    """REST path of a resource collection.

    Args:
        group: API group, ``""`` for the core group.
        version: e.g. ``"v1"``.
        plural: resource name, e.g. ``"secrets"``.
        namespace: the namespace for namespaced resources; ``None`` for
            cluster-scoped ones.

    Returns:
        e.g. ``/api/v1/namespaces/ns/secrets`` or
        ``/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations``.
    """
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{scope}/{plural}"


def object_path(group: str, version: str, plural: str, name: str, namespace: str | None = None) -> str:
    """REST path of one object (see :func:`collection_path`), e.g. ``/api/v1/namespaces/ns/secrets/tls``."""
    return f"{collection_path(group, version, plural, namespace)}/{name}"


async def call_json(
    api: ApiClient,
    method: str,
    path: str,
    *,
    body: dict[str, Any] | list[Any] | None = None,
    content_type: str = JSON,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Send one request and decode the JSON answer.

    Args:
        api: a configured kubernetes_asyncio ``ApiClient`` (not closed here).
        method: ``GET``, ``POST``, ``PUT``, ``PATCH`` or ``DELETE``.
        path: REST path (see :func:`object_path`).
        body: JSON body: an object, or a list of operations for
            :data:`JSON_PATCH`.
        content_type: :data:`JSON`, :data:`MERGE_PATCH` or :data:`JSON_PATCH`.
        timeout: seconds for the whole request; ``None`` for the client's default.

    Returns:
        The decoded body (``{}`` when it is not a JSON object).

    Raises:
        ApiException: any non-2xx answer; ``.status`` is the HTTP code
            (404 NotFound, 409 Conflict/AlreadyExists, 422 Invalid, ...) and
            ``.body`` the ``metav1.Status``.
        TimeoutError, aiohttp.ClientError: the request did not complete.
    """
    result = await api.call_api(
        path,
        method,
        header_params={"Accept": JSON, "Content-Type": content_type},
        body=body,
        response_types_map={200: "object", 201: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _request_timeout=timeout,
    )
    return result if isinstance(result, dict) else {}


async def request_json(api: ApiClient, method: str, path: str, *, body: Any = None,
                       query: list[tuple[str, str]] | None = None, timeout: float = 30.0) -> dict[str, Any]:
    """Send one JSON request and decode the answer, with the informer's error types.

    For callers that handle API errors the way the Reflector does (discovery, report writing);
    :func:`call_json` raises kubernetes_asyncio's ``ApiException`` instead.

    Args:
        api: a configured kubernetes_asyncio ``ApiClient`` (not closed here).
        method: ``GET``, ``POST``, ``PUT`` or ``DELETE``.
        path: REST path.
        body: JSON body, or None.
        query: query parameters, e.g. ``[("labelSelector", "a=b")]``.
        timeout: seconds for the whole request.

    Returns:
        The decoded body (``{}`` when empty or not a JSON object).

    Raises:
        ApiStatusError: a non-2xx answer (``code`` 404, 409, ...), with the ``metav1.Status``.
        ConnectError: the API server could not be reached.
        StreamError: the request or the body did not complete.
    """
    resp = await open_response(api, method, path, query=query, body=body,
                               timeout=aiohttp.ClientTimeout(total=timeout))
    try:
        raw = await resp.read()
    except (TimeoutError, aiohttp.ClientError) as e:
        raise StreamError(f"{method} {path}: {e!r}") from e
    finally:
        resp.release()
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        data = {}
    return data if isinstance(data, dict) else {}
