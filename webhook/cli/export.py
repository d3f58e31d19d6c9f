"""``tollgate export``: Tollgate policies as Kubernetes ValidatingAdmissionPolicy / MutatingAdmissionPolicy + bindings.

Reads every ClusterAdmissionPolicy / AdmissionPolicy of the files given
(directories recursively; other documents are ignored) and prints, for each
policy that uses only what the API server's in-tree admission policies can
express, its ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
(validations, auditAnnotations) and its MutatingAdmissionPolicy and
MutatingAdmissionPolicyBinding (mutations), as ``kubectl apply -f`` reads them.
For every other policy, one line per feature that blocks it, on stderr::

    policy.yaml:1: document 1: ClusterAdmissionPolicy unique-host: spec.references: reading cached objects ...

The mapping is :mod:`webhook.formats.kubernetes.export`'s. Exit status: 0 every policy
exported; 1 some exported, others blocked; 2 nothing exported (every policy
blocked, none found) or unusable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from webhook.cli.command import ExitStatus, Subparsers, add_command
from webhook.files.checks import schema_problems
from webhook.files.imported import ImportedDocument, import_documents
from webhook.files.yamlio import Document, InputError, load_paths, parse_path
from webhook.formats.kubernetes.export import MUTATING_VERSIONS, export_policy
from webhook.policy.vocabulary import POLICY_KINDS

__all__ = ["add_parser", "render", "run"]


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate export``."""
    p = add_command(
        sub, "export", run, help="render policies as Kubernetes ValidatingAdmissionPolicy/MutatingAdmissionPolicy",
        description="Render each policy as admissionregistration.k8s.io ValidatingAdmissionPolicy + binding (and "
                    "MutatingAdmissionPolicy + binding for mutations) when it uses only what the API server can "
                    "express; otherwise name each feature that blocks it (stderr).",
        epilog="Exit status: 0 every policy exported, 1 some blocked (the others printed), 2 nothing exported or "
               "unusable input.",
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="YAML file or directory (searched recursively)")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml",
                   help="yaml: a multi-document stream (default); json: a v1 List")
    p.add_argument("--mutating-version", choices=MUTATING_VERSIONS, default="v1",
                   help="apiVersion of MutatingAdmissionPolicy: v1 (Kubernetes 1.36+, default) or v1beta1 (1.34+)")


class _Dumper(yaml.SafeDumper):
    """Writes a multi-line string (an expression as its author wrote it) as a ``|`` block."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text and not any(line != line.rstrip() for line in text.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def render(objects: list[dict[str, Any]], output: str) -> str:
    """``objects`` as a YAML stream or a JSON ``v1`` List (what ``kubectl apply -f`` reads)."""
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=120) if objects else ""


def _gatekeeper_policies(docs: list[Document]) -> list[Document]:
    """Each Gatekeeper constraint with its template as the ClusterAdmissionPolicy it is served as.

    Named ``<kind lower>-<constraint>`` (a Kubernetes object name); one Tollgate cannot honour is refused.

    Raises:
        InputError: an imported document without a name, or defined twice.
    """
    imported = import_documents(docs)
    out: list[Document] = []
    for doc in imported.documents:
        if doc.imported is None or doc.imported.policy.kind != "ConstraintTemplate":
            continue
        if doc.problems:
            raise InputError(doc.problems[0])
        assert doc.imported.binding is not None
        name = f"{doc.imported.binding.kind.lower()}-{doc.imported.binding.name}"
        out.append(ImportedDocument(doc.source, doc.index, {**doc.obj, "metadata": {**doc.obj["metadata"],
                                                                                    "name": name}},
                                    doc.node, doc.item, imported=doc.imported, located=doc.located))
    return out


def run(args: argparse.Namespace) -> int:
    """Run ``tollgate export``; returns the exit status (0 all exported, 1 some blocked, 2 none exported)."""
    exported: list[dict[str, Any]] = []
    policies = blocked = 0
    try:
        docs = list(load_paths(args.paths))
        for doc in [*docs, *_gatekeeper_policies(docs)]:
            if doc.kind not in POLICY_KINDS:
                continue
            policies += 1
            problems = schema_problems(doc)
            if problems:
                blocked += 1
                for line in problems:
                    print(line, file=sys.stderr)
                continue
            result = export_policy(doc.obj, mutating_version=args.mutating_version)
            for note in result.notes:
                print(f"{doc.where(parse_path(note.split(':', 1)[0]))}: {doc.display_name}: note: {note}",
                      file=sys.stderr)
            if result.blockers:
                blocked += 1
                for blocker in result.blockers:
                    print(f"{doc.where(parse_path(blocker.path))}: {doc.display_name}: cannot be exported: {blocker}",
                          file=sys.stderr)
                continue
            exported += result.objects
    except InputError as e:
        print(f"tollgate export: {e}", file=sys.stderr)
        return ExitStatus.USAGE
    if not policies:
        print("tollgate export: no ClusterAdmissionPolicy or AdmissionPolicy found", file=sys.stderr)
        return ExitStatus.USAGE
    sys.stdout.write(render(exported, args.output))
    if blocked == policies:
        print(f"tollgate export: nothing exported: {blocked} polic{'y' if blocked == 1 else 'ies'} blocked",
              file=sys.stderr)
        return ExitStatus.USAGE
    if blocked:
        print(f"tollgate export: {policies - blocked} of {policies} policies exported, {blocked} blocked",
              file=sys.stderr)
        return ExitStatus.FINDINGS
    return ExitStatus.OK
