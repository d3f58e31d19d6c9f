"""Gatekeeper library's CEL suites through ``tollgate test``, unchanged: how many agree with ``gator verify``.

    python bench/gatekeeper_library.py CHECKOUT [--json out.json]

CHECKOUT is a checkout of open-policy-agent/gatekeeper-library. Every ``suite.yaml`` under ``library/``
whose template has a ``K8sNativeValidation`` engine is run with ``tollgate test -o json SUITE`` in a
subprocess (the CLI as users run it). The library's CI runs ``gator verify`` on the same suites and
every assertion holds there, so an assertion agrees when its row is ``ok``; a suite agrees when
``tollgate test`` exits 0. Printed: one line per suite (assertions met / total, exit status, the first
mismatch), then the totals and the agreement in per cent (goal: >= 98 % of assertions).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TOLLGATE = [sys.executable, "-m", "webhook.cli"]


def cel_suites(checkout: Path) -> list[Path]:
    """The library's suites whose test templates carry K8sNativeValidation code, in path order."""
    out = []
    for suite in sorted((checkout / "library").rglob("suite.yaml")):
        try:
            doc = yaml.safe_load(suite.read_text())
        except yaml.YAMLError:
            continue
        templates = {t.get("template") for t in (doc or {}).get("tests") or [] if isinstance(t, dict)}
        if any(t and "K8sNativeValidation" in (suite.parent / t).read_text() for t in templates
               if (suite.parent / str(t)).is_file()):
            out.append(suite)
    return out


def run(suite: Path) -> dict[str, object]:
    """One suite through ``tollgate test -o json``: exit status, rows met, total, first mismatch."""
    done = subprocess.run([*TOLLGATE, "test", "-o", "json", str(suite)], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    try:
        rows = json.loads(done.stdout) if done.stdout.strip() else []
    except json.JSONDecodeError:
        rows = []
    bad = [r for r in rows if not r.get("ok")]
    doc = yaml.safe_load(suite.read_text()) or {}
    # Every assertion the suite states (an unusable suite's count as unmet; a failed one stops its case).
    total = sum(len(c.get("assertions") or []) for t in doc.get("tests") or [] for c in t.get("cases") or [])
    first = bad[0]["mismatch"] if bad else (done.stderr.strip().splitlines() or [""])[-1] if done.returncode else ""
    return {"suite": str(suite), "exit": done.returncode, "met": len(rows) - len(bad), "total": total,
            "first": first}


def main() -> int:
    """Run every CEL suite and print the agreement; exit 0 when it reaches the goal."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, help="a checkout of open-policy-agent/gatekeeper-library")
    parser.add_argument("--json", type=Path, help="also write the per-suite results here")
    parser.add_argument("--goal", type=float, default=98.0, help="agreement goal in per cent (default 98)")
    args = parser.parse_args()
    suites = cel_suites(args.checkout)
    if not suites:
        print(f"{args.checkout}: no suite with a K8sNativeValidation template under library/", file=sys.stderr)
        return 2
    results = [run(s) for s in suites]
    for r in results:
        name = Path(str(r["suite"])).parent.relative_to(args.checkout / "library")
        print(f"{'ok ' if r['exit'] == 0 else 'BAD'} {name}: {r['met']}/{r['total']} assertions, exit {r['exit']}"
              + (f": {r['first']}" if r["first"] else ""))
    met = sum(int(str(r["met"])) for r in results)
    total = sum(int(str(r["total"])) for r in results)
    agreeing = sum(1 for r in results if r["exit"] == 0)
    share = 100.0 * met / total if total else 0.0
    print(f"suites exiting 0: {agreeing}/{len(results)}; assertions agreeing with gator verify: {met}/{total} "
          f"({share:.1f} %; goal {args.goal:.0f} %)")
    if args.json:
        args.json.write_text(json.dumps({"suites": results, "met": met, "total": total, "share": share}, indent=1))
    return 0 if share >= args.goal else 1


if __name__ == "__main__":
    sys.exit(main())
