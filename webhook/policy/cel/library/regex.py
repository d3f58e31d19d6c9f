"""Kubernetes regex library: ``<string>.find(re)``, ``<string>.findAll(re[, n])`` (pure).

Follows ``k8s.io/apiserver/pkg/cel/library/regex.go`` (Kubernetes 1.24+) with RE2 semantics as
Go's ``regexp`` has them: matching is linear in the input (google-re2, the same engine cel-cpp uses
for ``matches``), so no pattern can backtrack catastrophically. A pattern RE2 rejects (lookaround,
backreferences) is an error value at run time and a compile error when it is a literal (see
:mod:`webhook.policy.cel.validators`).
"""

from __future__ import annotations

import functools
from typing import Any

import re2
from cel_expr_python import cel

from webhook.policy.cel.cost import PYTHON_MATCH, PYTHON_MATCHES
from webhook.policy.cel.library._decl import LibraryError, T, member, overloads

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=512)
def compile_re2(pattern: str) -> Any:
    """The compiled RE2 program for ``pattern`` (cached).

    Raises:
        LibraryError: ``pattern`` is not valid RE2 syntax.
    """
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        detail = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise LibraryError(f"invalid regular expression: {pattern!r}: {detail}") from None


def find(s: str, pattern: str) -> str:
    """``<string>.find(<string>) -> string``: the first match, or ``""``."""
    m = compile_re2(pattern).search(s)
    return m.group(0) if m else ""


def find_all(s: str, pattern: str, limit: int = -1) -> list[str]:
    """``<string>.findAll(<string>[, <int>]) -> list<string>``: up to ``limit`` matches (all if < 0).

    Like Go's ``FindAllString``: an empty match right after a previous match is skipped.
    """
    if limit == 0:
        return []
    out: list[str] = []
    prev_end = -1
    for m in compile_re2(pattern).finditer(s):
        if m.start() == m.end() == prev_end:
            continue
        out.append(m.group(0))
        prev_end = m.end()
        if 0 < limit <= len(out):
            break
    return out


def declarations() -> list[Any]:
    """The regex library's functions."""
    return [
        member("find", "tg_string_find", T.STRING, [T.STRING, T.STRING], find, rule=PYTHON_MATCH),
        overloads(
            "findAll",
            cel.Overload("tg_string_find_all", T.List(T.STRING), [T.STRING, T.STRING], is_member=True,
                         impl=find_all),
            cel.Overload("tg_string_find_all_n", T.List(T.STRING), [T.STRING, T.STRING, T.INT], is_member=True,
                         impl=find_all),
            rule=PYTHON_MATCHES,
        ),
    ]
