"""Kyverno's hash library: ``sha1``, ``sha256``, ``md5`` and their ``hash.``-prefixed names (pure; no I/O).

Follows ``github.com/kyverno/sdk`` ``extensions/cel/libs/hash`` (``impl.go``): the lowercase hex digest of
the string's UTF-8 bytes (Go's ``hex.EncodeToString(h.Sum(nil))``). The unprefixed names are Kyverno's
original; ``hash.sha1``/``hash.sha256``/``hash.md5`` since Kyverno 1.18.

Cost: linear in the length of the string (one pass of the hash); result a constant 32, 40 or 64 characters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from webhook.policy.cel.cost import PYTHON_DIGEST
from webhook.policy.cel.library._decl import T, function


def _digest(algorithm: str) -> Callable[[str], str]:
    def digest(value: str) -> str:
        return hashlib.new(algorithm, value.encode(), usedforsecurity=False).hexdigest()
    return digest


sha1 = _digest("sha1")
sha256 = _digest("sha256")
md5 = _digest("md5")


def declarations() -> list[Any]:
    """The hash library's functions."""
    out = []
    for name, impl in (("sha1", sha1), ("sha256", sha256), ("md5", md5)):
        out.append(function(name, f"tg_kyverno_{name}", T.STRING, [T.STRING], impl, rule=PYTHON_DIGEST))
        out.append(function(f"hash.{name}", f"tg_kyverno_hash_{name}", T.STRING, [T.STRING], impl,
                            rule=PYTHON_DIGEST))
    return out
