"""Read live objects once: discovery, then one paginated LIST per resource (``tollgate audit --kubeconfig``).

No informer and no WATCH: a one-shot reader lists what it needs and is done.
Discovery is :class:`webhook.kube.discovery.Discovery` (a group version that
fails is left out and named, as client-go's ``ServerGroupsAndResources``
does); every LIST goes through :class:`webhook.kube.listwatch.KubeListerWatcher`
in pages of ``limit`` objects followed by ``continue`` tokens, as client-go's
``tools/pager.ListPager`` does, including its fallback: when a continue token
has expired (410) the list is taken again whole, without ``limit``, so the
result is still one consistent snapshot of that resource. ``managedFields``
are dropped from every object, as the informers drop them.

A resource that cannot be listed (403 Forbidden from RBAC, 404 because it went
away, 5xx) does not stop the others: :func:`list_each` returns its one-line
reason next to the objects it did list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from webhook.informer.errors import ApiStatusError, ListWatchError
from webhook.informer.gvr import GVR, DiscoverySnapshot
from webhook.informer.store import drop_managed_fields
from webhook.informer.types import KubeObject, ListOptions
from webhook.kube.discovery import Discovery
from webhook.kube.listwatch import KubeListerWatcher

__all__ = ["PAGE_SIZE", "ListRequest", "discover", "list_all", "list_each", "refusal"]

#: Objects per LIST page (client-go's ListPager default).
PAGE_SIZE = 500
#: LISTs in flight at once.
CONCURRENCY = 4


@dataclass(frozen=True, slots=True, order=True)
class ListRequest:
    """One LIST: a resource, optionally narrowed by a label selector.

    Attributes:
        gvr: what to list (every namespace for a namespaced resource).
        label_selector: ``labelSelector``, e.g. ``tollgate.dev/params=true`` (``""``: every object).
    """

    gvr: GVR
    label_selector: str = ""

    def __str__(self) -> str:
        """``v1/configmaps`` or ``v1/configmaps -l tollgate.dev/params=true`` (kubectl's spelling)."""
        return f"{self.gvr} -l {self.label_selector}" if self.label_selector else str(self.gvr)


async def discover(api_client: Any) -> tuple[DiscoverySnapshot, dict[str, str]]:
    """What the API server serves, and the group versions that failed to answer (``"G/V"`` → reason).

    Raises:
        ApiStatusError / ConnectError / StreamError: ``/api`` or ``/apis`` could not be read.
    """
    discovery = Discovery(api_client)
    snapshot = await discovery.snapshot()
    return snapshot, dict(discovery.failed)


async def list_all(api_client: Any, request: ListRequest, *, page_size: int = PAGE_SIZE) -> list[KubeObject]:
    """Every object of one resource, page by page (``managedFields`` dropped).

    Args:
        api_client: a configured kubernetes_asyncio ApiClient (not closed here).
        request: the resource and label selector.
        page_size: ``limit`` of each page.

    Returns:
        The objects in the API server's order (by namespace and name).

    Raises:
        ApiStatusError: the API server refused a page (403 Forbidden, 404 NotFound, 5xx...).
        ConnectError / StreamError: the API server could not be reached or the answer broke off.
    """
    gvr = request.gvr
    lister = KubeListerWatcher(api_client, group=gvr.group, version=gvr.version, plural=gvr.resource)
    selector = request.label_selector or None
    items: list[KubeObject] = []
    token: str | None = None
    while True:
        try:
            page = await lister.list(ListOptions(limit=page_size, continue_token=token, label_selector=selector))
        except ApiStatusError as e:
            if token is None or not e.is_expired:
                raise
            # The continue token expired between pages: one whole list instead (ListPager.FullListIfExpired).
            page = await lister.list(ListOptions(label_selector=selector))
            return [drop_managed_fields(o) for o in page.items]
        items.extend(drop_managed_fields(o) for o in page.items)
        token = page.continue_token
        if not token:
            return items


def refusal(error: ListWatchError) -> str:
    """One line saying why a LIST failed: ``403 Forbidden: pods is forbidden: User ... cannot list ...``."""
    if isinstance(error, ApiStatusError):
        return f"{error.code} {error.reason}: {error.message}".strip().rstrip(":")
    return str(error) or type(error).__name__


async def list_each(api_client: Any, requests: Iterable[ListRequest], *, page_size: int = PAGE_SIZE,
                    concurrency: int = CONCURRENCY) -> tuple[dict[ListRequest, list[KubeObject]],
                                                             dict[ListRequest, str]]:
    """:func:`list_all` of every request, ``concurrency`` at a time; a failed one does not stop the others.

    Returns:
        ``(objects, refused)``: the objects of every request that could be listed, and for every other
        one :func:`refusal`'s line (each request is in exactly one of them).
    """
    gate = asyncio.Semaphore(max(1, concurrency))
    objects: dict[ListRequest, list[KubeObject]] = {}
    refused: dict[ListRequest, str] = {}

    async def one(request: ListRequest) -> None:
        async with gate:
            try:
                objects[request] = await list_all(api_client, request, page_size=page_size)
            except ListWatchError as e:
                refused[request] = refusal(e)

    await asyncio.gather(*(one(r) for r in sorted(set(requests))))
    return objects, refused
