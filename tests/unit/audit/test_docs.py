"""docs/audit.md's file examples are what ``tollgate audit`` prints: stderr lines, exit status, the report shown."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "audit.md"


def examples() -> list[tuple[list[str], list[str], int]]:
    """``(argv, output lines, exit status)`` of every documented ``$ tollgate audit ... -r ...`` run."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", DOC.read_text(), flags=re.S):
        lines = block.splitlines()
        command = lines[0].removeprefix("$ ")
        if "--kubeconfig" in command:
            continue  # a live cluster: tests/component/dynamic/test_live_audit.py
        status_at = lines.index("$ echo $?")
        out.append((shlex.split(command)[1:], lines[1:status_at], int(lines[status_at + 1])))
    return out


def without_timestamps(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "timestamp"}


@pytest.mark.parametrize(("argv", "shown", "status"), examples(), ids=lambda v: " ".join(v) if isinstance(v, list)
                         else None)
def test_documented_runs_print_what_the_doc_shows(argv: list[str], shown: list[str], status: int, capsys: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(argv) == status
    out, err = capsys.readouterr()
    assert err.splitlines() == [line for line in shown if line.startswith("tollgate audit: ")]
    report_lines = [line for line in shown if not line.startswith("tollgate audit: ")]
    if not report_lines:
        assert out == ""
        return
    # The report's head (up to the first "..."), then each elided excerpt as a result that is in the output.
    head, *excerpts = "\n".join(report_lines).split("\n...\n")
    (actual,) = list(yaml.safe_load_all(out))
    expected_head = yaml.safe_load(head)
    assert {k: actual[k] for k in expected_head} == {**expected_head, "results": actual["results"]}
    for excerpt in excerpts:
        for result in yaml.safe_load(excerpt.rstrip(".\n")) or []:
            assert without_timestamps(result) in [without_timestamps(r) for r in actual["results"]]
