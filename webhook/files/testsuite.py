"""TestSuites for ``tollgate test`` (expected results, checked offline), and its ad-hoc mode.

A TestSuite (schema ``webhook/files/schemas/testsuite-v1alpha1.yaml``) names its input files
relative to itself (read by :mod:`webhook.files.inputs`) and, per ``results`` entry, a policy,
a resource, the request and the expected result (see :mod:`webhook.files.chain`), optionally
``messageContains`` and the ``patchedResource`` the mutating policies must leave. Each distinct
request (:mod:`webhook.files.requests`) goes through the admission chain once; every expectation
becomes a :class:`Row` whose ``mismatch`` says why it does not hold. Ad hoc, every policy meets
every resource.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch

from webhook.files.chain import AdmissionChain, Evaluation
from webhook.files.checks import schema_problems
from webhook.files.inputs import (
    LoadedPolicy,
    index_resources,
    iter_resources,
    load_exceptions,
    load_kind,
    load_policies,
    load_resources,
    reference_objects,
    select_params,
)
from webhook.files.requests import DEFAULT_USER, build_request, describe_key, old_object_for, resource_key
from webhook.files.yamlio import STDIN, Document, InputError, load_file, yaml_files
from webhook.formats.gatekeeper.suite import is_gator_suite
from webhook.formats.kyverno.testfile import is_kyverno_test
from webhook.policy.explain import PolicyTrace
from webhook.policy.resources import resource_for_kind


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
                          objects=reference_objects(load_resources(references)), explain=explain,
                          exceptions=load_exceptions(policies))
    olds = index_resources(load_resources(old_resources))
    rows = []
    names = sorted(p.key for p in loaded)
    for doc in iter_resources(resources):  # one at a time: a 100 MB file is never held whole
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

_SUITE_MARK = re.compile(r"^kind:\s*[\"']?(TestSuite|Test|Suite)[\"']?\s*$", re.MULTILINE)
#: The directories Kyverno keeps its CLI tests in: searched although hidden (``kyverno test DIR`` finds them).
KYVERNO_TEST_DIR = ".kyverno-test"


def _is_suite(doc: Document) -> bool:
    """A TestSuite, a Kyverno CLI ``Test`` or a gator ``Suite`` (the foreign ones: :mod:`webhook.formats`)."""
    return doc.kind == "TestSuite" or is_kyverno_test(doc.obj) or is_gator_suite(doc.obj)


def _suite_files(root: Path) -> list[Path]:
    """:func:`yaml_files`, plus the YAML files of Kyverno's hidden ``.kyverno-test`` directories under a directory."""
    files = yaml_files(root)
    if str(root) == STDIN or not root.is_dir():
        return files
    kyverno = [p for d in root.rglob(KYVERNO_TEST_DIR) if d.is_dir()
               and not any(part.startswith(".") for part in d.relative_to(root).parts[:-1])
               for p in yaml_files(d)]
    return sorted({*files, *kyverno})


@dataclass(slots=True)
class SuiteSearch:
    """What :func:`find_suites` found: the suites, and one line for each path or file that is unusable."""

    suites: list[Document] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def find_suites(paths: Iterable[Path]) -> SuiteSearch:
    """The TestSuite documents of the given files; directories are searched recursively (like ``kyverno test DIR``).

    Kyverno's CLI tests (``cli.kyverno.io/v1alpha1`` ``Test``) count as suites, and a directory's
    hidden ``.kyverno-test`` directories are searched too, where Kyverno keeps them.
    A file given by name must hold TestSuites only; in a directory, files without
    a ``kind: TestSuite`` (or ``kind: Test``) line are skipped unparsed (resources, policies). An
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
            files = _suite_files(root)
        except InputError as e:
            out.errors.append(str(e))
            continue
        for path in files:
            try:
                if is_dir and not _SUITE_MARK.search(_read(path)):
                    continue
                docs = load_file(path)
                if is_dir and not any(_is_suite(d) for d in docs):
                    continue  # a ``kind: Test`` of another API (not Kyverno's CLI)
                for doc in docs:
                    if not _is_suite(doc):
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


def _policy_key(named: str, loaded: list[LoadedPolicy], where: str) -> str:
    """The key of the policy a TestSuite row names (``namespace/name`` for an AdmissionPolicy).

    A bare name is accepted when only one of the suite's policies has it.

    Raises:
        InputError: no such policy, or a bare name two policies share (the row must say which).
    """
    keys = sorted(p.key for p in loaded)
    if named in keys:
        return named
    same = sorted(p.key for p in loaded if p.name == named)
    if len(same) == 1:
        return same[0]
    if same:
        raise InputError(f"{where}: {named} names {len(same)} policies ({', '.join(same)}): name one as "
                         "namespace/name")
    raise InputError(f"{where}: no policy {named} in the suite's policies (have: {', '.join(keys)})")


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
                          explain=explain, exceptions=load_exceptions(_files(suite, "policies")))
    resources = index_resources(load_resources(_files(suite, "resources")))
    olds = index_resources(load_resources(_files(suite, "oldResources")))
    cache: dict[str, Evaluation] = {}
    for i, exp in enumerate(spec["results"]):
        where = suite.where(("results", i))
        policy = _policy_key(exp["policy"], loaded, f"{where}: results[{i}].policy")
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
        outcome = evaluation.outcomes[policy]
        row = Row(exp["policy"], key[0], key[1], key[2], outcome.result, outcome.message, suite=suite.source,
                  operation=operation, expected=exp["result"], sub_resource=sub_resource,
                  explanation=evaluation.explanations.get(policy) if explain else None)
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

