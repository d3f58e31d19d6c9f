"""Kubernetes semver library: ``semver(s[, normalize])``, ``isSemver(...)`` and getters (pure; no I/O).

``major()``, ``minor()``, ``patch()``; ``compareTo``/``isLessThan``/``isGreaterThan`` are shared
with quantities (declared in :mod:`.quantity`).

Follows ``k8s.io/apiserver/pkg/cel/library/semverlib.go`` (Kubernetes 1.31+, ``normalize`` since
1.33) which parses with ``github.com/blang/semver/v4`` (strict ``MAJOR.MINOR.PATCH[-pre][+build]``,
no leading zeros). ``normalize`` drops a leading ``v``, fills a missing minor/patch with 0 and strips
leading zeros. Precedence follows semver 2.0.0; build metadata is ignored by ``==`` and ordering.

A semver value is ``{"@semver": "<major>.<minor>.<patch>[-<pre>]"}``.
"""

from __future__ import annotations

import re
from typing import Any

from cel_expr_python import cel

from webhook.policy.cel.cost import PYTHON_PART, PYTHON_SCALAR
from webhook.policy.cel.library._decl import VALUE, LibraryError, T, member, overloads

KEY = "@semver"
_IDENT = re.compile(r"^[0-9A-Za-z-]+$")


def _num(part: str, what: str) -> int:
    if not part.isascii() or not part.isdigit():
        raise LibraryError(f"Invalid character(s) found in {what} number {part!r}")
    if len(part) > 1 and part[0] == "0":
        raise LibraryError(f"{what.capitalize()} number must not contain leading zeroes {part!r}")
    return int(part)


def parse(text: str, normalize: bool = False) -> tuple[int, int, int, tuple[str, ...]]:
    """``(major, minor, patch, prerelease identifiers)`` of a version string.

    Raises:
        LibraryError: blang/semver's errors ("No Major.Minor.Patch elements found", ...).
    """
    if normalize:
        text = text.removeprefix("v")
        if text == "":
            raise LibraryError("Version string empty")
        core, sep, tail = _split_core(text)
        nums = core.split(".")
        if len(nums) > 3 or any(not n.isascii() or not n.isdigit() for n in nums):
            raise LibraryError("No Major.Minor.Patch elements found")
        nums = [n.lstrip("0") or "0" for n in nums] + ["0"] * (3 - len(nums))
        text = ".".join(nums) + sep + tail
    if text == "":
        raise LibraryError("Version string empty")
    core, sep, tail = _split_core(text)
    parts = core.split(".")
    if len(parts) != 3:
        raise LibraryError("No Major.Minor.Patch elements found")
    major, minor, patch = _num(parts[0], "major"), _num(parts[1], "minor"), _num(parts[2], "patch")
    pre: tuple[str, ...] = ()
    pre_text, _, build = (tail.partition("+") if sep == "-" else ("", "", tail))
    if sep == "-":
        pre = tuple(pre_text.split("."))
        for p in pre:
            if not p or not _IDENT.match(p):
                raise LibraryError(f"Invalid character(s) found in prerelease {p!r}")
            if p.isdigit() and len(p) > 1 and p[0] == "0":
                raise LibraryError(f"Prerelease number must not contain leading zeroes {p!r}")
    if (sep and build != "") or (sep == "+" and not build):
        for b in build.split("."):
            if not b or not _IDENT.match(b):
                raise LibraryError(f"Invalid character(s) found in build meta data {b!r}")
    return major, minor, patch, pre


def _split_core(text: str) -> tuple[str, str, str]:
    for i, c in enumerate(text):
        if c in "-+":
            return text[:i], c, text[i + 1:]
    return text, "", ""


def _text(v: tuple[int, int, int, tuple[str, ...]]) -> str:
    core = f"{v[0]}.{v[1]}.{v[2]}"
    return core + ("-" + ".".join(v[3]) if v[3] else "")


def semver(text: str, normalize: bool = False) -> dict[str, str]:
    """``semver(<string>[, <bool>]) -> Semver``."""
    return {KEY: _text(parse(text, normalize))}


def is_semver(text: str, normalize: bool = False) -> bool:
    """``isSemver(<string>[, <bool>]) -> bool``."""
    try:
        parse(text, normalize)
    except LibraryError:
        return False
    return True


def _get(v: Any) -> tuple[int, int, int, tuple[str, ...]]:
    if isinstance(v, dict) and KEY in v:
        return parse(v[KEY])
    raise LibraryError("no such overload: expected a semver")


def is_semver_value(v: Any) -> bool:
    """Whether ``v`` is a semver value."""
    return isinstance(v, dict) and KEY in v


def compare(a: Any, b: Any) -> int:
    """Semver 2.0.0 precedence of two semver values: -1, 0 or 1."""
    x, y = _get(a), _get(b)
    if x[:3] != y[:3]:
        return -1 if x[:3] < y[:3] else 1
    if x[3] == y[3]:
        return 0
    if not x[3] or not y[3]:
        return 1 if not x[3] else -1
    for p, q in zip(x[3], y[3], strict=False):
        if p == q:
            continue
        if p.isdigit() and q.isdigit():
            return -1 if int(p) < int(q) else 1
        if p.isdigit() != q.isdigit():
            return -1 if p.isdigit() else 1
        return -1 if p < q else 1
    return (len(x[3]) > len(y[3])) - (len(x[3]) < len(y[3]))


def declarations() -> list[Any]:
    """The semver library's functions (comparisons are in :mod:`.quantity`, shared by name)."""
    return [
        overloads("semver",
                  cel.Overload("tg_semver", VALUE, [T.STRING], impl=semver),
                  cel.Overload("tg_semver_normalize", VALUE, [T.STRING, T.BOOL], impl=semver), rule=PYTHON_PART),
        overloads("isSemver",
                  cel.Overload("tg_is_semver", T.BOOL, [T.STRING], impl=is_semver),
                  cel.Overload("tg_is_semver_normalize", T.BOOL, [T.STRING, T.BOOL], impl=is_semver),
                  rule=PYTHON_SCALAR),
        member("major", "tg_semver_major", T.INT, [VALUE], lambda v: _get(v)[0], rule=PYTHON_SCALAR),
        member("minor", "tg_semver_minor", T.INT, [VALUE], lambda v: _get(v)[1], rule=PYTHON_SCALAR),
        member("patch", "tg_semver_patch", T.INT, [VALUE], lambda v: _get(v)[2], rule=PYTHON_SCALAR),
    ]
