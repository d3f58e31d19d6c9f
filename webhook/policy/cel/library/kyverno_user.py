"""Kyverno's user library: ``parseServiceAccount(s)`` and ``user.parseServiceAccount(s)`` (pure; no I/O).

Follows ``github.com/kyverno/sdk`` ``extensions/cel/libs/user`` (``impl.go``): a username
``system:serviceaccount:<namespace>:<name>`` gives ``{Name, Namespace}`` (the name keeps any further
``:``); any other string gives both empty. Kyverno returns a Go struct through ``ext.NativeTypes``, so the
fields are its Go names, ``Name`` and ``Namespace`` (``parseServiceAccount(u).Namespace``); here it is a map
with those two keys. The unprefixed name is Kyverno's original; ``user.`` since Kyverno 1.18.

Cost: linear in the length of the username (one prefix test and one ``:`` search); result at most that size.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.cel.cost import PYTHON_PART
from webhook.policy.cel.library._decl import T, function

#: Kubernetes' prefix of a ServiceAccount's username (``k8s.io/apiserver/pkg/authentication/serviceaccount``).
PREFIX = "system:serviceaccount:"


def parse_service_account(username: str) -> dict[str, str]:
    """``parseServiceAccount(<string>) -> {Name: string, Namespace: string}``.

    ``"system:serviceaccount:foo:bar:baz"`` → ``{"Name": "bar:baz", "Namespace": "foo"}``; a username
    that is not a ServiceAccount's (or lacks the second ``:``) → both ``""``.
    """
    name = namespace = ""
    if username.startswith(PREFIX):
        rest = username[len(PREFIX):]
        namespace, sep, name = rest.partition(":")
        if not sep:
            name = namespace = ""
    return {"Name": name, "Namespace": namespace}


def declarations() -> list[Any]:
    """The user library's functions."""
    return [function("parseServiceAccount", "tg_kyverno_parse_sa", T.DYN, [T.STRING], parse_service_account,
                     rule=PYTHON_PART),
            function("user.parseServiceAccount", "tg_kyverno_user_parse_sa", T.DYN, [T.STRING],
                     parse_service_account, rule=PYTHON_PART)]
