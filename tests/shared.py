"""Locate ``shared/`` (design notes and fixtures), which sits beside the checkout, never inside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """``$TOLLGATE_SHARED``, else ``../shared`` next to the repository (as on CI and dev machines)."""
    env = os.environ.get("TOLLGATE_SHARED")
    return Path(env) if env else ROOT.parent / "shared"


def fixture_dir(name: str) -> Path:
    """A fixtures folder; fails the test with a clear message when ``shared/`` is missing."""
    path = shared_dir() / "fixtures" / name
    if not path.is_dir():
        pytest.fail(f"fixtures not found at {path}: check out shared/ beside the repository or set TOLLGATE_SHARED")
    return path
