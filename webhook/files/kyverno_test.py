"""Kyverno's CLI tests (``kyverno-test.yaml``) run unchanged by ``tollgate test``.

The document is parsed by :mod:`webhook.formats.kyverno.testfile`; this module reads the files it
names (relative to it, as ``kyverno test`` does) and runs every request through the admission chain
(:mod:`webhook.files.chain`) with the server's engine, as a TestSuite is run:

- policies: any file :func:`~webhook.files.inputs.load_policies` reads (Kyverno's CEL policies are
  imported, Tollgate's own kinds read as they are);
- the request of a resource: CREATE, or the ``request.operation`` of the values (global, or for the
  policy and resource), or the row's ``operation``: UPDATE sends the resource as ``object`` and
  ``oldObject``, DELETE as ``oldObject`` (kyverno/kyverno ``cmd/cli/kubectl-kyverno/processor/operation.go``);
  ``userInfo`` is the UserInfo file's, else Tollgate's test user;
- Namespaces: the values' ``namespaces`` and ``namespaceSelector`` labels, and the Namespaces among the
  resources; any other namespace has a Namespace with its name only (as Kyverno's CLI);
- what ``resource.Get``/``List`` read: the Context's ``spec.resources`` and the resources under test
  (Kyverno's CLI holds both in its fake cluster);
- what ``image.GetMetadata`` answers: the Context's ``spec.images`` (:func:`~webhook.formats.kyverno.testfile.
  context_images`), as Kyverno's CLI answers it offline; only here does that library compile;
- a row: each resource a ``results`` entry names, of its ``kind``, by ``name`` (every namespace) or
  ``namespace/name``; it holds when the policy's result is the one expected and, with
  ``patchedResources``, the mutated object equals that file's object of the same kind and name, both
  without empty fields (:func:`~webhook.formats.kyverno.testfile.tidy`, as Kyverno compares them); a row
  whose file lacks the object is skipped, as Kyverno's is.

Rows are :class:`~webhook.files.testsuite.Row` s with ``expected`` and ``mismatch``, so reports, ``-o json``
and the exit status are a TestSuite's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from webhook.files.chain import AdmissionChain, Evaluation
from webhook.files.imported import ImportedDocument
from webhook.files.inputs import LoadedPolicy, load_exceptions, load_policies, load_resources, reference_objects
from webhook.files.requests import DEFAULT_USER, build_request, resource_key
from webhook.files.testsuite import Row, SuiteRun, diff_objects
from webhook.files.yamlio import STDIN, Document, InputError, load_file
from webhook.formats.kyverno.testfile import (
    Expectation,
    KyvernoTest,
    TestFormatError,
    Values,
    context_images,
    context_objects,
    parse_test,
    parse_user_info,
    parse_values,
    tidy,
)
from webhook.policy.cel.scope import offline_image_data

__all__ = ["run_kyverno_test"]


def _base_dir(test: Document) -> Path:
    return Path.cwd() if test.source == STDIN else Path(test.source).parent


def _path(test: Document, field: Sequence[str | int], name: str) -> Path:
    path = _base_dir(test) / name
    if not path.exists():
        raise InputError(test.problem(field, f"{path}: no such file or directory"))
    return path


def _one_document(test: Document, field: str, name: str) -> Document:
    docs = load_file(_path(test, (field,), name))
    if len(docs) != 1:
        raise InputError(test.problem((field,), f"{name}: must hold exactly one document, has {len(docs)}"))
    return docs[0]


def _parsed(doc: Document, parse: Any) -> Any:
    try:
        return parse(doc.obj)
    except TestFormatError as e:
        raise InputError(doc.problem(e.path, e.message)) from None


def _unique(resources: list[Document], warnings: list[str]) -> list[Document]:
    """The resources with each (kind, namespace, name) once, the first kept, a warning for each repeat.

    Kyverno's CLI removes duplicated resources the same way (``resource.RemoveDuplicates``) and warns.
    """
    seen: dict[tuple[str, str, str], Document] = {}
    for doc in resources:
        key = resource_key(doc.obj)
        if key in seen:
            warnings.append(f"{doc.where()}: {doc.display_name} is given twice (first in {seen[key].where()}); "
                            "the first is used, as Kyverno's CLI does")
            continue
        seen[key] = doc
    return list(seen.values())


def _policies_by_name(loaded: list[LoadedPolicy]) -> dict[str, list[tuple[str, str | None]]]:
    """Kyverno's name of each policy → (the chain's key, its namespace or None)."""
    out: dict[str, list[tuple[str, str | None]]] = {}
    for policy in loaded:
        doc = policy.doc
        if isinstance(doc, ImportedDocument) and doc.imported is not None:
            ref = doc.imported.policy
            out.setdefault(ref.name, []).append((policy.key, ref.namespace or None))
        else:
            out.setdefault(policy.name, []).append((policy.key, policy.compiled.spec.namespace))
    return out


def _policy(exp: Expectation, by_name: dict[str, list[tuple[str, str | None]]], test: Document) -> str:
    found = [name for name, ns in by_name.get(exp.policy_name, [])
             if exp.policy_namespace is None or ns == exp.policy_namespace]
    if not found:
        raise InputError(test.problem(("results", exp.index, "policy"),
                                      f"no policy {exp.policy} in the test's policies "
                                      f"(have: {', '.join(sorted(by_name)) or 'none'})"))
    return found[0]


def _selected(exp: Expectation, resources: list[Document]) -> list[tuple[str, Document | None]]:
    """Each resource the row names: ``(as named, its document)``; None when the test's resources lack it."""
    out: list[tuple[str, Document | None]] = []
    for named in exp.resources:
        namespace, slash, name = named.rpartition("/")
        hits = [d for d in resources if resource_key(d.obj)[0] == exp.kind and resource_key(d.obj)[2] == name
                and (not slash or resource_key(d.obj)[1] == namespace)]
        out += [(named, d) for d in hits] or [(named, None)]
    return out


def _namespaces(values: Values | None, resources: list[Document]) -> list[dict[str, Any]]:
    out = {str((ns.get("metadata") or {}).get("name")): ns for ns in (values.namespaces if values else ())}
    for doc in resources:
        if doc.kind == "Namespace":
            out.setdefault(resource_key(doc.obj)[2], doc.obj)
    return list(out.values())


def _references(test: Document, parsed: KyvernoTest, resources: list[Document]) -> list[Document]:
    """The Context's objects, then the resources under test not already among them."""
    docs: list[Document] = []
    if parsed.context is not None:
        context = _one_document(test, "context", parsed.context)
        for path, obj in _parsed(context, context_objects):
            if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name") or not obj.get("kind"):
                raise InputError(context.problem(path, "an object needs kind and metadata.name"))
            docs.append(Document(context.source, context.index, obj, None))
    seen = {(*resource_key(d.obj), str(d.obj.get("apiVersion"))) for d in docs}
    for doc in resources:
        key = (*resource_key(doc.obj), str(doc.obj.get("apiVersion")))
        if key not in seen:  # a resource given twice is one object, as in Kyverno's fake cluster
            seen.add(key)
            docs.append(doc)
    return docs


#: A row whose patchedResources file lacks its resource: Kyverno's test skips it (``failOnMissingResources``
#: false, kyverno/kyverno ``cmd/cli/kubectl-kyverno/commands/test/output.go``), whatever the result.
_NOT_IN_PATCHED = "\0not in patchedResources"


def _patched_mismatch(test: Document, exp: Expectation, doc: Document, evaluation: Evaluation) -> str:
    assert exp.patched_resources is not None
    path = _path(test, ("results", exp.index, "patchedResources"), exp.patched_resources)
    kind, namespace, name = resource_key(doc.obj)
    expected = [d for d in load_file(path) if d.kind == kind and resource_key(d.obj)[2] == name
                and resource_key(d.obj)[1] == namespace]
    if not expected:
        return _NOT_IN_PATCHED
    want, got = expected[0].obj, evaluation.patched
    if isinstance(got, dict) and not (want.get("metadata") or {}).get("namespace"):
        # The request fills metadata.namespace as the API server does; Kyverno's files leave it out.
        meta = {k: v for k, v in (got.get("metadata") or {}).items() if k != "namespace"}
        got = {**got, "metadata": meta}
    differences = diff_objects(tidy(want), tidy(got)) if got is not None else diff_objects(want, got)
    if differences:
        return f"patchedResources {exp.patched_resources} differs from the mutated object: " + "; ".join(differences)
    return ""


def run_kyverno_test(test: Document, *, params_selector: str = "", explain: bool = False) -> SuiteRun:
    """Run one Kyverno ``Test`` document: a row per resource each ``results`` entry names.

    Args:
        test: the ``cli.kyverno.io/v1alpha1`` Test document.
        params_selector: unused (Kyverno's tests have no params); the signature is :func:`run_suite`'s.
        explain: rows carry their policy's trace on their resource.

    Raises:
        InputError: a field Tollgate refuses or that is malformed, a file that is not there, a policy a row
            names that is not among the test's policies (one line naming file, line and field).
    """
    del params_selector
    parsed: KyvernoTest = _parsed(test, parse_test)
    images: dict[str, dict[str, Any]] = {}
    if parsed.context is not None:
        images = _parsed(_one_document(test, "context", parsed.context), context_images)
    if not images:
        return _run(test, parsed, explain)
    # The Context's image data answers image.GetMetadata, as Kyverno's CLI answers it offline; the policies
    # are compiled and evaluated with it installed (anywhere else that library is refused at compile time).
    with offline_image_data(images):
        return _run(test, parsed, explain)


def _run(test: Document, parsed: KyvernoTest, explain: bool) -> SuiteRun:
    out = SuiteRun(test)
    loaded = load_policies([_path(test, ("policies", i), p) for i, p in enumerate(parsed.policies)])
    resources = _unique(load_resources([_path(test, ("resources", i), p) for i, p in enumerate(parsed.resources)]),
                        out.warnings)
    values = parsed.values
    if parsed.variables is not None:
        values = _parsed(_one_document(test, "variables", parsed.variables), parse_values)
    user_info = dict(DEFAULT_USER)
    if parsed.userinfo is not None:
        user_info = _parsed(_one_document(test, "userinfo", parsed.userinfo), parse_user_info)
    # Kyverno's CEL PolicyExceptions the test names (``exceptions:``), with Tollgate's semantics: confined to
    # their namespace, expiring at expiresAt (webhook.formats.kyverno.exceptions).
    exceptions = load_exceptions([_path(test, ("exceptions", i), p) for i, p in enumerate(parsed.exceptions)])
    chain = AdmissionChain(loaded, namespaces=_namespaces(values, resources),
                           objects=reference_objects(_references(test, parsed, resources)), explain=explain,
                           exceptions=exceptions or None)
    by_name = _policies_by_name(loaded)
    cache: dict[str, Evaluation] = {}
    for exp in parsed.results:
        policy = _policy(exp, by_name, test)
        for named, doc in _selected(exp, resources):
            if doc is None:
                namespace, _, name = named.rpartition("/")
                row = Row(exp.policy, exp.kind, namespace, name, "error", "not found in the test's resources",
                          suite=test.source, expected=exp.result)
                row.mismatch = f"no {exp.kind} {named} in the test's resources"
                out.rows.append(row)
                continue
            key = resource_key(doc.obj)
            operation = exp.operation or (values.operation_for(exp.policy_name, key[2]) if values else None) \
                or "CREATE"
            memo = json.dumps([key, operation], sort_keys=True)
            if memo not in cache:
                old = doc.obj if operation in ("UPDATE", "DELETE") else None
                cache[memo] = chain.evaluate(build_request(doc.obj, operation=operation, user_info=user_info,
                                                           old_object=old))
            evaluation = cache[memo]
            outcome = evaluation.outcomes[policy]
            # Kyverno reports a violated validation as fail whatever its validationActions (a Warn-only policy's
            # result is Tollgate's warn): pkg/cel/policies/vpol/engine reports the rule's failure. A row that
            # expects warn is compared as written.
            result = "fail" if outcome.result == "warn" and exp.result != "warn" else outcome.result
            row = Row(exp.policy, key[0], key[1], key[2], result, outcome.message, suite=test.source,
                      operation=operation, expected=exp.result,
                      explanation=evaluation.explanations.get(policy) if explain else None)
            patched = _patched_mismatch(test, exp, doc, evaluation) if exp.patched_resources is not None else ""
            if patched == _NOT_IN_PATCHED:
                row.message = f"skipped as Kyverno skips it: {exp.patched_resources} holds no {key[0]} {key[2]}"
            elif result != exp.result:
                row.mismatch = f"expected {exp.result}, got {result}" + \
                    (f": {outcome.message}" if outcome.message else "")
            else:
                row.mismatch = patched
            out.rows.append(row)
    return out
