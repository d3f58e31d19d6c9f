"""``tollgate test``: evaluate policies against resource files, offline, with the server's engine.

Two ways to call it::

    tollgate test [PATH ...]          # TestSuite files, or directories searched for them; - is stdin
    tollgate test -p POLICY -r RESOURCE [--configmap F] [--namespace-file F] [--old-resource F] [--reference F]
                  [--operation UPDATE] [--username U] [--groups a,b]

Argument parsing and exit status only; evaluation is :mod:`webhook.files.testsuite` (over
:mod:`webhook.files.chain`),
output :mod:`webhook.cli.report`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook.cli import report
from webhook.cli.command import ExitStatus, Subparsers, add_command
from webhook.files.gator import run_gator_suite
from webhook.files.kyverno_test import run_kyverno_test
from webhook.files.requests import DEFAULT_USER, OPERATIONS
from webhook.files.testsuite import Row, find_suites, run_adhoc, run_suite
from webhook.files.yamlio import InputError
from webhook.formats.gatekeeper.suite import is_gator_suite
from webhook.formats.kyverno.testfile import is_kyverno_test
from webhook.server.settings import DEFAULTS

_PARAMS_SELECTOR = DEFAULTS.params_selector

_EPILOG = """\
Results: pass | fail | warn | skip | error. warn: a validation failed in a policy whose
validationActions has Warn and not Deny (admitted with a warning). skip: the policy does not
match, or a matchCondition is false. error: the policy could not be evaluated (a CEL runtime or
mutation error, missing params under parameterNotFoundAction: Deny, a policy that does not compile),
which the server answers per its failurePolicy.
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
  subResource: ephemeralcontainers # optional default request.subResource
  userInfo: {username: alice, groups: [dev]}   # optional default
  results:
  - {policy: NAME, resource: {kind: Pod, namespace: default, name: good}, result: pass}
  - {policy: NAME, resource: {kind: Pod, name: bad}, result: fail, messageContains: "..."}
  - {policy: NAME, resource: {kind: Pod, name: web}, result: pass, operation: UPDATE,
     userInfo: {username: bob}, patchedResource: web-mutated.yaml}

Kyverno's CLI tests (cli.kyverno.io/v1alpha1 Test, kyverno-test.yaml) run unchanged: a file, or a
directory (its hidden .kyverno-test directories are searched too), even mixed with TestSuites. Read:
policies, resources, variables (Values: request.operation, namespaces, namespaceSelector labels),
userinfo, context (spec.resources, read by resource.Get/List), results (pass|fail|skip|error per
resource, name or namespace/name; patchedResources). A violated Warn-only validation is "fail", as
Kyverno reports it. What Tollgate cannot run (payloads, targetResources, exceptions, Context images,
generated resources) is one line and exit status 2. See docs/writing-policies.md.

Output: --output table|json|yaml|junit. json/yaml rows: {"policy", "kind", "namespace", "name",
"result", "message"}, plus for suites {"suite", "operation", "expected", "ok", "mismatch"} and "subResource" when set.

--explain: after the table, a tree per row: why the policy matched or not (each resource rule, the
selectors and the labels they saw), each matchCondition, variable and validation with its value and
message, and for a false or failed expression the values of its top-level operands. json/yaml rows
carry it as "explanation", junit test cases in <system-out>.

Input: YAML or JSON, multi-document; a List (kubectl get -o yaml|json) stands for its items;
- is standard input, and <(kubectl get pods -o yaml) works too.

Exit status: 0 when every expectation holds (ad-hoc: no fail or error row), 1 on any mismatch
(ad-hoc: any fail or error row), 2 for usage errors and unusable input (one line on stderr naming
the file, document, line and YAML path; never a traceback). An unusable suite among several is
named and the others still run: their rows are printed, and the exit status is 2.
Example: tollgate test policies/examples/allowed-registries/test.yaml
"""


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate test``."""
    p = add_command(
        sub, "test", run, help="evaluate policies against resource files offline",
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
    p.add_argument("--username", default=DEFAULT_USER["username"],
                   help=f"request.userInfo.username (default {DEFAULT_USER['username']})")
    p.add_argument("--groups", default=",".join(DEFAULT_USER["groups"]),
                   help=f"comma-separated request.userInfo.groups (default {','.join(DEFAULT_USER['groups'])})")
    p.add_argument("--params-selector", default=_PARAMS_SELECTOR,
                   help=f"label selector a ConfigMap needs to be a param, as on the server "
                        f"(default {_PARAMS_SELECTOR})")
    p.add_argument("-o", "--output", choices=report.FORMATS, default="table", help="output format (default table)")
    p.add_argument("--fail-only", action="store_true",
                   help="show only unmet expectations (ad-hoc: only fail and error rows)")
    p.add_argument("--explain", action="store_true",
                   help="explain each row: why the policy matched, every value it computed, why it failed")


def _stdin_uses(args: argparse.Namespace) -> int:
    paths = [*args.suites, *args.policy, *args.resource, *args.configmap, *args.namespace_file, *args.old_resource,
             *args.reference]
    return sum(1 for p in paths if str(p) == "-")


def run(args: argparse.Namespace) -> int:
    """Run ``tollgate test``; returns the exit status (0, 1 on an unmet expectation, 2 on unusable input)."""
    if args.suites and (args.policy or args.resource):
        return _usage("give TestSuite paths, or --policy and --resource, not both")
    if not args.suites and not (args.policy and args.resource):
        return _usage("give TestSuite files or directories, or --policy and --resource")
    if _stdin_uses(args) > 1:
        return _usage("standard input (-) can be read only once")
    warnings: list[str] = []
    errors: list[str] = []
    rows: list[Row] = []
    if args.suites:
        search = find_suites(args.suites)
        errors += search.errors
        for suite in search.suites:
            run_one = (run_kyverno_test if is_kyverno_test(suite.obj)
                       else run_gator_suite if is_gator_suite(suite.obj) else run_suite)
            try:
                outcome = run_one(suite, params_selector=args.params_selector, explain=args.explain)
            except (InputError, ValueError) as e:
                errors.append(str(e))  # this suite is unusable; the others still run
                continue
            rows += outcome.rows
            warnings += outcome.warnings
    else:
        try:
            rows, warnings = run_adhoc(
                policies=args.policy, resources=args.resource, configmaps=args.configmap,
                namespaces=args.namespace_file, old_resources=args.old_resource, operation=args.operation,
                user_info={"username": args.username, "groups": [g for g in args.groups.split(",") if g]},
                params_selector=args.params_selector, references=args.reference, explain=args.explain)
        except (InputError, ValueError) as e:
            print(f"tollgate test: {e}", file=sys.stderr)
            return ExitStatus.USAGE
    for w in dict.fromkeys(warnings):
        print(f"tollgate test: warning: {w}", file=sys.stderr)
    bad = [r for r in rows if not r.ok]
    if rows or not errors:
        shown = bad if args.fail_only else rows
        sys.stdout.write(report.render(shown, args.output))
        if args.explain and args.output == "table":
            sys.stdout.write(report.explanations(shown))
        sys.stdout.flush()
        _summary(rows, bad, suites=bool(args.suites))
    for line in errors:
        print(f"tollgate test: {line}", file=sys.stderr)
    if errors:
        if len(errors) > 1 or rows:
            print(f"tollgate test: {len(errors)} unusable suite(s) or path(s); the others' results are above",
                  file=sys.stderr)
        return ExitStatus.USAGE
    return ExitStatus.FINDINGS if bad else ExitStatus.OK


def _usage(message: str) -> int:
    print(f"tollgate test: {message} (see tollgate test --help)", file=sys.stderr)
    return ExitStatus.USAGE


def _summary(rows: list[Row], bad: list[Row], *, suites: bool) -> None:
    if not suites:
        if bad:
            print(f"{len(bad)} of {len(rows)} row(s) fail or error", file=sys.stderr)
        return
    for r in bad:
        where = f"{r.kind}/{r.namespace}/{r.name}" if r.namespace else f"{r.kind}/{r.name}"
        print(f"MISMATCH {r.suite}: {r.policy} on {where} ({r.request}): {r.mismatch}", file=sys.stderr)
    print(f"{len(bad)} of {len(rows)} expectation(s) failed" if bad else f"all {len(rows)} expectations met",
          file=sys.stderr)
