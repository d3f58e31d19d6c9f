"""Tollgate under exactly the shipped RBAC: everything it did this session, read from the API server's audit log."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.realapi.tollgate import SA_USER, Deployment

pytestmark = pytest.mark.session_audit


def _received(event: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def test_the_service_account_is_not_an_admin(deployment: Deployment) -> None:
    """The identity is the ServiceAccount's token, bound only by the shipped roles (asked without a 403)."""
    def can(*args: str) -> str:
        return deployment.cluster.kubectl("auth", "can-i", *args, kubeconfig=deployment.sa_kubeconfig).stdout.strip()

    assert can("list", "secrets", "--all-namespaces") == "no"
    assert can("create", "validatingwebhookconfigurations") == "no"
    assert can("watch", "clusteradmissionpolicies.tollgate.dev") == "yes"
    assert can("patch", "clusteradmissionpolicies.tollgate.dev", "--subresource=status") == "yes"


def test_tollgate_is_never_forbidden_anything_it_does(deployment: Deployment, report: Callable[[str], None]) -> None:
    """Every request Tollgate made in the session (informers, status, Lease, webhook configurations, reports,
    discovery) is authorized by manifests/install and the background-audit and references components.

    A starting kube-apiserver answers 403 to everyone until its RBAC caches have synced: requests received
    while it was starting are left out (and counted in the report)."""
    events = [e for e in deployment.cluster.audit_events()
              if e["user"]["username"] == SA_USER and e["stage"] in ("ResponseComplete", "ResponseStarted")]
    assert len(events) > 50, f"only {len(events)} requests of {SA_USER} in the audit log"

    def starting(event: dict[str, Any]) -> bool:
        return any(began <= _received(event) <= ready for began, ready in deployment.cluster.starting)

    forbidden = [e for e in events if e.get("responseStatus", {}).get("code") == 403]
    while_starting = [e for e in forbidden if starting(e)]
    verbs = Counter(f"{e['verb']} {(e.get('objectRef') or {}).get('resource', e['requestURI'])}" for e in events)
    report(f"rbac: {len(events)} requests of {SA_USER}, {len(forbidden)} answered 403 "
           f"({len(while_starting)} while kube-apiserver was starting); {len(verbs)} kinds of request")
    refused = [f"{e['verb']} {e['requestURI']}" for e in forbidden if not starting(e)]
    assert not refused, refused
