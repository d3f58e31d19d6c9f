"""``serve --import kyverno`` against the real API server: Kyverno's CRDs installed without Kyverno (issue #24).

A 1.20 server does not serve ValidatingAdmissionPolicy, but it serves any CRD: the module installs a
stand-in for Kyverno's ValidatingPolicy CRD (``kyverno-validatingpolicy-crd.yaml``: v1 served and stored,
v1beta1 served), then the shipped example ``policies/examples/kyverno-restrict-image-registries`` with its
ConfigMap, with kubectl, as a user would. Tollgates of their own (``--no-manage-webhooks --no-status``: they
never touch the shared webhook configurations or the status Lease, so the shared Deployment and the other
tests are unaffected) run under the ServiceAccount's token with the shipped RBAC and are asked directly
(:meth:`Tollgate.review`). Everything is removed at the end (the Tollgates stopped first).

Tollgate's own shipped policies are in the cluster too and judge the same Pods: ``allowed-registries`` also
denies a ``docker.io`` image. So the tests read the ValidatingPolicy's own part of each answer (its message
in ``status.message`` or in ``warnings``), as ``ValidatingPolicy/restrict-image-registries: ...``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_objects import eventually
from tests.realapi.cluster import REPO
from tests.realapi.helpers import answer, compliant_pod, denial, new_namespace, unique
from tests.realapi.tollgate import SA_USER, Deployment, Tollgate

CRD = Path(__file__).with_name("kyverno-validatingpolicy-crd.yaml")
EXAMPLE = REPO / "policies" / "examples" / "kyverno-restrict-image-registries"
POLICY_FILE, CONFIGMAP_FILE = EXAMPLE / "validating-policy.yaml", EXAMPLE / "existing.yaml"
RESOURCE = "validatingpolicies.policies.kyverno.io"
KEY = "ValidatingPolicy/restrict-image-registries"
DISALLOWED = "docker.io/library/busybox:1.36"
#: The policy's messageExpression for a Pod with the DISALLOWED image, with the example ConfigMap's registries.
MESSAGE = f"{KEY}: images must come from registry.example.com or ghcr.io/example: {DISALLOWED}"
#: Neither writes the shared webhook configurations nor takes the status Lease.
QUIET = ("--no-manage-webhooks", "--no-status")


def kyverno_requests(deployment: Deployment) -> list[dict[str, Any]]:
    """Requests of Tollgate's ServiceAccount on ValidatingPolicies so far, from the API server's audit log."""
    return [e for e in deployment.cluster.audit_events()
            if e["user"]["username"] == SA_USER and (e.get("objectRef") or {}).get("resource") == "validatingpolicies"]


def start_tollgate(deployment: Deployment, workdir: Path, identity: str, *args: str) -> Tollgate:
    tollgate = Tollgate(deployment.cluster, workdir, deployment.sa_kubeconfig, deployment.cert_dir,
                        args=[*QUIET, *args], identity=identity)
    tollgate.start()
    return tollgate


def its_warnings(response: dict[str, Any]) -> list[str]:
    """The ValidatingPolicy's warnings in ``response``."""
    return [w for w in response.get("warnings") or [] if w.startswith(f"{KEY}: ")]


def assert_denied_by_it(tollgate: Tollgate, pod: dict[str, Any]) -> None:
    response = answer(tollgate, pod)
    assert response["allowed"] is False and MESSAGE in denial(response), response


def apply_policy(deployment: Deployment) -> None:
    """``kubectl apply -f`` the shipped ValidatingPolicy as written (validationActions [Deny])."""
    deployment.kubectl("apply", "--validate=false", "-f", str(POLICY_FILE), check=True)


@pytest.fixture(scope="module")
def kyverno_crd(deployment: Deployment) -> Iterator[None]:
    """The ValidatingPolicy CRD (until Established), the example's ConfigMap and policy; all deleted at the end."""
    deployment.kubectl("apply", "-f", str(CRD), check=True)
    try:
        deployment.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{RESOURCE}", check=True)
        deployment.kubectl("apply", "-f", str(CONFIGMAP_FILE), check=True)
        apply_policy(deployment)
        yield
    finally:
        deployment.kubectl("delete", "--ignore-not-found", "-f", str(POLICY_FILE))
        deployment.kubectl("delete", "--ignore-not-found", "-f", str(CONFIGMAP_FILE))
        deployment.kubectl("delete", "--ignore-not-found", "--timeout=60s", "-f", str(CRD))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("imports")


@pytest.fixture(scope="module")
def namespace(deployment: Deployment) -> str:
    return new_namespace(deployment, "imports")


@pytest.fixture(scope="module")
def importing(deployment: Deployment, kyverno_crd: None, workdir: Path) -> Iterator[Tollgate]:
    """``tollgate serve --import kyverno``, started once the kind is served and the policy stored."""
    tollgate = start_tollgate(deployment, workdir, "tollgate-realapi-imports", "--import", "kyverno")
    try:
        yield tollgate
    finally:
        tollgate.stop()


def test_without_import_the_kind_is_served_but_never_listed(
        deployment: Deployment, kyverno_crd: None, workdir: Path, namespace: str) -> None:
    """The default: Kyverno (or nobody) owns these policies; Tollgate neither reads nor enforces them."""
    tollgate = start_tollgate(deployment, workdir, "tollgate-realapi-no-import")
    try:
        _, ready = tollgate.readyz()
        bad = answer(tollgate, compliant_pod(namespace, unique("bad"), image=DISALLOWED))
    finally:
        tollgate.stop()
    assert ready.get("imports", {"watching": {}}) == {"watching": {}}, ready.get("imports")
    assert KEY not in ready["policies"]
    assert KEY not in denial(bad) and not its_warnings(bad), bad
    # Neither this Tollgate nor the shared one (started before the CRD) asked for the kind, ever; the importing
    # Tollgate's test below sees its own requests in the same log.
    assert kyverno_requests(deployment) == []


def test_import_kyverno_lists_and_watches_the_kind_in_v1(deployment: Deployment, importing: Tollgate) -> None:
    _, ready = importing.readyz()
    # v1beta1 is served too: the first of the versions Tollgate reads that the API server serves is watched.
    assert ready["imports"] == {"watching": {"ValidatingPolicy": "policies.kyverno.io/v1"}}, ready["imports"]
    assert ready["policies"][KEY] == {"ready": True, "reason": "Compiled"}
    # Under the shipped RBAC: listed in v1, nothing refused. (A 1.20 server logs a successful watch only when it
    # ends, minutes from now: the tests below show the watch by its effect. It answers the informer's streaming
    # list, a watch with sendInitialEvents=true, 422; the informer then lists and watches, as client-go does.)
    seen = {(e["verb"], e["objectRef"].get("apiVersion"), e.get("responseStatus", {}).get("code"))
            for e in kyverno_requests(deployment)}
    assert ("list", "v1", 200) in seen, seen
    assert not [s for s in seen if s[2] in (401, 403) or s[1] != "v1"], seen


def test_the_validating_policy_decides(importing: Tollgate, namespace: str) -> None:
    assert_denied_by_it(importing, compliant_pod(namespace, unique("bad"), image=DISALLOWED))
    good = answer(importing, compliant_pod(namespace, unique("good")))
    assert good["allowed"] is True, good
    assert not its_warnings(good), good


def test_an_edit_with_kubectl_changes_the_decision_without_a_restart(
        deployment: Deployment, importing: Tollgate, namespace: str) -> None:
    apply_policy(deployment)  # as shipped: Deny
    pod = compliant_pod(namespace, unique("bad"), image=DISALLOWED)
    eventually(lambda: assert_denied_by_it(importing, pod))
    deployment.kubectl("patch", RESOURCE, "restrict-image-registries", "--type=merge",
                       "-p", json.dumps({"spec": {"validationActions": ["Warn"]}}), check=True)

    def warns() -> dict[str, Any]:
        response = answer(importing, pod)
        assert its_warnings(response) == [MESSAGE], response
        return response

    response = eventually(warns)
    assert KEY not in denial(response), denial(response)  # still denied, by Tollgate's own allowed-registries only
    assert importing.proc is not None and importing.proc.poll() is None


def test_a_deleted_policy_stops_deciding(deployment: Deployment, importing: Tollgate, namespace: str) -> None:
    apply_policy(deployment)
    pod = compliant_pod(namespace, unique("bad"), image=DISALLOWED)
    eventually(lambda: assert_denied_by_it(importing, pod))
    deployment.kubectl("delete", RESOURCE, "restrict-image-registries", check=True)

    def gone() -> dict[str, Any]:
        _, ready = importing.readyz()
        assert KEY not in ready["policies"], ready["policies"].get(KEY)
        return ready

    ready = eventually(gone)
    assert ready["imports"]["watching"] == {"ValidatingPolicy": "policies.kyverno.io/v1"}  # the kind is still watched
    response = answer(importing, pod)
    assert KEY not in denial(response) and not its_warnings(response), response
