"""End-to-end: real API server requests through the deployed webhook, with kubectl.

Run by tests/e2e/run.sh after it created a kind cluster, deployed manifests/
and applied policies/. Skipped unless ``TOLLGATE_E2E=1`` is set and ``kind``
and ``docker`` are usable, so a plain ``pytest`` run skips them cleanly.

Two groups:

* tests of the shipped policies (policies/pod-security, policies/examples),
  asserting the messages their authors wrote;
* self-contained tests that create their own policies, so the engine's
  semantics (DELETE, UPDATE, dry-run, Warn, mutation, namespaced
  AdmissionPolicy, a policy edit changing the very next decision) do not hinge
  on the examples' wording.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.cluster_objects import (
    allowed_registry,
    compliant_pod,
    configmap,
    deployment_of,
    eventually,
    image_in,
    ingress,
    messages,
    privileged,
    shipped,
)


def _cluster_available() -> bool:
    if os.environ.get("TOLLGATE_E2E") != "1":
        return False
    if shutil.which("kind") is None or shutil.which("docker") is None or shutil.which("kubectl") is None:
        return False
    # The docker client may be installed without an engine: ask the engine.
    try:
        return subprocess.run(["docker", "info"], check=False, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not _cluster_available(),
        reason="e2e needs TOLLGATE_E2E=1 (set by tests/e2e/run.sh), kind, kubectl and a running docker engine",
    ),
]

CONTEXT = os.environ.get("TOLLGATE_E2E_CONTEXT", "kind-tollgate-e2e")
DENIED = 'admission webhook "validate.tollgate.dev" denied the request'


# -- helpers ------------------------------------------------------------------


def kubectl(*args: str, obj: Any = None, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run kubectl against the e2e cluster; ``obj`` is sent as JSON on stdin."""
    result = subprocess.run(
        ["kubectl", "--context", CONTEXT, *args],
        check=False,
        input=json.dumps(obj) if obj is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result


def apply(obj: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    """``kubectl apply -f -`` of one object (stdout/stderr captured, no check)."""
    return kubectl("apply", "-f", "-", *extra, obj=obj)


def create(obj: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    """``kubectl create -f -`` of one object (stdout/stderr captured, no check)."""
    return kubectl("create", "-f", "-", *extra, obj=obj)


def get(kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """The object as JSON, or ``None`` when not found."""
    ns = ["-n", namespace] if namespace else []
    result = kubectl("get", kind, name, *ns, "-o", "json")
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    obj: dict[str, Any] = json.loads(result.stdout)
    return obj




def assert_denied(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """The request was rejected by Tollgate's validating webhook with every fragment in the message."""
    assert result.returncode != 0, f"expected a denial, got: {result.stdout}"
    assert DENIED in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in {result.stderr!r}"


def assert_admitted(result: subprocess.CompletedProcess[str]) -> None:
    """The request went through."""
    assert result.returncode == 0, result.stderr


def unique(prefix: str) -> str:
    """A DNS-1123 name unique to this run."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# -- fixtures -----------------------------------------------------------------


@pytest.fixture(scope="module")
def namespace() -> Iterator[str]:
    """A fresh namespace for this module's objects, labelled with a team."""
    name = unique("tollgate-e2e")
    kubectl(
        "create",
        "-f",
        "-",
        obj={
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"team": "e2e"}},
        },
        check=True,
    )
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def cluster_policy(namespace: str) -> Iterator[Callable[[dict[str, Any]], str]]:
    """Create ClusterAdmissionPolicies confined to the test namespace; delete them afterwards."""
    created: list[str] = []

    def make(spec: dict[str, Any]) -> str:
        name = unique("e2e")
        spec = json.loads(json.dumps(spec))
        # Confined to our namespace: other tests and the cluster's own writes are untouched.
        spec.setdefault("match", {})["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        kubectl(
            "create",
            "-f",
            "-",
            obj={
                "apiVersion": "tollgate.dev/v1alpha1",
                "kind": "ClusterAdmissionPolicy",
                "metadata": {"name": name},
                "spec": spec,
            },
            check=True,
        )
        created.append(name)
        return name

    yield make
    for name in created:
        kubectl("delete", "clusteradmissionpolicy", name, "--ignore-not-found")


CONFIGMAP_RULE = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "resources": ["configmaps"],
    "operations": ["CREATE", "UPDATE", "DELETE"],
}


def forbidden_key_spec(key: str, message: str) -> dict[str, Any]:
    """A policy denying ConfigMaps that carry ``data[key]``."""
    return {
        "failurePolicy": "Fail",
        "validationActions": ["Deny"],
        "match": {"resourceRules": [CONFIGMAP_RULE]},
        "validations": [
            {
                "expression": f"request.operation == 'DELETE' || !has(object.data) || !('{key}' in object.data)",
                "message": message,
            }
        ],
    }


# -- self-contained engine semantics -----------------------------------------


def test_policy_denies_create_and_edit_changes_next_decision(
    namespace: str, cluster_policy: Callable[[dict[str, Any]], str]
) -> None:
    policy = cluster_policy(forbidden_key_spec("forbidden", "e2e: key forbidden is not allowed"))

    eventually(
        lambda: assert_denied(
            create(configmap(unique("cm"), namespace, data={"forbidden": "x"})), "e2e: key forbidden is not allowed"
        )
    )
    assert_admitted(create(configmap(unique("cm"), namespace, data={"banned": "x"})))

    # Edit the policy with kubectl: the informer delivers it and the next request follows it.
    patch = [
        {
            "op": "replace",
            "path": "/spec/validations/0/expression",
            "value": "request.operation == 'DELETE' || !has(object.data) || !('banned' in object.data)",
        },
        {"op": "replace", "path": "/spec/validations/0/message", "value": "e2e: key banned is not allowed"},
    ]
    assert_admitted(kubectl("patch", "clusteradmissionpolicy", policy, "--type=json", "-p", json.dumps(patch)))
    eventually(
        lambda: assert_denied(
            create(configmap(unique("cm"), namespace, data={"banned": "x"})), "e2e: key banned is not allowed"
        )
    )
    assert_admitted(create(configmap(unique("cm"), namespace, data={"forbidden": "x"})))

    # Deleting the policy lifts the restriction.
    assert_admitted(kubectl("delete", "clusteradmissionpolicy", policy))
    eventually(lambda: assert_admitted(create(configmap(unique("cm"), namespace, data={"banned": "x"}))))


def test_update_is_evaluated_against_the_new_object(
    namespace: str, cluster_policy: Callable[[dict[str, Any]], str]
) -> None:
    cluster_policy(forbidden_key_spec("forbidden", "e2e: no forbidden key"))
    name = unique("cm")
    eventually(lambda: assert_denied(create(configmap(unique("probe"), namespace, data={"forbidden": "1"}))))
    assert_admitted(create(configmap(name, namespace, data={"ok": "1"})))
    patch = json.dumps({"data": {"forbidden": "1"}})
    assert_denied(
        kubectl("patch", "configmap", name, "-n", namespace, "--type=merge", "-p", patch), "e2e: no forbidden key"
    )
    stored = get("configmap", name, namespace)
    assert stored is not None and "forbidden" not in stored["data"]


def test_delete_sees_old_object(namespace: str, cluster_policy: Callable[[dict[str, Any]], str]) -> None:
    cluster_policy(
        {
            "failurePolicy": "Fail",
            "validationActions": ["Deny"],
            "match": {"resourceRules": [dict(CONFIGMAP_RULE, operations=["DELETE"])]},
            "validations": [
                {
                    "expression": "!has(oldObject.metadata.labels) || !('protected' in oldObject.metadata.labels)",
                    "message": "e2e: protected ConfigMaps cannot be deleted",
                }
            ],
        }
    )
    name = unique("cm")
    assert_admitted(create(configmap(name, namespace, labels={"protected": "yes"})))
    eventually(
        lambda: assert_denied(
            kubectl("delete", "configmap", name, "-n", namespace), "e2e: protected ConfigMaps cannot be deleted"
        )
    )
    assert get("configmap", name, namespace) is not None
    assert_admitted(kubectl("label", "configmap", name, "-n", namespace, "protected-"))
    assert_admitted(kubectl("delete", "configmap", name, "-n", namespace))


def test_server_side_dry_run_is_decided_and_writes_nothing(
    namespace: str, cluster_policy: Callable[[dict[str, Any]], str]
) -> None:
    cluster_policy(forbidden_key_spec("forbidden", "e2e: dry-run denied too"))
    denied_name, allowed_name = unique("cm"), unique("cm")
    eventually(
        lambda: assert_denied(
            create(configmap(denied_name, namespace, data={"forbidden": "1"}), "--dry-run=server"),
            "e2e: dry-run denied too",
        )
    )
    assert_admitted(create(configmap(allowed_name, namespace, data={"ok": "1"}), "--dry-run=server"))
    assert get("configmap", allowed_name, namespace) is None


def test_warn_action_admits_with_a_warning(namespace: str, cluster_policy: Callable[[dict[str, Any]], str]) -> None:
    spec = forbidden_key_spec("deprecated", "e2e: key deprecated is deprecated")
    spec["validationActions"] = ["Warn"]
    cluster_policy(spec)

    def check() -> None:
        result = create(configmap(unique("cm"), namespace, data={"deprecated": "1"}))
        assert_admitted(result)
        assert "Warning:" in result.stderr and "e2e: key deprecated is deprecated" in result.stderr, result.stderr

    eventually(check)


def test_mutation_adds_labels(namespace: str, cluster_policy: Callable[[dict[str, Any]], str]) -> None:
    cluster_policy(
        {
            "failurePolicy": "Fail",
            "match": {"resourceRules": [dict(CONFIGMAP_RULE, operations=["CREATE"])]},
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": "{'metadata': {'labels': {'e2e-mutated': 'true'}}}"},
                }
            ],
        }
    )

    def check() -> None:
        name = unique("cm")
        assert_admitted(create(configmap(name, namespace, labels={"keep": "me"})))
        stored = get("configmap", name, namespace)
        assert stored is not None
        labels = stored["metadata"]["labels"]
        # Subset: a shipped example (add-default-labels) may add its own labels too.
        assert labels.get("keep") == "me" and labels.get("e2e-mutated") == "true", labels

    eventually(check)


def test_namespaced_admission_policy_only_applies_in_its_namespace(namespace: str) -> None:
    other = unique("tollgate-e2e-other")
    kubectl("create", "namespace", other, check=True)
    try:
        policy = {
            "apiVersion": "tollgate.dev/v1alpha1",
            "kind": "AdmissionPolicy",
            "metadata": {"name": "e2e-tenant", "namespace": namespace},
            "spec": forbidden_key_spec("tenant-forbidden", "e2e: tenant rule"),
        }
        assert_admitted(create(policy))
        eventually(
            lambda: assert_denied(
                create(configmap(unique("cm"), namespace, data={"tenant-forbidden": "1"})), "e2e: tenant rule"
            )
        )
        assert_admitted(create(configmap(unique("cm"), other, data={"tenant-forbidden": "1"})))
    finally:
        kubectl("delete", "admissionpolicy", "e2e-tenant", "-n", namespace, "--ignore-not-found")
        kubectl("delete", "namespace", other, "--wait=false")


def _hooks(kind: str) -> list[dict[str, Any]]:
    config = get(kind, "tollgate")
    assert config is not None
    return list(config.get("webhooks") or [])


def test_generated_webhook_rules_follow_the_policies(cluster_policy: Callable[[dict[str, Any]], str]) -> None:
    """The leader adds an Ignore entry for a new Ignore policy's resources and drops it on delete."""
    spec = forbidden_key_spec("forbidden", "e2e: ignore entry")
    spec["failurePolicy"] = "Ignore"
    spec["match"]["resourceRules"] = [{**CONFIGMAP_RULE, "resources": ["secrets"]}]
    name = cluster_policy(spec)

    def has_ignore_entry_for_secrets() -> None:
        ignore = [h for h in _hooks("validatingwebhookconfiguration") if h["failurePolicy"] == "Ignore"]
        assert ignore and "secrets" in {r for rule in ignore[0]["rules"] for r in rule["resources"]}, ignore
        assert ignore[0]["clientConfig"].get("caBundle"), "the leader fills caBundle in new entries too"

    eventually(has_ignore_entry_for_secrets)
    kubectl("delete", "clusteradmissionpolicy", name)

    def no_secrets_rule() -> None:
        rules = [rule for h in _hooks("validatingwebhookconfiguration") for rule in h["rules"]]
        assert "secrets" not in {r for rule in rules for r in rule["resources"]}, rules

    eventually(no_secrets_rule)


def test_generated_webhook_rules_never_use_wildcards() -> None:
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        for hook in _hooks(kind):
            for rule in hook["rules"]:
                assert "*" not in rule["resources"] and "*/*" not in rule["resources"], (kind, rule)
            assert {"tollgate-system", "kube-system"} <= set(hook["namespaceSelector"]["matchExpressions"][0]["values"])


def test_webhook_serves_with_two_replicas() -> None:
    deployment = get("deployment", "tollgate", "tollgate-system")
    assert deployment is not None
    assert deployment["status"].get("readyReplicas") == 2


# -- the shipped policies (policies/) -------------------------------------------
#
# Messages and params are read from the policy files themselves (tests/cluster_objects.py), so these
# tests follow the policies' wording instead of restating it.


def assert_denied_by(result: subprocess.CompletedProcess[str], policy: dict[str, Any], *, prefix: str = "") -> None:
    """Denied with ``"<policy>: <prefix><message>"``, the engine's format, for one of ``policy``'s validations.

    ``prefix`` is the autogen template path, e.g. ``"spec.template: "`` for a Deployment.
    """
    assert_denied(result)
    name = policy["metadata"]["name"]
    candidates = [f"{name}: {prefix}{m}" for m in messages(policy)] or [f"{name}: {prefix}"]
    assert any(c in result.stderr for c in candidates), f"none of {candidates} in {result.stderr!r}"


def test_unique_ingress_host_reads_the_ingress_cache(namespace: str) -> None:
    """spec.references: the policy sees the cluster's other Ingresses through its informer, by its host index."""
    shipped("ClusterAdmissionPolicy", "unique-ingress-host")
    host = f"{unique('shop')}.e2e.example.com"
    assert_admitted(create(ingress(unique("shop"), namespace, host)))
    other = unique("tollgate-e2e-other")
    kubectl("create", "namespace", other, check=True)
    try:
        def claimed() -> None:  # the informer's watch brings the first Ingress into the cache
            assert_denied(create(ingress(unique("copy"), other, host)), f"host {host} is already used by another "
                                                                        "Ingress")

        eventually(claimed)
        assert_admitted(create(ingress(unique("blog"), other, f"{unique('blog')}.e2e.example.com")))
    finally:
        kubectl("delete", "namespace", other, "--wait=false")


def test_service_selector_must_match_a_deployment_warns(namespace: str) -> None:
    """spec.references: a Service whose selector matches no Deployment's pods is admitted with a warning."""
    shipped("ClusterAdmissionPolicy", "service-selector-matches-deployment")
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": unique("typo"), "namespace": namespace},
               "spec": {"selector": {"app": "no-such-app"}, "ports": [{"port": 80}]}}

    def warned() -> None:  # a server-side dry run: retried until the Deployment cache has synced
        result = create(service, "--dry-run=server")
        assert_admitted(result)
        assert "selector app=no-such-app matches the pods of no Deployment" in result.stderr, result.stderr

    eventually(warned)
    pod = compliant_pod(namespace, unique("web"))
    assert_admitted(create(deployment_of(pod)))
    matching = {**service, "metadata": {"name": unique("web"), "namespace": namespace},
                "spec": {"selector": {"app": pod["metadata"]["labels"]["app"]}, "ports": [{"port": 80}]}}

    def clean() -> None:
        result = create(matching, "--dry-run=server")
        assert_admitted(result)
        assert "matches the pods of no Deployment" not in result.stderr, result.stderr

    eventually(clean)


def test_privileged_pod_denied_with_pod_security_message(namespace: str) -> None:
    policy = shipped("ClusterAdmissionPolicy", "disallow-privileged-containers")
    result = create(privileged(compliant_pod(namespace, unique("priv"))))
    assert_denied_by(result, policy)
    assert messages(policy), "the policy should carry a message to check"
    assert "app (securityContext.privileged=true)" in result.stderr, result.stderr


def test_compliant_pod_admitted_and_mutated(namespace: str) -> None:
    name = unique("good")
    assert_admitted(create(compliant_pod(namespace, name)))
    stored = get("pod", name, namespace)
    assert stored is not None
    shipped("ClusterAdmissionPolicy", "add-default-labels")
    # The example's JSONPatch marks the Pod managed; its ApplyConfiguration records the creator.
    meta = stored["metadata"]
    assert meta["labels"].get("tollgate.dev/managed") == "true", meta
    assert meta["labels"].get("team") == "e2e", meta
    assert meta.get("annotations", {}).get("tollgate.dev/created-by"), meta


def test_deployment_with_privileged_template_denied_by_autogen(namespace: str) -> None:
    policy = shipped("ClusterAdmissionPolicy", "disallow-privileged-containers")
    result = create(deployment_of(privileged(compliant_pod(namespace, unique("dep")))))
    assert_denied_by(result, policy, prefix="spec.template: ")
    assert_admitted(create(deployment_of(compliant_pod(namespace, unique("dep")))))


def test_update_of_deployment_to_privileged_template_denied(namespace: str) -> None:
    policy = shipped("ClusterAdmissionPolicy", "disallow-privileged-containers")
    name = unique("dep")
    assert_admitted(create(deployment_of(compliant_pod(namespace, name))))
    patch = [{"op": "add", "path": "/spec/template/spec/containers/0/securityContext/privileged", "value": True}]
    result = kubectl("patch", "deployment", name, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    assert_denied_by(result, policy, prefix="spec.template: ")


def test_allowed_registries_follows_its_configmap(namespace: str) -> None:
    policy = shipped("ClusterAdmissionPolicy", "allowed-registries")
    ref = policy["spec"]["paramRef"]
    params = shipped("ConfigMap", ref.get("name", "allowed-registries"))
    foreign = "e2e-registry.example.com/pause:3.10"
    eventually(lambda: assert_denied_by(create(compliant_pod(namespace, unique("reg"), image=foreign)), policy))

    # Allow the foreign registry by editing the params ConfigMap: the next request follows it.
    key, value = next(iter(params["data"].items()))
    separator = "\n" if "\n" in value.strip() else ","
    widened = value.rstrip("\n" + ",") + separator + "e2e-registry.example.com/"
    cm_ns = ref.get("namespace") or params["metadata"].get("namespace", "tollgate-system")
    patch = json.dumps({"data": {key: widened}})
    assert_admitted(kubectl("patch", "configmap", params["metadata"]["name"], "-n", cm_ns, "--type=merge", "-p", patch))
    try:
        eventually(lambda: assert_admitted(create(compliant_pod(namespace, unique("reg"), image=foreign))))
    finally:
        restore = json.dumps({"data": {key: value}})
        kubectl("patch", "configmap", params["metadata"]["name"], "-n", cm_ns, "--type=merge", "-p", restore)


def test_latest_tag_admitted_with_warning(namespace: str) -> None:
    policy = shipped("ClusterAdmissionPolicy", "disallow-latest-tag")
    assert policy["spec"]["validationActions"] == ["Warn"]
    image = image_in(allowed_registry(), "pause:latest")
    result = create(compliant_pod(namespace, unique("latest"), image=image))
    assert_admitted(result)
    assert "Warning:" in result.stderr, result.stderr
    assert f"disallow-latest-tag: {messages(policy)[0]}" in result.stderr, result.stderr


def test_pod_security_dry_run_denied_and_nothing_written(namespace: str) -> None:
    policy = shipped("ClusterAdmissionPolicy", "disallow-privileged-containers")
    name = unique("dry")
    assert_denied_by(create(privileged(compliant_pod(namespace, name)), "--dry-run=server"), policy)
    assert_admitted(create(compliant_pod(namespace, name), "--dry-run=server"))
    assert get("pod", name, namespace) is None


# -- status and leader election --------------------------------------------------


def test_one_replica_holds_the_status_lease() -> None:
    def holder() -> str:
        lease = get("lease", "tollgate-status-writer", "tollgate-system")
        assert lease is not None and lease["spec"].get("holderIdentity"), lease
        return str(lease["spec"]["holderIdentity"])

    identity = eventually(holder, timeout=60)
    pods = json.loads(
        kubectl(
            "get", "pods", "-n", "tollgate-system", "-l", "app.kubernetes.io/name=tollgate", "-o", "json", check=True
        ).stdout
    )
    assert identity in {p["metadata"]["name"] for p in pods["items"]}


def test_shipped_policy_status_is_ready() -> None:
    def check() -> None:
        policy = get("clusteradmissionpolicy", "disallow-privileged-containers")
        assert policy is not None
        status = policy.get("status") or {}
        ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", status
        assert ready[0].get("observedGeneration") == policy["metadata"]["generation"], status

    eventually(check, timeout=60)


def test_broken_policy_reports_compile_error_in_status(cluster_policy: Callable[[dict[str, Any]], str]) -> None:
    name = cluster_policy(
        {
            "match": {"resourceRules": [CONFIGMAP_RULE]},
            "validations": [{"expression": "objekt.data.size() == 0", "message": "never evaluated"}],
        }
    )

    def check() -> None:
        policy = get("clusteradmissionpolicy", name)
        assert policy is not None
        ready = [c for c in (policy.get("status") or {}).get("conditions", []) if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "False" and ready[0]["reason"] == "CompileError", policy.get("status")
        assert "objekt" in ready[0]["message"]

    eventually(check, timeout=60)


def test_status_lease_moves_when_the_leader_pod_goes_away() -> None:
    # Last in the file: it takes one replica down for a while.
    def holder() -> str:
        lease = get("lease", "tollgate-status-writer", "tollgate-system")
        assert lease is not None and lease["spec"].get("holderIdentity"), lease
        return str(lease["spec"]["holderIdentity"])

    leader = eventually(holder, timeout=60)
    assert_admitted(kubectl("delete", "pod", leader, "-n", "tollgate-system", "--wait=false"))

    def moved() -> str:
        current = holder()
        assert current != leader, "the lease did not move"
        return current

    # Graceful delete: the old leader releases the Lease on SIGTERM, so the other
    # replica takes it on its next retry; 15 s (the lease duration) bounds a crash.
    successor = eventually(moved, timeout=30)
    assert successor.startswith("tollgate-")
    # Admission kept working with one replica, and the Deployment heals.
    assert_admitted(
        kubectl("create", "configmap", unique("probe"), "-n", "default", "--from-literal=k=v", "--dry-run=server")
    )
    assert_admitted(kubectl("-n", "tollgate-system", "rollout", "status", "deployment/tollgate", "--timeout=120s"))
