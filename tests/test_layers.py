"""Import layering is part of the test suite: import-linter's contracts in pyproject.toml."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    exe = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = re.search(r"Contracts: (\d+) kept, (\d+) broken", proc.stdout)
    assert kept is not None, proc.stdout
    assert int(kept.group(1)) >= 4 and kept.group(2) == "0", proc.stdout
