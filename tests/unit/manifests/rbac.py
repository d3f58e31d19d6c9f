"""What each optional part may grant Tollgate's ServiceAccount, and a checker for rendered manifests.

install/ alone is held to ``test_least_privilege``'s tables; a component may add only the grants
listed here for it (and the Helm chart, rendered with the same options, exactly what kustomize
renders). :func:`rbac_problems` checks any rendered set of documents against install's grants
plus those of the parts it was rendered with.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.model import RBAC_REFERENCES

NAMESPACE = "tollgate-system"
SERVICE_ACCOUNT = "tollgate"
READ = frozenset({"get", "list", "watch"})
WATCH = frozenset({"list", "watch"})
REPORTS = frozenset({"get", "list", "create", "update", "delete"})

#: Cluster-wide grants of install/ (see test_least_privilege for why each is needed).
INSTALL_CLUSTER: dict[tuple[str, str], frozenset[str]] = {
    ("", "configmaps"): READ,
    ("", "namespaces"): READ,
    ("", "events"): frozenset({"create", "patch"}),
    ("tollgate.dev", "clusteradmissionpolicies"): READ,
    ("tollgate.dev", "admissionpolicies"): READ,
    ("tollgate.dev", "clusteradmissionpolicies/status"): frozenset({"patch"}),
    ("tollgate.dev", "admissionpolicies/status"): frozenset({"patch"}),
    ("tollgate.dev", "policyexceptions"): READ,
    ("tollgate.dev", "clusterpolicyexceptions"): READ,
    ("tollgate.dev", "policyexceptions/status"): frozenset({"patch"}),
    ("tollgate.dev", "clusterpolicyexceptions/status"): frozenset({"patch"}),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): frozenset({"get", "update", "patch"}),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): frozenset({"get", "update", "patch"}),
    # Imported policies (webhook/server/imports.py), read only.
    **{("admissionregistration.k8s.io", r): READ for r in (
        "validatingadmissionpolicies", "validatingadmissionpolicybindings",
        "mutatingadmissionpolicies", "mutatingadmissionpolicybindings")},
    **{("policies.kyverno.io", r): READ for r in ("validatingpolicies", "mutatingpolicies",
                                                 "namespacedvalidatingpolicies", "namespacedmutatingpolicies",
                                                 "policyexceptions")},
    ("templates.gatekeeper.sh", "constrainttemplates"): READ,
    ("constraints.gatekeeper.sh", "*"): READ,
}
#: The one wildcard allowed, read only: Gatekeeper's controller creates one constraint CRD per
#: ConstraintTemplate, so their resources cannot be named in advance (serve --import gatekeeper).
DYNAMIC_RESOURCES = frozenset({("constraints.gatekeeper.sh", "*")})
INSTALL_NAMESPACED: dict[tuple[str, str], frozenset[str]] = {
    ("coordination.k8s.io", "leases"): frozenset({"get", "create", "update"}),
}
#: Grants that must name their objects (resourceNames), whatever adds them.
PINNED: dict[tuple[str, str], tuple[str, ...]] = {
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): ("tollgate",),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): ("tollgate",),
    ("", "secrets"): ("tollgate-tls",),
}
#: What each component may add: (cluster-wide, in tollgate-system).
COMPONENT_GRANTS: dict[str, tuple[dict[tuple[str, str], frozenset[str]], dict[tuple[str, str], frozenset[str]]]] = {
    "background-audit": ({
        ("", "pods"): READ, ("", "replicationcontrollers"): READ,
        ("apps", "deployments"): READ, ("apps", "statefulsets"): READ, ("apps", "daemonsets"): READ,
        ("apps", "replicasets"): READ, ("batch", "jobs"): READ, ("batch", "cronjobs"): READ,
        ("apiextensions.k8s.io", "customresourcedefinitions"): READ,
        ("wgpolicyk8s.io", "policyreports"): REPORTS, ("wgpolicyk8s.io", "clusterpolicyreports"): REPORTS,
    }, {}),
    "references": ({("networking.k8s.io", "ingresses"): WATCH, ("apps", "deployments"): WATCH,
                    **{("rbac.authorization.k8s.io", r.resource): WATCH for r in RBAC_REFERENCES}}, {}),
    "self-managed": ({}, {("", "secrets"): frozenset({"get", "update", "patch"})}),
    "cert-manager": ({}, {}),
    "policy-reports": ({}, {}),
}


def grants(role: dict[str, Any]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """``(apiGroup, resource, verb, resourceNames)`` of every rule of a Role or ClusterRole."""
    out = []
    for rule in role.get("rules") or []:
        assert not rule.get("nonResourceURLs"), f"{role['metadata']['name']}: nonResourceURLs granted"
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    out.append((group, resource, verb, tuple(rule.get("resourceNames") or ())))
    return out


def _allowed(parts: tuple[str, ...], which: int) -> dict[tuple[str, str], set[str]]:
    allowed: dict[tuple[str, str], set[str]] = {}
    for key, verbs in (INSTALL_CLUSTER if which == 0 else INSTALL_NAMESPACED).items():
        allowed.setdefault(key, set()).update(verbs)
    for part in parts:
        for key, verbs in COMPONENT_GRANTS[part][which].items():
            allowed.setdefault(key, set()).update(verbs)
    return allowed


def rbac_problems(docs: list[dict[str, Any]], parts: tuple[str, ...]) -> list[str]:
    """Every grant beyond install/ plus ``parts``, every wildcard, unpinned grant or foreign binding."""
    problems = []
    for which, kind in ((0, "ClusterRole"), (1, "Role")):
        allowed = _allowed(parts, which)
        for role in (d for d in docs if d["kind"] == kind):
            name = role["metadata"]["name"]
            if kind == "Role" and role["metadata"].get("namespace") != NAMESPACE:
                problems.append(f"Role {name} outside {NAMESPACE}")
            for group, resource, verb, names in grants(role):
                if "*" in (group, resource, verb) and not ((group, resource) in DYNAMIC_RESOURCES and verb in READ):
                    problems.append(f"{kind} {name}: wildcard in {group}/{resource} {verb}")
                elif verb not in allowed.get((group, resource), set()):
                    problems.append(f"{kind} {name} grants {verb} on {group or 'core'}/{resource}")
                elif (group, resource) in PINNED and verb != "create" and names != PINNED[(group, resource)]:
                    problems.append(f"{kind} {name}: {verb} on {resource} not limited to {PINNED[(group, resource)]}")
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("ClusterRole", "Role")}
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        ref = binding["roleRef"]
        if (ref["kind"], ref["name"]) not in roles:
            problems.append(f"{binding['kind']} {binding['metadata']['name']} binds {ref['kind']} {ref['name']}, "
                            "not one of ours")
        if binding["subjects"] != [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]:
            problems.append(f"{binding['kind']} {binding['metadata']['name']} binds {binding['subjects']}")
    return problems


def rbac_of(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The RBAC objects by (kind, namespace, name): rules, or roleRef and subjects (labels left out)."""
    out = {}
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role"):
            body = {"rules": d.get("rules") or []}
        elif d["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            body = {"roleRef": d["roleRef"], "subjects": d["subjects"]}
        else:
            continue
        out[(d["kind"], d["metadata"].get("namespace") or "", d["metadata"]["name"])] = body
    return out
