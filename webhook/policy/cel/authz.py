"""Kubernetes' CEL authorizer library: ``authorizer.group(g).resource(r)...check(verb).allowed()`` (pure; no I/O).

Follows k8s.io/apiserver ``pkg/cel/library/authz.go`` (libraries ``kubernetes.authz`` and
``kubernetes.authzSelectors``), as ValidatingAdmissionPolicy binds it:

* ``authorizer`` is the requesting user's authorizer; ``authorizer.requestResource`` the resource check of the
  request itself (its group, resource, subresource, namespace and name: ``NewResourceAuthorizerVal``);
* ``authorizer.path(p)`` (a non-resource URL; an empty path is an error), ``authorizer.group(g)``,
  ``.resource(r)`` (empty is an error), ``.subresource(s)``, ``.namespace(ns)``, ``.name(n)``,
  ``.fieldSelector(s)``, ``.labelSelector(s)``, ``authorizer.serviceAccount(ns, name)`` (the authorizer of
  that ServiceAccount; an invalid name or namespace is an error);
* ``check(verb)`` asks the authorizer (API version ``*``) and returns a Decision: ``allowed()``, ``reason()``,
  ``errored()``, ``error()``.

Values are maps with the reserved key ``@authz`` naming their type (cel-expr-python cannot declare opaque types),
so the functions are members of ``dyn`` and a call on anything else is a run-time error, not a compile error.
``check`` asks the authorizer of the policy being evaluated (:class:`~webhook.policy.cel.scope.VariableScope`'s,
which the engine installs per policy): Tollgate answers from its informer caches of the RBAC objects
(:mod:`webhook.policy.rbac`), never from the API server. Field and label selectors are kept on the check and,
as for kube-apiserver's RBAC authorizer, do not change its answer.

Cost: ``check`` is an RBAC walk over every ClusterRoleBinding and the namespace's RoleBindings
(:data:`CHECK_UNITS`); Kubernetes charges it 350,000 of its cost units so that two checks fit one expression.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.cel import scope
from webhook.policy.cel.cost import PYTHON_SCALAR, Plus, Python, Rule
from webhook.policy.cel.library._decl import VALUE, LibraryError, T, member
from webhook.policy.cel.library.format import dns1123_label, dns1123_subdomain
from webhook.policy.rbac import Attributes, Decision, UserInfo, service_account_user

__all__ = [
    "CHECK_UNITS",
    "KEY",
    "authorizer_value",
    "declarations",
]

#: The reserved key of an authorizer library value; its value names the type (``Authorizer``, ``PathCheck``,
#: ``GroupCheck``, ``ResourceCheck``, ``Decision``).
KEY = "@authz"

#: Work units (~10 ns) charged per ``check``: an RBAC walk over a few hundred bindings is ~0.5 ms in Python.
CHECK_UNITS = 50_000


def _user_wire(user: UserInfo) -> dict[str, Any]:
    """``user`` as an AdmissionRequest's ``userInfo``."""
    return {"username": user.name, "groups": list(user.groups), "uid": user.uid,
            "extra": {k: list(v) for k, v in user.extra.items()}}


def authorizer_value(user_info: Any, request: Any = None) -> dict[str, Any]:
    """The ``authorizer`` variable: the checks of ``user_info``, with ``requestResource`` when ``request`` is given.

    Cheap: built for every request (``user_info`` is shared, not copied).

    Args:
        user_info: an AdmissionRequest's ``userInfo`` (``username``, ``groups``, ``uid``, ``extra``).
        request: the AdmissionRequest, whose ``resource`` (group, resource), ``subResource``, ``namespace`` and
            ``name`` make ``authorizer.requestResource``.
    """
    value: dict[str, Any] = {KEY: "Authorizer", "user": user_info if isinstance(user_info, dict) else {}}
    if isinstance(request, dict):
        gvr = request.get("resource")
        gvr = gvr if isinstance(gvr, dict) else {}
        check = _resource_check(value, str(gvr.get("group") or ""), str(gvr.get("resource") or ""))
        check["subresource"] = str(request.get("subResource") or "")
        check["namespace"] = str(request.get("namespace") or "")
        check["name"] = str(request.get("name") or "")
        value["requestResource"] = check
    return value


def _of(value: Any, kind: str, function: str) -> dict[str, Any]:
    if not isinstance(value, dict) or value.get(KEY) != kind:
        raise LibraryError(f"no such overload: {function} applies to a kubernetes.authorization.{kind}")
    return value


def _bare(authorizer: dict[str, Any]) -> dict[str, Any]:
    return {KEY: "Authorizer", "user": authorizer["user"]}


def _path(authorizer: Any, path: str) -> dict[str, Any]:
    a = _of(authorizer, "Authorizer", "path")
    if not path.strip():
        raise LibraryError("path must not be empty")
    return {KEY: "PathCheck", "authorizer": _bare(a), "path": path}


def _group(authorizer: Any, group: str) -> dict[str, Any]:
    return {KEY: "GroupCheck", "authorizer": _bare(_of(authorizer, "Authorizer", "group")), "group": group}


def _service_account(authorizer: Any, namespace: str, name: str) -> dict[str, Any]:
    """``ValidateServiceAccountName`` (a DNS-1123 subdomain) and ``ValidateNamespaceName`` (a DNS-1123 label)."""
    _of(authorizer, "Authorizer", "serviceAccount")
    if dns1123_subdomain(name):
        raise LibraryError("Invalid service account name")
    if dns1123_label(namespace):
        raise LibraryError("Invalid service account namespace")
    return {KEY: "Authorizer", "user": _user_wire(service_account_user(namespace, name))}


def _resource_check(authorizer: dict[str, Any], group: str, resource: str) -> dict[str, Any]:
    return {KEY: "ResourceCheck", "authorizer": _bare(authorizer), "group": group, "resource": resource,
            "subresource": "", "namespace": "", "name": "", "fieldSelector": "", "labelSelector": ""}


def _resource(group_check: Any, resource: str) -> dict[str, Any]:
    g = _of(group_check, "GroupCheck", "resource")
    if not resource.strip():
        raise LibraryError("resource must not be empty")
    return _resource_check(g["authorizer"], g["group"], resource)


def _setter(key: str) -> Any:
    def set_field(check: Any, value: str) -> dict[str, Any]:
        return {**_of(check, "ResourceCheck", key), key: value}
    set_field.__name__ = f"resource_check_{key}"
    return set_field


def _user(authorizer: dict[str, Any]) -> UserInfo:
    return UserInfo.from_request(authorizer["user"])


def _decide(attributes: Attributes) -> dict[str, Any]:
    authorizer = scope.current_authorizer()
    error: str | None = "no authorizer is available here"
    decision, reason = Decision.NO_OPINION, ""
    if authorizer is not None:
        decision, reason, error = authorizer.authorize(attributes)
    return {KEY: "Decision", "decision": decision.name.lower(), "reason": reason, "error": error or ""}


def _check(check: Any, verb: str) -> dict[str, Any]:
    if isinstance(check, dict) and check.get(KEY) == "PathCheck":
        return _decide(Attributes(_user(check["authorizer"]), verb, resource_request=False, path=check["path"]))
    c = _of(check, "ResourceCheck", "check")
    return _decide(Attributes(_user(c["authorizer"]), verb, api_group=c["group"], resource=c["resource"],
                              subresource=c["subresource"], namespace=c["namespace"], name=c["name"]))


def _allowed(decision: Any) -> bool:
    return bool(_of(decision, "Decision", "allowed")["decision"] == "allow")


def _reason(decision: Any) -> str:
    return str(_of(decision, "Decision", "reason")["reason"])


def _errored(decision: Any) -> bool:
    return bool(_of(decision, "Decision", "errored")["error"])


def _error(decision: Any) -> str:
    return str(_of(decision, "Decision", "error")["error"])


#: A builder's result: its receiver plus one string argument (at most twice the larger) and the type tag.
_BUILDS = Rule(Python(), Plus(64, 2))
#: ``check``: the RBAC walk (:data:`CHECK_UNITS`); a Decision holds a reason of a few names (under 1 KiB).
_CHECK = Rule(Python(fixed=CHECK_UNITS), Plus(1024))
#: ``reason()``/``error()``: a part of the Decision.
_TEXT = Rule(Python(), Plus(0))


def declarations() -> list[Any]:
    """The library's functions, members of ``dyn`` (see the module docstring)."""
    s = T.STRING
    return [
        member("path", "tg_authz_path", VALUE, [VALUE, s], _path, rule=_BUILDS),
        member("group", "tg_authz_group", VALUE, [VALUE, s], _group, rule=_BUILDS),
        member("serviceAccount", "tg_authz_service_account", VALUE, [VALUE, s, s], _service_account, rule=_BUILDS),
        member("resource", "tg_authz_resource", VALUE, [VALUE, s], _resource, rule=_BUILDS),
        *(member(key, f"tg_authz_{key.lower()}", VALUE, [VALUE, s], _setter(key), rule=_BUILDS)
          for key in ("subresource", "namespace", "name", "fieldSelector", "labelSelector")),
        member("check", "tg_authz_check", VALUE, [VALUE, s], _check, rule=_CHECK),
        member("allowed", "tg_authz_allowed", T.BOOL, [VALUE], _allowed, rule=PYTHON_SCALAR),
        member("errored", "tg_authz_errored", T.BOOL, [VALUE], _errored, rule=PYTHON_SCALAR),
        member("reason", "tg_authz_reason", T.STRING, [VALUE], _reason, rule=_TEXT),
        member("error", "tg_authz_error", T.STRING, [VALUE], _error, rule=_TEXT),
    ]
