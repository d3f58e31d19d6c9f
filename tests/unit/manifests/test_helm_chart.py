"""The Helm chart (manifests/helm/tollgate) installs what the kustomize tree installs, for the same options.

No ``helm`` binary is installable here (no Debian or npm package; PyPI has none), so the chart is
rendered and linted with Helm's own Go engine through ``helm_python`` (PyPI ``helm-python-sdk``,
a ctypes binding of the Helm v4 SDK): ``Chart.render`` is ``helm template`` and ``lint`` is
``helm lint``. Those tests are skipped when it is not installed; the rest (files the chart copies
from the tree, defaults equal to the manifests) run always.

For every certificate source with every subset of the other components, the rendered chart must
contain exactly the objects ``kubectl kustomize`` gives for the same parts (the structural
expansion of :mod:`tests.unit.manifests.kustomize`), with the same content, labels aside (the
chart adds Helm's) — so the chart's RBAC equals the manifests' RBAC, and is held to the same
least-privilege tables.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.unit.manifests.kustomize import COMPONENTS, MANIFESTS, ROOT, Deployment, build, deployments
from tests.unit.manifests.rbac import rbac_of, rbac_problems
from webhook.tls import generate as certs

CHART = MANIFESTS / "helm" / "tollgate"
NAMESPACE = "tollgate-system"

try:
    import helm_python
except ImportError:  # pragma: no cover - depends on the environment
    helm_python = None

needs_helm = pytest.mark.skipif(helm_python is None,
                                reason="Helm's engine (pip install helm-python-sdk) not installed")


def _key(d: dict[str, Any]) -> tuple[str, str, str]:
    return d["kind"], d["metadata"].get("namespace") or "", d["metadata"]["name"]


def _values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def _install() -> list[dict[str, Any]]:
    return build(MANIFESTS / "install")


# -- what the chart copies from the tree (no Helm needed) ---------------------------------------------------------


def test_chart_crds_are_the_policy_crds() -> None:
    chart = sorted(p.name for p in (CHART / "crds").iterdir())
    assert chart == sorted(p.name for p in (MANIFESTS / "crds").glob("*.yaml") if p.name != "kustomization.yaml")
    for name in chart:
        assert (CHART / "crds" / name).read_bytes() == (MANIFESTS / "crds" / name).read_bytes(), name


def test_chart_policy_report_crds_are_the_components() -> None:
    component = COMPONENTS / "policy-reports"
    for path in sorted(component.glob("wgpolicyk8s.io_*.yaml")):
        assert (CHART / "files" / path.name).read_bytes() == path.read_bytes(), path.name


def test_chart_pod_security_file_is_the_restricted_set() -> None:
    # Regenerate with:
    #   kubectl kustomize policies/pod-security/restricted > manifests/helm/tollgate/files/pod-security.yaml
    shipped = [d for d in yaml.safe_load_all((CHART / "files" / "pod-security.yaml").read_text()) if d]
    expected = build(ROOT / "policies" / "pod-security" / "restricted")
    assert sorted(shipped, key=_key) == sorted(expected, key=_key)


def test_chart_defaults_are_the_manifests_defaults() -> None:
    values = _values()
    deployment = next(d for d in _install() if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert values["replicas"] == deployment["spec"]["replicas"]
    assert values["resources"] == container["resources"]
    [image] = yaml.safe_load((MANIFESTS / "install" / "kustomization.yaml").read_text())["images"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (values["image"]["repository"], values["image"]["tag"] or chart["appVersion"]) == (
        image["newName"], image["newTag"])
    assert f"--eval-workers={values['evaluation']['workers']}" in container["args"]
    assert f"--eval-memory-limit={values['evaluation']['memoryLimitBytes']}" in container["args"]
    assert values["backgroundAudit"]["readResources"] == [
        {"apiGroups": r["apiGroups"], "resources": r["resources"]}
        for r in next(d for d in build(MANIFESTS / "install", components=(COMPONENTS / "background-audit",))
                      if d["metadata"]["name"] == "tollgate-background-read")["rules"]
        if r["apiGroups"] != ["apiextensions.k8s.io"]]


# -- rendering (Helm's engine) ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    paths = certs.write_certs(tmp_path_factory.mktemp("tls"),
                              dns_names=certs.service_dns_names("tollgate", NAMESPACE), days=1)
    return {"tlsCrt": paths.cert.read_text(), "tlsKey": paths.key.read_text(), "caCrt": paths.ca.read_text()}


def render(values: dict[str, Any], *, namespace: str = NAMESPACE, crds: bool = False) -> list[dict[str, Any]]:
    """``helm template tollgate manifests/helm/tollgate -n NAMESPACE`` (``--include-crds`` with ``crds``)."""
    assert helm_python is not None
    with helm_python.Chart.load(str(CHART)) as chart:
        out = chart.render(values, name="tollgate", namespace=namespace)
    docs = [d for path, text in sorted(out.items()) if not path.endswith(".txt")
            for d in yaml.safe_load_all(text) if d]
    if crds:
        docs += [yaml.safe_load(p.read_text()) for p in sorted((CHART / "crds").glob("*.yaml"))]
    return docs


def values_for(deployment: Deployment, pems: dict[str, str]) -> dict[str, Any]:
    """The chart values that select the same parts as ``deployment``'s components."""
    values: dict[str, Any] = {
        "createNamespace": True,
        "certificates": {"mode": deployment.certificate},
        "backgroundAudit": {"enabled": "background-audit" in deployment.components},
        "policyReports": {"installCRDs": "policy-reports" in deployment.components},
        "references": {"enabled": "references" in deployment.components},
    }
    if deployment.certificate == "static":
        values["certificates"]["static"] = pems
    return values


DEPLOYMENTS = deployments()


def _pairs(chart: list[dict[str, Any]], manifests: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], ...]]:
    by_key = {_key(d): d for d in chart}
    for doc in manifests:
        yield by_key[_key(doc)], doc


@needs_helm
@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d.id for d in DEPLOYMENTS])
def test_chart_renders_what_kustomize_renders(deployment: Deployment, pems: dict[str, str]) -> None:
    chart = render(values_for(deployment, pems), crds=True)
    manifests = deployment.build()
    if deployment.certificate == "static":
        secret = next(d for d in chart if d["kind"] == "Secret")
        assert secret["type"] == "kubernetes.io/tls"
        assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]
        chart = [d for d in chart if d is not secret]
    assert sorted(map(_key, chart)) == sorted(map(_key, manifests))
    for rendered, built in _pairs(chart, manifests):
        ours, theirs = copy.deepcopy(rendered), copy.deepcopy(built)
        labels, expected_labels = ours["metadata"].pop("labels", {}), theirs["metadata"].pop("labels", {})
        assert expected_labels.items() <= labels.items(), _key(ours)
        assert ours == theirs, _key(ours)


@needs_helm
@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d.id for d in DEPLOYMENTS])
def test_chart_rbac_equals_the_manifests_rbac(deployment: Deployment, pems: dict[str, str]) -> None:
    chart = render(values_for(deployment, pems))
    assert rbac_of(chart) == rbac_of(deployment.build())
    assert rbac_problems(chart, tuple(d.name for d in deployment.component_dirs())) == []


@needs_helm
@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d.id for d in DEPLOYMENTS])
def test_helm_lint_is_clean(deployment: Deployment, pems: dict[str, str]) -> None:
    assert helm_python is not None
    report = helm_python.lint(str(CHART), values_for(deployment, pems), strict=True, namespace=NAMESPACE,
                              kube_version="v1.30.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def _deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "Deployment")


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = _deployment(docs)["spec"]["template"]["spec"]["containers"][0]
    return container


@needs_helm
def test_values_reach_the_deployment(pems: dict[str, str]) -> None:
    docs = render({"certificates": {"static": pems}, "replicas": 3, "image": {"repository": "registry.example.com/tg",
                                                                                "tag": "1.2.3", "pullPolicy": "Always"},
                   "imagePullSecrets": [{"name": "pull"}],
                   "resources": {"requests": {"cpu": "200m", "memory": "256Mi"},
                                 "limits": {"cpu": "2", "memory": "1Gi"}},
                   "evaluation": {"workers": 4, "memoryLimitBytes": 536870912},
                   "imports": ["admission", "kyverno"]})
    deployment = _deployment(docs)
    container = _container(docs)
    assert deployment["spec"]["replicas"] == 3
    assert (container["image"], container["imagePullPolicy"]) == ("registry.example.com/tg:1.2.3", "Always")
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "1Gi"}
    assert {"--eval-workers=4", "--eval-memory-limit=536870912"} <= set(container["args"])
    from webhook.cli.main import build_parser

    args = build_parser().parse_args(container["args"])
    assert (args.eval_workers, args.eval_memory_limit) == (4, 536870912)
    assert args.imports == ["admission", "kyverno"]


@needs_helm
def test_static_certificate_from_an_existing_secret_or_refused_without_one() -> None:
    docs = render({"certificates": {"static": {"existingSecret": "my-tls"}}})
    assert not [d for d in docs if d["kind"] == "Secret"]
    volumes = _deployment(docs)["spec"]["template"]["spec"]["volumes"]
    assert {"secretName": "my-tls", "defaultMode": 0o440} in [v.get("secret") for v in volumes]
    assert helm_python is not None
    with pytest.raises(helm_python.HelmError, match="tollgate certs"):
        render({})


@needs_helm
def test_webhook_values(pems: dict[str, str]) -> None:
    static = {"certificates": {"static": pems}}
    gitops = render({**static, "webhooks": {"manage": False}})
    assert not [d for d in gitops if d["kind"].endswith("WebhookConfiguration")]
    assert "--no-manage-webhooks" in _container(gitops)["args"]
    created = render({**static, "webhooks": {"create": True}})
    assert "--create-webhooks" in _container(created)["args"]
    role = next(d for d in created if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "tollgate")
    assert {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations",
            "mutatingwebhookconfigurations"], "verbs": ["create"]} in role["rules"]
    # Another name: the server is told, the RBAC names it, and both configurations carry it.
    renamed = render({**static, "webhooks": {"configurationName": "gate"}})
    assert "--webhook-config-name=gate" in _container(renamed)["args"]
    role = next(d for d in renamed if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "tollgate")
    assert any(r.get("resourceNames") == ["gate"] and "update" in r["verbs"] for r in role["rules"])
    assert {d["metadata"]["name"] for d in renamed if d["kind"].endswith("WebhookConfiguration")} == {"gate"}
    # The configurations carry exactly the labels the leader writes, or every start would rewrite them.
    from webhook.policy.webhook_configs import WebhookTarget

    for config in (d for d in render(static) if d["kind"].endswith("WebhookConfiguration")):
        assert config["metadata"]["labels"] == dict(WebhookTarget().labels) and "webhooks" not in config


@needs_helm
@pytest.mark.parametrize(("level", "directory"), [("baseline", "baseline"), ("restricted", "restricted")])
def test_pod_security_library_with_its_failure_policy(level: str, directory: str, pems: dict[str, str]) -> None:
    docs = render({"certificates": {"static": pems}, "podSecurity": {
        "level": level, "failurePolicy": "Ignore", "validationActions": ["Warn", "Audit"]}})
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterAdmissionPolicy"}
    shipped = {d["metadata"]["name"]: d for d in build(ROOT / "policies" / "pod-security" / directory)}
    assert set(policies) == set(shipped)
    for name, policy in policies.items():
        assert policy["spec"]["failurePolicy"] == "Ignore" and policy["spec"]["validationActions"] == ["Warn", "Audit"]
        expected = copy.deepcopy(shipped[name]["spec"])
        expected.update(failurePolicy="Ignore", validationActions=["Warn", "Audit"])
        assert policy["spec"] == expected, name
    # The failure policy reaches the generated webhook entry: Ignore policies go to the Ignore entry.
    from webhook.policy.webhook_configs import WebhookTarget, parsed_specs, webhook_configurations

    hooks = webhook_configurations(parsed_specs(policies.values()), WebhookTarget()).validating["webhooks"]
    assert [h["failurePolicy"] for h in hooks] == ["Ignore"]
    assert not [d for d in render({"certificates": {"static": pems}}) if d["kind"] == "ClusterAdmissionPolicy"]


@needs_helm
def test_release_namespace_is_used_everywhere() -> None:
    docs = render({"certificates": {"mode": "cert-manager"}}, namespace="gate")
    for doc in docs:
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert doc["subjects"] == [{"kind": "ServiceAccount", "name": "tollgate", "namespace": "gate"}]
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration",
                               "MutatingWebhookConfiguration"):
            assert doc["metadata"]["namespace"] == "gate", _key(doc)
    serving = next(d for d in docs if d["kind"] == "Certificate" and d["metadata"]["name"] == "tollgate")
    assert sorted(serving["spec"]["dnsNames"]) == sorted(certs.service_dns_names("tollgate", "gate"))
    config = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "gate/tollgate"}


@needs_helm
@pytest.mark.parametrize("values", [
    {"replicaCount": 3},
    {"certificates": {"mode": "vault"}},
    {"podSecurity": {"level": "baseline", "validationActions": ["Deny", "Warn"]}},
    {"podSecurity": {"level": "privileged"}},
    {"webhooks": {"manage": "yes"}},
], ids=["unknown-key", "mode", "deny-and-warn", "level", "type"])
def test_schema_refuses_bad_values(values: dict[str, Any]) -> None:
    assert helm_python is not None
    with pytest.raises(helm_python.HelmValuesError):
        render({"certificates": {"mode": "self-managed"}} | values)


@needs_helm
def test_events_value(pems: dict[str, str]) -> None:
    static = {"certificates": {"static": pems}}
    events_rule = {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}

    def role(docs: list[dict[str, Any]]) -> dict[str, Any]:
        return next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "tollgate")

    on = render(static)
    assert events_rule in role(on)["rules"] and "--no-events" not in _container(on)["args"]
    off = render({**static, "events": {"enabled": False}})
    assert events_rule not in role(off)["rules"] and "--no-events" in _container(off)["args"]
    from webhook.cli.main import build_parser

    assert build_parser().parse_args(_container(off)["args"]).events is False
