"""The Kubernetes CEL libraries cel-cpp lacks, implemented in Python, one module per library (pure).

Each module exposes ``declarations() -> list[cel.FunctionDecl]`` and follows the library of the same
name in ``k8s.io/apiserver/pkg/cel/library`` (Kubernetes 1.36): :mod:`.lists`, :mod:`.regex`,
:mod:`.urls`, :mod:`.ip`, :mod:`.cidr`, :mod:`.quantity`, :mod:`.format`, :mod:`.semver`,
:mod:`.jsonpatch`; :mod:`.comprehensions` supplies the runtime half of cel-cpp's two-variable
comprehensions that cel-expr-python 0.1.3 does not register. What cel-cpp implements natively
(ext lists, sets, strings, math, encoders, two-variable comprehensions, optional, bindings) is
enabled through the environment's YAML config in :mod:`webhook.policy.cel.env` instead.

Kyverno's libraries that need no network, one module each, following ``github.com/kyverno/sdk``
``extensions/cel/libs/<library>``: :mod:`.kyverno_user`, :mod:`.kyverno_time`, :mod:`.kyverno_image`,
:mod:`.kyverno_json`, :mod:`.kyverno_yaml`, :mod:`.kyverno_x509`, :mod:`.kyverno_hash`, :mod:`.kyverno_math`
(``regex.replace``/``extract``/``extractAll`` are cel-cpp's regex extension, enabled natively, as Kyverno
enables cel-go's ``ext.Regex``). They are declared for every policy, not only Kyverno's: their names are
Kyverno's and collide with no Kubernetes function, and one environment serves every policy; a policy that
calls them is not portable to a Kubernetes ValidatingAdmissionPolicy. What needs the network or a registry
(``http``, ``image.GetMetadata``, ``resource.Post``, ``globalContext``, image verification) is not declared:
:mod:`webhook.formats.libraries` names it when an imported policy calls it.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.cel.library import (
    cidr,
    format,
    ip,
    jsonpatch,
    kyverno_hash,
    kyverno_image,
    kyverno_json,
    kyverno_math,
    kyverno_time,
    kyverno_user,
    kyverno_x509,
    kyverno_yaml,
    lists,
    quantity,
    regex,
    semver,
    urls,
)

#: cel-cpp's regex extension, enabled natively as Kyverno enables cel-go's ``ext.Regex``; Kubernetes has none.
REGEX_EXTENSION = frozenset({"regex.replace", "regex.extract", "regex.extractAll"})


def kyverno_functions() -> frozenset[str]:
    """Names of the functions Tollgate has from Kyverno's environment, not Kubernetes' (export blocks them).

    ``math.round`` is among them for its two-argument overload only (the one-argument one is cel-cpp's).
    """
    return frozenset(d.name for m in (kyverno_user, kyverno_time, kyverno_image, kyverno_json, kyverno_yaml,
                                      kyverno_x509, kyverno_hash, kyverno_math)
                     for d in m.declarations()) | REGEX_EXTENSION


def declarations() -> list[Any]:
    """Every Python-implemented Kubernetes and Kyverno library function, ready for ``cel.CelExtension``."""
    out: list[Any] = []
    for module in (lists, regex, urls, ip, cidr, quantity, format, semver, jsonpatch):
        out += module.declarations()
    for kyverno in (kyverno_user, kyverno_time, kyverno_image, kyverno_json, kyverno_yaml, kyverno_x509,
                    kyverno_hash, kyverno_math):
        out += kyverno.declarations()
    return out
