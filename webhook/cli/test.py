"""``tollgate test``: evaluate policies against resource files, offline, with the server's engine.

Two ways to call it::

    tollgate test [PATH ...]          # TestSuite files, or directories searched for them; - is stdin
    tollgate test -p POLICY -r RESOURCE [--configmap F] [--namespace-file F] [--old-resource F] [--reference F]
                  [--operation UPDATE] [--username U] [--groups a,b]

Argument parsing and exit status only; evaluation is :mod:`webhook.files.testsuite`,
output :mod:`webhook.cli.report`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from webhook.cli import report
from webhook.cli.parsing import OneLineParser
from webhook.files.testsuite import (
    DEFAULT_PARAMS_SELECTOR,
    OPERATIONS,
    Row,
    find_suites,
    run_adhoc,
    run_suite,
)
from webhook.files.testsuite import build_request as _build_request
from webhook.files.yamlio import InputError
from webhook.policy import InMemoryLookups, Result, evaluate_mutating, evaluate_validating
from webhook.policy.compiler import CompiledPolicy

#: Exit status: every expectation holds (ad-hoc: no ``fail`` or ``error`` row).
EXIT_OK = 0
#: Exit status: an expectation does not hold (ad-hoc: a ``fail`` or ``error`` row).
EXIT_FAILED = 1
#: Exit status: usage error or unusable input (one line on stderr naming file and location).
EXIT_USAGE = 2

_EPILOG = """\
Results: pass | fail | warn | skip | error. warn: a validation failed in a policy whose
validationActions has Warn and not Deny (admitted with a warning). skip: the policy does not
match, or a matchCondition is false. error: a CEL runtime or mutation error.
Mutating policies run first, in admission-chain order; validations see the mutated object.

TestSuite file (paths relative to the suite file; see docs/writing-policies.md):
  apiVersion: tollgate.dev/v1alpha1
  kind: TestSuite
  metadata: {name: my-tests}
  policies: [policy.yaml]          # files or directories
  resources: [resources.yaml]      # multi-document YAML
  oldResources: [old.yaml]         # optional: oldObject of UPDATE tests (same kind/namespace/name)
  configMaps: [configmap.yaml]     # optional, the params cache (needs the params label)
  namespaces: [namespaces.yaml]    # optional, the Namespace cache
  references: [existing.yaml]      # optional, objects in the caches spec.references declares
  operation: CREATE                # optional default
  userInfo: {username: alice, groups: [dev]}   # optional default
  results:
  - {policy: NAME, resource: {kind: Pod, namespace: default, name: good}, result: pass}
  - {policy: NAME, resource: {kind: Pod, name: bad}, result: fail, messageContains: "..."}
  - {policy: NAME, resource: {kind: Pod, name: web}, result: pass, operation: UPDATE,
     userInfo: {username: bob}, patchedResource: web-mutated.yaml}

Output: --output table|json|yaml|junit. json/yaml rows: {"policy", "kind", "namespace", "name",
"result", "message"}, plus for suites {"suite", "operation", "expected", "ok", "mismatch"}.

Exit status: 0 when every expectation holds (ad-hoc: no fail or error row), 1 on any mismatch
(ad-hoc: any fail or error row), 2 for usage errors and unusable input (one line on stderr naming
the file, document, line and YAML path; never a traceback).
Example: tollgate test policies/examples/allowed-registries/test.yaml
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``tollgate test`` argument parser."""
    p = OneLineParser(
        prog="tollgate test",
        description="Evaluate Tollgate policies against resource files offline, with the same engine as the "
                    "server. Give TestSuite files or directories (searched recursively), or --policy and "
                    "--resource files.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    p.add_argument("suites", nargs="*", type=Path, metavar="PATH",
                   help="TestSuite file, or directory searched recursively for them; - reads standard input")
    p.add_argument("-p", "--policy", action="append", type=Path, default=[], help="policy file or directory (- stdin)")
    p.add_argument("-r", "--resource", action="append", type=Path, default=[],
                   help="resource file (multi-document YAML) or directory (- stdin)")
    p.add_argument("--configmap", action="append", type=Path, default=[],
                   help="ConfigMaps standing in for the params cache")
    p.add_argument("--namespace-file", action="append", type=Path, default=[],
                   help="Namespaces standing in for the cache")
    p.add_argument("--reference", action="append", type=Path, default=[],
                   help="existing objects standing in for the caches the policies' spec.references declare")
    p.add_argument("--old-resource", action="append", type=Path, default=[],
                   help="old objects for --operation UPDATE (matched by kind, namespace and name)")
    p.add_argument("--operation", choices=OPERATIONS, default="CREATE", help="admission operation (default CREATE)")
    p.add_argument("--username", default="tollgate-test", help="request.userInfo.username")
    p.add_argument("--groups", default="system:authenticated", help="comma-separated request.userInfo.groups")
    p.add_argument("--params-selector", default=DEFAULT_PARAMS_SELECTOR,
                   help=f"label selector a ConfigMap needs to be a param, as on the server "
                        f"(default {DEFAULT_PARAMS_SELECTOR})")
    p.add_argument("-o", "--output", choices=report.FORMATS, default="table", help="output format (default table)")
    p.add_argument("--fail-only", action="store_true",
                   help="show only unmet expectations (ad-hoc: only fail and error rows)")
    return p


def _stdin_uses(args: argparse.Namespace) -> int:
    paths = [*args.suites, *args.policy, *args.resource, *args.configmap, *args.namespace_file, *args.old_resource,
             *args.reference]
    return sum(1 for p in paths if str(p) == "-")


def main(argv: list[str] | None = None) -> int:
    """Run ``tollgate test``; returns the exit status (:data:`EXIT_OK`, :data:`EXIT_FAILED`, :data:`EXIT_USAGE`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.suites and (args.policy or args.resource):
        return _usage("give TestSuite paths, or --policy and --resource, not both")
    if not args.suites and not (args.policy and args.resource):
        return _usage("give TestSuite files or directories, or --policy and --resource")
    if _stdin_uses(args) > 1:
        return _usage("standard input (-) can be read only once")
    warnings: list[str] = []
    try:
        if args.suites:
            rows = []
            for suite in find_suites(args.suites):
                outcome = run_suite(suite, params_selector=args.params_selector)
                rows += outcome.rows
                warnings += outcome.warnings
        else:
            rows, warnings = run_adhoc(
                policies=args.policy, resources=args.resource, configmaps=args.configmap,
                namespaces=args.namespace_file, old_resources=args.old_resource, operation=args.operation,
                user_info={"username": args.username, "groups": [g for g in args.groups.split(",") if g]},
                params_selector=args.params_selector, references=args.reference)
    except (InputError, ValueError) as e:
        print(f"tollgate test: {e}", file=sys.stderr)
        return EXIT_USAGE
    for w in dict.fromkeys(warnings):
        print(f"tollgate test: warning: {w}", file=sys.stderr)
    bad = [r for r in rows if not r.ok]
    sys.stdout.write(report.render(bad if args.fail_only else rows, args.output))
    sys.stdout.flush()
    _summary(rows, bad, suites=bool(args.suites))
    return EXIT_FAILED if bad else EXIT_OK


def _usage(message: str) -> int:
    print(f"tollgate test: {message} (see tollgate test --help)", file=sys.stderr)
    return EXIT_USAGE


def _summary(rows: list[Row], bad: list[Row], *, suites: bool) -> None:
    if not suites:
        if bad:
            print(f"{len(bad)} of {len(rows)} row(s) fail or error", file=sys.stderr)
        return
    for r in bad:
        where = f"{r.kind}/{r.namespace}/{r.name}" if r.namespace else f"{r.kind}/{r.name}"
        print(f"MISMATCH {r.suite}: {r.policy} on {where} ({r.operation}): {r.mismatch}", file=sys.stderr)
    print(f"{len(bad)} of {len(rows)} expectation(s) failed" if bad else f"all {len(rows)} expectations met",
          file=sys.stderr)


# ---------------------------------------------------------------- compatibility helpers


def build_request(obj: dict[str, Any], *, operation: str, username: str, groups: list[str],
                  old_object: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`webhook.files.testsuite.build_request` with ``userInfo`` given as username and groups."""
    return _build_request(obj, operation=operation, user_info={"username": username, "groups": groups},
                          old_object=old_object)


def evaluate_pair(policy: CompiledPolicy, request: dict[str, Any], lookups: InMemoryLookups) -> tuple[str, str]:
    """``(result, message)`` of one policy on one request on its own (no chain): validations, then mutations."""
    results = []
    if policy.validations or policy.audit_annotations:
        results.extend(evaluate_validating(request, [policy], lookups).results)
    if policy.mutations:
        mut = evaluate_mutating(request, [policy], lookups)
        for r in mut.results:
            if str(r.result) == "pass" and mut.patch:
                results.append(type(r)(r.policy, Result.PASS, "patch: " + json.dumps(mut.patch, sort_keys=True)))
            else:
                results.append(r)
    if not results:
        return "skip", "policy does not match the resource"
    order = {"error": 0, "fail": 1, "pass": 2, "skip": 3}
    worst = min(results, key=lambda r: order.get(str(r.result), 0))
    return str(worst.result), "; ".join(r.message for r in results if r.message)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
