"""Write core/v1 Events to the API server (the sink of ``webhook.admission.events.EventRecorder``).

POST to create, JSON merge patch of ``count``/``lastTimestamp``/``message`` for a repeat, as
client-go's ``tools/record`` ``EventSinkImpl`` does (it sends a strategic merge patch of the same
fields; for these scalar fields both patch types mean the same). Needs RBAC ``create`` and
``patch`` on ``events`` (manifests/install/rbac.yaml).
"""

from __future__ import annotations

from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient

from webhook.kube.api import MERGE_PATCH, ApiException, call_json, collection_path, describe, object_path

__all__ = ["ApiEventSink", "EventWriteError"]

#: Seconds one Event write may take (it runs off the request path).
TIMEOUT = 10.0


class EventWriteError(Exception):
    """An Event write the API server refused or that did not complete; the message is one line."""


class ApiEventSink:
    """Creates and patches Events through :func:`webhook.kube.api.call_json`.

    Args:
        api: a configured ``ApiClient`` (not closed here).
    """

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    async def create(self, namespace: str, event: dict[str, Any]) -> None:
        """POST ``event``; one that already exists (409) is not an error, as in client-go.

        Raises:
            EventWriteError: any other failure.
        """
        try:
            await call_json(self.api, "POST", collection_path("", "v1", "events", namespace), body=event,
                            timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status != 409:
                raise EventWriteError(describe(exc)) from None
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            raise EventWriteError(describe(exc)) from None

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        """Merge ``patch`` into Event ``name``.

        Returns:
            False when the Event no longer exists (404: the API server's event TTL expired it).

        Raises:
            EventWriteError: any other failure.
        """
        try:
            await call_json(self.api, "PATCH", object_path("", "v1", "events", name, namespace), body=patch,
                            content_type=MERGE_PATCH, timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise EventWriteError(describe(exc)) from None
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            raise EventWriteError(describe(exc)) from None
        return True
