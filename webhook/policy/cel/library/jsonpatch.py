"""Kubernetes JSONPatch library: ``jsonpatch.escapeKey(s)`` (pure).

Follows ``k8s.io/apiserver/pkg/cel/library/jsonpatch.go`` (MutatingAdmissionPolicy, Kubernetes
1.32+): escapes a map key for use in a JSON Pointer path (RFC 6901): ``~`` → ``~0``, ``/`` → ``~1``.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.cel.cost import PYTHON_DOUBLE
from webhook.policy.cel.library._decl import T, function


def escape_key(key: str) -> str:
    """``jsonpatch.escapeKey(<string>) -> string``."""
    return key.replace("~", "~0").replace("/", "~1")


def declarations() -> list[Any]:
    """The JSONPatch library's functions."""
    return [function("jsonpatch.escapeKey", "tg_jsonpatch_escape_key", T.STRING, [T.STRING], escape_key,
                     rule=PYTHON_DOUBLE)]
