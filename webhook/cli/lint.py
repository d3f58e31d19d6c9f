"""``tollgate lint``: strict schema validation plus CEL compilation of policy files, nothing evaluated.

Every document of a kind Tollgate reads (ClusterAdmissionPolicy,
AdmissionPolicy, TestSuite, ConfigMap, Namespace) is checked against its
schema (:mod:`webhook.files.schema`, kubectl's strict field validation); every
policy that passes is compiled with the server's compiler, so a CEL error is
reported with its spec path and position (:mod:`webhook.files.checks`). Documents of other kinds (the Pods
of a test) are skipped. One problem per line::

    policy.yaml:7: document 1: spec.validationAction: unknown field (did you mean validationActions?)
    policy.yaml:31: document 1: ClusterAdmissionPolicy x: spec.validations[0].expression: ERROR: <input>:1:1: ...

Exit status: 0 clean, 1 when any problem was found, 2 for a usage error or a
path that does not exist.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook.cli.command import ExitStatus, Subparsers, add_command
from webhook.files.checks import lint_paths
from webhook.files.yamlio import InputError


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate lint``."""
    p = add_command(
        sub, "lint", run, help="check policy files against the CRD schema and compile their CEL",
        description="Check policy, TestSuite, ConfigMap and Namespace files against their schemas (unknown "
                    "fields, types, apiVersion) and compile every policy's CEL. Nothing is evaluated.",
        epilog="Exit status: 0 clean, 1 when any problem was found, 2 for a usage error or a missing path.",
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="YAML file or directory (searched recursively)")


def run(args: argparse.Namespace) -> int:
    """Run ``tollgate lint``; returns the exit status (0 clean, 1 problems, 2 a missing path)."""
    warnings: list[str] = []
    try:
        problems, checked = lint_paths(args.paths, warnings)
    except InputError as e:
        print(f"tollgate lint: {e}", file=sys.stderr)
        return ExitStatus.USAGE
    for line in [*warnings, *problems]:  # warnings (an ApplyConfiguration's list merges) do not fail lint
        print(line)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return ExitStatus.FINDINGS
    if not checked:
        print(f"tollgate lint: nothing to lint under {', '.join(map(str, args.paths))}: no document of a kind it "
              "reads", file=sys.stderr)
        return ExitStatus.USAGE
    noted = f", {len(warnings)} warning(s)" if warnings else ""
    print(f"{checked} document(s) checked, no problems{noted}", file=sys.stderr)
    return ExitStatus.OK
