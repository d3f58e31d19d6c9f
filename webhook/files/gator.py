"""gator Suites (``test.gatekeeper.sh/v1alpha1``) run by ``tollgate test``, as ``gator verify`` runs them.

The Suite's format is :mod:`webhook.formats.gatekeeper.suite`; the template and constraint become a
Tollgate policy as everywhere (:mod:`webhook.files.imported`, :mod:`webhook.formats.gatekeeper.convert`).
Each case reviews its object through the admission chain (:mod:`webhook.files.chain`) and counts
violations as Gatekeeper's CEL driver reports them: one per failing validation (``validating.Validator``
gives a decision per validation; ``k8scel/driver.go`` turns each deny into a result), and one per
validation that errors under ``failurePolicy: Fail``. Each assertion becomes a row whose ``expected``
is the assertion and whose ``mismatch`` is gator's complaint.

The review, as ``pkg/gator/verify/runner.go`` and ``pkg/target/target.go`` build it: a plain object is
reviewed without an operation (Tollgate sends CREATE, which no library template tells apart) in its own
namespace (none when it names none: a namespaced object without one is not put in ``default``); an
AdmissionReview's ``request`` is reviewed with its ``operation``, ``object``, ``oldObject`` and
``userInfo``. Inventory objects are the references cache (and their Namespaces the Namespace cache).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from webhook.files.chain import AdmissionChain
from webhook.files.checks import compile_for_evaluation
from webhook.files.imported import ImportedDocument
from webhook.files.inputs import LoadedPolicy, load_policies, load_resources, reference_objects
from webhook.files.requests import DEFAULT_USER, OPERATIONS, build_request
from webhook.files.testsuite import Row, SuiteRun
from webhook.files.yamlio import STDIN, Document, InputError, load_file
from webhook.formats.gatekeeper.suite import Case, SuiteError, Test, check_assertion, parse_suite

__all__ = ["run_gator_suite"]


def _base(suite: Document) -> Path:
    return Path.cwd() if suite.source == STDIN else Path(suite.source).parent


def _path(suite: Document, where: tuple[str | int, ...], name: str) -> Path:
    path = _base(suite) / name
    if not path.exists():
        raise InputError(suite.problem(where, f"{path}: no such file or directory"))
    return path


def _split(policy: LoadedPolicy) -> list[tuple[LoadedPolicy, bool]]:
    """One policy per validation (Gatekeeper reports each failing validation), and whether errors count.

    An error counts as a violation under ``failurePolicy: Fail`` (the driver's validator denies).
    """
    spec = policy.doc.obj.get("spec") or {}
    fails = spec.get("failurePolicy", "Fail") != "Ignore"
    validations = spec.get("validations") or []
    if len(validations) <= 1:
        return [(policy, fails)]
    out = []
    for i, validation in enumerate(validations):
        meta = {**policy.doc.obj["metadata"], "name": f"{policy.name}#{i}"}
        obj = {**policy.doc.obj, "metadata": meta, "spec": {**spec, "validations": [validation]}}
        doc = dataclasses.replace(policy.doc, obj=obj)
        compiled, error = compile_for_evaluation(doc)
        if compiled is None:
            raise InputError(str(error))
        out.append((LoadedPolicy(doc, compiled), fails))
    return out


def _request(doc: Document) -> dict[str, Any]:
    """The AdmissionRequest gator reviews for a case's object (see the module docstring)."""
    obj = doc.obj
    if obj.get("kind") == "AdmissionReview" and str(obj.get("apiVersion", "")).startswith("admission.k8s.io/"):
        raw = obj.get("request")
        if not isinstance(raw, dict):
            raise InputError(doc.problem(("request",), "an AdmissionReview without a request"))
        new, old = raw.get("object"), raw.get("oldObject")
        if not isinstance(new, dict) and not isinstance(old, dict):
            raise InputError(doc.problem(("request",), 'the AdmissionRequest has no "object" or "oldObject" '
                                                       "to review"))
        operation = raw.get("operation") or "CREATE"
        if operation not in OPERATIONS:
            raise InputError(doc.problem(("request", "operation"), f"must be one of {', '.join(OPERATIONS)}"))
        subject = new if isinstance(new, dict) else old
        assert isinstance(subject, dict)
        user: dict[str, Any] = raw["userInfo"] if isinstance(raw.get("userInfo"), dict) else DEFAULT_USER
        request = build_request(subject, operation=operation, user_info=user,
                                old_object=old if isinstance(old, dict) else None)
        namespace = raw.get("namespace") or (subject.get("metadata") or {}).get("namespace")
    else:
        request = build_request(obj, operation="CREATE", user_info=DEFAULT_USER)
        namespace = (obj.get("metadata") or {}).get("namespace")
    if isinstance(namespace, str) and namespace:
        request["namespace"] = namespace
    else:
        request.pop("namespace", None)
    return request


def _rows_of_test(suite: Document, test: Test, caches: dict[Path, list[Document]]) -> list[Row]:
    template = _path(suite, (*test.path, "template"), test.template)
    constraint = _path(suite, (*test.path, "constraint"), test.constraint)
    loaded = load_policies([template, constraint])
    imported = [p for p in loaded if isinstance(p.doc, ImportedDocument)]
    if len(imported) != 1:
        raise InputError(suite.problem((*test.path, "constraint"), f"{constraint}: must hold one constraint of "
                                                                   f"the template's kind, found {len(imported)}"))
    policy = imported[0]
    assert isinstance(policy.doc, ImportedDocument)
    if policy.doc.problems:
        raise InputError(policy.doc.problems[0])  # gator cannot add the template or the constraint either
    split = _split(policy)
    rows = []
    for case in test.cases:
        rows += _rows_of_case(suite, test, case, policy, split, caches)
    return rows


def _load(path: Path, caches: dict[Path, list[Document]], *, resources: bool) -> list[Document]:
    if path not in caches:
        caches[path] = load_resources([path]) if resources else load_file(path)
    return caches[path]


def _rows_of_case(suite: Document, test: Test, case: Case, policy: LoadedPolicy,
                  split: list[tuple[LoadedPolicy, bool]], caches: dict[Path, list[Document]]) -> list[Row]:
    docs = _load(_path(suite, (*case.path, "object"), case.object), caches, resources=False)
    if len(docs) != 1:
        raise InputError(suite.problem((*case.path, "object"), f"{case.object} defines {len(docs)} objects, "
                                                               "gator reviews exactly one"))
    inventory = [d for i, p in enumerate(case.inventory)
                 for d in _load(_path(suite, (*case.path, "inventory", i), p), caches, resources=True)]
    request = _request(docs[0])
    chain = AdmissionChain([p for p, _ in split], namespaces=[d.obj for d in inventory if d.kind == "Namespace"],
                           objects=reference_objects(inventory))
    evaluation = chain.evaluate(request)
    messages = [evaluation.outcomes[p.name].message for p, fails in split
                if evaluation.outcomes[p.name].result in ("fail", "warn")
                or (evaluation.outcomes[p.name].result == "error" and fails)]
    results = [evaluation.outcomes[p.name].result for p, _ in split]
    result = next((r for r in ("error", "fail", "warn", "pass") if r in results), "skip")
    kind = str((request.get("kind") or {}).get("kind", ""))
    rows = []
    for assertion in case.assertions:
        mismatch = check_assertion(assertion, messages)
        rows.append(Row(policy.name, kind, str(request.get("namespace") or ""), str(request.get("name") or ""),
                        result, "; ".join(messages), suite=suite.source, operation=str(request.get("operation")),
                        expected=f"{test.name}/{case.name}: {assertion.describe()}",
                        mismatch=f"{test.name}/{case.name}: {mismatch}" if mismatch else ""))
        if mismatch:
            break  # gator stops a case at its first failing assertion
    return rows


def run_gator_suite(suite: Document, *, params_selector: str = "", explain: bool = False) -> SuiteRun:
    """Every assertion of a gator Suite as ``gator verify`` checks it: one row each, ``expected`` the assertion.

    Args:
        suite: the ``test.gatekeeper.sh/v1alpha1`` Suite document.
        params_selector: unused (a constraint carries its parameters); the signature is ``run_suite``'s.
        explain: unused (gator has no traces); the signature is ``run_suite``'s.

    Raises:
        InputError: a malformed Suite, a missing file, a template or constraint Gatekeeper would refuse (a
            Rego-only template: Tollgate runs only CEL), an object file without exactly one object.
    """
    try:
        tests = parse_suite(suite.obj)
    except SuiteError as e:
        raise InputError(suite.problem(e.path, e.message)) from None
    del params_selector, explain
    caches: dict[Path, list[Document]] = {}
    out = SuiteRun(suite)
    for test in tests:
        out.rows += _rows_of_test(suite, test, caches)
    return out
