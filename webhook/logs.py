"""Structured JSON logs: one object per line with ``time``, ``level``, ``logger``, ``msg`` and extras.

Pass fields with ``extra={"uid": ..., "policy": ..., "decision": ...}``. Events a
client can repeat at will go through a :class:`Throttle`, so they cannot flood the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import orjson

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """Formats a record as one compact JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as ``{"time", "level", "logger", "msg", ...extra fields}`` on one line."""
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in record.__dict__.items():
            if k not in _STANDARD and not k.startswith("_"):
                out[k] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def setup(level: str = "INFO") -> None:
    """Route the root logger to stderr as JSON lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class Throttle:
    """At most one log line per ``interval`` seconds for an event that can repeat at an attacker's rate.

    Call :meth:`admit` once per event; log only when it returns a number (how many
    events were not logged since the last line, to put in that line).

    Args:
        interval: seconds between two lines.
        clock: monotonic seconds (tests).
    """

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._next = float("-inf")
        self._dropped = 0

    def admit(self) -> int | None:
        """None when this event is not to be logged; else the count of events dropped since the last line."""
        now = self._clock()
        if now < self._next:
            self._dropped += 1
            return None
        dropped, self._dropped = self._dropped, 0
        self._next = now + self.interval
        return dropped
