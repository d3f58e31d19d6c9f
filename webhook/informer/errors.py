"""Errors a ListerWatcher raises, classified the way client-go's Reflector needs them.

``webhook.kube`` maps HTTP statuses and transport failures onto these, so
the Reflector decides "relist", "re-watch" or "back off" without knowing
the transport (docs/design/informer.md §B, "What the informer must add"). Pure.
"""

from __future__ import annotations


class ListWatchError(Exception):
    """Base class for failures of a LIST or WATCH."""


class ApiStatusError(ListWatchError):
    """The API server answered with a ``Status`` failure (HTTP status, or an ERROR watch event).

    Attributes:
        code: HTTP status code (``Status.code``), e.g. 410, 429, 500.
        reason: ``Status.reason``, e.g. ``Expired``, ``Gone``, ``Timeout``, ``TooManyRequests``.
        message: ``Status.message``.
        retry_after: seconds from ``Retry-After`` or ``details.retryAfterSeconds``, if given.
        causes: ``details.causes[].reason`` values, e.g. ``ResourceVersionTooLarge``.
    """

    def __init__(self, code: int, reason: str = "", message: str = "", *,
                 retry_after: float | None = None, causes: tuple[str, ...] = ()) -> None:
        super().__init__(f"{code} {reason}: {message}".strip())
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.causes = causes

    @property
    def is_expired(self) -> bool:
        """410 Gone/Expired: the resourceVersion or continue token was compacted."""
        return self.code == 410 or self.reason in ("Expired", "Gone")

    @property
    def is_too_large_resource_version(self) -> bool:
        """504 with cause ``ResourceVersionTooLarge`` (a lagging cache); treated like expired."""
        return "ResourceVersionTooLarge" in self.causes or "Too large resource version" in self.message


class ConnectError(ListWatchError):
    """The connection could not be opened (refused, DNS, TLS handshake)."""


class StreamError(ListWatchError):
    """A WATCH stream broke (cut mid-line, read timeout, garbage line): re-watch, no relist."""


class LineTooLongError(ListWatchError):
    """A WATCH line exceeded the cap: relist (re-watching would hit it again)."""
