"""The Kubernetes CEL libraries cel-cpp lacks, implemented in Python, one module per library (pure).

Each module exposes ``declarations() -> list[cel.FunctionDecl]`` and follows the library of the same
name in ``k8s.io/apiserver/pkg/cel/library`` (Kubernetes 1.36): :mod:`.lists`, :mod:`.regex`,
:mod:`.urls`, :mod:`.ip`, :mod:`.cidr`, :mod:`.quantity`, :mod:`.format`, :mod:`.semver`,
:mod:`.jsonpatch`; :mod:`.comprehensions` supplies the runtime half of cel-cpp's two-variable
comprehensions that cel-expr-python 0.1.3 does not register. What cel-cpp implements natively
(ext lists, sets, strings, math, encoders, two-variable comprehensions, optional, bindings) is
enabled through the environment's YAML config in :mod:`webhook.policy.cel.env` instead.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.cel.library import cidr, format, ip, jsonpatch, lists, quantity, regex, semver, urls


def declarations() -> list[Any]:
    """Every Python-implemented Kubernetes library function, ready for ``cel.CelExtension``."""
    out: list[Any] = []
    for module in (lists, regex, urls, ip, cidr, quantity, format, semver, jsonpatch):
        out += module.declarations()
    return out
