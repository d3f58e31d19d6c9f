"""``tollgate audit``: print the PolicyReports the background audit would write, for files or a live cluster.

    tollgate audit -p POLICIES -r RESOURCES [-c CONFIGMAPS] [-n NAMESPACES] [--all] [-o yaml|json]
    tollgate audit -p POLICIES --kubeconfig [PATH] [--context NAME] [--all] [-o yaml|json]

The server's background audit, run once: every policy CR is decided by
``webhook.audit.evaluate.audit_policy`` (Ready, ``spec.background: true`` —
``--all``: every policy — and auditable), every audited policy is evaluated
by ``evaluate_policy`` on the objects it selects, and the rows are built into
one ``PolicyReport`` per namespace plus one ``ClusterPolicyReport`` by
``webhook.audit.reports.build_reports``.

The objects come from files (``-r``; read by ``webhook.files``; a namespaced
object without ``metadata.namespace`` is in ``default``, as ``kubectl apply``
puts it; the resources are the cluster, so they are also what
``spec.references`` and the Namespace cache read) or from the cluster
(``--kubeconfig``: discovery resolves the policies' rules to resources, each
listed once, page by page, with the Namespaces, the params ConfigMaps and the
``spec.references`` resources the policies read; ``webhook.kube.live``).

Everything not audited is said on stderr, one line each: policies without
``spec.background: true``, policies that are not Ready or not auditable,
resources that could not be listed (RBAC). Output: multi-document YAML, or
with ``-o json`` a ``v1`` ``List``. Exit status (Kyverno's ``apply`` and
``tollgate test`` use the same first two):

- 0: every audited object passed (or was skipped by a matchCondition);
- 1: a report holds a ``fail`` or ``error`` result;
- 2: usage error, unusable input, or input left unaudited: nothing could be
  audited (no policy with ``spec.background: true``, none auditable, or no
  ``-r`` resource selected by any), a policy is not Ready, or a resource could
  not be listed. The reports of what could be audited are still printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.audit.auditable import reads_namespace_object
from webhook.audit.evaluate import (
    AuditedPolicy,
    AuditResult,
    Skipped,
    StoredObject,
    audit_policy,
    audit_rules,
    evaluate_policy,
    policy_note,
)
from webhook.audit.reports import SUMMARY_RESULTS, build_reports
from webhook.cli.command import ExitStatus, Subparsers, UsageError, add_command
from webhook.files.imported import policy_documents
from webhook.files.inputs import (
    load_exceptions,
    load_kind,
    load_resources,
    reference_objects,
    select_params,
)
from webhook.files.yamlio import Document, InputError
from webhook.informer.discovered import DEFAULT_EXCLUDE
from webhook.informer.gvr import GVR, DiscoverySnapshot, resolve_rules
from webhook.policy import InMemoryLookups
from webhook.policy.exceptions import ExceptionSet
from webhook.policy.labelquery import parse_label_selector_text
from webhook.policy.lookups import Lookups
from webhook.policy.model import Reference
from webhook.policy.resources import CONFIGMAPS, NAMESPACES, Resource
from webhook.policy.vocabulary import Result
from webhook.server.settings import DEFAULTS

if TYPE_CHECKING:  # webhook.kube is imported only when a cluster is audited (it loads kubernetes_asyncio)
    from webhook.kube.live import ListRequest

#: Policy names listed in one stderr line before "and N more".
NAMES_SHOWN = 5


@dataclass(slots=True)
class Run:
    """What one ``tollgate audit`` did: its rows, and every line it owes the user on stderr."""

    audited: list[AuditedPolicy] = field(default_factory=list)
    results: list[AuditResult] = field(default_factory=list)
    #: objects evaluated by at least one policy (selected, or skipped by a matchCondition).
    objects: int = 0
    #: lines that make the exit status 2 (input that could not be used or was left unaudited).
    problems: list[str] = field(default_factory=list)
    #: lines that inform without changing the exit status.
    notes: list[str] = field(default_factory=list)
    #: the PolicyExceptions read with the policies (applied as the server's background audit applies them).
    exceptions: ExceptionSet = field(default_factory=ExceptionSet)


# -- policies ---------------------------------------------------------------------------------------------


def _names(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:NAMES_SHOWN])
    return f"{shown} and {len(keys) - NAMES_SHOWN} more" if len(keys) > NAMES_SHOWN else shown


def decide_policies(docs: Iterable[Document], run: Run, *, every_policy: bool, now: int) -> None:
    """Decide every policy CR (``audit_policy``); record the audited ones and say why each other one is not.

    A not-Ready policy is a problem (exit 2), as ``tollgate test`` refuses it; an auditable-in-principle
    policy that is not auditable gets the server's ``skip`` row about itself, and a note.

    Raises:
        InputError: no policy, or two with the same kind and key.
    """
    seen: dict[tuple[str, str], Document] = {}
    skipped: dict[Skipped, list[str]] = {why: [] for why in Skipped}
    for doc in docs:
        decision = audit_policy(doc.obj, every_policy=every_policy)
        key = (doc.kind, decision.key)
        if key in seen:
            raise InputError(f"{doc.where()}: {doc.display_name}: defined twice (first in {seen[key].where()})")
        seen[key] = doc
        if isinstance(decision, AuditedPolicy):
            run.audited.append(decision)
            continue
        skipped[decision.why].append(decision.key)
        if decision.why is Skipped.NOT_READY:
            run.problems.append(f"{doc.where()}: policy {decision.key} is not Ready: {decision.reason}")
        elif decision.why is Skipped.NOT_AUDITABLE:
            run.notes.append(f"policy {decision.key} is not auditable: {decision.reason}")
            run.results.append(decision.note(now))
    if not seen:
        raise InputError("no ClusterAdmissionPolicy or AdmissionPolicy found")
    run.audited.sort(key=lambda a: a.key)
    not_background = sorted(skipped[Skipped.NOT_BACKGROUND])
    if run.audited:
        if not_background:
            run.notes.append(f"{len(not_background)} of {len(seen)} policies not audited: spec.background is not "
                             f"true (--all audits them): {_names(not_background)}")
    elif len(not_background) == len(seen):
        run.problems.append(f"nothing audited: no policy has spec.background: true ({len(seen)} read: "
                            f"{_names(not_background)}; --all audits them anyway)")
    else:
        counts = ", ".join(f"{len(keys)} {why}" for why, keys in skipped.items() if keys)
        run.problems.append(f"nothing audited: none of the {len(seen)} policies can be audited ({counts})")


def _evaluate(run: Run, objects: Iterable[StoredObject], wanted: dict[str, frozenset[GVR]] | None,
              lookups: Lookups, now: int) -> None:
    """Every audited policy over ``objects`` (only the GVRs it wants, when ``wanted`` is given)."""
    evaluated: set[int] = set()
    stored = [o for o in objects if (o.gvr.group, o.gvr.resource) not in DEFAULT_EXCLUDE]
    for audited in run.audited:
        mine = stored if wanted is None else [o for o in stored if o.gvr in wanted.get(audited.key, ())]
        for one, rows in evaluate_policy(audited, mine, lookups, now=now, exceptions=run.exceptions):
            if rows:
                evaluated.add(id(one))
                run.results.extend(rows)
    run.objects = len(evaluated)


# -- objects from files -------------------------------------------------------------------------------------


def audit_files(run: Run, resources: list[Path], configmaps: list[Path], namespaces: list[Path], *,
                params_selector: str, now: int) -> None:
    """Audit the ``-r`` files: the resources are the cluster (also the references', Namespace and params caches).

    Raises:
        InputError: unusable files (one line naming file and location).
    """
    docs = load_resources(resources)
    if not docs:
        raise InputError(f"no resources found in {', '.join(map(str, resources))}")
    by_reference = reference_objects(docs)
    objects = [StoredObject(GVR(ref.group, ref.version, ref.resource), str(obj.get("kind", "")), obj)
               for ref, objs in by_reference.items() for obj in objs]
    params, warnings = select_params(load_kind(configmaps, "ConfigMap"), params_selector)
    run.notes += [f"warning: {w}" for w in warnings]
    # ConfigMaps among the resources are the cluster's too: those with the params label are in the params
    # cache as on the server (the others are only audited, so no warning for them).
    params += select_params([d for d in docs if d.kind == "ConfigMap"], params_selector)[0]
    namespace_objects = [d.obj for d in load_kind(namespaces, "Namespace")]
    namespace_objects += by_reference.get(Reference(NAMESPACES.api_version, NAMESPACES.plural), [])
    lookups = InMemoryLookups(namespaces=namespace_objects, configmaps=params, objects=by_reference)
    _evaluate(run, objects, None, lookups, now)
    if run.audited and not run.objects:
        run.problems.append(f"nothing audited: none of the {len(objects)} resources is selected by the audited "
                            f"policies ({_names([a.key for a in run.audited])})")


# -- objects from the cluster -------------------------------------------------------------------------------


def wanted_gvrs(audited: Sequence[AuditedPolicy], snapshot: DiscoverySnapshot) -> dict[str, frozenset[GVR]]:
    """Policy key → the GVRs its audit rules resolve to, less what background audit never informs.

    The same resolution as the server's dynamic informers (``resolve_rules`` minus ``DEFAULT_EXCLUDE``).
    """
    return {a.key: frozenset(g for g in resolve_rules(audit_rules(a.policy.spec), snapshot)
                             if (g.group, g.resource) not in DEFAULT_EXCLUDE) for a in audited}


def _gvr(resource: Resource) -> GVR:
    return GVR(resource.group, resource.version, resource.plural)


def _cache_readers(audited: Sequence[AuditedPolicy], params_selector: str) -> dict[ListRequest, list[str]]:
    """The caches the policies read, each as the LIST that fills it → the keys of the policies reading it.

    Namespaces for a ``namespaceSelector`` or ``namespaceObject``, the params ConfigMaps (those the params
    selector selects, as the server caches them) for a ``paramRef``, and every ``spec.references`` resource.
    """
    from webhook.kube.live import ListRequest

    out: dict[ListRequest, list[str]] = {}
    for a in audited:
        spec = a.policy.spec
        if not spec.namespace_selector.empty or reads_namespace_object(a.policy):
            out.setdefault(ListRequest(_gvr(NAMESPACES)), []).append(a.key)
        if spec.param_ref is not None:
            out.setdefault(ListRequest(_gvr(CONFIGMAPS), params_selector), []).append(a.key)
        for r in spec.references:
            out.setdefault(ListRequest(GVR(r.group, r.version, r.resource)), []).append(a.key)
    return out


async def _audit_cluster(run: Run, kubeconfig: str | None, context: str | None, *, params_selector: str,
                         now: int) -> None:
    from webhook.kube.client import new_api_client
    from webhook.kube.live import ListRequest, discover, list_each

    api = await new_api_client(kubeconfig=kubeconfig, context=context)
    try:
        snapshot, failed = await discover(api)
        run.notes += [f"discovery: {gv} is unavailable: {why}" for gv, why in sorted(failed.items())]
        wanted = wanted_gvrs(run.audited, snapshot)
        for key, gvrs in wanted.items():
            if not gvrs:
                run.notes.append(f"policy {key} selects no resource this cluster serves")
        references = {r for a in run.audited for r in a.policy.spec.references}
        readers = _cache_readers(run.audited, params_selector)
        requests = {ListRequest(g) for gvrs in wanted.values() for g in gvrs} | set(readers)
        listed, refused = await list_each(api, requests)
    finally:
        await api.close()
    for request, why in sorted(refused.items()):
        users = sorted(k for k, gvrs in wanted.items() if request.gvr in gvrs)
        effect = [f"not audited for {_names(users)}"] if users else []
        if readers.get(request):
            effect.append(f"read as empty by {_names(readers[request])}")
        run.problems.append(f"cannot list {request}: {why} ({'; '.join(effect)})")
        for a in run.audited:
            if a.key in users:
                run.results.append(policy_note(a.policy_object, f"cannot list {request}: {why}", now=now))
    lookups = InMemoryLookups(
        namespaces=listed.get(ListRequest(_gvr(NAMESPACES)), []),
        configmaps=listed.get(ListRequest(_gvr(CONFIGMAPS), params_selector), []),
        objects={r: listed.get(ListRequest(GVR(r.group, r.version, r.resource)), []) for r in references})
    objects = [StoredObject(request.gvr, snapshot.kind(request.gvr) or "", obj)
               for request, objs in sorted(listed.items()) if not request.label_selector
               and any(request.gvr in gvrs for gvrs in wanted.values()) for obj in objs]
    _evaluate(run, objects, wanted, lookups, now)
    if run.audited and not run.objects:
        run.notes.append("no object in the cluster is selected by the audited policies")


def audit_cluster(run: Run, kubeconfig: str | None, context: str | None, *, params_selector: str, now: int) -> None:
    """Audit the live objects of the cluster ``kubeconfig``/``context`` names (None: the default kubeconfig).

    Raises:
        UsageError: no usable configuration, or the API server cannot be reached or refuses discovery.
    """
    from webhook.informer.errors import ListWatchError

    try:
        asyncio.run(_audit_cluster(run, kubeconfig, context, params_selector=params_selector, now=now))
    except ListWatchError as e:
        raise UsageError(f"cannot read the cluster's discovery documents: {e}") from None
    except Exception as e:
        # kubernetes_asyncio.config.ConfigException, matched by name: only webhook.kube imports kubernetes_asyncio.
        if any(t.__name__ == "ConfigException" for t in type(e).__mro__):
            raise UsageError(f"no Kubernetes configuration: {e}") from None
        raise


# -- the command --------------------------------------------------------------------------------------------


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate audit``."""
    p = add_command(
        sub, "audit", run, help="print the PolicyReports the background audit would write (files or a cluster)",
        description="Print the PolicyReports / ClusterPolicyReports the background audit would write, with the "
                    "server's engine, for resource files (-r) or the live objects of a cluster (--kubeconfig). "
                    "Policies with spec.background: true are audited (--all: every policy).",
        epilog="Exit status: 0 every audited object passed, 1 a fail or error result, 2 usage error, unusable "
               "input, or input left unaudited (said on stderr). See docs/audit.md.")
    p.add_argument("-p", "--policy", action="append", type=Path, required=True,
                   help="policy file (multi-document YAML) or directory; repeatable")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-r", "--resource", action="append", type=Path,
                        help="resource file (multi-document YAML) or directory; repeatable")
    source.add_argument("--kubeconfig", nargs="?", const="", metavar="PATH",
                        help="audit the cluster's live objects (PATH, or $KUBECONFIG / ~/.kube/config when omitted)")
    p.add_argument("--context", help="kubeconfig context (with --kubeconfig)")
    p.add_argument("-c", "--configmap", action="append", type=Path, default=[],
                   help="ConfigMaps standing in for the params cache (with -r)")
    p.add_argument("-n", "--namespace-file", action="append", type=Path, default=[],
                   help="Namespaces standing in for the Namespace cache (with -r; Namespaces among the resources "
                        "count too)")
    p.add_argument("--params-selector", default=DEFAULTS.params_selector,
                   help=f"label selector a ConfigMap needs to be a param, as on the server "
                        f"(default {DEFAULTS.params_selector})")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format (default yaml)")
    p.add_argument("--all", action="store_true", help="audit every policy, not only spec.background: true ones")


def _check_arguments(args: argparse.Namespace) -> None:
    if args.kubeconfig is None and args.context:
        raise UsageError("--context needs --kubeconfig")
    if args.kubeconfig is not None and (args.configmap or args.namespace_file):
        raise UsageError("--configmap and --namespace-file stand in for a cluster's caches: with --kubeconfig "
                         "they are read from the cluster")
    if args.kubeconfig and not Path(args.kubeconfig).expanduser().is_file():
        raise UsageError(f"--kubeconfig {args.kubeconfig}: no such file")
    if args.kubeconfig == "" and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        # Fail in one line before kubernetes_asyncio's loader, which prints its own complaint first.
        candidates = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        candidates = candidates or [str(Path("~/.kube/config").expanduser())]
        if not any(Path(c).expanduser().is_file() for c in candidates):
            raise UsageError(f"no Kubernetes configuration: not in a cluster and no kubeconfig "
                             f"({', '.join(candidates)} not found); give --kubeconfig PATH")
    try:
        parse_label_selector_text(args.params_selector)
    except ValueError as e:
        raise UsageError(f"--params-selector: {e}") from None


def _write(reports: list[dict[str, Any]], output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": reports}, indent=2) + "\n")
    elif reports:
        sys.stdout.write(yaml.safe_dump_all(reports, sort_keys=False))
    sys.stdout.flush()


def _summary(run: Run) -> str:
    counts = dict.fromkeys(SUMMARY_RESULTS, 0)
    for row in run.results:
        counts[Result(row.result)] += 1
    policies = f"{len(run.audited)} polic{'y' if len(run.audited) == 1 else 'ies'}"
    objects = f"{run.objects} object{'' if run.objects == 1 else 's'}"
    return f"audited {policies} on {objects}: " + ", ".join(f"{k} {v}" for k, v in counts.items())


def run(args: argparse.Namespace) -> int:
    """Run ``tollgate audit``; returns the exit status (see the module docstring: 0, 1 or 2)."""
    _check_arguments(args)
    now = int(time.time())
    result = Run()
    try:
        decide_policies(policy_documents(args.policy, result.notes), result, every_policy=args.all, now=now)
        result.exceptions = load_exceptions(args.policy)
        if result.audited:
            if args.resource is not None:
                audit_files(result, args.resource, args.configmap, args.namespace_file,
                            params_selector=args.params_selector, now=now)
            else:
                audit_cluster(result, args.kubeconfig or None, args.context, params_selector=args.params_selector,
                              now=now)
    except InputError as e:
        raise UsageError(str(e)) from None
    _write(build_reports(result.results), args.output)
    for line in [*result.notes, *result.problems]:
        print(f"tollgate audit: {line}", file=sys.stderr)
    if result.audited:
        print(f"tollgate audit: {_summary(result)}", file=sys.stderr)
    if result.problems:
        return ExitStatus.USAGE
    if any(r.result in (Result.FAIL, Result.ERROR) for r in result.results):
        return ExitStatus.FINDINGS
    return ExitStatus.OK
