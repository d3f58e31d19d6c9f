"""The ``tollgate`` command's lifecycle: --version, one-line failures with documented exit codes, cleanup.

``serve`` runs in a subprocess here (it installs signal handlers and logging for the process);
everything else calls ``webhook.cli.main.main`` in-process.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from webhook.cli.command import ExitStatus, output_cut_short
from webhook.cli.main import main
from webhook.tls import generate as certs

EXIT_BROKEN_PIPE = ExitStatus.BROKEN_PIPE

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "policies" / "examples"
TOLLGATE = [sys.executable, "-m", "webhook.cli.main"]


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOLLGATE, *args], check=False, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    certs.write_certs(out, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    return out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert re.fullmatch(r"tollgate \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


@pytest.mark.parametrize(("argv", "message"), [
    ([], "tollgate: error: the following arguments are required: command"),
    (["bogus"], "tollgate: error: argument command: invalid choice: 'bogus'"),
    (["tset"], "tollgate: error: unknown command 'tset' (did you mean 'test'?)"),
    (["test", "--polciy", "p.yaml"],
     "tollgate test: error: unrecognized arguments: --polciy (did you mean --policy?)"),
    (["serve", "--lcal=policies"],
     "tollgate serve: error: unrecognized arguments: --lcal=policies (did you mean --local?)"),
    (["lint", "policies", "--zzzz"], "tollgate lint: error: unrecognized arguments: --zzzz (see tollgate lint --help)"),
    (["serve", "--port", "x"], "tollgate serve: error: argument --port: invalid port 'x': not a number"),
    (["serve", "--port", "99999"], "tollgate serve: error: argument --port: invalid port 99999: must be 1-65535"),
    (["certs", "--out-dir", "/proc/tollgate-no"], "tollgate certs: --out-dir /proc/tollgate-no:"),
    (["webhook-config", "--url", "http://127.0.0.1:8443"],
     "tollgate webhook-config: webhook URL 'http://127.0.0.1:8443': the scheme must be https"),
    (["serve", "--local", "policies", "--webhook-url", "https://h/?q=1"],
     "tollgate serve: --webhook-url: webhook URL 'https://h/?q=1': a query or fragment is not allowed"),
])
def test_usage_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(message), err


def test_webhook_config_url_points_both_configurations_at_the_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhook-config", "--policies", str(EXAMPLES), "--url", "https://127.0.0.1:8443/"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    urls = {hook["clientConfig"]["url"] for doc in docs for hook in doc["webhooks"]}
    assert urls == {"https://127.0.0.1:8443/validate", "https://127.0.0.1:8443/mutate"}
    assert not any("service" in hook["clientConfig"] for doc in docs for hook in doc["webhooks"])


def one_line_failure(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith("tollgate ")]
    assert len(ours) == 1 and message in ours[0], result.stderr
    assert "Traceback" not in result.stderr


def test_serve_without_kubeconfig(tmp_path: Path, cert_dir: Path) -> None:
    env = {"HOME": str(tmp_path), "KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""}
    result = run("serve", "--cert-dir", str(cert_dir), "--port", str(free_port()), env=env)
    one_line_failure(result, "tollgate serve: no Kubernetes configuration: not in a cluster")
    assert result.stderr.count("\n") == 1
    result = run("serve", "--cert-dir", str(cert_dir), "--kubeconfig", str(tmp_path / "nope"), env=env)
    one_line_failure(result, f"tollgate serve: --kubeconfig {tmp_path / 'nope'}: no such file")


def test_serve_with_an_unusable_kubeconfig(tmp_path: Path, cert_dir: Path) -> None:
    (tmp_path / "config").write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    result = run("serve", "--cert-dir", str(cert_dir), "--kubeconfig", str(tmp_path / "config"), "--port",
                 str(free_port()), env={"KUBERNETES_SERVICE_HOST": ""})
    one_line_failure(result, "tollgate serve: no usable Kubernetes configuration: ")


def test_serve_on_a_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--local", str(EXAMPLES), "--port", str(port))
    one_line_failure(result, f"tollgate serve: cannot listen on 127.0.0.1:{port}: address already in use")


@pytest.mark.parametrize(("args", "message"), [
    (["--local", "/does-not-exist"], "tollgate serve: --local /does-not-exist: no such file or directory"),
    (["--cert-dir", "/does-not-exist"], "tollgate serve: --cert-dir /does-not-exist: no such directory"),
    (["--cert-dir", "EMPTY"], "tollgate serve: certificate EMPTY/tls.crt: no such file"),
    (["--cert-dir", "GARBAGE"], "tollgate serve: cannot use certificate GARBAGE/tls.crt and key GARBAGE/tls.key"),
    ([], "tollgate serve: --cert-dir (or --tls-cert-file/--tls-key-file) is required without --local"),
    (["--local", str(EXAMPLES), "--log-level", "bogus"], "tollgate serve: --log-level bogus: Unknown level"),
])
def test_serve_cannot_start(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "tls.crt").write_text("not a certificate")
    (tmp_path / "garbage" / "tls.key").write_text("not a key")
    names = {"EMPTY": str(tmp_path / "empty"), "GARBAGE": str(tmp_path / "garbage")}
    args = [names.get(a, a) for a in args]
    for name, value in names.items():
        message = message.replace(name, value)
    one_line_failure(run("serve", *args, "--port", str(free_port())), message)


@pytest.fixture
def local_server() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([*TOLLGATE, "serve", "--local", str(EXAMPLES), "--port", str(free_port())], cwd=ROOT,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_serve_local_removes_its_temporary_files_on_exit(local_server: subprocess.Popen[str]) -> None:
    assert local_server.stderr is not None
    deadline = time.monotonic() + 30
    banner = ""
    while time.monotonic() < deadline and "--data @" not in banner:
        banner = local_server.stderr.readline()
    match = re.search(r"--cacert (\S+)/tollgate-certs-\w+/ca.crt .*--data @(\S+)", banner)
    assert match, banner
    tmp, sample = Path(match.group(1)), Path(match.group(2))
    assert tmp.name.startswith("tollgate-local-") and sample.is_file() and sample.is_relative_to(tmp)
    time.sleep(1)  # the banner precedes the signal handlers by a few statements
    local_server.send_signal(signal.SIGINT)
    assert local_server.wait(timeout=30) == 0
    assert not tmp.exists()


def test_output_closed_early_is_quiet() -> None:
    # The reader is gone before anything is written (what `| head` leaves behind once it has its lines).
    proc = subprocess.Popen([*TOLLGATE, "test", str(EXAMPLES / "disallow-latest-tag" / "test.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert proc.stderr.read() == b""  # as a program killed by SIGPIPE: nothing more, no traceback


def test_broken_pipe_in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    class ClosedPipe:
        def write(self, _text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            raise OSError("no file descriptor")

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["test", str(EXAMPLES / "disallow-latest-tag" / "test.yaml")]) == EXIT_BROKEN_PIPE
    assert "Traceback" not in capsys.readouterr().err


def test_output_cut_short_is_a_reader_gone_with_output_unread() -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"x" * 100)
        assert not output_cut_short(write_end, wait=0)  # the reader is still there
        os.read(read_end, 10)
        os.close(read_end)
        assert output_cut_short(write_end, wait=0)  # | head -c 10: gone with 90 bytes unread
    finally:
        os.close(write_end)
    read_end, write_end = os.pipe()
    os.write(write_end, b"all of it")
    os.read(read_end, 100)
    os.close(read_end)
    assert not output_cut_short(write_end, wait=0)  # everything was read: not a cut
    os.close(write_end)
    with open(os.devnull, "w") as devnull:
        assert not output_cut_short(devnull.fileno())


def test_a_reader_leaving_after_the_output_fit_in_the_pipe_is_141(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # `tollgate test -o json ... | head -c 10`: the whole output fits in the pipe, no write fails, then head leaves.
    read_end, write_end = os.pipe()
    stdout = os.fdopen(write_end, "w")
    monkeypatch.setattr("sys.stdout", stdout)
    saved = os.dup(1)  # main silences fd 1 of a cut output: keep pytest's
    try:
        def head_leaves(*_args: object, **_kwargs: object) -> None:
            os.read(read_end, 10)
            os.close(read_end)

        monkeypatch.setattr("webhook.cli.test._summary", head_leaves)
        os.dup2(write_end, 1)
        assert main(["test", "-o", "json", str(EXAMPLES / "disallow-latest-tag" / "test.yaml")]) == EXIT_BROKEN_PIPE
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        stdout.close()
