"""The ``labelSelector`` query-string syntax of LIST and WATCH (k8s.io/apimachinery ``labels.Parse``).

``tollgate.dev/params=true``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``, ``a notin (x)``,
comma-separated, parsed into the policy core's :class:`LabelSelector`. Pure.
"""

from __future__ import annotations

import re

from webhook.policy.selectors import LabelSelector, Requirement


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


_SET_REQ = re.compile(r"^([^\s!=()]+)\s+(in|notin)\s+\(([^()]*)\)$")
_KEY = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_./]*$")


def parse_label_selector_text(text: str | None) -> LabelSelector:
    """A ``labelSelector`` query string, as the API server parses it (k8s.io/apimachinery labels.Parse).

    Supports ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)`` and ``k notin (a,b)``,
    comma-separated (all must hold). ``None`` or ``""`` selects everything.

    Raises:
        ValueError: a malformed requirement (the message quotes it).
    """
    reqs = []
    for part in _split_selector(text or ""):
        m = _SET_REQ.match(part)
        if m:
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), "In" if m.group(2) == "in" else "NotIn", values))
            continue
        if "!=" in part:
            k, v = (x.strip() for x in part.split("!=", 1))
            op = "NotIn"
        elif "=" in part:
            k, v = (x.strip() for x in part.split("=", 1))
            v = v.removeprefix("=").strip()
            op = "In"
        elif part.startswith("!"):
            k, v, op = part[1:].strip(), "", "DoesNotExist"
        else:
            k, v, op = part, "", "Exists"
        if not _KEY.match(k) or any(c in v for c in "=!(), "):
            raise ValueError(f"invalid label selector requirement {part!r}")
        reqs.append(Requirement(k, op, frozenset({v}) if op in ("In", "NotIn") else frozenset()))
    return LabelSelector(tuple(reqs))
