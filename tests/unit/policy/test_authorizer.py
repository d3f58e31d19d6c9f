"""The ``authorizer`` variable in policies: Kubernetes' authz library answered from the RBAC caches (no sockets).

As k8s.io/apiserver ``pkg/cel/library/authz.go`` and ValidatingAdmissionPolicy bind it; the RBAC decisions
themselves are tested in test_rbac.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.caches.references import references_of
from webhook.policy import InMemoryLookups, PolicyIndex, RequestCoordinates, compile_policy, evaluate_validating
from webhook.policy.memo import DecisionMemo
from webhook.policy.model import RBAC_REFERENCES, authorizer_references, parse_policy

CRB, RB, CR, ROLE = RBAC_REFERENCES


def rbac_cache(*, alice_creates_in: str = "default", extra: tuple[dict[str, Any], ...] = ()) -> dict[Any, Any]:
    """alice may create Pods in one namespace; every ServiceAccount of ``ci`` may get Secrets cluster-wide."""
    return {
        CR: [{"kind": "ClusterRole", "metadata": {"name": "pod-creator"},
              "rules": [{"verbs": ["create"], "apiGroups": [""], "resources": ["pods"]}]},
             {"kind": "ClusterRole", "metadata": {"name": "secret-reader"},
              "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]},
             {"kind": "ClusterRole", "metadata": {"name": "healthz"},
              "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}],
        RB: [{"kind": "RoleBinding", "metadata": {"name": "alice", "namespace": alice_creates_in},
              "roleRef": {"kind": "ClusterRole", "name": "pod-creator"},
              "subjects": [{"kind": "User", "name": "alice"}]}],
        CRB: [{"kind": "ClusterRoleBinding", "metadata": {"name": "ci-secrets"},
               "roleRef": {"kind": "ClusterRole", "name": "secret-reader"},
               "subjects": [{"kind": "Group", "name": "system:serviceaccounts:ci"}]},
              {"kind": "ClusterRoleBinding", "metadata": {"name": "healthz"},
               "roleRef": {"kind": "ClusterRole", "name": "healthz"},
               "subjects": [{"kind": "Group", "name": "system:authenticated"}]}, *extra],
        ROLE: [],
    }


def checking(expression: str, message: str = "'denied'", **spec: Any) -> dict[str, Any]:
    return policy("p", validations=[{"expression": expression, "messageExpression": message}], **spec)


def outcomes(index: PolicyIndex, req: dict[str, Any], lookups: InMemoryLookups, memo: DecisionMemo) -> Any:
    """The per-policy path's outcome, checked equal to the server's (a compiled plan with the decision memo)."""
    coords = RequestCoordinates.of(req)
    per_policy = evaluate_validating(req, index.candidates(coords), lookups)
    planned = evaluate_validating(req, index.plan(coords).compile_all(), lookups, memo=memo)
    assert [(r.result, r.message) for r in planned.results] == [(r.result, r.message) for r in per_policy.results]
    return per_policy


def decide(p: dict[str, Any], *, req: dict[str, Any] | None = None, objects: Any = None, **kw: Any) -> Any:
    index = PolicyIndex()
    index.upsert(p)
    lookups = InMemoryLookups(objects=rbac_cache() if objects is None else objects, **kw)
    return outcomes(index, req or request(pod()), lookups, DecisionMemo())


def only(outcome: Any) -> tuple[str, str]:
    (result,) = outcome.results
    return str(result.result), result.message


def test_request_resource_checks_the_requesting_user_for_the_request_itself() -> None:
    p = checking("authorizer.requestResource.check('create').allowed()")
    assert only(decide(p)) == ("pass", "")
    assert only(decide(p, req=request(pod(namespace="other"), namespace="other"))) == ("fail", "denied")
    assert only(decide(p, req=request(pod(), username="bob"))) == ("fail", "denied")


def test_request_resource_carries_group_resource_subresource_namespace_and_name() -> None:
    p = checking("authorizer.requestResource.check('update').reason() == 'x'",
                 "authorizer.requestResource.check('update').reason()", resources=("deployments/scale",),
                 groups=("apps",), operations=("UPDATE",))
    cache = rbac_cache(extra=({"kind": "ClusterRoleBinding", "metadata": {"name": "scale"},
                               "roleRef": {"kind": "ClusterRole", "name": "scaler"},
                               "subjects": [{"kind": "User", "name": "alice"}]},))
    cache[CR] = [*cache[CR], {"kind": "ClusterRole", "metadata": {"name": "scaler"},
                              "rules": [{"verbs": ["update"], "apiGroups": ["apps"], "resources": ["deployments/scale"],
                                         "resourceNames": ["web"]}]}]
    req = request({"kind": "Scale"}, operation="UPDATE", old={"kind": "Scale"}, resource="deployments", group="apps",
                  kind="Scale", sub_resource="scale")
    req["name"] = "web"
    assert only(decide(p, req=req, objects=cache)) == (
        "fail", 'RBAC: allowed by ClusterRoleBinding "scale" of ClusterRole "scaler" to User "alice"')
    req["name"] = "db"  # no opinion, no reason: an empty messageExpression falls back to the expression (as VAP)
    assert only(decide(p, req=req, objects=cache)) == ("fail", "failed expression: " + p["spec"]["validations"][0][
        "expression"])


def test_built_checks_resources_paths_and_service_accounts() -> None:
    assert only(decide(checking("authorizer.group('').resource('pods').namespace('default').check('create')"
                                ".allowed()"))) == ("pass", "")
    assert only(decide(checking("authorizer.group('').resource('pods').namespace('kube-system').check('create')"
                                ".allowed()"))) == ("fail", "denied")
    assert only(decide(checking("authorizer.path('/healthz').check('get').allowed()"))) == ("pass", "")
    assert only(decide(checking("authorizer.path('/metrics').check('get').allowed()"))) == ("fail", "denied")
    sa = "authorizer.serviceAccount('{ns}', 'deployer').group('').resource('secrets').name('s').check('get')"
    assert only(decide(checking(sa.format(ns="ci") + ".allowed()"))) == ("pass", "")
    assert only(decide(checking(sa.format(ns="prod") + ".allowed()"))) == ("fail", "denied")
    # Selectors are carried and, as for kube-apiserver's RBAC authorizer, change nothing.
    assert only(decide(checking("authorizer.group('').resource('pods').namespace('default')"
                                ".fieldSelector('spec.nodeName=n1').labelSelector('a=b').check('create')"
                                ".allowed()"))) == ("pass", "")


@pytest.mark.parametrize(("expression", "error"), [
    ("authorizer.path(' ').check('get').allowed()", "path must not be empty"),
    ("authorizer.group('').resource('').check('get').allowed()", "resource must not be empty"),
    ("authorizer.serviceAccount('ci', 'Not_Valid').check('get').allowed()", "Invalid service account name"),
    ("authorizer.serviceAccount('CI', 'deployer').group('').resource('pods').check('get').allowed()",
     "Invalid service account namespace"),
    ("object.metadata.check('get').allowed()", "kubernetes.authorization.ResourceCheck"),
])
def test_misuse_is_an_evaluation_error_answered_per_failure_policy(expression: str, error: str) -> None:
    outcome = decide(checking(expression))
    result, message = only(outcome)
    assert result == "error" and error in message and not outcome.allowed


def test_decision_reason_errored_and_error() -> None:
    p = checking("false", "authorizer.group('').resource('pods').namespace('default').check('create').reason()")
    assert only(decide(p)) == (
        "fail", 'RBAC: allowed by RoleBinding "alice/default" of ClusterRole "pod-creator" to User "alice"')
    p = checking("authorizer.group('').resource('pods').check('create').errored()")
    assert only(decide(p)) == ("fail", "denied")
    cache = rbac_cache(extra=({"kind": "ClusterRoleBinding", "metadata": {"name": "gone"},
                               "roleRef": {"kind": "ClusterRole", "name": "nope"},
                               "subjects": [{"kind": "User", "name": "alice"}]},))
    p = checking("false", "authorizer.group('').resource('nodes').check('delete').reason()")
    assert only(decide(p, objects=cache)) == ("fail", 'RBAC: clusterrole.rbac.authorization.k8s.io "nope" not found')


def test_rbac_changes_are_seen_by_the_next_request_the_decision_is_never_memoized() -> None:
    index, memo, req = PolicyIndex(), DecisionMemo(), request(pod())
    index.upsert(policy("p", validations=[{"expression": "authorizer.requestResource.check('create').allowed()"}]))
    assert outcomes(index, req, InMemoryLookups(objects=rbac_cache()), memo).allowed
    assert not outcomes(index, req, InMemoryLookups(objects=rbac_cache(alice_creates_in="other")), memo).allowed
    assert outcomes(index, req, InMemoryLookups(objects=rbac_cache()), memo).allowed


@pytest.mark.parametrize(("on_unsynced", "result"), [("Deny", "fail"), ("Allow", "skip")])
def test_unsynced_rbac_caches_answer_per_on_unsynced(on_unsynced: str, result: str) -> None:
    p = checking("authorizer.requestResource.check('create').allowed()", onUnsynced=on_unsynced)
    outcome = decide(p, unsynced=[CRB.cache])
    assert only(outcome)[0] == result and "rbac.authorization.k8s.io/v1/clusterrolebindings" in only(outcome)[1]
    # A policy that does not read authorizer never waits for those caches.
    assert only(decide(checking("true", onUnsynced=on_unsynced), unsynced=[CRB.cache]))[0] == "pass"


def test_an_admission_policy_may_check_only_its_own_namespace() -> None:
    def tenant(expression: str, message: str = "'denied'") -> dict[str, Any]:
        return checking(expression, message, kind="AdmissionPolicy", namespace="default")
    own = "authorizer.group('').resource('pods').namespace('default').check('create')"
    assert only(decide(tenant(own + ".allowed()"))) == ("pass", "")
    for other in ("authorizer.group('').resource('pods').namespace('kube-system').check('create')",
                  "authorizer.group('').resource('nodes').check('get')",
                  "authorizer.path('/healthz').check('get')"):
        assert only(decide(tenant(other + ".allowed()"))) == ("fail", "denied")
        result, message = only(decide(tenant(f"!{other}.errored()", f"{other}.error()")))
        assert result == "fail" and "may only check access in its own namespace 'default'" in message


def test_which_policies_read_authorizer_and_start_the_rbac_caches() -> None:
    reads = checking("authorizer.requestResource.check('create').allowed()")
    assert parse_policy(reads).reads_authorizer and compile_policy(reads).policy.reads_authorizer
    assert set(RBAC_REFERENCES) <= references_of(reads)
    for text in ("'authorizer' == object.kind", "object.authorizer == 1", "has(object.metadata.authorizers)"):
        other = checking(text)
        assert not parse_policy(other).reads_authorizer and not references_of(other)
    assert authorizer_references({"variables": [{"name": "a", "expression": "authorizer.path('/x')"}]}) \
        == RBAC_REFERENCES
    assert set(RBAC_REFERENCES) <= references_of(
        policy("q", matchConditions=[{"name": "m", "expression": "authorizer.path('/x').check('get').allowed()"}]))
