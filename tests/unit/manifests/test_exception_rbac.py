"""manifests/examples/team-policy-exceptions.yaml: a team may manage PolicyExceptions in its namespace, nothing more."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.unit.manifests.rbac import grants

EXAMPLE = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "team-policy-exceptions.yaml"


def test_the_team_role_grants_only_policy_exceptions_in_its_namespace() -> None:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    assert sorted(d["kind"] for d in docs) == ["Role", "RoleBinding"]  # never a ClusterRole(Binding)
    [role] = [d for d in docs if d["kind"] == "Role"]
    [binding] = [d for d in docs if d["kind"] == "RoleBinding"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    granted = {(group, resource) for group, resource, _verb, _names in grants(role)}
    # Not the status (the leader's), not ClusterPolicyExceptions, not the policies themselves.
    assert granted == {("tollgate.dev", "policyexceptions")}
