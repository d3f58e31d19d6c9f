"""``authorizer`` checks answered from Tollgate's RBAC informers agree with kube-apiserver's own RBAC authorizer.

Users are impersonated (``kubectl --as``), so each admission request carries their userInfo; the policy asks
``authorizer.requestResource.check('delete')`` and the server's SubjectAccessReview is asked the same question.
"""

from __future__ import annotations

from typing import Any

from tests.cluster_objects import eventually
from tests.realapi.helpers import assert_admitted, new_namespace, unique
from tests.realapi.tollgate import Deployment


def config_map(namespace: str, *, protected: bool) -> dict[str, Any]:
    labels = {"realapi/protected": "yes"} if protected else {}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": unique("cm"), "namespace": namespace, "labels": labels}, "data": {"k": "v"}}


def grant(deployment: Deployment, namespace: str, user: str, verbs: list[str]) -> None:
    role = unique("cm")
    deployment.kubectl("create", "-f", "-", check=True, obj=[
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": role, "namespace": namespace},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": role, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}])


def api_server_allows(deployment: Deployment, user: str, namespace: str, verb: str) -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "resourceAttributes": {"namespace": namespace, "verb": verb,
                                                            "resource": "configmaps"}}}
    answer = deployment.cluster.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer.json()["status"].get("allowed"))


def test_protected_config_maps_need_delete_rights_as_rbac_grants_them(deployment: Deployment) -> None:
    namespace = new_namespace(deployment, "authz")
    alice, bob = unique("alice"), unique("bob")
    grant(deployment, namespace, alice, ["create"])
    grant(deployment, namespace, bob, ["create", "delete"])
    name = unique("authz")
    deployment.add_policy(name, {
        "failurePolicy": "Fail",
        "match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                                     "operations": ["CREATE"]}],
                  "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        "validations": [{
            "expression": "!('realapi/protected' in object.metadata.?labels.orValue({})) || "
                          "authorizer.requestResource.check('delete').allowed()",
            "messageExpression": "'protected ConfigMaps need delete rights: ' + "
                                 "authorizer.requestResource.check('delete').reason()"}]})

    def create(user: str, *, protected: bool) -> Any:
        return deployment.kubectl("create", f"--as={user}", "-f", "-", obj=config_map(namespace, protected=protected))

    try:
        assert not api_server_allows(deployment, alice, namespace, "delete")
        assert api_server_allows(deployment, bob, namespace, "delete")

        def decided() -> None:  # the RBAC informers have the Roles and RoleBindings created above
            result = create(bob, protected=True)
            assert_admitted(result)
            result = create(alice, protected=True)
            # Denied (reason Invalid: kubectl words it "is invalid"); RBAC's no opinion has no reason.
            assert result.returncode != 0, result.stdout
            assert "protected ConfigMaps need delete rights:\n" in result.stderr, result.stderr

        eventually(decided, timeout=60)
        assert_admitted(create(alice, protected=False))

        grant(deployment, namespace, alice, ["delete"])  # a RoleBinding's watch event changes the next answer
        assert api_server_allows(deployment, alice, namespace, "delete")
        eventually(lambda: assert_admitted(create(alice, protected=True)), timeout=60)
    finally:  # the suite's later tests count the cluster's policies
        deployment.kubectl("delete", "clusteradmissionpolicies.tollgate.dev", name, check=True)
