"""Checks of documents read from files: strict schema, then CEL compilation with the server's compiler.

``tollgate lint`` reports these; ``tollgate test`` refuses input that fails them
and compiles policies the way the server files them. Every policy is compiled
with :func:`webhook.policy.compile_policy`, so a CEL error is reported with its
spec path and position, on the line of that path. Lint reports every problem in
one run: every schema violation, and every error of every expression (also of a
policy with schema violations, whenever its spec can still be read).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from webhook.files import schema
from webhook.files.imported import IMPORTED_KIND_NAMES, import_problems, is_imported_kind
from webhook.files.yamlio import Document, InputError, load_file, parse_path, yaml_files
from webhook.formats.kinds import import_kind_of
from webhook.formats.kyverno.exceptions import compile_kyverno_exception, is_kyverno_exception, policy_label
from webhook.formats.kyverno.testfile import TestFormatError, is_kyverno_test, parse_test
from webhook.policy import CompiledPolicy, compile_policy
from webhook.policy.cel.env import compile_expression
from webhook.policy.exceptions import EXCEPTION_KINDS, compile_exception
from webhook.policy.merge_check import mutation_warnings
from webhook.policy.vocabulary import POLICY_KINDS, policy_key

__all__ = ["compile_document", "compile_for_evaluation", "compile_problems", "document_problems", "document_warnings",
           "exception_problems", "lint_paths", "schema_problems"]

#: What ``tollgate lint`` reads, for messages: the kinds with a schema, then the imported ones.
LINTED_KINDS = (*schema.API_VERSIONS, *IMPORTED_KIND_NAMES, "Test (cli.kyverno.io)")

#: Stands in for an expression already reported, so compiling again finds the next one: its type is
#: ``dyn``, which every expected result type accepts and every expression reading a variable can use.
_NEUTRAL_EXPRESSION = "dyn(null)"
#: One CEL diagnostic of a compile error's text (cel-cpp lists every error, each with its position).
_CEL_ERROR = re.compile(r"ERROR: <input>:\d+:\d+: [^\n]*")


def schema_problems(doc: Document) -> list[str]:
    """One-line messages for every schema violation of ``doc`` (``[]`` for kinds without a schema)."""
    if not schema.has_schema(doc.obj):
        return []
    return [doc.problem(p.path, p.message) for p in schema.validate(doc.obj)]


def compile_document(doc: Document) -> tuple[CompiledPolicy | None, str | None]:
    """Compile a policy document with the server's compiler.

    Returns:
        ``(policy, None)``, or ``(None, message)`` where the message is
        ``file:line: document N: Kind name: <Ready condition message>`` (spec path
        and CEL position), the line being that of the spec path the compiler names.
    """
    result = compile_policy(doc.obj)
    if result.policy is not None:
        return result.policy, None
    text = str(result.condition.get("message", "")).strip()
    path = parse_path(text) if text.startswith("spec") else ()
    return None, f"{doc.where(path)}: {doc.display_name}: {text or result.condition.get('reason', 'not Ready')}"


def compile_for_evaluation(doc: Document) -> tuple[CompiledPolicy | None, str | None]:
    """Compile a policy document as the server would file it.

    Returns:
        ``(policy, None)`` for a Ready policy; ``(broken, message)`` for one
        that is not Ready but whose match rules parse (the engine answers what
        it selects per its failurePolicy, as the server does); ``(None,
        message)`` when not even its match rules can be read.
    """
    policy, error = compile_document(doc)
    if error is None:
        return policy, None
    return compile_policy(doc.obj).matchable, error


def compile_problems(doc: Document, *, spec_checked: bool = True) -> list[str]:
    """Every compile error of a policy document, one line each (``[]`` when it compiles).

    The server's compiler stops at the first expression that does not compile;
    this compiles the policy again with each reported expression replaced by a
    neutral one until it compiles, so every failing expression is named, and
    lists every CEL diagnostic of each (cel-cpp reports them all).

    Args:
        doc: a ClusterAdmissionPolicy or AdmissionPolicy document.
        spec_checked: False when schema problems were already reported: a spec the
            compiler cannot read (``InvalidSpec``) then adds nothing.

    Returns:
        ``file:line: document N: Kind name: spec.path: message`` lines, in the order the compiler meets them.
    """
    obj = copy.deepcopy(doc.obj)
    problems: list[str] = []
    replaced: set[tuple[str | int, ...]] = set()
    while True:
        result = compile_policy(obj)
        if result.policy is not None:
            return problems
        text = str(result.condition.get("message", "")).strip()
        path = parse_path(text) if text.startswith("spec") else ()
        if result.condition.get("reason") != "CompileError" or path in replaced or not _is_expression(obj, path):
            if spec_checked or result.condition.get("reason") == "CompileError":
                problems.append(f"{doc.where(path)}: {doc.display_name}: "
                                f"{text or result.condition.get('reason', 'not Ready')}")
            return problems
        source = _get(obj, path)
        problems += [f"{doc.where(path)}: {doc.display_name}: {line}" for line in _expression_errors(text, source)]
        replaced.add(path)
        _set(obj, path, _NEUTRAL_EXPRESSION)


def _expression_errors(message: str, source: str) -> list[str]:
    """``spec.path: ERROR: ...`` for every CEL diagnostic of ``source``, or the compiler's one message."""
    head, _, rest = message.partition(": ")
    if not rest.startswith("ERROR: <input>:"):
        return [message]  # a wrong result type, an undeclared variable, an undeclared reference, the length
    try:
        compile_expression(source)
    except RuntimeError as e:
        found = [m.group(0).removesuffix(" [INVALID_ARGUMENT]").replace(" (in container '')", "")
                 for m in _CEL_ERROR.finditer(str(e))
                 if "'*error*'" not in m.group(0)]  # follow-on errors of an earlier one (cel-go drops them)
        if found:
            return [f"{head}: {line}" for line in found]
    return [message]


def _is_expression(obj: Any, path: Sequence[str | int]) -> bool:
    return bool(path) and isinstance(_get(obj, path), str)


def _get(obj: Any, path: Sequence[str | int]) -> Any:
    for part in path:
        try:
            obj = obj[part]
        except (KeyError, IndexError, TypeError):
            return None
    return obj


def _set(obj: Any, path: Sequence[str | int], value: str) -> None:
    _get(obj, path[:-1])[path[-1]] = value


def document_problems(doc: Document) -> list[str]:
    """Every schema problem, and (for a policy) every compile error; ``[]`` when the document is sound.

    Schema problems do not hide the CEL errors of the same document: the policy is compiled again
    without each field a schema problem names (an unknown field, as the API server prunes it; a value of
    the wrong type or outside its enum, which then takes its default), so ``lint`` names both in one run.
    A spec the compiler still cannot read (a required field missing) adds nothing beyond its schema
    problems.
    """
    found = schema.validate(doc.obj) if schema.has_schema(doc.obj) else []
    problems = [doc.problem(p.path, p.message) for p in found]
    if doc.kind not in POLICY_KINDS:
        return problems
    if not found:
        return compile_problems(doc)
    pruned = copy.deepcopy(doc.obj)
    for problem in found:
        parent = _get(pruned, problem.path[:-1]) if problem.path else None
        if isinstance(parent, dict) and not problem.message.startswith("required field"):
            parent.pop(problem.path[-1], None)
    return problems + compile_problems(dataclasses.replace(doc, obj=pruned), spec_checked=False)


def document_warnings(doc: Document) -> list[str]:
    """Warnings about a sound policy document: ApplyConfiguration lists whose merge is unknown or refused.

    See :func:`webhook.policy.merge_check.mutation_warnings`; ``[]`` for other kinds and broken policies.
    """
    if doc.kind not in POLICY_KINDS:
        return []
    policy, error = compile_document(doc)
    if policy is None or error is not None:
        return []
    return [f"{doc.where(parse_path(path))}: {doc.display_name}: warning: {path}: {message}"
            for path, message in mutation_warnings(policy.spec)]


def lintable(doc: Document) -> bool:
    """Whether ``tollgate lint`` checks ``doc``: a kind with a schema, an imported kind, a Kyverno CLI test."""
    return schema.has_schema(doc.obj) or is_imported_kind(doc) or is_kyverno_test(doc.obj)


def lint_paths(paths: Iterable[Path], warnings: list[str] | None = None) -> tuple[list[str], int]:
    """Lint files and directories (recursively).

    Args:
        paths: files and directories.
        warnings: when given, collects :func:`document_warnings` of every sound document.

    Returns:
        ``(problems, checked)``: one-line messages, and how many documents had a schema.

    Raises:
        InputError: a path that does not exist.
    """
    problems: list[str] = []
    checked = 0
    every: list[Document] = []
    for root in paths:
        for path in yaml_files(root):
            try:
                docs = load_file(path)
            except InputError as e:
                problems.append(str(e))
                continue
            if path == root and not any(lintable(d) for d in docs):
                # A file named on the command line is never passed over in silence (a directory's Pods are).
                problems.append(f"{path}: nothing to lint: no document of a kind tollgate lint reads "
                                f"({', '.join(LINTED_KINDS)})")
            every += docs
            for doc in docs:
                if is_kyverno_test(doc.obj):  # Kyverno's CLI test: what tollgate test would refuse
                    checked += 1
                    try:
                        parse_test(doc.obj)
                    except TestFormatError as e:
                        problems.append(doc.problem(e.path, e.message))
                if schema.has_schema(doc.obj):
                    checked += 1
                    found = document_problems(doc)
                    problems += found
                    if warnings is not None and not found:
                        warnings += document_warnings(doc)
    # Imported kinds (ValidatingAdmissionPolicy and its binding, Kyverno's CEL policies): across every file.
    found, imported = import_problems(every, warnings)
    return problems + found + exception_problems(every) + kyverno_exception_problems(every), checked + imported


def exception_problems(docs: Sequence[Document]) -> list[str]:
    """Lint's checks of the PolicyExceptions among ``docs`` (their schema is checked with every document's).

    An exception whose spec is readable by the schema but does not compile (a matchCondition's CEL, a blank
    ``reason``, an ``expiresAt`` that is not RFC 3339) is reported at its spec path; one that names a policy
    no document among ``docs`` defines (``name``, ``namespace/name``) is reported at that
    ``spec.policies[i].name``: in a cluster it would be ``Ready=False`` and exempt nothing.
    """
    known = {policy_key((d.obj.get("metadata") or {}).get("namespace") if d.kind == "AdmissionPolicy" else None,
                        str((d.obj.get("metadata") or {}).get("name") or ""))
             for d in docs if d.kind in POLICY_KINDS and isinstance(d.obj.get("metadata"), dict)}
    problems: list[str] = []
    for doc in docs:
        if doc.kind not in EXCEPTION_KINDS or is_kyverno_exception(doc.obj) or schema_problems(doc):
            continue
        result = compile_exception(doc.obj)
        if result.exception is None:
            text = str(result.condition.get("message", ""))
            path = parse_path(text) if text.startswith("spec") else ()
            problems.append(f"{doc.where(path)}: {doc.display_name}: {text}")
            continue
        for i, entry in enumerate(doc.obj["spec"]["policies"]):
            name = str(entry.get("name", "")).strip()
            if name not in known:
                path = ("spec", "policies", i, "name")
                problems.append(f"{doc.where(path)}: {doc.display_name}: spec.policies[{i}].name: no policy "
                                f"named {name} among the files linted (have: {', '.join(sorted(known)) or 'none'})")
    return problems


def kyverno_exception_problems(docs: Sequence[Document]) -> list[str]:
    """Lint's checks of Kyverno's CEL PolicyExceptions among ``docs`` (:mod:`webhook.formats.kyverno.exceptions`).

    One Tollgate cannot honour (a ref to a kind it does not exempt, fine-grained ``images``, a
    matchCondition that does not compile, an unknown field) is reported at its spec path; one whose
    ``spec.policyRefs[i]`` names no Kyverno ValidatingPolicy (of its namespace, for a
    NamespacedValidatingPolicy) among ``docs`` is reported at that ref's ``name``: it would exempt nothing.
    """
    known: set[str] = set()
    for d in docs:
        kind = import_kind_of(d.obj)
        meta = d.obj.get("metadata") if isinstance(d.obj, dict) else None
        if kind is None or kind.group != "policies.kyverno.io" or not isinstance(meta, dict):
            continue
        namespace = meta.get("namespace") if kind.namespaced else None
        try:
            known.add(policy_label({"kind": kind.kind, "name": meta.get("name")}, namespace or "", 0))
        except ValueError:
            continue  # not a kind an exception may name, or no name (the import's problem)
    problems: list[str] = []
    for doc in docs:
        if not is_kyverno_exception(doc.obj):
            continue
        result = compile_kyverno_exception(doc.obj)
        if result.exception is None:
            text = str(result.condition.get("message", ""))
            path = parse_path(text) if text.startswith(("spec", "metadata")) else ()
            problems.append(f"{doc.where(path)}: {doc.display_name}: {text}")
            continue
        namespace = doc.obj["metadata"]["namespace"]
        for i, ref in enumerate(doc.obj["spec"]["policyRefs"]):
            label = policy_label(ref, namespace, i)
            if label not in known:
                path = ("spec", "policyRefs", i, "name")
                problems.append(f"{doc.where(path)}: {doc.display_name}: spec.policyRefs[{i}]: no {ref['kind']} named "
                                f"{ref['name']} among the files linted (have: {', '.join(sorted(known)) or 'none'})")
    return problems
