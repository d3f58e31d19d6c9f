"""docs/server.md's option tables name every option of ``tollgate serve`` and ``tollgate certs``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from webhook.cli.main import build_parser

DOC = Path(__file__).resolve().parents[3] / "docs" / "server.md"


def options(command: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return {o for a in sub.choices[command]._actions for o in a.option_strings if o.startswith("--") and o != "--help"}


def documented(command: str) -> set[str]:
    """Options in the first column of the table under ``### `tollgate COMMAND```."""
    section = DOC.read_text().split(f"### `tollgate {command}`", 1)[1].split("\n### ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `--")]
    return {flag for cell in rows for flag in re.findall(r"`(--[a-z-]+)", cell)}


@pytest.mark.parametrize("command", ["serve", "certs"])
def test_every_option_is_in_the_table(command: str) -> None:
    assert options(command) - documented(command) == set()
    assert documented(command) - options(command) == set()  # and nothing that no longer exists
