"""``tollgate test``: evaluate policies against resource files, offline, with the server's engine.

Two ways to call it::

    tollgate test --policy policies/examples/allowed-registries/policy.yaml \\
        --resource pods.yaml --configmap configmap.yaml [--namespace-file ns.yaml] \\
        [--operation CREATE] [--username alice] [--groups dev,ops] [--output table|json]

    tollgate test policies/examples/allowed-registries/test.yaml   # a TestSuite

Every (policy, resource) pair becomes a row ``{"policy", "kind", "namespace",
"name", "result", "message"}`` with result ``pass`` | ``fail`` | ``skip`` |
``error`` (``skip``: the policy does not match the resource, or a
matchCondition is false). A TestSuite (``kind: TestSuite``) lists the files
(relative to itself) and the expected results; the exit status is 1 when any
expectation is not met, 2 for unusable input (reported with file and YAML
path, never a traceback), 0 otherwise.

The AdmissionRequest for each resource is built the same way every time
(``build_request``) and decided by the same ``webhook.policy`` engine the
server uses.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.policy import (
    InMemoryLookups,
    PolicyIndex,
    evaluate_mutating,
    evaluate_validating,
)
from webhook.policy.compiler import CompiledPolicy

OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
_IRREGULAR = {"Ingress": "ingresses", "NetworkPolicy": "networkpolicies", "Endpoints": "endpoints"}


class InputError(Exception):
    """Unusable input: the message names the file and the YAML path."""


@dataclass(frozen=True, slots=True)
class Row:
    """One result row (the JSON output's object)."""

    policy: str
    kind: str
    namespace: str
    name: str
    result: str
    message: str

    def as_dict(self) -> dict[str, str]:
        """``{"policy", "kind", "namespace", "name", "result", "message"}``."""
        return {"policy": self.policy, "kind": self.kind, "namespace": self.namespace, "name": self.name,
                "result": self.result, "message": self.message}


def plural(kind: str) -> str:
    """The resource name of a kind (``Pod`` → ``pods``, ``NetworkPolicy`` → ``networkpolicies``)."""
    if kind in _IRREGULAR:
        return _IRREGULAR[kind]
    low = kind.lower()
    if low.endswith("s"):
        return low + "es"
    if low.endswith("y"):
        return low[:-1] + "ies"
    return low + "s"


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """Every mapping document of a (multi-document) YAML file.

    Raises:
        InputError: unreadable file, YAML syntax error (with line), or a document that is not a mapping.
    """
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise InputError(f"{path}: invalid YAML{where}: {getattr(e, 'problem', e)}") from None
    out = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(f"{path}: document {i}: must be a mapping, got {type(doc).__name__}")
        out.append(doc)
    return out


def build_request(obj: dict[str, Any], *, operation: str, username: str, groups: list[str],
                  old_object: dict[str, Any] | None = None) -> dict[str, Any]:
    """An AdmissionRequest for ``obj`` as the API server would send it (``object`` null on DELETE)."""
    api_version = obj.get("apiVersion", "v1")
    group, _, version = api_version.rpartition("/")
    kind = obj.get("kind", "")
    meta = obj.get("metadata") or {}
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": plural(kind)}
    namespaced = kind not in ("Namespace", "ClusterAdmissionPolicy", "Node", "ClusterRole", "ClusterRoleBinding")
    request = {
        "uid": str(uuid.uuid4()),
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": meta.get("name", ""),
        "operation": operation,
        "userInfo": {"username": username, "groups": groups},
        "object": None if operation == "DELETE" else obj,
        "oldObject": obj if operation == "DELETE" else old_object,
        "dryRun": False,
        "options": None,
    }
    if namespaced:
        request["namespace"] = meta.get("namespace") or "default"
    return request


def evaluate_pair(policy: CompiledPolicy, request: dict[str, Any], lookups: InMemoryLookups) -> tuple[str, str]:
    """``(result, message)`` of one policy on one request, validations first, then mutations."""
    results = []
    if policy.validations or policy.audit_annotations:
        out = evaluate_validating(request, [policy], lookups)
        results.extend(out.results)
    if policy.mutations:
        mut = evaluate_mutating(request, [policy], lookups)
        for r in mut.results:
            if r.result == "pass" and mut.patch:
                results.append(type(r)(r.policy, "pass", "patch: " + json.dumps(mut.patch, sort_keys=True)))
            else:
                results.append(r)
    if not results:
        return "skip", "policy does not match the resource"
    order = {"error": 0, "fail": 1, "pass": 2, "skip": 3}
    worst = min(results, key=lambda r: order[r.result])
    messages = "; ".join(r.message for r in results if r.message)
    return worst.result, messages


def _docs_of(paths: list[Path], kinds: set[str] | None = None) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        for f in files:
            out.extend(d for d in load_yaml_documents(f) if kinds is None or d.get("kind") in kinds)
    return out


def run(*, policies: list[Path], resources: list[Path], configmaps: list[Path], namespaces: list[Path],
        operation: str, username: str, groups: list[str]) -> list[Row]:
    """Evaluate every policy against every resource.

    Raises:
        InputError: unreadable files or a policy that is not Ready (with its status message).
    """
    index = PolicyIndex()
    compiled: list[CompiledPolicy] = []
    policy_docs = _docs_of(policies, {"ClusterAdmissionPolicy", "AdmissionPolicy"})
    if not policy_docs:
        raise InputError(f"no ClusterAdmissionPolicy or AdmissionPolicy found in {', '.join(map(str, policies))}")
    for doc in policy_docs:
        state = index.upsert(doc)
        if state.result.policy is None:
            raise InputError(f"policy {state.key} is not Ready ({state.result.condition['reason']}): "
                             f"{state.result.condition['message']}")
        compiled.append(state.result.policy)
    compiled.sort(key=lambda p: p.name)
    lookups = InMemoryLookups(namespaces=_docs_of(namespaces, {"Namespace"}),
                              configmaps=_docs_of(configmaps, {"ConfigMap"}))
    rows = []
    for obj in _docs_of(resources):
        if obj.get("kind") in ("TestSuite", "ClusterAdmissionPolicy", "AdmissionPolicy"):
            continue
        meta = obj.get("metadata") or {}
        request = build_request(obj, operation=operation, username=username, groups=groups)
        for policy in compiled:
            result, message = evaluate_pair(policy, request, lookups)
            rows.append(Row(policy.name, obj.get("kind", ""), request.get("namespace", ""), meta.get("name", ""),
                            result, message))
    return rows


def _list_field(suite: dict[str, Any], field: str, path: Path) -> list[Path]:
    value = suite.get(field) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{path}: {field}: must be a list of file paths")
    return [(path.parent / v) for v in value]


def run_suite(path: Path) -> tuple[list[Row], list[str]]:
    """Run a TestSuite file; returns the rows and the list of unmet expectations."""
    docs = load_yaml_documents(path)
    if len(docs) != 1 or docs[0].get("kind") != "TestSuite":
        raise InputError(f"{path}: expected one document of kind TestSuite")
    suite = docs[0]
    user = suite.get("userInfo") or {}
    operation = suite.get("operation", "CREATE")
    if operation not in OPERATIONS:
        raise InputError(f"{path}: operation: must be one of {', '.join(OPERATIONS)}")
    rows = run(policies=_list_field(suite, "policies", path), resources=_list_field(suite, "resources", path),
               configmaps=_list_field(suite, "configMaps", path), namespaces=_list_field(suite, "namespaces", path),
               operation=operation, username=str(user.get("username", "tollgate-test")),
               groups=list(user.get("groups") or ["system:authenticated"]))
    by_key = {(r.policy, r.kind, r.namespace, r.name): r for r in rows}
    expected = suite.get("results")
    if not isinstance(expected, list) or not expected:
        raise InputError(f"{path}: results: must be a non-empty list")
    failures = []
    for i, exp in enumerate(expected):
        where = f"{path}: results[{i}]"
        if not isinstance(exp, dict) or not isinstance(exp.get("resource"), dict):
            raise InputError(f"{where}: needs policy, resource {{kind, namespace, name}} and result")
        res = exp["resource"]
        kind, name = res.get("kind", ""), res.get("name", "")
        ns = res.get("namespace", "default" if kind not in ("Namespace",) else "")
        key = (exp.get("policy"), kind, ns, name)
        want = exp.get("result")
        if want not in ("pass", "fail", "skip", "error"):
            raise InputError(f"{where}.result: must be pass, fail, skip or error")
        row = by_key.get(key)
        if row is None:
            failures.append(f"{where}: no such (policy, resource): {key}")
            continue
        if row.result != want:
            failures.append(f"{where}: {exp.get('policy')} on {kind}/{ns}/{name}: expected {want}, got "
                            f"{row.result} ({row.message})")
        elif "messageContains" in exp and str(exp["messageContains"]) not in row.message:
            failures.append(f"{where}: message {row.message!r} does not contain {exp['messageContains']!r}")
    return rows, failures


def _print(rows: list[Row], output: str) -> None:
    if output == "json":
        print(json.dumps([r.as_dict() for r in rows], indent=2))
        return
    headers = ("POLICY", "KIND", "NAMESPACE", "NAME", "RESULT", "MESSAGE")
    table = [headers] + [(r.policy, r.kind, r.namespace, r.name, r.result, r.message) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    for row in table:
        print("  ".join(row[i].ljust(widths[i]) for i in range(5)) + "  " + row[5])


_EPILOG = """\
Rows: policy, kind, namespace, name, result (pass|fail|skip|error), message.
--output json prints [{"policy", "kind", "namespace", "name", "result", "message"}, ...].

TestSuite file (paths relative to the suite file):
  apiVersion: tollgate.dev/v1alpha1
  kind: TestSuite
  policies: [policy.yaml]          # files or directories
  resources: [resources.yaml]      # multi-document YAML
  configMaps: [configmap.yaml]     # optional, stand in for the ConfigMap cache
  namespaces: [namespaces.yaml]    # optional, stand in for the Namespace cache
  operation: CREATE                # optional
  userInfo: {username: alice, groups: [dev]}   # optional
  results:
  - {policy: NAME, resource: {kind: Pod, namespace: default, name: good}, result: pass}
  - {policy: NAME, resource: {kind: Pod, name: bad}, result: fail, messageContains: "..."}

Exit status: 0 when every TestSuite expectation holds, 1 on any mismatch, 2 for unusable input
(reported with file and YAML location, never a traceback).
Example: tollgate test policies/examples/allowed-registries/test.yaml
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``tollgate test`` argument parser."""
    p = argparse.ArgumentParser(
        prog="tollgate test",
        description="Evaluate Tollgate policies against resource files offline, with the same engine as the "
                    "server. Give TestSuite files, or --policy and --resource files.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    p.add_argument("suites", nargs="*", type=Path, help="TestSuite YAML files (kind: TestSuite)")
    p.add_argument("-p", "--policy", action="append", type=Path, default=[], help="policy file or directory")
    p.add_argument("-r", "--resource", action="append", type=Path, default=[],
                   help="resource file (multi-document YAML) or directory")
    p.add_argument("--configmap", action="append", type=Path, default=[], help="ConfigMaps standing in for the cache")
    p.add_argument("--namespace-file", action="append", type=Path, default=[],
                   help="Namespaces standing in for the cache")
    p.add_argument("--operation", choices=OPERATIONS, default="CREATE", help="admission operation (default CREATE)")
    p.add_argument("--username", default="tollgate-test", help="request.userInfo.username")
    p.add_argument("--groups", default="system:authenticated", help="comma-separated request.userInfo.groups")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``tollgate test``; returns the exit status."""
    args = build_parser().parse_args(argv)
    if not args.suites and not (args.policy and args.resource):
        print("tollgate test: give TestSuite files, or --policy and --resource", file=sys.stderr)
        return 2
    try:
        if args.suites:
            rows: list[Row] = []
            failures: list[str] = []
            for suite in args.suites:
                r, f = run_suite(suite)
                rows += r
                failures += f
            _print(rows, args.output)
            for f in failures:
                print(f"MISMATCH {f}", file=sys.stderr)
            print(f"{len(failures)} expectation(s) failed" if failures else "all expectations met", file=sys.stderr)
            return 1 if failures else 0
        rows = run(policies=args.policy, resources=args.resource, configmaps=args.configmap,
                   namespaces=args.namespace_file, operation=args.operation, username=args.username,
                   groups=[g for g in args.groups.split(",") if g])
    except InputError as e:
        print(f"tollgate test: {e}", file=sys.stderr)
        return 2
    _print(rows, args.output)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
