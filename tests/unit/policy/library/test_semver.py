"""Semver library: transcribed from kubernetes staging/src/k8s.io/apiserver/pkg/cel/library/semver_test.go."""

from __future__ import annotations

import pytest

from tests.unit.policy.library._cel import check

# TestSemver (version 1 of the library, Kubernetes 1.33: the normalize argument)
CASES = [
    ('semver("1.2.3")', "value", {"@semver": "1.2.3"}),
    ('semver("v1.0")', "error", "No Major.Minor.Patch elements found"),
    ('isSemver("1.2.3-beta.1+build.1")', "value", True),
    ('isSemver("")', "value", False),
    ('isSemver("v1.0.0")', "value", False),
    ('isSemver(" 1.0.0")', "value", False),
    ('isSemver("1. 0.0")', "value", False),
    ('isSemver("1.0.0 ")', "value", False),
    ('isSemver("01.01.01")', "value", False),
    ('isSemver("1")', "value", False),
    ('isSemver("1.1")', "value", False),
    ('isSemver("", true)', "value", False),
    ('isSemver(" 1.0.0", true)', "value", False),
    ('isSemver("1. 0.0", true)', "value", False),
    ('isSemver("1.0.0 ", true)', "value", False),
    ('isSemver("v1.0.0", true)', "value", True),
    ('isSemver("01.01.01", true)', "value", True),
    ('isSemver("1", true)', "value", True),
    ('isSemver("1.1", true)', "value", True),
    ("isSemver([1, 2, 3])", "compile", "found no matching overload for 'isSemver'"),
    ('semver("v01.01", true) == semver("1.1.0")', "value", True),
    ('semver("1.2.3") == semver("1.2.3")', "value", True),
    ('semver("1.2.3") == semver("1.0.0")', "value", False),
    ('semver("1.0.0").isLessThan(semver("1.2.3"))', "value", True),
    ('semver("1.0.0").isLessThan(semver("1.0.0"))', "value", False),
    ('semver("1.2.3").isGreaterThan(semver("1.0.0"))', "value", True),
    ('semver("1.0.0").isGreaterThan(semver("1.0.0"))', "value", False),
    ('semver("1.2.3").compareTo(semver("1.2.3"))', "value", 0),
    ('semver("1.0.0").compareTo(semver("1.2.3"))', "value", -1),
    ('semver("1.2.3").compareTo(semver("1.0.0"))', "value", 1),
    ('semver("1.2.3").major()', "value", 1),
    ('semver("1.2.3").minor()', "value", 2),
    ('semver("1.2.3").patch()', "value", 3),
    # semver 2.0.0 precedence (blang/semver): pre-releases sort before the release.
    ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', "value", True),
    ('semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))', "value", True),
    ('semver("1.0.0-2").isLessThan(semver("1.0.0-11"))', "value", True),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), CASES)
def test_semver(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)
