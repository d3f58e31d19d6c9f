"""``tollgate serve --local`` as a process: when it says it is ready, and what a signal does during start-up.

Each test runs the real command in a subprocess (it installs signal handlers and logging for the process)
and synchronises on what it prints, never on the clock.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
POLICIES = ROOT / "policies"
TOLLGATE = [sys.executable, "-m", "webhook.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tmpdir_env(tmp_path: Path) -> dict[str, str]:
    """The server's temporary files go under ``tmp_path`` (``TMPDIR``), so a test can see what is left."""
    return {**os.environ, "TMPDIR": str(tmp_path)}


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start(processes: list[subprocess.Popen[str]], env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([*TOLLGATE, "serve", "--local", str(POLICIES), *args], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    processes.append(proc)
    return proc


def test_the_try_it_command_is_printed_once_a_review_would_be_answered(
        processes: list[subprocess.Popen[str]], tmpdir_env: dict[str, str]) -> None:
    proc = start(processes, tmpdir_env, "--port", str(free_port()))
    assert proc.stderr is not None
    banner = ""
    for line in proc.stderr:
        if "--data @" in line:
            banner = line
            break
    match = re.search(r"--cacert (\S+) .*--data @(\S+) (https://\S+)", banner)
    assert match, banner
    cafile, sample, url = match.groups()
    # At once, as a user pasting the command would: answered from the loaded policies, never 503.
    request = urllib.request.Request(url, data=Path(sample).read_bytes(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=cafile), timeout=30) as resp:
        assert resp.status == 200
        response = json.load(resp)["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_start_up_stops_it_quietly_and_removes_its_temporary_files(
        processes: list[subprocess.Popen[str]], tmpdir_env: dict[str, str], tmp_path: Path,
        sig: signal.Signals) -> None:
    proc = start(processes, tmpdir_env, "--port", str(free_port()), "--log-level", "DEBUG")
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first policy compiled: start-up has begun, readiness is far off
    assert first, "serve printed nothing"
    assert list(tmp_path.glob("tollgate-local-*")), "the temporary directory (ca.key) exists during start-up"
    proc.send_signal(sig)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, rest
    assert "Traceback" not in rest and "--data @" not in rest, rest  # stopped before it ever said "Try it"
    assert "stopped during start-up" in rest
    assert not list(tmp_path.glob("tollgate-*")), "serve left its temporary files (ca.key) behind"


def test_a_second_signal_skips_the_shutdown_delay(processes: list[subprocess.Popen[str]],
                                                   tmpdir_env: dict[str, str], tmp_path: Path) -> None:
    # A shutdown delay no test could wait out: only the second signal can end it.
    proc = start(processes, tmpdir_env, "--port", str(free_port()), "--shutdown-delay", "3600")
    assert proc.stderr is not None
    for line in proc.stderr:
        if "--data @" in line:
            break
    proc.send_signal(signal.SIGINT)
    for line in proc.stderr:
        if "shutting down" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, rest
    assert "Traceback" not in rest and "CleanupError" not in rest
    assert not list(tmp_path.glob("tollgate-*"))


def test_a_port_in_use_is_refused_before_any_policy_is_compiled(tmpdir_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([*TOLLGATE, "serve", "--local", str(POLICIES), "--port", str(port)], cwd=ROOT,
                                env=tmpdir_env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr == f"tollgate serve: cannot listen on 127.0.0.1:{port}: address already in use\n"
