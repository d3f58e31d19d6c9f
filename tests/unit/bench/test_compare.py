"""bench/compare.py, the benches' regression gate: which runs pass, which fail, and why."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import compare


def figs(**values: tuple[float | None, str]) -> dict[str, dict[str, object]]:
    return {k: compare.figure(v, better) for k, (v, better) in values.items()}


BASE = figs(rps=(0.4, "higher"), p99=(2.0, "lower"))


def test_a_run_within_the_margin_passes_both_ways() -> None:
    lines, status = compare.compare(BASE, figs(rps=(0.27, "higher"), p99=(2.9, "lower")))
    assert status == 0, lines
    assert all(" ok " in line for line in lines)


@pytest.mark.parametrize("run", [figs(rps=(0.26, "higher"), p99=(2.0, "lower")),   # 1.54x less throughput
                                 figs(rps=(0.4, "higher"), p99=(3.1, "lower"))])     # 1.55x the latency
def test_a_figure_past_the_margin_fails(run: dict[str, dict[str, object]]) -> None:
    lines, status = compare.compare(BASE, run)
    assert status == 1
    assert sum("REGRESSED" in line for line in lines) == 1


def test_direction_matters_a_better_figure_never_fails() -> None:
    lines, status = compare.compare(BASE, figs(rps=(4.0, "higher"), p99=(0.1, "lower")))
    assert status == 0, lines


def test_a_figure_the_run_lost_fails_and_a_new_one_does_not() -> None:
    lines, status = compare.compare(BASE, figs(rps=(0.4, "higher")))
    assert status == 1 and any("MISSING" in line for line in lines)
    lines, status = compare.compare(BASE, {**BASE, **figs(extra=(1.0, "higher"))})
    assert status == 0 and any(line.startswith("extra") and "new" in line for line in lines)


def test_zero_throughput_is_infinitely_worse() -> None:
    assert compare.worse_by(0.4, 0.0, "higher") == float("inf")
    assert compare.worse_by(2.0, 3.0, "lower") == 1.5
    with pytest.raises(ValueError, match="must be positive"):
        compare.worse_by(0.0, 1.0, "lower")
    with pytest.raises(ValueError, match="better must be"):
        compare.figure(1.0, "up")
    with pytest.raises(ValueError, match="margin must be above 1"):
        compare.compare(BASE, BASE, margin=1.0)


def _args(tmp_path: Path, **kw: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    compare.add_arguments(parser)
    argv: list[str] = []
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return parser.parse_args(argv)


def test_gate_records_then_compares_like_with_like(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    assert compare.gate(_args(tmp_path, update_baseline=path, reason="first"), "admission", BASE, "--quick",
                        {"cores": 2}) == 0
    section = json.loads(path.read_text())["admission"]
    assert section["figures"] == BASE and section["reason"] == "first" and section["mode"] == "--quick"
    assert compare.gate(_args(tmp_path, compare=path), "admission", BASE, "--quick", {}) == 0
    worse = figs(rps=(0.1, "higher"), p99=(2.0, "lower"))
    assert compare.gate(_args(tmp_path, compare=path), "admission", worse, "--quick", {}) == 1
    # Another mode or another bench's section is not a comparison: status 2, not a silent pass.
    assert compare.gate(_args(tmp_path, compare=path), "admission", BASE, "10s x 3", {}) == 2
    assert compare.gate(_args(tmp_path, compare=path), "apiserver", BASE, "--quick", {}) == 2
    # Updating one section keeps the other.
    compare.gate(_args(tmp_path, update_baseline=path), "apiserver", BASE, "--quick", {})
    assert set(json.loads(path.read_text())) == {"admission", "apiserver"}


def test_a_figure_may_carry_its_own_margin() -> None:
    base = {"p99": compare.figure(2.0, "lower", margin=3.0)}
    assert compare.compare(base, {"p99": compare.figure(5.9, "lower")})[1] == 0  # the baseline's margin holds
    assert compare.compare(base, {"p99": compare.figure(6.1, "lower")})[1] == 1
    with pytest.raises(ValueError, match="margin must be above 1"):
        compare.figure(1.0, "lower", margin=0.5)
