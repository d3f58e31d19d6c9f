"""``tollgate serve --explain``: off by default, on with --local, refused in a cluster without --client-ca."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli.test_serve_settings import _settings
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
