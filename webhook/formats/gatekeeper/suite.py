"""gator's Suite files (``test.gatekeeper.sh/v1alpha1``, ``kind: Suite``): parsing and assertions (pure; no I/O).

A Suite lists tests; each names a ConstraintTemplate file and a constraint file (paths relative to the
suite) and cases: an object file to review (a resource, or an ``admission.k8s.io`` AdmissionReview whose
``request`` is reviewed as sent), inventory files (objects the policy may read) and assertions. An
assertion (``pkg/gator/verify/assertion.go``) counts the review's violations whose message matches
``message`` (a regular expression; every violation when absent) and compares the count with
``violations``: ``yes`` (at least one; the default), ``no`` (none) or an exact non-negative number.
``gator verify`` fails a case on the first assertion that does not hold; :func:`check_assertion` says why,
in gator's words.

Fields gator has that Tollgate does not run (``expansion``, ``invalid``: a constraint that must fail its
template's schema) are refused by :func:`parse_suite` with their path, never silently passed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SUITE_API_VERSION", "SUITE_KIND", "Assertion", "Case", "SuiteError", "Test", "check_assertion",
           "is_gator_suite", "parse_suite"]

SUITE_KIND = "Suite"
SUITE_API_VERSION = "test.gatekeeper.sh/v1alpha1"


class SuiteError(ValueError):
    """A malformed or unsupported field of a Suite (``path``: its YAML path, e.g. ``("tests", 0, "cases")``)."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class Assertion:
    """One assertion: ``violations`` (``"yes"``, ``"no"`` or a count) and ``message`` (a regex, or None)."""

    violations: str | int = "yes"
    message: str | None = None

    def describe(self) -> str:
        """``violations: yes`` or ``violations: 1, message: "..."`` (a row's ``expected``)."""
        text = f"violations: {self.violations}"
        return text + (f", message: {self.message!r}" if self.message is not None else "")


@dataclass(frozen=True, slots=True)
class Case:
    """One case: the object file, inventory files, assertions, and where it is in the suite."""

    name: str
    object: str
    inventory: tuple[str, ...]
    assertions: tuple[Assertion, ...]
    path: tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Test:
    """One test: its template and constraint files and its cases (skipped ones left out)."""

    name: str
    template: str
    constraint: str
    cases: tuple[Case, ...] = field(default=())
    path: tuple[str | int, ...] = ()


def is_gator_suite(obj: Any) -> bool:
    """Whether ``obj`` is a gator Suite (``kind: Suite`` of ``test.gatekeeper.sh``, any version)."""
    return (isinstance(obj, dict) and obj.get("kind") == SUITE_KIND and isinstance(obj.get("apiVersion"), str)
            and obj["apiVersion"].startswith("test.gatekeeper.sh/"))


def _str(raw: dict[str, Any], key: str, path: tuple[str | int, ...], *, required: bool = True) -> str:
    value = raw.get(key)
    if value is None or value == "":
        if required:
            raise SuiteError((*path, key), "required")
        return ""
    if not isinstance(value, str):
        raise SuiteError((*path, key), "must be a string")
    return value


def _list(raw: dict[str, Any], key: str, path: tuple[str | int, ...]) -> list[Any]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SuiteError((*path, key), "must be a list")
    return value


def _assertion(raw: Any, path: tuple[str | int, ...]) -> Assertion:
    if not isinstance(raw, dict):
        raise SuiteError(path, "must be an object")
    violations = raw.get("violations", "yes")
    if isinstance(violations, bool) or not (violations in ("yes", "no") or isinstance(violations, int)):
        # YAML 1.1 reads a bare yes/no as a boolean; gator's YAML (1.2) reads them as strings.
        if isinstance(violations, bool):
            violations = "yes" if violations else "no"
        else:
            raise SuiteError((*path, "violations"), 'must be a nonnegative integer, "yes", or "no"')
    if isinstance(violations, int) and violations < 0:
        raise SuiteError((*path, "violations"), 'must be a nonnegative integer, "yes", or "no"')
    message = raw.get("message")
    if message is not None:
        if not isinstance(message, str):
            raise SuiteError((*path, "message"), "must be a string (a regular expression)")
        try:
            re.compile(message)
        except re.error as e:
            raise SuiteError((*path, "message"), f"not a regular expression: {e}") from None
    return Assertion(violations, message)


def parse_suite(obj: dict[str, Any]) -> list[Test]:
    """The tests of a Suite, skipped tests and cases left out (``skip: true``, as gator skips them).

    Raises:
        SuiteError: a missing or malformed field, or one Tollgate does not run (``expansion``, ``invalid``).
    """
    if obj.get("skip") is True:
        return []
    tests = []
    for i, raw in enumerate(_list(obj, "tests", ())):
        path: tuple[str | int, ...] = ("tests", i)
        if not isinstance(raw, dict):
            raise SuiteError(path, "must be an object")
        if raw.get("skip") is True:
            continue
        for unsupported in ("expansion", "invalid"):
            if raw.get(unsupported):
                raise SuiteError((*path, unsupported), "not supported by tollgate test (gator verify runs it)")
        cases = []
        for j, c in enumerate(_list(raw, "cases", path)):
            cpath = (*path, "cases", j)
            if not isinstance(c, dict):
                raise SuiteError(cpath, "must be an object")
            if c.get("skip") is True:
                continue
            inventory = _list(c, "inventory", cpath)
            if not all(isinstance(p, str) for p in inventory):
                raise SuiteError((*cpath, "inventory"), "must be a list of paths")
            assertions = _list(c, "assertions", cpath)
            if not assertions:
                raise SuiteError((*cpath, "assertions"), "must be non-empty")
            cases.append(Case(_str(c, "name", cpath, required=False) or f"case {j}", _str(c, "object", cpath),
                              tuple(inventory),
                              tuple(_assertion(a, (*cpath, "assertions", k)) for k, a in enumerate(assertions)),
                              cpath))
        tests.append(Test(_str(raw, "name", path, required=False) or f"test {i}", _str(raw, "template", path),
                          _str(raw, "constraint", path), tuple(cases), path))
    return tests


def check_assertion(assertion: Assertion, messages: Sequence[str]) -> str:
    """Why ``assertion`` does not hold for a review whose violations have ``messages`` ('' when it holds).

    Follows gator's ``Assertion.Run``: count the messages the regex finds a match in (Go's
    ``regexp.MatchString``: anywhere in the message), compare with ``violations``.
    """
    pattern = re.compile(assertion.message) if assertion.message is not None else None
    matching = sum(1 for m in messages if pattern is None or pattern.search(m))
    containing = f" containing {assertion.message!r}" if assertion.message is not None else ""
    want = assertion.violations
    if want == "yes":
        wrong, wanted = matching == 0, "at least 1"
    elif want == "no":
        wrong, wanted = matching > 0, "none"
    else:
        wrong, wanted = matching != want, f"exactly {want}"
    if not wrong:
        return ""
    return f"got {matching} violations{containing} but want {wanted}: got messages {list(messages)}"
