"""``tollgate lint``: strict schema validation plus CEL compilation of policy files, nothing evaluated.

Every document of a kind Tollgate reads (ClusterAdmissionPolicy,
AdmissionPolicy, TestSuite, ConfigMap, Namespace) is checked against its
schema (:mod:`webhook.schema`, kubectl's strict field validation); every
policy that passes is compiled with the server's compiler, so a CEL error is
reported with its spec path and position. Documents of other kinds (the Pods
of a test) are skipped. One problem per line::

    policy.yaml:7: document 1: spec.validationAction: unknown field (did you mean validationActions?)
    policy.yaml:31: document 1: ClusterAdmissionPolicy x: spec.validations[0].expression: ERROR: <input>:1:1: ...

Exit status: 0 clean, 1 when any problem was found, 2 for a usage error or a
path that does not exist.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from webhook import schema
from webhook.argparsing import OneLineParser
from webhook.policy import CompiledPolicy, compile_policy
from webhook.yamlio import Document, InputError, load_file, parse_path, yaml_files


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


def build_parser() -> argparse.ArgumentParser:
    """The ``tollgate lint`` argument parser."""
    p = OneLineParser(
        prog="tollgate lint",
        description="Check policy, TestSuite, ConfigMap and Namespace files against their schemas (unknown "
                    "fields, types, apiVersion) and compile every policy's CEL. Nothing is evaluated.",
        epilog="Exit status: 0 clean, 1 when any problem was found, 2 for a usage error or a missing path.",
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="YAML file or directory (searched recursively)")
    return p


def main(argv: list[str]) -> int:
    """Run ``tollgate lint``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        problems, checked = lint_paths(args.paths)
    except InputError as e:
        print(f"tollgate lint: {e}", file=sys.stderr)
        return 2
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{checked} document(s) checked, no problems", file=sys.stderr)
    return 0
