"""Fixtures of the realapi suite: a real kube-apiserver and etcd, and Tollgate deployed against them.

Every test here is marked ``realapi``. Without the binaries (``tests/realapi/install.sh``) they skip with
one line saying how to install them; with ``TOLLGATE_REQUIRE_REALAPI=1`` (CI) a skip is a failure, and
so is a run in which no realapi test passed.

One API server and one Tollgate serve the whole session (starting them takes ~10 s): tests use unique
namespaces (deleted namespaces stay Terminating: there is no namespace controller). Tests that stop
the API server are marked ``disruptive`` and run after the others; ``session_audit`` tests, which read
everything Tollgate did in the session from the API server's audit log, run last.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realapi.cluster import Binaries, Cluster, find_binaries
from tests.realapi.tollgate import Deployment

REQUIRED = os.environ.get("TOLLGATE_REQUIRE_REALAPI") == "1"
HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark everything under tests/realapi ``realapi``; run ``disruptive`` tests after the others and
    ``session_audit`` tests (which read the whole session's audit log) last, each group in file order."""
    for item in items:
        if Path(str(item.fspath)).is_relative_to(HERE):
            item.add_marker(pytest.mark.realapi)
            if not item.get_closest_marker("timeout"):  # the first test also pays for the session's set-up
                item.add_marker(pytest.mark.timeout(180))
    items.sort(key=lambda i: 2 if i.get_closest_marker("session_audit") else
               1 if i.get_closest_marker("disruptive") else 0)  # stable: file order within each group


#: realapi tests that passed against the API server (those using the ``cluster`` fixture).
_passed: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """In CI (``TOLLGATE_REQUIRE_REALAPI=1``) a skipped realapi test is a failed one; remember the passes."""
    report = yield
    if report.when == "call" and report.passed and "cluster" in getattr(item, "fixturenames", ()):
        _passed.append(item.nodeid)
    if REQUIRED and report.skipped and item.get_closest_marker("realapi") and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"realapi test skipped in CI (TOLLGATE_REQUIRE_REALAPI=1): {report.longrepr}"
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI, fail the run when no test passed against the API server (none collected, all deselected, ...)."""
    if REQUIRED and not _passed and exitstatus in (0, 5):
        print("\nTOLLGATE_REQUIRE_REALAPI=1 but no realapi test passed: failing", flush=True)
        session.exitstatus = 1


_measurements: list[str] = []


@pytest.fixture(scope="session")
def report() -> Callable[[str], None]:
    """Record a measurement line, printed in the terminal summary (measured, never asserted)."""
    return _measurements.append


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print what the realapi tests measured."""
    if _measurements:
        terminalreporter.write_sep("-", "realapi measurements")
        for line in _measurements:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    """The installed kube-apiserver, kubectl, etcd and etcdctl; skip (fail in CI) without them."""
    found = find_binaries()
    if isinstance(found, str):
        if REQUIRED:
            pytest.fail(f"realapi: {found}", pytrace=False)
        pytest.skip(f"realapi: {found}")
    return found


@pytest.fixture(scope="session")
def cluster(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """etcd and kube-apiserver for the session, stopped by PID at the end."""
    c = Cluster(tmp_path_factory.mktemp("realapi"), binaries)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def deployment(cluster: Cluster) -> Iterator[Deployment]:
    """Tollgate installed from the shipped manifests, serving the shipped policies, webhooks registered by URL."""
    d = Deployment(cluster, cluster.workdir)
    try:
        d.install()
        d.start()
        d.apply_policy_sets()
        d.wait_for_webhooks()
        yield d
    finally:
        d.stop()
