"""Checks of documents read from files: strict schema, then CEL compilation with the server's compiler.

``tollgate lint`` reports these; ``tollgate test`` refuses input that fails them
and compiles policies the way the server files them. Every policy that passes
its schema is compiled with :func:`webhook.policy.compile_policy`, so a CEL
error is reported with its spec path and position, on the line of that path.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from webhook.files import schema
from webhook.files.yamlio import Document, InputError, load_file, parse_path, yaml_files
from webhook.policy import CompiledPolicy, compile_policy

__all__ = ["compile_document", "compile_for_evaluation", "document_problems", "lint_paths", "schema_problems"]


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


def document_problems(doc: Document) -> list[str]:
    """Schema problems, else (for a policy) the compile error; ``[]`` when the document is sound."""
    problems = schema_problems(doc)
    if problems or doc.kind not in schema.POLICY_KINDS:
        return problems
    _policy, error = compile_document(doc)
    return [error] if error else []


def lint_paths(paths: Iterable[Path]) -> tuple[list[str], int]:
    """Lint files and directories (recursively).

    Returns:
        ``(problems, checked)``: one-line messages, and how many documents had a schema.

    Raises:
        InputError: a path that does not exist.
    """
    problems: list[str] = []
    checked = 0
    for root in paths:
        for path in yaml_files(root):
            try:
                docs = load_file(path)
            except InputError as e:
                problems.append(str(e))
                continue
            for doc in docs:
                if schema.has_schema(doc.obj):
                    checked += 1
                    problems += document_problems(doc)
    return problems, checked
