"""Kyverno's public policy library, run unchanged by ``tollgate test``: how often Tollgate agrees with Kyverno's tests.

    python bench/kyverno_library.py PATH [--markdown docs/kyverno-library.md] [--json out.json] [-v]

PATH is a checkout of https://github.com/kyverno/policies (``git clone --depth 1
https://github.com/kyverno/policies``; tests never read it, only this runner). Every folder whose name ends
in ``-vpol`` or ``-mpol`` (Kyverno's ValidatingPolicy / MutatingPolicy ports) holds policies, each with a
``.kyverno-test/kyverno-test.yaml``; each test file is run as ``tollgate test FILE -o json`` (in process,
through the CLI's own entry point) and its exit status and rows kept:

- a test **agrees** when it exits 0 (every row as Kyverno's test expects);
- a row **agrees** when its result is the one expected (and its patched object, if the row names one);
  a test that exits 2 (unusable input: a field or file Tollgate refuses) counts each of its expected rows
  as disagreeing.

Each disagreeing row is classed by its message (see :func:`classify`): a CEL library or dialect gap
(functions Kyverno declares that Tollgate lacks, cel-go semantics: another slice of issue #30) or a
test-format / conversion gap (this one's). Output: per-folder lines, per-class counts, the totals; with
``--markdown`` the table docs/kyverno-library.md carries; with ``--json`` every row.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webhook.cli.main import main as tollgate  # noqa: E402

#: Disagreement classes, first match wins: (class, who, pattern on the row's message or the test's error).
CLASSES: tuple[tuple[str, str, str], ...] = (
    ("image data (Context spec.images, image.GetMetadata)", "test Context", r"spec\.images|GetMetadata"),
    ("ternary of mixed shapes", "CEL dialect", r"_\?_:_"),
    ("orValue on a non-optional value", "CEL dialect", r"orValue"),
    ("matchConditions reading variables", "CEL dialect", r"matchConditions.*variables|undeclared variable"),
    ("Kyverno library Tollgate lacks", "CEL libraries", r"library|undeclared reference|found no matching overload|"
                                                        r"No matching overloads|no such overload"),
    ("mutateExisting (refused)", "refused (scope)", r"mutateExisting"),
    ("test format", "test format", r"kyverno-test|values|userinfo|results\[|patchedResources"),
)


@dataclass
class TestRun:
    """One test file: its folder, exit status, rows (as ``-o json`` prints them) and error lines."""

    path: str
    status: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    expected_rows: int = 0

    @property
    def agreeing_rows(self) -> int:
        return sum(1 for r in self.rows if r.get("ok"))


def classify(text: str) -> tuple[str, str]:
    """The class of a disagreement and whose slice it is, by its message."""
    for name, who, pattern in CLASSES:
        if re.search(pattern, text):
            return name, who
    return "decision differs", "unclassified"


def expected_rows(test_file: Path) -> int:
    """How many rows a Kyverno test expects: one per resource of each results entry."""
    doc = yaml.safe_load(test_file.read_text())
    return sum(len(r.get("resources") or []) for r in (doc or {}).get("results") or [])


def run_one(test_file: Path) -> TestRun:
    """``tollgate test FILE -o json`` in process: exit status, rows, stderr lines."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = tollgate(["test", str(test_file), "-o", "json"])
    text = out.getvalue().strip()
    rows = json.loads(text) if text.startswith("[") else []
    errors = [line for line in err.getvalue().splitlines() if line.startswith("tollgate test: ")
              and "warning" not in line and "note:" not in line]
    return TestRun(str(test_file), status, rows, errors, expected_rows(test_file))


def test_files(library: Path) -> list[Path]:
    """Every ``kyverno-test.yaml`` of the ``-vpol``/``-mpol`` folders, sorted."""
    out = []
    for folder in sorted(p for p in library.iterdir() if p.is_dir() and p.name.endswith(("-vpol", "-mpol"))):
        for dirpath, _, files in os.walk(folder):
            if "kyverno-test.yaml" in files:
                out.append(Path(dirpath) / "kyverno-test.yaml")
    return sorted(out)


def commit_of(library: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(library), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def summarize(runs: list[TestRun], library: Path) -> dict[str, Any]:
    """Totals, per folder and per disagreement class."""
    folders: dict[str, Counter[str]] = {}
    classes: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], str] = {}
    for run in runs:
        rel = Path(run.path).relative_to(library)
        c = folders.setdefault(rel.parts[0], Counter())
        c["tests"] += 1
        c["tests_ok"] += run.status == 0
        c["rows"] += run.expected_rows
        c["rows_ok"] += run.agreeing_rows
        policy_dir = str(rel.parent.parent)
        if run.status == 2 and not run.rows:
            key = classify(" ".join(run.errors))
            classes[key] += run.expected_rows
            examples.setdefault(key, f"{policy_dir}: {run.errors[0] if run.errors else 'exit 2'}")
        else:
            for row in run.rows:
                if not row.get("ok"):
                    key = classify(row.get("mismatch", "") + " " + row.get("message", ""))
                    classes[key] += 1
                    examples.setdefault(key, f"{policy_dir}: {row.get('mismatch', '')}")
            missing = run.expected_rows - len(run.rows)
            if missing > 0:
                key = classify(" ".join(run.errors))
                classes[key] += missing
    total = Counter[str]()
    for c in folders.values():
        total.update(c)
    return {"commit": commit_of(library), "folders": {k: dict(v) for k, v in folders.items()}, "total": dict(total),
            "classes": [{"class": name, "who": who, "rows": n, "example": examples.get((name, who), "")}
                        for (name, who), n in classes.most_common()]}


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "-"


def markdown(summary: dict[str, Any], runs: list[TestRun], library: Path) -> str:
    """The result table of docs/kyverno-library.md."""
    t = summary["total"]
    lines = [
        "# Kyverno's policy library, run by `tollgate test`",
        "",
        "Generated by `python bench/kyverno_library.py PATH --markdown docs/kyverno-library.md` against",
        f"[kyverno/policies](https://github.com/kyverno/policies) at `{summary['commit']}`: every `-vpol` and "
        "`-mpol` folder's",
        "`.kyverno-test/kyverno-test.yaml`, unchanged, run as `tollgate test FILE`. A test agrees when it exits 0; "
        "a row",
        "when its result (and patched object) is the one Kyverno's test expects. A test Tollgate refuses (exit 2) "
        "counts",
        "all its rows as disagreeing.",
        "",
        f"**Tests exiting 0: {t.get('tests_ok', 0)} of {t.get('tests', 0)} "
        f"({_pct(t.get('tests_ok', 0), t.get('tests', 0))}). Rows agreeing: {t.get('rows_ok', 0)} of "
        f"{t.get('rows', 0)} ({_pct(t.get('rows_ok', 0), t.get('rows', 0))}).**",
        "",
        "| folder | tests | exit 0 | rows | rows agreeing |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, c in sorted(summary["folders"].items()):
        lines.append(f"| {name} | {c.get('tests', 0)} | {c.get('tests_ok', 0)} | {c.get('rows', 0)} | "
                     f"{c.get('rows_ok', 0)} ({_pct(c.get('rows_ok', 0), c.get('rows', 0))}) |")
    lines += ["", "## Why rows disagree", ""]
    if not summary["classes"]:
        lines.append("Every row agrees. Tests whose Context gives `spec.images` run too: `tollgate test` answers "
                     "`image.GetMetadata` from that image data, as Kyverno's CLI does (anywhere else the ImageData "
                     "library is refused at compile time: Tollgate calls no registry).")
    else:
        lines += ["Classed by message (`CLASSES` in the runner).", "",
                  "| class | who | rows | first example |", "|---|---|---:|---|"]
        for c in summary["classes"]:
            example = c["example"].replace("|", "\\|")[:160]
            lines.append(f"| {c['class']} | {c['who']} | {c['rows']} | {example} |")
    lines += ["", "## Tests that do not exit 0", ""]
    if all(run.status == 0 for run in runs):
        lines.append("None.")
    for run in runs:
        if run.status != 0:
            rel = Path(run.path).relative_to(library)
            bad = [r for r in run.rows if not r.get("ok")]
            why = (bad[0].get("mismatch", "") if bad else (run.errors[0] if run.errors else ""))
            why = why.replace("|", "\\|").replace("\n", " ")[:200]
            lines.append(f"- `{rel.parent.parent}` (exit {run.status}, {len(bad)} row(s)): {why}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("library", type=Path, help="a checkout of github.com/kyverno/policies")
    parser.add_argument("--markdown", type=Path, help="write the result table here (docs/kyverno-library.md)")
    parser.add_argument("--json", type=Path, help="write every test's rows here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every disagreeing row")
    args = parser.parse_args(argv)
    if not (args.library / "best-practices-vpol").is_dir():
        print(f"{args.library}: not a checkout of kyverno/policies (no best-practices-vpol/); get it with\n"
              "  git clone --depth 1 https://github.com/kyverno/policies", file=sys.stderr)
        return 2
    runs = []
    for test_file in test_files(args.library):
        run = run_one(test_file)
        runs.append(run)
        rel = test_file.relative_to(args.library)
        print(f"{'ok  ' if run.status == 0 else f'exit {run.status}'} {rel.parent.parent}: "
              f"{run.agreeing_rows}/{run.expected_rows} rows", flush=True)
        if args.verbose and run.status != 0:
            for row in run.rows:
                if not row.get("ok"):
                    print(f"      {row['kind']} {row['name']}: {row.get('mismatch', '')}"[:300])
            for line in run.errors:
                print(f"      {line}"[:300])
    for run in runs:  # messages name files relative to the checkout, as the table does
        run.errors = [e.replace(f"{args.library}/", "").removeprefix("tollgate test: ") for e in run.errors]
    summary = summarize(runs, args.library)
    t = summary["total"]
    for c in summary["classes"]:
        print(f"{c['rows']:5d}  {c['class']} ({c['who']})")
    print(f"tests exiting 0: {t.get('tests_ok', 0)}/{t.get('tests', 0)} ({_pct(t.get('tests_ok', 0), t['tests'])}); "
          f"rows agreeing: {t.get('rows_ok', 0)}/{t.get('rows', 0)} ({_pct(t.get('rows_ok', 0), t['rows'])})")
    if args.markdown:
        args.markdown.write_text(markdown(summary, runs, args.library))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": [asdict(r) for r in runs]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
