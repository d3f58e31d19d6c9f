"""``serve --import gatekeeper`` against the real API server: Gatekeeper's CRDs installed without Gatekeeper.

A 1.20 server serves any CRD: the module installs stand-ins for Gatekeeper's ConstraintTemplate CRD and for
the constraint CRD Gatekeeper's controller would create for the library's K8sRequiredLabels template
(``gatekeeper-crds.yaml``), then the template and its ``must-have-pizza`` constraint from
``tests/fixtures/gatekeeper-library`` with kubectl, as a user would. A Tollgate of its own
(``--no-manage-webhooks --no-status``) runs under the ServiceAccount's token with the shipped RBAC and is
asked directly. Then the constraint CRD is deleted, as Gatekeeper's controller does with its template: its
policy goes. Everything is removed at the end.

Tollgate's own shipped policies judge the same Pods; the tests read the constraint's own part of each answer.
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

CRDS = Path(__file__).with_name("gatekeeper-crds.yaml")
LABELS = REPO / "tests" / "fixtures" / "gatekeeper-library" / "general" / "requiredlabels"
TEMPLATE_FILE = LABELS / "template.yaml"
CONSTRAINT_FILE = LABELS / "samples" / "verify-label-key-only" / "constraint.yaml"
CONSTRAINT_CRD = "k8srequiredlabels.constraints.gatekeeper.sh"
KEY = "K8sRequiredLabels/must-have-pizza"
MESSAGE = f"{KEY}: missing required label, requires all of: pizza"
QUIET = ("--no-manage-webhooks", "--no-status")


def constraint_requests(deployment: Deployment) -> list[dict[str, Any]]:
    """Requests of Tollgate's ServiceAccount on the constraint kind so far, from the API server's audit log."""
    return [e for e in deployment.cluster.audit_events()
            if e["user"]["username"] == SA_USER and (e.get("objectRef") or {}).get("resource") == "k8srequiredlabels"]


@pytest.fixture(scope="module")
def gatekeeper_crds(deployment: Deployment) -> Iterator[None]:
    """The CRDs (until Established), the template and the constraint; all deleted at the end."""
    deployment.kubectl("apply", "-f", str(CRDS), check=True)
    try:
        for crd in ("constrainttemplates.templates.gatekeeper.sh", CONSTRAINT_CRD):
            deployment.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}", check=True)
        deployment.kubectl("apply", "-f", str(TEMPLATE_FILE), check=True)
        deployment.kubectl("apply", "-f", str(CONSTRAINT_FILE), check=True)
        yield
    finally:
        deployment.kubectl("delete", "--ignore-not-found", "-f", str(CONSTRAINT_FILE))
        deployment.kubectl("delete", "--ignore-not-found", "-f", str(TEMPLATE_FILE))
        deployment.kubectl("delete", "--ignore-not-found", "--timeout=60s", "-f", str(CRDS))


@pytest.fixture(scope="module")
def importing(deployment: Deployment, gatekeeper_crds: None,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tollgate]:
    tollgate = Tollgate(deployment.cluster, tmp_path_factory.mktemp("gatekeeper"), deployment.sa_kubeconfig,
                        deployment.cert_dir, args=[*QUIET, "--import", "gatekeeper"],
                        identity="tollgate-realapi-gatekeeper")
    tollgate.start()
    try:
        yield tollgate
    finally:
        tollgate.stop()


@pytest.fixture(scope="module")
def namespace(deployment: Deployment) -> str:
    return new_namespace(deployment, "gatekeeper")


def test_the_template_and_the_constraint_kind_are_watched_under_the_shipped_rbac(
        deployment: Deployment, importing: Tollgate) -> None:
    def watching() -> dict[str, Any]:
        _, ready = importing.readyz()
        assert ready["imports"]["watching"] == {"ConstraintTemplate": "templates.gatekeeper.sh/v1",
                                                "K8sRequiredLabels": "constraints.gatekeeper.sh/v1beta1"}, ready
        return ready

    ready = eventually(watching)
    assert ready["policies"][KEY] == {"ready": True, "reason": "Compiled"}
    seen = {(e["verb"], e["objectRef"].get("apiVersion"), e.get("responseStatus", {}).get("code"))
            for e in constraint_requests(deployment)}
    assert ("list", "v1beta1", 200) in seen, seen
    assert not [s for s in seen if s[2] in (401, 403)], seen


def test_the_constraint_decides_and_follows_kubectl(deployment: Deployment, importing: Tollgate,
                                                    namespace: str) -> None:
    bad = compliant_pod(namespace, unique("bad"))

    def denied() -> None:
        assert MESSAGE in denial(answer(importing, bad))

    eventually(denied)
    good = compliant_pod(namespace, unique("good"))
    good["metadata"].setdefault("labels", {})["pizza"] = "yes"
    assert KEY not in denial(answer(importing, good))
    deployment.kubectl("patch", CONSTRAINT_CRD, "must-have-pizza", "--type=merge",
                       "-p", json.dumps({"spec": {"enforcementAction": "warn"}}), check=True)

    def warns() -> None:
        response = answer(importing, bad)
        assert MESSAGE not in denial(response), response
        assert [w for w in response.get("warnings") or [] if w.startswith(MESSAGE)], response

    eventually(warns)


def test_the_policy_goes_with_the_constraint_crd(deployment: Deployment, importing: Tollgate,
                                                 namespace: str) -> None:
    # Deleting the CRD deletes its constraints (their watch tells the informer); the kind itself is retired at
    # the next discovery (discovery_interval; the fake API server's component test shows that step).
    deployment.kubectl("delete", "--timeout=60s", f"crd/{CONSTRAINT_CRD}", check=True)

    def gone() -> dict[str, Any]:
        _, ready = importing.readyz()
        assert KEY not in ready["policies"]
        return ready

    eventually(gone)
    response = answer(importing, compliant_pod(namespace, unique("bad")))
    assert KEY not in denial(response) and not [w for w in response.get("warnings") or [] if w.startswith(KEY)]
    assert importing.proc is not None and importing.proc.poll() is None
