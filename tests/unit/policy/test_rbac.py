"""The RBAC evaluator behind ``authorizer`` checks, against kube-apiserver's rules (no sockets).

Facts from kubernetes/kubernetes ``plugin/pkg/auth/authorizer/rbac/rbac.go``,
``pkg/registry/rbac/validation/rule.go`` and ``pkg/apis/rbac/v1/evaluation_helpers.go``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from webhook.policy.rbac import Attributes, Decision, Obj, UserInfo, authorize, rule_allows, service_account_user


def meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    return {"name": name, **({"namespace": namespace} if namespace else {})}


def role(name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    return {"kind": "Role" if namespace else "ClusterRole", "metadata": meta(name, namespace), "rules": rules}


def binding(name: str, role_kind: str, role_name: str, subjects: list[dict[str, Any]],
            namespace: str | None = None) -> dict[str, Any]:
    return {"kind": "RoleBinding" if namespace else "ClusterRoleBinding", "metadata": meta(name, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": subjects}


class Lister:
    def __init__(self, *objs: dict[str, Any]) -> None:
        self.objs = objs

    def _of(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objs if o["kind"] == kind]

    def cluster_role_bindings(self) -> Iterable[Obj]:
        return self._of("ClusterRoleBinding")

    def role_bindings(self, namespace: str) -> Iterable[Obj]:
        return [o for o in self._of("RoleBinding") if o["metadata"]["namespace"] == namespace]

    def cluster_role(self, name: str) -> Obj | None:
        return next((o for o in self._of("ClusterRole") if o["metadata"]["name"] == name), None)

    def role(self, namespace: str, name: str) -> Obj | None:
        return next((o for o in self._of("Role") if o["metadata"] == meta(name, namespace)), None)


ALICE = UserInfo("alice", ("dev", "system:authenticated"))


def res(verb: str, resource: str, *, group: str = "", sub: str = "", ns: str = "", name: str = "",
        user: UserInfo = ALICE) -> Attributes:
    return Attributes(user, verb, api_group=group, resource=resource, subresource=sub, namespace=ns, name=name)


def url(verb: str, path: str) -> Attributes:
    return Attributes(ALICE, verb, resource_request=False, path=path)


@pytest.mark.parametrize(("rule", "attrs", "allowed"), [
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, res("get", "pods"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, res("list", "pods"), False),
    ({"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]}, res("delete", "pods"), True),
    ({"verbs": ["get"], "apiGroups": ["apps"], "resources": ["pods"]}, res("get", "pods"), False),
    ({"verbs": ["get"], "apiGroups": ["*"], "resources": ["deployments"]}, res("get", "deployments", group="apps"),
     True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}, res("get", "secrets"), True),
    # A resource does not grant its subresources; resource/subresource and */subresource do.
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, res("get", "pods", sub="log"), False),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}, res("get", "pods", sub="log"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}, res("get", "pods", sub="log"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}, res("get", "pods"), False),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/status"]}, res("get", "pods", sub="log"), False),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]},
     res("get", "pods", name="a"), True),
    ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]},
     res("get", "pods", name="b"), False),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz"]}, url("get", "/healthz"), True),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz"]}, url("get", "/healthz/ready"), False),
    ({"verbs": ["get"], "nonResourceURLs": ["/healthz*"]}, url("get", "/healthz/ready"), True),
    ({"verbs": ["get"], "nonResourceURLs": ["/api/**"]}, url("get", "/api/v1"), True),
    ({"verbs": ["get"], "nonResourceURLs": ["*"]}, url("get", "/metrics"), True),
    ({"verbs": ["post"], "nonResourceURLs": ["*"]}, url("get", "/metrics"), False),
    # A resource rule grants no URL, and a URL rule no resource.
    ({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, url("get", "/healthz"), False),
    ({"verbs": ["*"], "nonResourceURLs": ["*"]}, res("get", "pods"), False),
])
def test_rule_allows_as_evaluation_helpers(rule: dict[str, Any], attrs: Attributes, allowed: bool) -> None:
    assert rule_allows(attrs, rule) is allowed


READ_PODS = role("read-pods", [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}])


def test_a_cluster_role_binding_to_a_group_allows_everywhere_with_kubernetes_reason() -> None:
    lister = Lister(READ_PODS, binding("devs", "ClusterRole", "read-pods", [{"kind": "Group", "name": "dev"}]))
    assert authorize(lister, res("get", "pods", ns="a")) == (
        Decision.ALLOW, 'RBAC: allowed by ClusterRoleBinding "devs" of ClusterRole "read-pods" to Group "dev"')
    assert authorize(lister, res("get", "pods"))[0] is Decision.ALLOW
    assert authorize(lister, res("create", "pods", ns="a")) == (Decision.NO_OPINION, "")
    assert authorize(lister, res("get", "pods", user=UserInfo("bob"))) == (Decision.NO_OPINION, "")


def test_a_role_binding_grants_only_in_its_namespace_and_reads_its_role_there() -> None:
    lister = Lister(role("edit", [{"verbs": ["create"], "apiGroups": [""], "resources": ["pods"]}], "a"),
                    role("edit", [{"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]}], "b"),
                    binding("alice-edit", "Role", "edit", [{"kind": "User", "name": "alice"}], "a"))
    assert authorize(lister, res("create", "pods", ns="a")) == (
        Decision.ALLOW, 'RBAC: allowed by RoleBinding "alice-edit/a" of Role "edit" to User "alice"')
    assert authorize(lister, res("delete", "pods", ns="a"))[0] is Decision.NO_OPINION  # b's Role is not read
    assert authorize(lister, res("create", "pods", ns="b"))[0] is Decision.NO_OPINION
    assert authorize(lister, res("create", "pods"))[0] is Decision.NO_OPINION  # cluster-wide: no RoleBinding


def test_a_role_binding_to_a_cluster_role_grants_it_in_the_binding_namespace() -> None:
    lister = Lister(READ_PODS, binding("r", "ClusterRole", "read-pods", [{"kind": "User", "name": "alice"}], "a"))
    assert authorize(lister, res("list", "pods", ns="a"))[0] is Decision.ALLOW
    assert authorize(lister, res("list", "pods", ns="b"))[0] is Decision.NO_OPINION


def test_service_account_subjects_default_to_the_binding_namespace() -> None:
    sa = service_account_user("a", "builder")
    assert sa == UserInfo("system:serviceaccount:a:builder", ("system:serviceaccounts", "system:serviceaccounts:a"))
    in_ns = Lister(READ_PODS, binding("r", "ClusterRole", "read-pods", [{"kind": "ServiceAccount", "name": "builder"}],
                                      "a"))
    assert authorize(in_ns, res("get", "pods", ns="a", user=sa)) == (
        Decision.ALLOW, 'RBAC: allowed by RoleBinding "r/a" of ClusterRole "read-pods" to ServiceAccount "builder/a"')
    # A ClusterRoleBinding has no namespace to default to: the subject must name one.
    unqualified = Lister(READ_PODS, binding("r", "ClusterRole", "read-pods",
                                            [{"kind": "ServiceAccount", "name": "builder"}]))
    assert authorize(unqualified, res("get", "pods", ns="a", user=sa))[0] is Decision.NO_OPINION
    qualified = Lister(READ_PODS, binding("r", "ClusterRole", "read-pods",
                                          [{"kind": "ServiceAccount", "name": "builder", "namespace": "a"}]))
    assert authorize(qualified, res("get", "pods", ns="z", user=sa))[0] is Decision.ALLOW
    assert authorize(qualified, res("get", "pods", user=service_account_user("b", "builder")))[0] \
        is Decision.NO_OPINION
    # The ServiceAccounts group is a Group subject like any other.
    group = Lister(READ_PODS, binding("r", "ClusterRole", "read-pods",
                                      [{"kind": "Group", "name": "system:serviceaccounts:a"}]))
    assert authorize(group, res("get", "pods", user=sa))[0] is Decision.ALLOW


def test_the_first_applying_subject_is_named_and_later_bindings_are_visited() -> None:
    lister = Lister(READ_PODS, role("none", []),
                    binding("empty", "ClusterRole", "none", [{"kind": "User", "name": "alice"}]),
                    binding("both", "ClusterRole", "read-pods", [{"kind": "User", "name": "bob"},
                                                                  {"kind": "Group", "name": "dev"},
                                                                  {"kind": "User", "name": "alice"}]))
    assert authorize(lister, res("get", "pods"))[1] == \
        'RBAC: allowed by ClusterRoleBinding "both" of ClusterRole "read-pods" to Group "dev"'


def test_missing_roles_are_the_no_opinion_reason_and_do_not_stop_the_walk() -> None:
    one = Lister(binding("gone", "ClusterRole", "nope", [{"kind": "User", "name": "alice"}]))
    assert authorize(one, res("get", "pods")) == (
        Decision.NO_OPINION, 'RBAC: clusterrole.rbac.authorization.k8s.io "nope" not found')
    two = Lister(binding("gone", "ClusterRole", "nope", [{"kind": "User", "name": "alice"}]),
                 binding("r", "Role", "missing", [{"kind": "User", "name": "alice"}], "a"))
    assert authorize(two, res("get", "pods", ns="a")) == (
        Decision.NO_OPINION, 'RBAC: [clusterrole.rbac.authorization.k8s.io "nope" not found, '
                             'role.rbac.authorization.k8s.io "missing" not found]')
    after = Lister(READ_PODS, binding("gone", "ClusterRole", "nope", [{"kind": "User", "name": "alice"}]),
                   binding("ok", "ClusterRole", "read-pods", [{"kind": "User", "name": "alice"}]))
    assert authorize(after, res("get", "pods"))[0] is Decision.ALLOW


def test_system_masters_are_allowed_before_rbac_and_unknown_kinds_never_apply() -> None:
    admin = UserInfo("root", ("system:masters",))
    assert authorize(Lister(), res("delete", "nodes", user=admin)) == (Decision.ALLOW, "")
    assert authorize(Lister(), Attributes(admin, "post", resource_request=False, path="/x")) == (Decision.ALLOW, "")
    odd = Lister(READ_PODS, binding("r", "ClusterRole", "read-pods", [{"kind": "Robot", "name": "alice"}]))
    assert authorize(odd, res("get", "pods"))[0] is Decision.NO_OPINION


def test_user_info_from_an_admission_request_tolerates_gaps() -> None:
    assert UserInfo.from_request({"username": "a", "groups": ["g"], "uid": "1", "extra": {"k": ["v"]}}) == \
        UserInfo("a", ("g",), "1", {"k": ("v",)})
    assert UserInfo.from_request(None) == UserInfo("")
    assert UserInfo.from_request({"username": "a", "groups": "g", "extra": {"k": "v"}}) == UserInfo("a")
