"""PolicyExceptions through kube-apiserver 1.20: a team's exception under exactly the documented RBAC.

The team (user alice, group team-a: kubectl impersonation, so the API server's RBAC decides) gets the
Role and RoleBinding of manifests/examples/team-policy-exceptions.yaml in its namespace and nothing else.
Its PolicyException admits its debug Pod, which the background audit reports as ``skip`` naming the
exception; the same Pod in another namespace is denied; once ``expiresAt`` passes the same Pod is denied
again with no further edit (the leader marks the exception Expired; the decision never waited for that).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import yaml

from tests.cluster_objects import eventually
from tests.realapi.helpers import assert_admitted, assert_denied, compliant_pod, new_namespace, privileged, unique
from tests.realapi.tollgate import Deployment

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "team-policy-exceptions.yaml"
POLICIES = ("disallow-privileged-containers", "disallow-privilege-escalation")
#: Long enough to create the exception, see it Ready and create the Pod; the test then waits it out.
LIFETIME = datetime.timedelta(seconds=45)


def team_rbac(namespace: str, group: str) -> list[dict[str, Any]]:
    """The documented Role and RoleBinding, for ``namespace`` and ``group`` instead of team-a."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
        for subject in d.get("subjects") or []:
            subject["name"] = group
    return docs


def as_team(deployment: Deployment, group: str, *args: str, obj: Any = None) -> Any:
    return deployment.kubectl(*args, "--as", f"alice-{group}", "--as-group", group, obj=obj)


def condition(deployment: Deployment, namespace: str, name: str) -> dict[str, Any]:
    got = json.loads(deployment.kubectl("get", "policyexceptions.tollgate.dev", name, "-n", namespace, "-o", "json",
                                        check=True).stdout)
    ready = [c for c in (got.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
    assert ready, got.get("status")
    return dict(ready[0])


def test_team_exception_admits_its_debug_pod_until_it_expires(deployment: Deployment) -> None:
    team, other = new_namespace(deployment, "team"), new_namespace(deployment, "other")
    group = unique("group")
    deployment.apply(team_rbac(team, group))
    expires = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + LIFETIME
    exception = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "PolicyException",
                 "metadata": {"name": "netdebug", "namespace": team},
                 "spec": {"policies": [{"name": p} for p in POLICIES], "reason": "OPS-1234: debug networking",
                          "expiresAt": expires.isoformat().replace("+00:00", "Z"),
                          "matchConditions": [{"name": "debug-pods",
                                               "expression": "object.metadata.name.startsWith('debug-')"}]}}
    # Exactly the documented RBAC: the team may create it in its namespace, not in another one.
    refused = as_team(deployment, group, "create", "--validate=false", "-f", "-",
                      obj={**exception, "metadata": {"name": "netdebug", "namespace": other}})
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    assert_admitted(as_team(deployment, group, "create", "--validate=false", "-f", "-", obj=exception))

    def ready() -> None:
        got = condition(deployment, team, "netdebug")
        assert (got["status"], got["reason"]) == ("True", "Compiled"), got

    eventually(ready, timeout=30)

    debug = privileged(compliant_pod(team, unique("debug")))
    assert_admitted(deployment.kubectl("create", "-f", "-", obj=debug))
    elsewhere = privileged(compliant_pod(other, debug["metadata"]["name"]))
    assert_denied(deployment.kubectl("create", "-f", "-", obj=elsewhere), "disallow-privileged-containers")
    web = privileged(compliant_pod(team, unique("web")))
    assert_denied(deployment.kubectl("create", "-f", "-", obj=web), "disallow-privileged-containers")

    def reported_skip() -> None:
        result = deployment.kubectl("get", "policyreports.wgpolicyk8s.io", "-n", team, "-o", "json", check=True)
        rows = [r for report in json.loads(result.stdout)["items"] for r in report.get("results") or []
                if r["resources"][0]["name"] == debug["metadata"]["name"] and r["policy"] in POLICIES]
        assert {r["policy"] for r in rows} == set(POLICIES), rows
        for r in rows:
            assert r["result"] == "skip", r
            assert r["properties"] == {"exception": f"PolicyException {team}/netdebug"}, r

    eventually(reported_skip, timeout=60)

    def expired() -> None:
        got = condition(deployment, team, "netdebug")
        assert (got["status"], got["reason"]) == ("False", "Expired"), got

    eventually(expired, timeout=LIFETIME.total_seconds() + 30, interval=1.0)
    # No further edit: the same Pod (a new name, the same spec) is denied now.
    again = privileged(compliant_pod(team, unique("debug")))
    assert_denied(deployment.kubectl("create", "-f", "-", obj=again), "disallow-privileged-containers")
