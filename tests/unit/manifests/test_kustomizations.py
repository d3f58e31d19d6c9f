"""Structure of every kustomization (manifests/, components, overlays, policy sets) and of `tollgate webhook-config`.

kubectl is not needed: :func:`~tests.unit.manifests.kustomize.build` expands a kustomization as
kustomize does for what these files use (resources, components, JSON 6902 patches, duplicate ids
rejected), so every component and the policy sets are checked from the files themselves; where
``kubectl`` (kustomize v4+) is on PATH, the real kustomize renders every combination too.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.manifests.kustomize import (
    COMPONENTS,
    MANIFESTS,
    OPTIONAL,
    ROOT,
    build,
    deployments,
    kubectl_available,
    kubectl_kustomize,
)
from webhook.cli.main import main
from webhook.policy import compile_policy
from webhook.policy.matching import POD_CONTROLLERS
from webhook.policy.model import RBAC_REFERENCES, parse_references
from webhook.tls import generate as certs

POLICIES = ROOT / "policies"
POLICY_KINDS = {"ClusterAdmissionPolicy", "AdmissionPolicy"}


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def test_cert_manager_overlay() -> None:
    docs = build(MANIFESTS / "overlays" / "cert-manager")
    service = _one(docs, "Service")
    namespace = service["metadata"]["namespace"]
    assert not [d for d in docs if d["kind"] == "Secret"], "the Secret is cert-manager's, not kustomize's"
    # The serving Certificate writes the Secret the Deployment mounts, with the Service's DNS names.
    deployment = _one(docs, "Deployment")
    [secret_name] = [v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]
                     if "secret" in v]
    serving = next(d for d in docs if d["kind"] == "Certificate" and d["spec"]["secretName"] == secret_name)
    assert serving["metadata"]["namespace"] == namespace
    assert sorted(serving["spec"]["dnsNames"]) == sorted(certs.service_dns_names(service["metadata"]["name"],
                                                                                   namespace))
    assert "server auth" in serving["spec"]["usages"] and not serving["spec"].get("isCA")
    # Its issuer chain resolves inside the overlay: CA Issuer -> CA Certificate -> self-signed Issuer.
    ca_issuer = _one(docs, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca_cert = next(d for d in docs if d["kind"] == "Certificate" and d["spec"]["secretName"]
                   == ca_issuer["spec"]["ca"]["secretName"])
    assert ca_cert["spec"]["isCA"] is True
    assert "selfSigned" in _one(docs, "Issuer", ca_cert["spec"]["issuerRef"]["name"])["spec"]
    for d in docs:
        if d["kind"] in ("Issuer", "Certificate"):
            assert d["apiVersion"] == "cert-manager.io/v1" and d["metadata"]["namespace"] == namespace
    # Both configurations ask the CA injector for that Certificate's CA.
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        config = _one(docs, kind)
        assert config["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{namespace}/{serving['metadata']['name']}"}
    # Everything else is install/ unchanged.
    install = build(MANIFESTS / "install")
    assert len(docs) == len(install) + 4


def test_self_managed_overlay() -> None:
    from webhook.kube.managed_certs import SelfManagedCerts

    docs = build(MANIFESTS / "overlays" / "self-managed")
    secret = _one(docs, "Secret")
    default_name = SelfManagedCerts.__init__.__kwdefaults__["secret_name"]  # type: ignore[index]
    assert secret["metadata"]["name"] == default_name and not secret.get("data"), "created empty, filled by Tollgate"
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--self-managed-certs" in container["args"]
    tls_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/tollgate/tls")
    assert tls_mount["readOnly"] is False
    volume = next(v for v in pod["volumes"] if v["name"] == tls_mount["name"])
    assert "emptyDir" in volume and "secret" not in volume
    role = _one(docs, "Role", "tollgate-certificates")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [default_name],
                              "verbs": ["get", "update", "patch"]}]
    binding = _one(docs, "RoleBinding", "tollgate-certificates")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tollgate", "namespace": "tollgate-system"}]


def test_default_entry_point_is_install_plus_the_generated_secret() -> None:
    root = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert root["resources"] == ["install"]
    build(MANIFESTS / "install")


def _policies(directory: Path) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in build(directory) if d["kind"] in POLICY_KINDS}


def test_baseline_set_installs_one_host_ports_policy() -> None:
    baseline = _policies(POLICIES / "pod-security" / "baseline")
    assert "disallow-host-ports" in baseline and "disallow-host-ports-range" not in baseline
    on_disk = {p.stem for p in (POLICIES / "pod-security" / "baseline").glob("*.yaml")} - {"kustomization"}
    assert set(baseline) == on_disk - {"disallow-host-ports-range"}


def test_restricted_set_is_baseline_plus_restricted_controls() -> None:
    baseline = _policies(POLICIES / "pod-security" / "baseline")
    restricted = _policies(POLICIES / "pod-security" / "restricted")
    on_disk = {p.stem for p in (POLICIES / "pod-security" / "restricted").glob("*.yaml")} - {"kustomization"}
    assert set(restricted) == set(baseline) | on_disk


def test_pod_security_installs_both_sets() -> None:
    # README: `kubectl apply -k policies/pod-security` applies baseline and restricted (the restricted set,
    # which includes baseline), and no test input (test.yaml, resources.yaml, old.yaml).
    both = build(POLICIES / "pod-security")
    assert {d["kind"] for d in both} == {"ClusterAdmissionPolicy"}
    assert set(_policies(POLICIES / "pod-security")) == set(_policies(POLICIES / "pod-security" / "restricted"))
    assert set(_policies(POLICIES / "pod-security" / "baseline")) < set(_policies(POLICIES / "pod-security"))


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_every_policy_in_a_set_is_ready(level: str) -> None:
    for name, obj in _policies(POLICIES / "pod-security" / level).items():
        assert compile_policy(obj).condition["status"] == "True", name


def test_examples_install_their_policies_and_params() -> None:
    docs = build(POLICIES / "examples")
    names = {d["metadata"]["name"] for d in docs if d["kind"] in POLICY_KINDS}
    on_disk = {d["metadata"]["name"] for p in (POLICIES / "examples").glob("*/policy.yaml")
               for d in yaml.safe_load_all(p.read_text()) if d}
    assert names == on_disk
    assert {d["kind"] for d in docs} <= POLICY_KINDS | {"ConfigMap"}, "no test inputs installed"
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        assert cm["metadata"]["labels"]["tollgate.dev/params"] == "true"


def test_webhook_config_for_pod_security_names_only_pods_and_pod_controllers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["webhook-config", "--policies", str(POLICIES / "pod-security")]) == 0
    validating, mutating = yaml.safe_load_all(capsys.readouterr().out)
    assert validating["kind"] == "ValidatingWebhookConfiguration" and mutating["webhooks"] == []
    named = {(group, resource) for hook in validating["webhooks"] for rule in hook["rules"]
             for group in rule["apiGroups"] for resource in rule["resources"]}
    assert named == {("", "pods"), ("", "pods/ephemeralcontainers")} | set(POD_CONTROLLERS)
    assert [h["failurePolicy"] for h in validating["webhooks"]] == ["Fail"]


def test_webhook_config_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = certs.write_certs(tmp_path, dns_names=["gate.gate-ns.svc"], days=1)
    assert main(["webhook-config", "--policies", str(POLICIES / "examples"), "--service", "gate",
                 "--namespace", "gate-ns", "--ca-bundle", str(paths.ca)]) == 0
    validating, mutating = yaml.safe_load_all(capsys.readouterr().out)
    hooks = validating["webhooks"] + mutating["webhooks"]
    assert hooks and mutating["webhooks"], "add-default-labels mutates"
    for hook in hooks:
        assert hook["clientConfig"]["service"]["name"] == "gate"
        assert hook["clientConfig"]["caBundle"] == certs.ca_bundle(paths.ca.read_bytes())
        assert "gate-ns" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert main(["webhook-config", "--policies", str(tmp_path / "missing")]) == 2


def _with(*components: str) -> list[dict[str, Any]]:
    return build(MANIFESTS / "install", components=tuple(COMPONENTS / c for c in components))


def test_background_audit_component() -> None:
    docs = _with("background-audit")
    container = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--background-audit" in container["args"]
    read = _one(docs, "ClusterRole", "tollgate-background-read")
    # Read only, and on no more than the Pod Security policies' kinds plus CRDs for discovery refreshes.
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in read["rules"])
    kinds = {(g, r) for rule in read["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert kinds == {*POD_CONTROLLERS, ("", "pods"), ("apiextensions.k8s.io", "customresourcedefinitions")}
    reports = _one(docs, "ClusterRole", "tollgate-policy-reports")
    assert reports["rules"] == [{"apiGroups": ["wgpolicyk8s.io"], "resources": ["policyreports",
                                                                              "clusterpolicyreports"],
                                 "verbs": ["get", "list", "create", "update", "delete"]}]
    for name in ("tollgate-background-read", "tollgate-policy-reports"):
        binding = _one(docs, "ClusterRoleBinding", name)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tollgate",
                                        "namespace": "tollgate-system"}]
    # The report CRDs are optional (another engine may own them): not in the base, nor in this component.
    crds = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert not [name for name in crds if name.endswith(".wgpolicyk8s.io")]


def test_policy_reports_component_adds_exactly_the_report_crds() -> None:
    crds = {d["metadata"]["name"] for d in build(MANIFESTS / "crds")}
    assert crds == {"clusteradmissionpolicies.tollgate.dev", "admissionpolicies.tollgate.dev",
                    "clusterpolicyexceptions.tollgate.dev", "policyexceptions.tollgate.dev"}
    docs = _with("policy-reports")
    added = [d for d in docs if d not in build(MANIFESTS / "install")]
    assert {(d["kind"], d["metadata"]["name"]) for d in added} == {
        ("CustomResourceDefinition", "policyreports.wgpolicyk8s.io"),
        ("CustomResourceDefinition", "clusterpolicyreports.wgpolicyk8s.io")}
    # The group and version the background audit writes.
    from webhook.audit.reports import REPORT_GROUP, REPORT_VERSION

    for crd in added:
        assert crd["spec"]["group"] == REPORT_GROUP
        assert [v["name"] for v in crd["spec"]["versions"] if v["served"]] == [REPORT_VERSION]


def test_references_component_grants_what_the_examples_reference() -> None:
    docs = _with("references")
    read = _one(docs, "ClusterRole", "tollgate-references-read")
    assert all(rule["verbs"] == ["list", "watch"] for rule in read["rules"])
    granted = {(g, r) for rule in read["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    referenced = {(ref.group, ref.resource) for p in (POLICIES / "examples").glob("*/policy.yaml")
                  for d in yaml.safe_load_all(p.read_text()) if d
                  for ref in parse_references(d["spec"])}
    # ... and the RBAC kinds that answer `authorizer` checks (webhook.policy.model.RBAC_REFERENCES).
    assert referenced and granted == referenced | {(ref.group, ref.resource) for ref in RBAC_REFERENCES}
    binding = _one(docs, "ClusterRoleBinding", "tollgate-references-read")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tollgate", "namespace": "tollgate-system"}]


def test_optional_parts_are_components_and_entry_points_are_kustomizations() -> None:
    for directory in sorted(COMPONENTS.iterdir()):
        doc = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert (doc["apiVersion"], doc["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component"), directory
    assert {d.name for d in COMPONENTS.iterdir()} == {"cert-manager", "self-managed", "monitoring", *OPTIONAL}
    for entry in (MANIFESTS, MANIFESTS / "overlays" / "cert-manager", MANIFESTS / "overlays" / "self-managed"):
        assert yaml.safe_load((entry / "kustomization.yaml").read_text())["kind"] == "Kustomization", entry


def test_a_component_listed_as_a_resource_is_refused(tmp_path: Path) -> None:
    # The accumulation error issue 25 hit: two overlays each carrying ../../install. Components never carry it.
    for directory in COMPONENTS.iterdir():
        resources = yaml.safe_load((directory / "kustomization.yaml").read_text()).get("resources") or []
        assert all((directory / r).is_file() for r in resources), f"{directory}: a component adds files only"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [str(COMPONENTS / "references")]}))
    with pytest.raises(AssertionError, match="is a Component"):
        build(mine)


DEPLOYMENTS = deployments()


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d.id for d in DEPLOYMENTS])
def test_every_combination_builds_with_what_each_part_adds(deployment: Any) -> None:
    docs = deployment.build()
    args = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ("--background-audit" in args) == ("background-audit" in deployment.components)
    assert ("--self-managed-certs" in args) == (deployment.certificate == "self-managed")
    kinds = {d["kind"] for d in docs}
    assert ("Certificate" in kinds) == (deployment.certificate == "cert-manager")
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert ("policyreports.wgpolicyk8s.io" in crds) == ("policy-reports" in deployment.components)
    install = build(MANIFESTS / "install")
    assert len(docs) == len(install) + sum(
        len(build(MANIFESTS / "install", components=(c,))) - len(install) for c in deployment.component_dirs())


@pytest.mark.skipif(not kubectl_available(), reason="kubectl with kustomize v4+ (Components) not on PATH")
@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d.id for d in DEPLOYMENTS])
def test_real_kustomize_renders_every_combination(deployment: Any, tmp_path: Path) -> None:
    real = kubectl_kustomize(deployment, tmp_path)
    expected = deployment.build()
    if deployment.certificate == "static":
        secret = _one(real, "Secret")
        assert secret["metadata"]["name"] == "tollgate-tls" and secret["type"] == "kubernetes.io/tls"
        real = [d for d in real if d is not secret]
    def key(d: dict[str, Any]) -> tuple[str, str, str]:
        return d["kind"], d["metadata"].get("namespace") or "", d["metadata"]["name"]

    assert sorted(map(key, real)) == sorted(map(key, expected))
    # Same content, not only the same names: the structural expansion is what the other tests check.
    by_key = {key(d): d for d in expected}
    for doc in real:
        assert doc == by_key[key(doc)], key(doc)


@pytest.mark.skipif(not kubectl_available(), reason="kubectl with kustomize v4+ (Components) not on PATH")
@pytest.mark.parametrize("directory", ["manifests/overlays/cert-manager", "manifests/overlays/self-managed",
                                       "policies/pod-security/baseline", "policies/pod-security",
                                       "policies/pod-security/restricted", "policies/examples"])
def test_real_kustomize_builds_what_the_structural_expansion_builds(directory: str) -> None:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / directory)], capture_output=True, text=True,
                         timeout=50)
    assert out.returncode == 0, out.stderr
    real = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out.stdout) if d}
    assert real == {(d["kind"], d["metadata"]["name"]) for d in build(ROOT / directory)}
