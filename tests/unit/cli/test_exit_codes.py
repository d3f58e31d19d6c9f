"""The exit-status promise: every documented kind of bad input is one line on stderr and exit 2, never 70.

One table over every subcommand. ``serve`` runs in a subprocess (it sets up the
process's logging); the others call ``webhook.cli.main.main`` in-process.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.cli.command import ExitStatus
from webhook.cli.main import main
from webhook.tls import generate as certs

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "policies" / "examples"
README = ROOT / "README.md"

INVALID_POLICY = """\
apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata: {name: typo}
spec:
  match: {resourceRules: [{resources: [pods], operations: [CREAT]}]}
  validations: [{expression: "true"}]
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Bad inputs on disk: an expired pair, a policy kubectl would refuse, a broken suite, two unrelated CAs."""
    root = tmp_path_factory.mktemp("bad")
    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=10)
    ca, ca_key = certs.new_ca(days=20, now=past)
    cert, key = certs.issue_serving(ca, ca_key, dns_names=["localhost"], days=1, now=past)
    (root / "expired").mkdir()
    for name, data in (("ca.crt", ca), ("tls.crt", cert), ("tls.key", key)):
        (root / "expired" / name).write_bytes(data)
    certs.write_certs(root / "a", dns_names=["a"], days=1)
    certs.write_certs(root / "b", dns_names=["b"], days=1)
    (root / "invalid.yaml").write_text(INVALID_POLICY)
    (root / "twice.yaml").write_text(INVALID_POLICY.replace("CREAT", "CREATE") + "  validations: []\n")
    (root / "suite.yaml").write_text("apiVersion: tollgate.dev/v1alpha1\nkind: TestSuite\npolicies: [gone.yaml]\n"
                                     "resources: [gone.yaml]\nresults: [{policy: p, resource: {kind: Pod, name: x}, "
                                     "result: pass}]\n")
    (root / "empty").mkdir()
    return {"root": root, **{p.name.removesuffix(".yaml"): p for p in root.iterdir()}}


IN_PROCESS = [
    # tollgate
    [],
    ["bogus"],
    # certs
    ["certs", "--out-dir", "{root}/c", "--days", "-5"],
    ["certs", "--out-dir", "{root}/c", "--days", "0"],
    ["certs", "--out-dir", "{root}/c", "--ip", "not-an-ip"],
    ["certs", "--out-dir", "{root}/c", "--dns-name", "bad name!"],
    ["certs", "--out-dir", "/proc/tollgate-no"],
    ["certs", "--out-dir", "{root}/c", "--ca-cert", "{a}/ca.crt"],
    ["certs", "--out-dir", "{root}/c", "--ca-cert", "{a}/ca.crt", "--ca-key", "{b}/ca.key"],
    ["certs", "--out-dir", "{root}/c", "--ca-cert", "{a}/tls.crt", "--ca-key", "{a}/tls.key"],
    ["certs", "--out-dir", "{root}/c", "--ca-cert", "{expired}/ca.crt", "--ca-key", "{a}/ca.key"],
    # webhook-config
    ["webhook-config", "--policies", "{invalid}"],
    ["webhook-config", "--policies", "{twice}"],
    ["webhook-config", "--policies", "{root}/nope"],
    ["webhook-config", "--policies", "{suite}"],
    ["webhook-config", "--policies", str(EXAMPLES), "--timeout-seconds", "0"],
    ["webhook-config", "--policies", str(EXAMPLES), "--timeout-seconds", "31"],
    ["webhook-config", "--policies", str(EXAMPLES), "--ca-bundle", str(README)],
    ["webhook-config", "--policies", str(EXAMPLES), "--url", "http://127.0.0.1:8443"],
    ["webhook-config", "--policies", str(EXAMPLES), "--service", "Not_A_Label"],
    # test
    ["test"],
    ["test", "{root}/nope"],
    ["test", "{empty}"],
    ["test", "{suite}"],
    ["test", "{invalid}"],
    ["test", "-p", "{invalid}", "-r", str(EXAMPLES / "allowed-registries" / "resources.yaml")],
    ["test", "-p", "{twice}", "-r", str(EXAMPLES / "allowed-registries" / "resources.yaml")],
    ["test", "-p", str(EXAMPLES / "allowed-registries" / "policy.yaml"), "-r", str(README)],
    ["test", str(EXAMPLES / "allowed-registries" / "test.yaml"), "-o", "xml"],
    # lint
    ["lint"],
    ["lint", "{root}/nope"],
    # audit
    ["audit", "--bogus"],
]

SERVE = [
    ["--kubeconfig", str(README), "--cert-dir", "{a}"],
    ["--kubeconfig", "{invalid}", "--cert-dir", "{a}"],
    ["--kubeconfig", "{root}/nope", "--cert-dir", "{a}"],
    ["--local", str(EXAMPLES), "--cert-dir", "{expired}"],
    ["--local", str(EXAMPLES), "--cert-dir", "{root}/nope"],
    ["--local", str(EXAMPLES), "--tls-cert-file", "{a}/tls.crt", "--tls-key-file", "{b}/tls.key"],
    ["--local", "{root}/nope"],
    ["--local", str(EXAMPLES), "--port", "99999"],
    ["--local", str(EXAMPLES), "--eval-workers", "-1"],
    ["--local", str(EXAMPLES), "--cert-poll-interval", "0"],
    ["--local", str(EXAMPLES), "--log-level", "bogus"],
    ["--cert-dir", "{a}"],  # no cluster configuration in the environment
]


def expand(argv: list[str], files: dict[str, Path]) -> list[str]:
    return [a.format(**files) for a in argv]


@pytest.mark.parametrize("argv", IN_PROCESS, ids=lambda argv: " ".join(argv) or "<none>")
def test_bad_input_is_one_line_and_exit_2(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                          argv: list[str]) -> None:
    assert main(expand(argv, files)) == ExitStatus.USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("tollgate"), err
    assert "internal error" not in err and "Traceback" not in err


@pytest.mark.parametrize("argv", SERVE, ids=" ".join)
def test_serve_bad_input_is_one_line_and_exit_2(files: dict[str, Path], tmp_path: Path, argv: list[str]) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""}
    result = subprocess.run([sys.executable, "-m", "webhook.cli.main", "serve", *expand(argv, files)], check=False,
                            capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert result.returncode == ExitStatus.USAGE, result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("tollgate serve") and "internal error" not in result.stderr
