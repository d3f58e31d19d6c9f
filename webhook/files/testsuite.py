"""Offline evaluation for ``tollgate test``: requests built from files, the admission chain, TestSuites.

Each resource becomes the AdmissionRequest the API server would send
(:func:`build_request`); it then goes through the chain as kube-apiserver
runs it: every matching mutating policy first (namespaced AdmissionPolicies,
then ClusterAdmissionPolicies, each group in name order, each on the result of
the previous), then every validating policy on the mutated object. The engine
is the server's (:mod:`webhook.policy`); only the caches are replaced by files.

Results per (policy, resource): ``pass``, ``fail`` (a violated validation),
``warn`` (a violated validation of a policy whose ``validationActions`` has
``Warn`` and not ``Deny``: the request would be admitted with a warning),
``skip`` (no match, or a false matchCondition) and ``error`` (the policy could
not be evaluated: a CEL runtime or mutation error, missing params under
``parameterNotFoundAction: Deny``, a policy that does not compile; the server
answers it per its failurePolicy).

Caches, as on a cluster: a ConfigMap is a param only when the params selector
(``--params-selector``, the server's) selects it; others are ignored with a
warning. ``namespaceObject`` of a request whose
namespace no Namespace file names is synthesized with the name only, no
labels (as Kyverno's CLI does).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch

from webhook.files.checks import schema_problems
from webhook.files.inputs import (
    LoadedPolicy,
    index_resources,
    load_kind,
    load_policies,
    load_resources,
    reference_objects,
    select_params,
)
from webhook.files.requests import DEFAULT_USER, build_request, describe_key, old_object_for, resource_key
from webhook.files.yamlio import STDIN, Document, InputError, load_file, yaml_files
from webhook.policy import CompiledPolicy, InMemoryLookups, Result, evaluate_mutating, evaluate_validating
from webhook.policy.explain import PolicyTrace, explain_mutating, explain_validating
from webhook.policy.model import Reference
from webhook.policy.resources import resource_for_kind

RESULTS = ("pass", "fail", "warn", "skip", "error")


@dataclass(slots=True)
class Row:
    """One result row.

    Ad-hoc rows carry the first six fields; TestSuite rows also the suite file,
    the operation and subresource, the expected result and ``mismatch`` (``""``
    when the expectation holds, else why not). With ``--explain``, ``explanation`` holds the
    policy's trace on the resource: one per endpoint that evaluated it (``mutate``, then ``validate``).
    """

    policy: str
    kind: str
    namespace: str
    name: str
    result: str
    message: str
    suite: str | None = None
    operation: str = "CREATE"
    expected: str | None = None
    mismatch: str = ""
    sub_resource: str = ""
    explanation: list[PolicyTrace] | None = None

    @property
    def request(self) -> str:
        """The request in reports: ``UPDATE``, or ``UPDATE ephemeralcontainers`` for a subresource."""
        return f"{self.operation} {self.sub_resource}" if self.sub_resource else self.operation

    @property
    def ok(self) -> bool:
        """Whether a TestSuite expectation holds (ad-hoc: the row is neither ``fail`` nor ``error``)."""
        if self.expected is None:
            return self.result not in ("fail", "error")
        return not self.mismatch

    def as_dict(self) -> dict[str, Any]:
        """The JSON/YAML object of the row.

        ``{"policy", "kind", "namespace", "name", "result", "message"}``, plus for a
        suite row ``"suite", "operation", "expected", "ok", "mismatch"`` and, when
        the test names one, ``"subResource"``; with ``--explain`` ``"explanation"``: a list of
        :meth:`PolicyTrace.as_dict`.
        """
        out: dict[str, Any] = {"policy": self.policy, "kind": self.kind, "namespace": self.namespace,
                               "name": self.name, "result": self.result, "message": self.message}
        if self.expected is not None:
            out.update(suite=self.suite, operation=self.operation, expected=self.expected, ok=self.ok,
                       mismatch=self.mismatch)
            if self.sub_resource:
                out["subResource"] = self.sub_resource
        if self.explanation is not None:
            out["explanation"] = [t.as_dict() for t in self.explanation]
        return out


@dataclass(slots=True)
class PolicyOutcome:
    """One policy's outcome on one request through the chain: ``result`` (see module doc) and ``message``."""

    result: str
    message: str


@dataclass(slots=True)
class Evaluation:
    """A request through the chain: each policy's outcome and the object as the mutating policies left it."""

    outcomes: dict[str, PolicyOutcome]
    patched: dict[str, Any] | None
    #: With ``explain``: each policy's traces (its mutating step, then its validating one).
    explanations: dict[str, list[PolicyTrace]] = field(default_factory=dict)


class AdmissionChain:
    """Runs requests through the admission chain (mutating, then validating policies) over in-memory caches.

    Args:
        policies: compiled policies (any order; the chain orders them).
        namespaces: Namespace objects standing in for the Namespace cache.
        configmaps: ConfigMaps standing in for the params cache (already selected).
        objects: reference → its objects, standing in for the caches of ``spec.references``
            (see :func:`reference_objects`).
        explain: also explain each policy's step (:mod:`webhook.policy.explain`), on the request it saw.
    """

    def __init__(self, policies: Sequence[LoadedPolicy], *, namespaces: Iterable[dict[str, Any]] = (),
                 configmaps: Iterable[dict[str, Any]] = (),
                 objects: Mapping[Reference, list[dict[str, Any]]] | None = None, explain: bool = False) -> None:
        # The order of the mutating chain: namespaced policies first, the platform's last (policy-api.md).
        self.policies = sorted(policies, key=lambda p: (not p.namespaced, p.name))
        self.namespaces = list(namespaces)
        self.configmaps = list(configmaps)
        self.objects = dict(objects or {})
        self.explain = explain

    def _lookups(self, request: dict[str, Any]) -> InMemoryLookups:
        namespaces = self.namespaces
        ns = request.get("namespace")
        if ns and not any((n.get("metadata") or {}).get("name") == ns for n in namespaces):
            namespaces = [*namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}]
        return InMemoryLookups(namespaces=namespaces, configmaps=self.configmaps, objects=self.objects)

    def evaluate(self, request: dict[str, Any]) -> Evaluation:
        """Mutations in chain order, then validations on the mutated object; an outcome for every policy."""
        lookups = self._lookups(request)
        found_by_policy: dict[str, list[PolicyOutcome]] = {p.name: [] for p in self.policies}
        explained: dict[str, list[PolicyTrace]] = {p.name: [] for p in self.policies} if self.explain else {}
        current = request.get("object")
        # The API server's order: tenants' AdmissionPolicies, then ClusterAdmissionPolicies, each in name order.
        chain = sorted(self.policies, key=lambda p: (not p.namespaced, p.compiled.spec.name,
                                                    p.compiled.spec.namespace or ""))
        for policy in chain:
            if not policy.compiled.mutating or not isinstance(current, dict):
                continue
            step = evaluate_mutating({**request, "object": current}, [policy.compiled], lookups)
            if self.explain:
                explained[policy.name] += explain_mutating({**request, "object": current}, [policy.compiled],
                                                           lookups).policies
            found = found_by_policy[policy.name]
            for r in step.results:
                if str(r.result) == "pass" and step.patch:
                    found.append(PolicyOutcome("pass", "patch: " + json.dumps(step.patch, sort_keys=True)))
                else:
                    found.append(PolicyOutcome(str(r.result), r.message))
            if step.patch:
                current = jsonpatch.apply_patch(current, step.patch)
        validated = request if current is request.get("object") else {**request, "object": current}
        for policy in self.policies:
            if not policy.compiled.validating:
                continue
            outcome = evaluate_validating(validated, [policy.compiled], lookups)
            if self.explain:
                explained[policy.name] += explain_validating(validated, [policy.compiled], lookups).policies
            for r in outcome.results:
                result = str(r.result)
                if result == "fail":
                    actions = getattr(r, "actions", None) or policy.actions
                    if "Deny" not in actions and "Warn" in actions:
                        result = "warn"
                found_by_policy[policy.name].append(PolicyOutcome(result, r.message))
        out = {}
        for name, found in found_by_policy.items():
            if not found:
                out[name] = PolicyOutcome("skip", "policy does not match the resource")
                continue
            worst = Result.worst(v.result for v in found)
            out[name] = PolicyOutcome(str(worst), "; ".join(v.message for v in found if v.message))
        return Evaluation(out, current if isinstance(current, dict) else None, explained)


def evaluate_pair(policy: CompiledPolicy, request: dict[str, Any], lookups: InMemoryLookups) -> tuple[str, str]:
    """``(result, message)`` of one policy on one request on its own (no chain): validations, then mutations.

    The result is the worst (:meth:`Result.worst`) of the policy's results; a
    passing mutation's message is its patch.
    """
    results = []
    if policy.validations or policy.audit_annotations:
        results.extend(evaluate_validating(request, [policy], lookups).results)
    if policy.mutations:
        mut = evaluate_mutating(request, [policy], lookups)
        for r in mut.results:
            if r.result == Result.PASS and mut.patch:
                results.append(type(r)(r.policy, Result.PASS, "patch: " + json.dumps(mut.patch, sort_keys=True)))
            else:
                results.append(r)
    if not results:
        return "skip", "policy does not match the resource"
    worst = Result.worst(r.result for r in results)
    return str(worst), "; ".join(r.message for r in results if r.message)


# ---------------------------------------------------------------- ad-hoc mode


def run_adhoc(*, policies: list[Path], resources: list[Path], configmaps: list[Path], namespaces: list[Path],
              old_resources: list[Path], operation: str, user_info: dict[str, Any], params_selector: str,
              references: Sequence[Path] = (), explain: bool = False) -> tuple[list[Row], list[str]]:
    """Every policy against every resource (``tollgate test -p ... -r ...``); with ``explain``, rows carry traces.

    Returns:
        ``(rows, warnings)``: rows in resource order, policies in name order.

    Raises:
        InputError: unusable input (one line naming file and location).
    """
    loaded = load_policies(policies)
    params, warnings = select_params(load_kind(configmaps, "ConfigMap"), params_selector)
    chain = AdmissionChain(loaded, namespaces=[d.obj for d in load_kind(namespaces, "Namespace")], configmaps=params,
                          objects=reference_objects(load_resources(references)), explain=explain)
    olds = index_resources(load_resources(old_resources))
    rows = []
    names = sorted(p.name for p in loaded)
    for doc in load_resources(resources):
        key = resource_key(doc.obj)
        old = old_object_for(key, olds, operation, doc.where())
        evaluation = chain.evaluate(build_request(doc.obj, operation=operation, user_info=user_info,
                                                      old_object=old))
        for name in names:
            outcome = evaluation.outcomes[name]
            rows.append(Row(name, key[0], key[1], key[2], outcome.result, outcome.message, operation=operation,
                            explanation=evaluation.explanations.get(name) if explain else None))
    return rows, warnings


# ---------------------------------------------------------------- TestSuites

_SUITE_MARK = re.compile(r"^kind:\s*[\"']?TestSuite[\"']?\s*$", re.MULTILINE)


@dataclass(slots=True)
class SuiteSearch:
    """What :func:`find_suites` found: the suites, and one line for each path or file that is unusable."""

    suites: list[Document] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def find_suites(paths: Iterable[Path]) -> SuiteSearch:
    """The TestSuite documents of the given files; directories are searched recursively (like ``kyverno test DIR``).

    A file given by name must hold TestSuites only; in a directory, files without
    a ``kind: TestSuite`` line are skipped unparsed (resources, policies). An
    unusable path or file is reported and the search goes on, so one broken
    suite never hides the others.

    Returns:
        The suites in path and file order, and an error line (file, line, document, YAML path) for
        a missing path, a path without suites, a file that does not parse, or a named file that is
        not a TestSuite.
    """
    out = SuiteSearch()
    for root in paths:
        is_dir = str(root) != STDIN and root.is_dir()
        found = 0
        try:
            files = yaml_files(root)
        except InputError as e:
            out.errors.append(str(e))
            continue
        for path in files:
            try:
                if is_dir and not _SUITE_MARK.search(_read(path)):
                    continue
                docs = load_file(path)
                for doc in docs:
                    if doc.kind != "TestSuite":
                        raise InputError(doc.problem(("kind",), f"expected TestSuite, got {doc.kind or 'nothing'}"))
            except InputError as e:
                out.errors.append(str(e))
                found += 1  # a suite, though a broken one
                continue
            out.suites += docs
            found += len(docs)
        if not found:
            out.errors.append(f"{root}: no TestSuite found (kind: TestSuite)")
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None


def _base_dir(suite: Document) -> Path:
    return Path.cwd() if suite.source == STDIN else Path(suite.source).parent


def _files(suite: Document, field_name: str) -> list[Path]:
    base = _base_dir(suite)
    out = []
    for i, name in enumerate(suite.obj.get(field_name) or []):
        path = base / name
        if not path.exists():
            raise InputError(suite.problem((field_name, i), f"{path}: no such file or directory"))
        out.append(path)
    return out


@dataclass(slots=True)
class SuiteRun:
    """The outcome of one TestSuite: rows (one per expectation) and warnings."""

    suite: Document
    rows: list[Row] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[Row]:
        """Rows whose expectation does not hold."""
        return [r for r in self.rows if not r.ok]


def run_suite(suite: Document, *, params_selector: str, explain: bool = False) -> SuiteRun:
    """Run one TestSuite document: every ``results`` entry becomes a row with ``mismatch`` set when it fails.

    With ``explain``, each row carries its policy's trace on its resource.

    Raises:
        InputError: the suite violates its schema, or names a policy, resource or file that is not there.
    """
    problems = schema_problems(suite)
    if problems:
        raise InputError(problems[0])
    spec = suite.obj
    out = SuiteRun(suite)
    loaded = load_policies(_files(suite, "policies"))
    params, out.warnings = select_params(load_kind(_files(suite, "configMaps"), "ConfigMap"), params_selector)
    chain = AdmissionChain(loaded, namespaces=[d.obj for d in load_kind(_files(suite, "namespaces"), "Namespace")],
                          configmaps=params, objects=reference_objects(load_resources(_files(suite, "references"))),
                          explain=explain)
    resources = index_resources(load_resources(_files(suite, "resources")))
    olds = index_resources(load_resources(_files(suite, "oldResources")))
    names = sorted(p.name for p in loaded)
    cache: dict[str, Evaluation] = {}
    for i, exp in enumerate(spec["results"]):
        where = suite.where(("results", i))
        if exp["policy"] not in names:
            raise InputError(f"{where}: results[{i}].policy: no policy {exp['policy']} in the suite's policies "
                             f"(have: {', '.join(names)})")
        res = exp["resource"]
        kind = res["kind"]
        key = (kind, res.get("namespace") or "default" if resource_for_kind(kind).namespaced else "", res["name"])
        doc = resources.get(key)
        if doc is None:
            raise InputError(f"{where}: results[{i}].resource: no {describe_key(key)} in the suite's resources")
        operation = exp.get("operation") or spec.get("operation") or "CREATE"
        user_info = {**DEFAULT_USER, **(exp.get("userInfo") or spec.get("userInfo") or {})}
        sub_resource = exp.get("subResource", spec.get("subResource", ""))
        memo = json.dumps([key, operation, user_info, sub_resource], sort_keys=True)
        if memo not in cache:
            old = old_object_for(key, olds, operation, where)
            cache[memo] = chain.evaluate(build_request(doc.obj, operation=operation, user_info=user_info,
                                                       old_object=old, sub_resource=sub_resource))
        evaluation = cache[memo]
        outcome = evaluation.outcomes[exp["policy"]]
        row = Row(exp["policy"], key[0], key[1], key[2], outcome.result, outcome.message, suite=suite.source,
                  operation=operation, expected=exp["result"], sub_resource=sub_resource,
                  explanation=evaluation.explanations.get(exp["policy"]) if explain else None)
        row.mismatch = _mismatch(suite, i, exp, row, evaluation)
        out.rows.append(row)
    return out


def _mismatch(suite: Document, i: int, exp: dict[str, Any], row: Row, evaluation: Evaluation) -> str:
    if row.result != exp["result"]:
        return f"expected {exp['result']}, got {row.result}" + (f": {row.message}" if row.message else "")
    if "messageContains" in exp and exp["messageContains"] not in row.message:
        return f"message does not contain \"{exp['messageContains']}\": {row.message or '(empty)'}"
    if "patchedResource" in exp:
        path = _base_dir(suite) / exp["patchedResource"]
        docs = load_file(path)
        if len(docs) != 1:
            raise InputError(f"{suite.where(('results', i, 'patchedResource'))}: {path}: must hold exactly one "
                             f"document, has {len(docs)}")
        differences = diff_objects(docs[0].obj, evaluation.patched)
        if differences:
            return f"patchedResource {exp['patchedResource']} differs from the mutated object: " + \
                "; ".join(differences)
    return ""


def diff_objects(expected: Any, actual: Any, *, limit: int = 5) -> list[str]:
    """Human-readable differences, one per JSON pointer: ``/metadata/labels/team: expected "a", got "b"``."""
    if actual is None:
        return ["no object (DELETE)"]
    out = []
    for op in jsonpatch.make_patch(expected, actual).patch:
        pointer = op["path"]
        if op["op"] == "add":
            out.append(f"{pointer}: unexpected {json.dumps(op['value'], sort_keys=True)}")
        elif op["op"] == "remove":
            out.append(f"{pointer}: missing {json.dumps(_resolve(expected, pointer), sort_keys=True)}")
        elif op["op"] == "replace":
            out.append(f"{pointer}: expected {json.dumps(_resolve(expected, pointer), sort_keys=True)}, "
                       f"got {json.dumps(op['value'], sort_keys=True)}")
        else:  # move / copy
            out.append(f"{op.get('from', '')} → {pointer}: {op['op']}")
    if len(out) > limit:
        out = [*out[:limit], f"... {len(out) - limit} more"]
    return out


def _resolve(doc: Any, pointer: str) -> Any:
    try:
        return jsonpatch.JsonPointer(pointer).resolve(copy.deepcopy(doc))
    except (jsonpatch.JsonPointerException, KeyError, IndexError, TypeError):
        return None

