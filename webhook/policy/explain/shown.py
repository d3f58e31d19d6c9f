"""Values as an explanation shows them: bounded copies and one-line text (pure; no I/O).

An explanation prints values an author's expressions computed over objects of any size, so every
value is cut to a bounded copy: at most :data:`MAX_ITEMS` entries per list or map, strings of at most
:data:`MAX_STRING` characters, :data:`MAX_DEPTH` levels; its one-line text is at most
:data:`MAX_TEXT` characters. What was cut is marked (``"…": "3 more"`` in a map, ``"… 3 more"`` in a
list, ``…`` at the end of a string) and ``truncated`` is set. Map keys are sorted (CEL maps have no
order), so an explanation reads the same every time.
"""

from __future__ import annotations

import base64
import datetime
import json
from dataclasses import dataclass
from typing import Any

from webhook.policy.engine.values import cel_type_name

__all__ = ["MAX_DEPTH", "MAX_ITEMS", "MAX_STRING", "MAX_TEXT", "Shown", "show"]

#: Entries kept per list or map.
MAX_ITEMS = 10
#: Characters kept per string.
MAX_STRING = 200
#: Levels of nesting kept; deeper containers become ``"…"``.
MAX_DEPTH = 6
#: Characters of a value's one-line text.
MAX_TEXT = 300

_MORE = "…"


@dataclass(frozen=True, slots=True)
class Shown:
    """A value as an explanation shows it.

    Attributes:
        value: a bounded JSON-compatible copy (durations as ``"1h0m0s"``-like text, timestamps RFC 3339,
            bytes base64).
        type: the CEL type name of the whole value (``list``, ``map``, ``bool``, ``null_type``...).
        size: entries of a list or map, characters of a string, else None.
        truncated: whether anything was cut.
    """

    value: Any
    type: str
    size: int | None
    truncated: bool

    def text(self, limit: int = MAX_TEXT) -> str:
        """One line of JSON, cut to ``limit`` characters (``…`` at the end when cut)."""
        text = json.dumps(self.value, ensure_ascii=False, separators=(", ", ": "))
        return text if len(text) <= limit else text[:max(limit - 1, 0)] + _MORE

    def as_dict(self) -> dict[str, Any]:
        """``{"value", "type"}`` plus ``"size"`` and ``"truncated": true`` when they apply."""
        out: dict[str, Any] = {"value": self.value, "type": self.type}
        if self.size is not None:
            out["size"] = self.size
        if self.truncated:
            out["truncated"] = True
        return out


def _duration(d: datetime.timedelta) -> str:
    micros = d // datetime.timedelta(microseconds=1)
    return f"{micros / 1_000_000:g}s"


class _Cutter:
    def __init__(self) -> None:
        self.truncated = False

    def cut(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            if len(value) > MAX_STRING:
                self.truncated = True
                return value[:MAX_STRING] + _MORE
            return value
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
        if isinstance(value, bytes):
            return self.cut(base64.b64encode(value).decode(), depth)
        if isinstance(value, datetime.timedelta):
            return _duration(value)
        if isinstance(value, datetime.datetime):
            return value.isoformat().replace("+00:00", "Z")
        if isinstance(value, dict | list) and depth >= MAX_DEPTH:
            self.truncated = True
            return _MORE
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            # Keys sorted: cel-cpp's maps have no stable order, an explanation must read the same every time.
            for i, (k, v) in enumerate(sorted(value.items(), key=lambda kv: str(kv[0]))):
                if i == MAX_ITEMS:
                    self.truncated = True
                    out[_MORE] = f"{len(value) - MAX_ITEMS} more"
                    break
                out[str(self.cut(k, depth + 1))] = self.cut(v, depth + 1)
            return out
        if isinstance(value, list):
            items = [self.cut(v, depth + 1) for v in value[:MAX_ITEMS]]
            if len(value) > MAX_ITEMS:
                self.truncated = True
                items.append(f"{_MORE} {len(value) - MAX_ITEMS} more")
            return items
        return self.cut(str(value), depth)


def show(value: Any) -> Shown:
    """The bounded form of an evaluation result (a plain value as cel-expr-python returns it)."""
    cutter = _Cutter()
    bounded = cutter.cut(value, 0)
    size = len(value) if isinstance(value, str | bytes | list | dict) else None
    return Shown(bounded, cel_type_name(value), size, cutter.truncated)
