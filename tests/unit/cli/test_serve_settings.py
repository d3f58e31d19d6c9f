"""``tollgate serve`` flags reach the Settings the server is built from (no server started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.cli import serve
from webhook.cli.main import main
from webhook.server.settings import DEFAULTS, Settings

EXAMPLES = Path(__file__).resolve().parents[3] / "policies" / "examples"


def _settings(monkeypatch: pytest.MonkeyPatch, *argv: str) -> Settings:
    seen: list[Settings] = []

    async def fake_serve(settings: Settings, ca_file: Any) -> None:
        seen.append(settings)

    monkeypatch.setattr(serve, "_serve", fake_serve)
    monkeypatch.setattr(serve, "_check_port", lambda *_a: None)  # the flags only: 8443 may be taken here
    assert main(["serve", "--local", str(EXAMPLES), *argv]) == 0
    [settings] = seen
    return settings


def test_defaults_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _settings(monkeypatch)
    assert (s.inline_work_budget, s.header_timeout, s.idle_timeout, s.max_connections) == (
        DEFAULTS.inline_work_budget, DEFAULTS.header_timeout, DEFAULTS.idle_timeout, DEFAULTS.max_connections)
    assert (s.webhook_config_name, s.webhook_service) == (DEFAULTS.webhook_config_name, DEFAULTS.webhook_service)
    assert s.ready_max_staleness == DEFAULTS.ready_max_staleness == 30.0
    assert s.imports == DEFAULTS.imports == frozenset()  # the API server and Kyverno enforce their own


def test_import_names_the_owners_whose_policies_are_enforced_too(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Settings] = []

    async def fake_serve(settings: Settings, ca_file: Any) -> None:
        seen.append(settings)

    monkeypatch.setattr(serve, "_serve", fake_serve)
    monkeypatch.setattr(serve, "_check_port", lambda *_a: None)  # the flags only: 8443 may be taken here
    monkeypatch.setattr(serve, "_check_kube_config", lambda _args: None)  # no cluster here: the flags only
    cluster = ["serve", "--kubeconfig", "kubeconfig", "--tls-cert-file", "c", "--tls-key-file", "k"]
    monkeypatch.setattr(serve, "_check_certs", lambda *_a: None)
    assert main([*cluster, "--import", "kyverno"]) == 0
    assert main([*cluster, "--import", "admission", "--import", "kyverno"]) == 0
    assert [s.imports for s in seen] == [{"kyverno"}, {"admission", "kyverno"}]


def test_import_with_local_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--local", str(EXAMPLES), "--import", "kyverno"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--local already reads every importable kind" in err, err


def test_bounds_and_names_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _settings(monkeypatch, "--inline-work-budget", "0", "--header-timeout", "3", "--idle-timeout", "30",
                  "--max-connections", "64", "--webhook-config-name", "gate.example", "--webhook-service", "gate",
                  "--ready-max-staleness", "0")
    assert s.ready_max_staleness == 0
    assert (s.inline_work_budget, s.header_timeout, s.idle_timeout, s.max_connections) == (0, 3.0, 30.0, 64)
    assert (s.webhook_config_name, s.webhook_service) == ("gate.example", "gate")


@pytest.mark.parametrize("argv", [["--max-connections", "0"], ["--header-timeout", "0"],
                                  ["--webhook-service", "Not_A_Label"], ["--inline-work-budget", "-1"],
                                  ["--ready-max-staleness", "-1"], ["--import", "opa"]])
def test_unusable_values_are_one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--local", str(EXAMPLES), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tollgate serve: error: argument"), err
