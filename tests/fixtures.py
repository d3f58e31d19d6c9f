"""Locate the test corpora vendored under ``tests/fixtures/`` (each with its LICENSE and source README)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


def fixture_dir(name: str) -> Path:
    """The vendored corpus ``tests/fixtures/<name>``.

    Raises:
        FileNotFoundError: the folder is missing (a broken checkout).
    """
    path = FIXTURES / name
    if not path.is_dir():
        raise FileNotFoundError(f"vendored fixtures missing: {path}")
    return path
