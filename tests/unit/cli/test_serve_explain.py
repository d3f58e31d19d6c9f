"""``tollgate serve --explain``: off by default, on with --local, refused in a cluster without --client-ca."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli.test_serve_settings import EXAMPLES, _settings
from webhook.cli.main import main
from webhook.tls import generate as certs


def test_explain_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _settings(monkeypatch).explain is False
    assert _settings(monkeypatch, "--explain").explain is True


def test_explain_in_a_cluster_without_client_ca_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    certs.write_certs(tmp_path, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    assert main(["serve", "--cert-dir", str(tmp_path), "--explain"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--explain in a cluster needs --client-ca" in err, err


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "tollgate.example"])
def test_explain_with_local_off_loopback_without_client_ca_is_refused(host: str, capsys: pytest.CaptureFixture[str]) \
        -> None:
    assert main(["serve", "--local", str(EXAMPLES), "--host", host, "--explain"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--explain on --host {host} needs --client-ca" in err, err


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_explain_with_local_on_loopback_needs_no_client_ca(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _settings(monkeypatch, "--host", host, "--explain").explain is True
