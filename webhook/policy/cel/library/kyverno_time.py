"""Kyverno's time library: ``time.now()``, ``time.truncate(ts, d)``, ``time.toCron(ts)`` (pure but for the clock).

Follows ``github.com/kyverno/sdk`` ``extensions/cel/libs/time/lib.go``:

* ``time.now() -> timestamp``: the current time (Go's ``time.Now()``), to the microsecond (Python's clock
  as cel-expr-python passes it); a program calling it is never memoized (to the decision memo,
  which reads programs unchecked, ``time`` is a root it does not key on: :func:`webhook.policy.memo.key_roots`);
* ``time.truncate(<timestamp>, <duration>) -> timestamp``: Go's ``Time.Truncate``: rounded down to a
  multiple of the duration since Go's zero time (January 1, year 1, UTC); a duration of zero or less
  leaves the timestamp unchanged;
* ``time.toCron(<timestamp>) -> string``: ``"<minute> <hour> <day> <month> <weekday>"`` in UTC, numbers
  without padding, Sunday = 0 (``time.toCron(timestamp("2025-01-02T15:30:00Z")) == "30 15 2 1 4"``).

Cost: constant; results a timestamp or a string of at most 18 characters.
"""

from __future__ import annotations

import datetime
from typing import Any

from webhook.policy.cel.cost import PYTHON_CONSTANT, PYTHON_SCALAR
from webhook.policy.cel.library._decl import T, function

_UTC = datetime.UTC
#: Go's zero time, the origin of ``Time.Truncate``.
_GO_ZERO = datetime.datetime(1, 1, 1, tzinfo=_UTC)
_MICRO = datetime.timedelta(microseconds=1)


def now() -> datetime.datetime:
    """``time.now() -> timestamp``: the current time, UTC."""
    return datetime.datetime.now(_UTC)


def truncate(ts: datetime.datetime, d: datetime.timedelta) -> datetime.datetime:
    """``time.truncate(<timestamp>, <duration>) -> timestamp`` (Go's ``Time.Truncate``)."""
    step = d // _MICRO
    if step <= 0:
        return ts
    ts = ts if ts.tzinfo is not None else ts.replace(tzinfo=_UTC)
    since = (ts - _GO_ZERO) // _MICRO
    return _GO_ZERO + datetime.timedelta(microseconds=since - since % step)


def to_cron(ts: datetime.datetime) -> str:
    """``time.toCron(<timestamp>) -> string``: minute, hour, day, month and weekday (Sunday 0), UTC."""
    ts = ts.astimezone(_UTC) if ts.tzinfo is not None else ts
    return f"{ts.minute} {ts.hour} {ts.day} {ts.month} {(ts.weekday() + 1) % 7}"


def declarations() -> list[Any]:
    """The time library's functions."""
    return [function("time.now", "tg_kyverno_time_now", T.TIMESTAMP, [], now, rule=PYTHON_SCALAR),
            function("time.truncate", "tg_kyverno_time_truncate", T.TIMESTAMP, [T.TIMESTAMP, T.DURATION], truncate,
                     rule=PYTHON_SCALAR),
            function("time.toCron", "tg_kyverno_time_to_cron", T.STRING, [T.TIMESTAMP], to_cron,
                     rule=PYTHON_CONSTANT)]
