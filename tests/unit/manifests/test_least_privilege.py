"""Least privilege and fail-safe settings of manifests/ (issue 7, item 7).

Parses manifests/install/ (everything but crds/, which another part of the
project owns) and the webhook configurations the leader generates for the
shipped policies (``webhook.policy.webhook_configs`` over policies/), and fails when:

* RBAC grants more than get/list/watch on the cached resources, patch on the
  policy ``/status`` subresources, get/update/patch on the two webhook
  configurations named ``tollgate`` (by ``resourceNames``, never create), and
  get/create/update on Leases in ``tollgate-system``; or any wildcard,
  nonResourceURL or extra verb;
* the Deployment could run as root, with a writable root filesystem, with
  privilege escalation, capabilities, host namespaces, or without resource
  requests and limits;
* a generated webhook entry lacks ``sideEffects: NoneOnDryRun``, an explicit
  ``failurePolicy``, ``timeoutSeconds`` <= 10, or a namespaceSelector that
  keeps ``tollgate-system`` (and ``kube-system``) out;
* the probes or webhook paths are not routes of the app ``create_app`` builds,
  or the Deployment's / Dockerfile's ``tollgate serve`` arguments do not parse.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.manifests.kustomize import deployments
from tests.unit.manifests.rbac import grants, rbac_problems
from webhook.formats.kinds import IMPORT_KINDS

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "manifests"
INSTALL = MANIFESTS / "install"
NAMESPACE = "tollgate-system"
SERVICE_ACCOUNT = "tollgate"

# (apiGroup, resource) -> the verbs Tollgate may hold, and whether the grant may
# be cluster-wide (ClusterRole) or only in tollgate-system (Role).
CACHED = frozenset({"get", "list", "watch"})
STATUS = frozenset({"patch"})
LEASE = frozenset({"get", "create", "update"})
EVENTS = frozenset({"create", "patch"})
WEBHOOK_CONFIGS = frozenset({"get", "update", "patch"})
WEBHOOK_CONFIG_NAME = "tollgate"
ALLOWED_CLUSTER: dict[tuple[str, str], frozenset[str]] = {
    ("", "configmaps"): CACHED,
    ("", "namespaces"): CACHED,
    # Events on the objects of denied and warned requests (webhook/kube/events.py): create, patch a repeat.
    ("", "events"): EVENTS,
    ("tollgate.dev", "clusteradmissionpolicies"): CACHED,
    ("tollgate.dev", "admissionpolicies"): CACHED,
    ("tollgate.dev", "clusteradmissionpolicies/status"): STATUS,
    ("tollgate.dev", "admissionpolicies/status"): STATUS,
    ("tollgate.dev", "policyexceptions"): CACHED,
    ("tollgate.dev", "clusterpolicyexceptions"): CACHED,
    ("tollgate.dev", "policyexceptions/status"): STATUS,
    ("tollgate.dev", "clusterpolicyexceptions/status"): STATUS,
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): WEBHOOK_CONFIGS,
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): WEBHOOK_CONFIGS,
    # Imported policies (webhook/server/imports.py): read only.
    **{("admissionregistration.k8s.io", r): CACHED for r in (
        "validatingadmissionpolicies", "validatingadmissionpolicybindings", "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings")},
    **{("policies.kyverno.io", r): CACHED for r in ("validatingpolicies", "mutatingpolicies",
                                                   "namespacedvalidatingpolicies", "namespacedmutatingpolicies",
                                                   "policyexceptions")},
    ("templates.gatekeeper.sh", "constrainttemplates"): CACHED,
    ("constraints.gatekeeper.sh", "*"): CACHED,
}
#: The one wildcard allowed, read only: one constraint CRD per ConstraintTemplate, unknown in advance.
DYNAMIC_RESOURCES = frozenset({("constraints.gatekeeper.sh", "*")})
#: Grants that must name their objects: nothing else in the cluster may be touched.
PINNED_CLUSTER = {
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): (WEBHOOK_CONFIG_NAME,),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): (WEBHOOK_CONFIG_NAME,),
}
ALLOWED_NAMESPACED: dict[tuple[str, str], frozenset[str]] = {
    ("coordination.k8s.io", "leases"): LEASE,
}
# What the server actually uses, so the RBAC must not be *less* either: informers
# list/watch, StatusWriter PATCHes .../status, the reconciler GETs and PUTs the configurations.
REQUIRED_CLUSTER: dict[tuple[str, str], frozenset[str]] = {
    ("", "configmaps"): frozenset({"list", "watch"}),
    ("", "namespaces"): frozenset({"list", "watch"}),
    ("tollgate.dev", "clusteradmissionpolicies"): CACHED,
    ("tollgate.dev", "admissionpolicies"): CACHED,
    ("tollgate.dev", "clusteradmissionpolicies/status"): frozenset({"patch"}),
    ("tollgate.dev", "admissionpolicies/status"): frozenset({"patch"}),
    ("tollgate.dev", "policyexceptions"): frozenset({"list", "watch"}),
    ("tollgate.dev", "clusterpolicyexceptions"): frozenset({"list", "watch"}),
    ("tollgate.dev", "policyexceptions/status"): frozenset({"patch"}),
    ("tollgate.dev", "clusterpolicyexceptions/status"): frozenset({"patch"}),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): frozenset({"get", "update"}),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): frozenset({"get", "update"}),
    # The imported kinds' informers list and watch every kind they import (webhook.formats.kinds).
    **{(k.group, k.plural): frozenset({"list", "watch"}) for k in IMPORT_KINDS},
    ("constraints.gatekeeper.sh", "*"): frozenset({"list", "watch"}),  # webhook/server/constraints.py
}


def _kustomization() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((INSTALL / "kustomization.yaml").read_text())
    return loaded


def _documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for entry in _kustomization()["resources"]:
        path = INSTALL / entry
        if entry == "../crds" or path.is_dir():
            continue  # crds/ (its own kustomization, owned elsewhere)
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in _documents() if d.get("kind") == kind]


def _one(kind: str) -> dict[str, Any]:
    found = _of_kind(kind)
    assert len(found) == 1, f"expected exactly one {kind}, found {len(found)}"
    return found[0]


def test_kustomization_lists_existing_files_and_crds() -> None:
    resources = _kustomization()["resources"]
    assert "../crds" in resources, "the CRDs must be part of `kubectl apply -k manifests/`"
    for entry in resources:
        if entry != "../crds":
            assert (INSTALL / entry).is_file(), entry
    on_disk = {p.name for p in INSTALL.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk <= set(resources), f"manifests not in kustomization.yaml: {on_disk - set(resources)}"
    root = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert root["resources"] == ["install"], "manifests/ is install/ plus the certificate Secret"
    [secret] = root["secretGenerator"]
    assert secret["name"] == _secret_volume_name()
    assert sorted(f.split("=")[0] for f in secret["files"]) == ["ca.crt", "tls.crt", "tls.key"]


def _secret_volume_name() -> str:
    volumes = _pod_spec()["volumes"]
    [secret] = [v["secret"]["secretName"] for v in volumes if "secret" in v]
    return str(secret)


@pytest.mark.parametrize("kind", ["ClusterRole", "Role"])
def test_rbac_has_no_wildcards(kind: str) -> None:
    for role in _of_kind(kind):
        for group, resource, verb, _ in grants(role):
            if (group, resource) in DYNAMIC_RESOURCES and verb in CACHED:
                continue
            assert "*" not in (group, resource, verb), (
                f"{kind} {role['metadata']['name']}: wildcard in {group}/{resource} {verb}"
            )


def test_cluster_role_grants_only_cache_reads_status_and_webhook_config_writes() -> None:
    granted: dict[tuple[str, str], set[str]] = {}
    for role in _of_kind("ClusterRole"):
        for group, resource, verb, names in grants(role):
            allowed = ALLOWED_CLUSTER.get((group, resource))
            assert allowed is not None, f"ClusterRole grants {verb} on {group or 'core'}/{resource}"
            assert verb in allowed, (
                f"ClusterRole grants {verb} on {group or 'core'}/{resource}; allowed: {sorted(allowed)}"
            )
            pinned = PINNED_CLUSTER.get((group, resource))
            if pinned is not None:
                assert names == pinned, f"{verb} on {resource} must be limited to resourceNames {list(pinned)}"
            granted.setdefault((group, resource), set()).add(verb)
    for key, verbs in REQUIRED_CLUSTER.items():
        assert verbs <= granted.get(key, set()), f"server needs {sorted(verbs)} on {key}"


def test_roles_only_handle_leases_in_own_namespace() -> None:
    roles = _of_kind("Role")
    assert roles, "leader election needs a Role for Leases"
    granted: set[str] = set()
    for role in roles:
        assert role["metadata"]["namespace"] == NAMESPACE
        for group, resource, verb, names in grants(role):
            allowed = ALLOWED_NAMESPACED.get((group, resource))
            assert allowed is not None and verb in allowed, f"Role grants {verb} on {group}/{resource}"
            if verb != "create":
                # create cannot be narrowed by name; everything else can and must be
                assert names, f"Role grants {verb} on every Lease in {NAMESPACE}"
            granted.add(verb)
    assert granted >= LEASE


def test_bindings_bind_only_our_roles_to_our_service_account() -> None:
    role_names = {r["metadata"]["name"] for r in _of_kind("ClusterRole") + _of_kind("Role")}
    bindings = _of_kind("ClusterRoleBinding") + _of_kind("RoleBinding")
    assert bindings
    for binding in bindings:
        assert binding["roleRef"]["name"] in role_names, f"binds foreign role {binding['roleRef']['name']}"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]


def _pod_spec() -> dict[str, Any]:
    deployment = _one("Deployment")
    assert deployment["spec"]["replicas"] >= 2, "one replica is a single point of failure for a fail-closed webhook"
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_deployment_runs_unprivileged() -> None:
    pod = _pod_spec()
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(host), host
    pod_sc = pod.get("securityContext") or {}
    assert pod_sc.get("runAsNonRoot") is True
    assert pod_sc.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost")
    for volume in pod.get("volumes") or []:
        assert "hostPath" not in volume, f"hostPath volume {volume['name']}"
    for container in pod["containers"] + pod.get("initContainers", []):
        sc = container.get("securityContext") or {}
        name = container["name"]
        run_as_user = sc.get("runAsUser", pod_sc.get("runAsUser"))
        assert run_as_user not in (None, 0), f"{name}: runAsUser must be set and non-zero"
        assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, name
        assert sc.get("readOnlyRootFilesystem") is True, f"{name}: writable root filesystem"
        assert sc.get("allowPrivilegeEscalation") is False, f"{name}: privilege escalation allowed"
        assert not sc.get("privileged"), f"{name}: privileged"
        caps = sc.get("capabilities") or {}
        assert caps.get("drop") == ["ALL"] and not caps.get("add"), f"{name}: capabilities {caps}"


def test_deployment_has_requests_and_limits() -> None:
    for container in _pod_spec()["containers"]:
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                assert resources.get(section, {}).get(resource), f"{container['name']}: no {section}.{resource}"


def test_tls_secret_mounted_read_only_and_tmp_is_empty_dir() -> None:
    pod = _pod_spec()
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    tls = next(m for m in mounts.values() if "secret" in volumes[m["name"]])
    assert tls["readOnly"] is True
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]


@pytest.fixture(scope="module")
def server_routes(tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, str]]:
    """``(method, path)`` of every route of the real app built by ``create_app``."""
    from webhook.server.app import create_app
    from webhook.server.settings import Settings
    from webhook.tls.generate import write_certs

    tmp = tmp_path_factory.mktemp("server")
    paths = write_certs(tmp, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    app = create_app(Settings(local_dir=tmp, cert_file=paths.cert, key_file=paths.key))
    return {(route.method, route.resource.canonical) for route in app.router.routes() if route.resource}


def test_probes_use_https_paths_the_server_serves(server_routes: set[tuple[str, str]]) -> None:
    container = _pod_spec()["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    expected = {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe_name, path in expected.items():
        probe = container[probe_name]["httpGet"]
        assert probe["path"] == path
        assert probe["scheme"] == "HTTPS"
        assert probe["port"] in ports or probe["port"] in ports.values()
        assert ("GET", path) in server_routes, f"the server has no GET {path}"


def _target() -> Any:
    from webhook.policy.webhook_configs import WebhookTarget

    service = _one("Service")
    return WebhookTarget(name=WEBHOOK_CONFIG_NAME, service=service["metadata"]["name"],
                         namespace=service["metadata"]["namespace"], service_account=SERVICE_ACCOUNT,
                         port=service["spec"]["ports"][0]["port"])


def _generated() -> list[dict[str, Any]]:
    """What the leader writes for the shipped policy library (the same as `tollgate webhook-config`)."""
    from webhook.cli.webhook_config import load_policies
    from webhook.policy.webhook_configs import parsed_specs, webhook_configurations

    configs = webhook_configurations(parsed_specs(load_policies([ROOT / "policies"])), _target())
    return configs.documents()


def _webhooks() -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for config in _generated():
        assert config["webhooks"], f"the shipped policies need a {config['kind']}"
        out.extend((config["kind"], hook) for hook in config["webhooks"])
    return out


def test_manifests_create_the_configurations_the_reconciler_may_write() -> None:
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        static = _one(kind)
        assert static["metadata"]["name"] == WEBHOOK_CONFIG_NAME
        # No `webhooks`: a re-apply of the manifests never resets what the leader wrote.
        assert "webhooks" not in static
        generated = next(c for c in _generated() if c["kind"] == kind)
        assert static["metadata"]["labels"] == generated["metadata"]["labels"], "else every start rewrites them"


def test_webhooks_fail_safe_settings() -> None:
    paths = set()
    for kind, hook in _webhooks():
        name = f"{kind}/{hook['name']}"
        # A dryRun request makes no Event (webhook.admission.events.records_for).
        assert hook["sideEffects"] == "NoneOnDryRun", name
        assert hook.get("failurePolicy") in ("Fail", "Ignore"), f"{name}: failurePolicy must be explicit"
        assert 1 <= hook["timeoutSeconds"] <= 10, name
        assert hook["admissionReviewVersions"] == ["v1"], name
        excluded = {
            value
            for expr in hook["namespaceSelector"]["matchExpressions"]
            if expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
            for value in expr["values"]
        }
        assert {NAMESPACE, "kube-system"} <= excluded, (
            f"{name}: namespaceSelector must exclude {NAMESPACE}, kube-system"
        )
        conditions = " ".join(c["expression"] for c in hook.get("matchConditions") or [])
        assert f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}" in conditions, (
            f"{name}: own ServiceAccount not excluded"
        )
        assert "coordination.k8s.io" in conditions and "leases" in conditions, f"{name}: leases not excluded"
        paths.add(hook["clientConfig"]["service"]["path"])
    assert paths == {"/validate", "/mutate"}


def test_server_serves_the_webhook_paths(server_routes: set[tuple[str, str]]) -> None:
    for _, hook in _webhooks():
        path = hook["clientConfig"]["service"]["path"]
        assert ("POST", path) in server_routes, f"the server has no POST {path}"


def test_deployment_and_image_arguments_parse_and_match_the_port() -> None:
    from webhook.cli.main import build_parser

    container = _pod_spec()["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert args.command == "serve" and args.local is None
    assert args.port == next(p["containerPort"] for p in container["ports"] if p["name"] == "https")
    tls_mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    assert str(args.cert_dir) == tls_mount["mountPath"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = next(line for line in dockerfile.splitlines() if line.startswith("CMD "))
    image_args = build_parser().parse_args(json.loads(cmd.removeprefix("CMD ")))
    assert (image_args.command, image_args.port, str(image_args.cert_dir)) == ("serve", args.port, str(args.cert_dir))


def test_webhooks_reach_the_service_and_its_container_port() -> None:
    service = _one("Service")
    container = _pod_spec()["containers"][0]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for kind, hook in _webhooks():
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"]) == (service["metadata"]["name"], service["metadata"]["namespace"])
        port = next(p for p in service["spec"]["ports"] if p["port"] == ref.get("port", 443))
        assert port["targetPort"] in container_ports or port["targetPort"] in container_ports.values(), kind
    selector = service["spec"]["selector"]
    labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    pdb = _one("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (built-in kustomize) not on PATH")
def test_kustomize_build_generates_the_tls_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy, ignore=shutil.ignore_patterns("tls"))
    # The real `tollgate certs` flow, as docs/deploying.md describes it.
    from webhook.cli.main import main

    assert main(["certs", "--out-dir", str(copy / "tls"), "--service", "tollgate", "--namespace", NAMESPACE]) == 0
    capsys.readouterr()
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(copy)], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert secret["metadata"]["name"] == "tollgate-tls" and secret["type"] == "kubernetes.io/tls"
    assert base64.b64decode(secret["data"]["ca.crt"]) == (copy / "tls" / "ca.crt").read_bytes()
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"secretName": "tollgate-tls", "defaultMode": 0o440} in [v.get("secret") for v in volumes]


def _request(
    *, group: str, resource: str, username: str = "alice", groups: tuple[str, ...] = ("system:authenticated",)
) -> dict[str, Any]:
    """An AdmissionRequest as the API server binds it to ``request`` in matchConditions."""
    return {
        "uid": "0",
        "kind": {"group": group, "version": "v1", "kind": "X"},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "operation": "CREATE",
        "userInfo": {"username": username, "groups": list(groups)},
    }


MATCH_CASES = [
    ("pod by a user", _request(group="", resource="pods"), True),
    (
        "deployment by a controller",
        _request(
            group="apps", resource="deployments", username="system:serviceaccount:kube-system:deployment-controller"
        ),
        True,
    ),
    ("policy by a user", _request(group="tollgate.dev", resource="clusteradmissionpolicies"), True),
    (
        "node heartbeat lease",
        _request(group="coordination.k8s.io", resource="leases", username="system:node:n1", groups=("system:nodes",)),
        False,
    ),
    ("leader-election lease", _request(group="coordination.k8s.io", resource="leases"), False),
    (
        "tollgate status write",
        _request(
            group="tollgate.dev",
            resource="clusteradmissionpolicies/status",
            username="system:serviceaccount:tollgate-system:tollgate",
        ),
        False,
    ),
    (
        "kubelet node status",
        _request(
            group="",
            resource="nodes/status",
            username="system:node:n1",
            groups=("system:nodes", "system:authenticated"),
        ),
        False,
    ),
    ("event", _request(group="", resource="events"), False),
    ("tokenreview", _request(group="authentication.k8s.io", resource="tokenreviews"), False),
]


@pytest.mark.parametrize(("case", "request_", "sent"), MATCH_CASES, ids=[c[0] for c in MATCH_CASES])
def test_match_conditions_send_exactly_the_intended_requests(case: str, request_: dict[str, Any], sent: bool) -> None:
    from cel_expr_python import cel

    env = cel.NewEnv(variables={"request": cel.Type.DYN})
    for kind, hook in _webhooks():
        results = []
        for condition in hook["matchConditions"]:
            value = env.compile(condition["expression"]).eval(data={"request": request_})
            assert value.type() != cel.Type.ERROR, f"{kind} {condition['name']}: {value}"
            results.append(value.value())
        assert all(results) is sent, (
            f"{kind}/{hook['name']}: {case}: {dict(zip([c['name'] for c in hook['matchConditions']], results, strict=True))}"  # noqa: E501
        )


def test_dockerfile_runs_as_the_deployments_non_root_user() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    bases = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert bases and all(b in ("${PYTHON_IMAGE}",) or b.startswith("python:3.11-slim") for b in bases), bases
    default_base = next(line for line in lines if line.startswith("ARG PYTHON_IMAGE="))
    assert default_base.split("=", 1)[1].startswith("python:3.11-slim"), "glibc slim base (cel-expr-python wheels)"
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    pod = _pod_spec()
    uid = str(pod["containers"][0]["securityContext"].get("runAsUser", pod["securityContext"]["runAsUser"]))
    assert users and users[-1].split(":")[0] == uid, f"image USER {users} vs runAsUser {uid}"
    assert 'ENTRYPOINT ["tollgate"]' in lines
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    # Allow-list: everything is ignored, then only the build inputs come back,
    # so manifests/tls/ (private keys) can never enter the build context.
    assert "*" in ignored
    assert {line for line in ignored if line.startswith("!")} <= {"!pyproject.toml", "!README.md", "!webhook/"}


# -- every combination of components ------------------------------------------------------------------------------

DEPLOYMENTS = deployments()


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d.id for d in DEPLOYMENTS])
def test_components_grant_only_what_their_part_needs(deployment: Any) -> None:
    parts = tuple(d.name for d in deployment.component_dirs())
    docs = deployment.build()
    assert rbac_problems(docs, parts) == []
    # Each part's grants are its own: without the part's allowance its RBAC is too wide.
    for part in set(parts) & {"background-audit", "references", "self-managed"}:
        assert rbac_problems(docs, tuple(p for p in parts if p != part)) != [], part


def test_the_rbac_checker_finds_a_grant_beyond_the_parts() -> None:
    docs = next(d for d in DEPLOYMENTS if d.id == "static+background-audit+references").build()
    assert rbac_problems(docs, ()) != [], "background-audit's reads are not install/'s"
    widened = [dict(d, rules=[*d["rules"], {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}])
               if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "tollgate-references-read" else d
               for d in docs]
    assert rbac_problems(widened, ("background-audit", "references")) == [
        "ClusterRole tollgate-references-read grants list on core/secrets"]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d.id for d in DEPLOYMENTS])
def test_every_combination_runs_unprivileged_with_limits(deployment: Any) -> None:
    pod = next(d for d in deployment.build() if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    for volume in pod["volumes"]:
        assert "hostPath" not in volume
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert all(container["resources"][s].get(r) for s in ("requests", "limits") for r in ("cpu", "memory"))
