"""``tollgate audit``: print the PolicyReports the background audit would write for resource files, offline.

    tollgate audit -p policies/ -r cluster-dump.yaml [-c configmaps.yaml] [-n namespaces.yaml] [-o yaml|json]

Same code path as the server's auditor: every resource is evaluated by
``webhook.audit.evaluate.evaluate_object`` (the admission engine on a
synthesized CREATE, one result per validation) against every policy with
``spec.background: true`` (``--all``: every policy), and the results are
grouped into one ``PolicyReport`` per namespace plus one
``ClusterPolicyReport`` by ``webhook.audit.evaluate.build_report``. A
namespaced object without ``metadata.namespace`` is placed in ``default``,
as ``kubectl apply`` would; the resource name comes from the kind (offline
there is no discovery). Output: multi-document YAML, or with ``-o json`` a
``v1`` ``List``. Exit status 2 on unusable input, else 0.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from webhook.audit.evaluate import (
    AuditResult,
    build_report,
    evaluate_object,
    not_auditable,
    not_auditable_result,
    report_meta,
    split_validations,
)
from webhook.cli.command import ExitStatus, Subparsers, add_command
from webhook.files.testsuite import load_resources, reference_objects
from webhook.files.yamlio import InputError, load_file
from webhook.policy import InMemoryLookups, compile_policy
from webhook.policy.lookups import Lookups
from webhook.policy.resources import plural

POLICY_KINDS = frozenset({"ClusterAdmissionPolicy", "AdmissionPolicy"})
#: Built-in cluster-scoped kinds (everything else is treated as namespaced).
CLUSTER_KINDS = frozenset({
    "Namespace", "Node", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding",
    "CustomResourceDefinition", "PriorityClass", "IngressClass", "RuntimeClass", "CSIDriver", "CSINode",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "APIService", "ClusterAdmissionPolicy", "ClusterPolicyReport",
})


def _documents(paths: list[Path]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        for f in files:
            out.extend(doc.obj for doc in load_file(f))
    return out


def audit_documents(policy_docs: list[dict[str, Any]], resource_docs: list[dict[str, Any]], lookups: Lookups, *,
                    include_all: bool = False, now: int = 0) -> list[dict[str, Any]]:
    """The reports the background audit would write for ``resource_docs``.

    Args:
        policy_docs: ClusterAdmissionPolicy / AdmissionPolicy CRs.
        resource_docs: the objects to audit (policy CRs among them are ignored).
        lookups: Namespaces and ConfigMaps the policies may read.
        include_all: audit every policy, not only those with ``spec.background: true``.
        now: Unix seconds stamped on results.

    Returns:
        PolicyReports (namespaces in name order), then the ClusterPolicyReport if it has results.

    Raises:
        InputError: a policy is not Ready (with its status message).
    """
    results: dict[str | None, list[AuditResult]] = {}
    audited = []
    for doc in policy_docs:
        compiled = compile_policy(doc).policy
        if compiled is None:
            cond = compile_policy(doc).condition
            raise InputError(f"policy {(doc.get('metadata') or {}).get('name')} is not Ready "
                             f"({cond['reason']}): {cond['message']}")
        if not (compiled.spec.background or include_all):
            continue
        reason = not_auditable(compiled.spec)
        if reason is not None:
            note = not_auditable_result(doc, reason, now=now)
            results.setdefault(compiled.spec.namespace, []).append(note)
            continue
        audited.append((compiled, report_meta(doc), split_validations(compiled)))
    audited.sort(key=lambda a: a[0].key)
    for raw in resource_docs:
        kind = str(raw.get("kind") or "")
        if kind in POLICY_KINDS or not kind:
            continue
        obj = raw
        if kind not in CLUSTER_KINDS and not (raw.get("metadata") or {}).get("namespace"):
            obj = copy.deepcopy(raw)
            obj.setdefault("metadata", {})["namespace"] = "default"
        group, _, version = str(obj.get("apiVersion") or "v1").rpartition("/")
        for compiled, meta, parts in audited:
            for r in evaluate_object(compiled, obj, group=group, version=version, resource=plural(kind), kind=kind,
                                     lookups=lookups, meta=meta, now=now, parts=parts):
                results.setdefault(r.resource.namespace, []).append(r)
    namespaces = sorted(ns for ns in results if ns)
    reports = [build_report(ns, results[ns]) for ns in namespaces]
    if results.get(None):
        reports.append(build_report(None, results[None]))
    return reports


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate audit``."""
    p = add_command(
        sub, "audit", run, help="print the PolicyReports the background audit would write (offline)",
        description="Print the PolicyReports / ClusterPolicyReports the background audit would write for the "
                    "given resources, with the server's engine (policies with spec.background: true).")
    p.add_argument("-p", "--policy", action="append", type=Path, required=True,
                   help="policy file (multi-document YAML) or directory; repeatable")
    p.add_argument("-r", "--resource", action="append", type=Path, required=True,
                   help="resource file (multi-document YAML) or directory; repeatable")
    p.add_argument("-c", "--configmap", action="append", type=Path, default=[],
                   help="ConfigMaps standing in for the params cache")
    p.add_argument("-n", "--namespace-file", action="append", type=Path, default=[],
                   help="Namespaces standing in for the Namespace cache")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format (default yaml)")
    p.add_argument("--all", action="store_true", help="audit every policy, not only spec.background: true ones")


def run(args: argparse.Namespace) -> int:
    """Run ``tollgate audit``; returns the exit status (0, or 2 on unusable input)."""
    try:
        policies = [d for d in _documents(args.policy) if d.get("kind") in POLICY_KINDS]
        if not policies:
            raise InputError(f"no ClusterAdmissionPolicy or AdmissionPolicy found in "
                             f"{', '.join(map(str, args.policy))}")
        lookups = InMemoryLookups(
            namespaces=[d for d in _documents(args.namespace_file) if d.get("kind") == "Namespace"],
            configmaps=[d for d in _documents(args.configmap) if d.get("kind") == "ConfigMap"],
            # The resources are the cluster: they are also the caches policies' spec.references read.
            objects=reference_objects(load_resources(args.resource)))
        reports = audit_documents(policies, _documents(args.resource), lookups, include_all=args.all,
                                  now=int(time.time()))
    except InputError as e:
        print(f"tollgate audit: {e}", file=sys.stderr)
        return ExitStatus.USAGE
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": reports}, indent=2))
    else:
        sys.stdout.write(yaml.safe_dump_all(reports, sort_keys=False) if reports else "")
    return ExitStatus.OK
