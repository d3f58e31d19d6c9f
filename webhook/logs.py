"""Structured JSON logs: one object per line with ``time``, ``level``, ``logger``, ``msg`` and extras.

Pass fields with ``extra={"uid": ..., "policy": ..., "decision": ...}``.
"""

from __future__ import annotations

import logging
import time

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
