"""The seam between the informer machinery and whatever serves objects.

Everything in ``webhook.informer`` talks to the API server only through the
:class:`ListerWatcher` protocol defined here, exactly as client-go's
``tools/cache/listwatch.go`` separates ``Reflector`` from ``ListWatch``.
Implementations: ``webhook.kube.listwatch.KubeListerWatcher`` (a real API
server through kubernetes_asyncio) and the local-directory lister used by
``tollgate serve --local``. Tests script their own.

Objects are raw JSON dicts exactly as the API server sends them (camelCase
field names); no model classes. This module is pure: no I/O, no aiohttp, no
kubernetes_asyncio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

#: A Kubernetes object as decoded from JSON, e.g. ``{"metadata": {...}, "data": {...}}``.
KubeObject = dict[str, Any]

#: ``type`` of a watch event, as on the wire (``watch.EventType`` in apimachinery).
EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


@dataclass(frozen=True, slots=True)
class ListOptions:
    """Query parameters of a LIST or WATCH (``metav1.ListOptions``).

    ``None`` means "leave the parameter out of the request"; an empty string
    for ``resource_version`` is sent as an empty parameter, which the API
    server reads as "most recent" (a consistent read), as client-go does.

    Attributes:
        resource_version: ``resourceVersion``; ``"0"`` = any (watch cache),
            ``""`` = most recent, ``"N"`` = not older than N (see API
            Concepts, "Resource versions").
        resource_version_match: ``resourceVersionMatch`` (``NotOlderThan`` or
            ``Exact``).
        limit: ``limit``, page size for a paginated LIST.
        continue_token: ``continue``, the opaque token of the previous page.
        label_selector: ``labelSelector``, e.g. ``"tollgate.dev/params=true"``.
        field_selector: ``fieldSelector``, e.g. ``"metadata.name=foo"``.
        timeout_seconds: ``timeoutSeconds``: server-side duration of a WATCH,
            in seconds.
        allow_watch_bookmarks: ``allowWatchBookmarks`` on a WATCH.
        send_initial_events: ``sendInitialEvents`` (WatchList, KEP-3157).
    """

    resource_version: str | None = None
    resource_version_match: str | None = None
    limit: int | None = None
    continue_token: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    timeout_seconds: int | None = None
    allow_watch_bookmarks: bool = False
    send_initial_events: bool | None = None


@dataclass(frozen=True, slots=True)
class ListResult:
    """One page of a LIST response.

    Attributes:
        items: the page's objects, as raw dicts. Built-in lists usually omit
            ``kind``/``apiVersion`` on items; custom-resource lists carry them.
        resource_version: the list's ``metadata.resourceVersion`` (constant
            across pages), never an item's.
        continue_token: ``metadata.continue``; ``None`` or ``""`` on the last page.
        handed_over: the ListerWatcher keeps no reference to the items (each page freshly parsed), so
            the informer may change them in place: it takes ``managedFields`` out of them instead of
            copying or putting it back. False (the default) when the lister keeps what it returns, as
            the local directory source does.
    """

    items: list[KubeObject]
    resource_version: str
    continue_token: str | None = None
    handed_over: bool = False


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One decoded line of a WATCH stream.

    Attributes:
        type: the event type. ``ERROR`` events carry a ``Status`` object (with
            ``code``, ``reason``, ``message``) in ``object``.
        object: the object (for ``BOOKMARK`` only ``kind``, ``apiVersion`` and
            ``metadata.resourceVersion``, plus the
            ``k8s.io/initial-events-end`` annotation at the end of WatchList's
            initial events).
    """

    type: str
    object: KubeObject


class ListerWatcher(Protocol):
    """Lists and watches one resource (client-go ``cache.ListerWatcher``).

    Errors are raised as the exceptions in ``webhook.informer.errors`` so the
    Reflector can tell "relist" from "re-watch" from "back off" without
    knowing the transport.
    """

    async def list(self, options: ListOptions) -> ListResult:
        """Return one page of the resource's LIST."""
        ...

    def watch(self, options: ListOptions) -> AsyncIterator[WatchEvent]:
        """Open a WATCH and yield its events until the stream ends.

        A clean end of the stream (server timeout, EOF) ends iteration. The
        returned iterator must release the connection when closed
        (``aclose()``) or garbage-collected.
        """
        ...
