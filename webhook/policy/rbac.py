"""Kubernetes RBAC decisions over cached RBAC objects, as kube-apiserver's authorizer chain makes them (pure; no I/O).

What the CEL ``authorizer`` library (:mod:`webhook.policy.cel.library.authz`) asks. Follows, fact for fact:

* kubernetes/kubernetes ``plugin/pkg/auth/authorizer/rbac/rbac.go``: ``Authorize`` visits every rule that
  applies to the user and allows at the first that matches (``RuleAllows``), with the reason
  ``RBAC: allowed by <source>``; no matching rule is *no opinion*, with the resolution errors (a binding
  naming a missing role) as its reason;
* ``pkg/registry/rbac/validation/rule.go``: ``VisitRulesFor`` walks every ClusterRoleBinding, then, for a
  namespaced request, the RoleBindings of that namespace; ``appliesToUser`` (User by name, Group by
  membership, ServiceAccount as ``system:serviceaccount:<ns>:<name>`` with the binding's namespace as the
  default); ``GetRoleReferenceRules`` (a RoleBinding's Role is read in the binding's namespace); the
  sources' wording (``ClusterRoleBinding "x" of ClusterRole "y" to User "z"``);
* ``pkg/apis/rbac/v1/evaluation_helpers.go``: ``VerbMatches``, ``APIGroupMatches``, ``ResourceMatches``
  (``*``, ``resource/subresource``, ``*/subresource``), ``ResourceNameMatches`` (no names: any name),
  ``NonResourceURLMatches`` (``*``, exact, or a ``prefix*``);
* the chain kube-apiserver builds for ``--authorization-mode=...,RBAC``
  (``pkg/kubeapiserver/authorizer/config.go``): members of ``system:masters`` are allowed before RBAC is asked.

Not modelled: the Node and Webhook authorizers, and ABAC; a request they would allow is answered here as RBAC
answers it. ClusterRoles with an ``aggregationRule`` are read as cached: the API server's aggregation
controller has already written the selected roles' rules into them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "PRIVILEGED_GROUP",
    "Attributes",
    "Authorizer",
    "Decision",
    "RbacLister",
    "UserInfo",
    "authorize",
    "rule_allows",
    "service_account_user",
]

Obj = Mapping[str, Any]

#: ``user.SystemPrivilegedGroup``: allowed everything by kube-apiserver before RBAC is asked.
PRIVILEGED_GROUP = "system:masters"


class Decision(enum.Enum):
    """``authorizer.Decision``."""

    DENY = 0
    ALLOW = 1
    NO_OPINION = 2


@dataclass(frozen=True, slots=True)
class UserInfo:
    """``user.Info``: who asks (an AdmissionRequest's ``userInfo``)."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, Sequence[str]] = field(default_factory=dict)

    @classmethod
    def from_request(cls, user_info: Any) -> UserInfo:
        """From an AdmissionRequest's ``userInfo`` (``username``, ``groups``, ``uid``, ``extra``); tolerant of gaps."""
        info = user_info if isinstance(user_info, Mapping) else {}
        groups = info.get("groups")
        extra = info.get("extra")
        return cls(str(info.get("username") or ""),
                   tuple(str(g) for g in groups) if isinstance(groups, list) else (),
                   str(info.get("uid") or ""),
                   {str(k): tuple(str(x) for x in v) for k, v in extra.items() if isinstance(v, list)}
                   if isinstance(extra, Mapping) else {})


def service_account_user(namespace: str, name: str) -> UserInfo:
    """The user a ServiceAccount token authenticates as (``serviceaccount.ServiceAccountInfo.UserInfo``).

    Name ``system:serviceaccount:<namespace>:<name>``; groups ``system:serviceaccounts`` and
    ``system:serviceaccounts:<namespace>`` (k8s.io/apiserver ``pkg/authentication/serviceaccount/util.go``).
    """
    return UserInfo(f"system:serviceaccount:{namespace}:{name}",
                    ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"))


@dataclass(frozen=True, slots=True)
class Attributes:
    """``authorizer.AttributesRecord``: one question. A resource request when ``resource_request``, else ``path``."""

    user: UserInfo
    verb: str
    resource_request: bool = True
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


class Authorizer(Protocol):
    """``authorizer.Authorizer``: what the CEL library's ``check`` asks (:mod:`webhook.policy.cel.authz`)."""

    def authorize(self, attributes: Attributes) -> tuple[Decision, str, str | None]:
        """``(decision, reason, error)``: the error text when the authorizer failed, else None."""
        ...


class RbacLister(Protocol):
    """The four RBAC kinds as client-go listers give them (objects as decoded JSON, shared: not to be mutated)."""

    def cluster_role_bindings(self) -> Iterable[Obj]:
        """Every ClusterRoleBinding."""
        ...

    def role_bindings(self, namespace: str) -> Iterable[Obj]:
        """The RoleBindings of ``namespace``."""
        ...

    def cluster_role(self, name: str) -> Obj | None:
        """The ClusterRole ``name``, or None."""
        ...

    def role(self, namespace: str, name: str) -> Obj | None:
        """The Role ``namespace/name``, or None."""
        ...


def _strings(rule: Obj, key: str) -> Sequence[str]:
    values = rule.get(key)
    return values if isinstance(values, list) else ()


def _resource_matches(rule: Obj, combined: str, subresource: str) -> bool:
    for r in _strings(rule, "resources"):
        if r in ("*", combined):
            return True
        if subresource and r == "*/" + subresource:
            return True
    return False


def _url_matches(rule: Obj, path: str) -> bool:
    for url in _strings(rule, "nonResourceURLs"):
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(attrs: Attributes, rule: Obj) -> bool:
    """``RuleAllows``: whether one PolicyRule grants ``attrs``."""
    verbs = _strings(rule, "verbs")
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        return _url_matches(rule, attrs.path)
    groups = _strings(rule, "apiGroups")
    if "*" not in groups and attrs.api_group not in groups:
        return False
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    if not _resource_matches(rule, combined, attrs.subresource):
        return False
    names = _strings(rule, "resourceNames")
    return not names or attrs.name in names


def _applies(user: UserInfo, subject: Obj, namespace: str) -> bool:
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = str(subject.get("namespace") or namespace)
        return bool(sa_namespace) and user.name == f"system:serviceaccount:{sa_namespace}:{name}"
    return False


def _subject(user: UserInfo, binding: Obj, namespace: str) -> Obj | None:
    """The first subject of ``binding`` that applies to ``user`` (``appliesTo``), or None."""
    subjects = binding.get("subjects")
    for s in subjects if isinstance(subjects, list) else ():
        if isinstance(s, Mapping) and _applies(user, s, namespace):
            return s
    return None


def _describe_subject(subject: Obj, binding_namespace: str) -> str:
    kind, name = str(subject.get("kind") or ""), str(subject.get("name") or "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def _meta(obj: Obj, key: str) -> str:
    meta = obj.get("metadata")
    return str(meta.get(key) or "") if isinstance(meta, Mapping) else ""


def _role_rules(lister: RbacLister, role_ref: Obj, namespace: str) -> tuple[Sequence[Obj], str | None]:
    """``GetRoleReferenceRules``: the referenced role's rules, or the lister's not-found error."""
    kind, name = role_ref.get("kind"), str(role_ref.get("name") or "")
    if kind == "Role":
        role = lister.role(namespace, name) if namespace else None
        if role is None:
            return (), f'role.rbac.authorization.k8s.io "{name}" not found'
    elif kind == "ClusterRole":
        role = lister.cluster_role(name)
        if role is None:
            return (), f'clusterrole.rbac.authorization.k8s.io "{name}" not found'
    else:
        return (), f'unsupported role reference kind: "{kind}"'
    rules = role.get("rules")
    return [r for r in rules if isinstance(r, Mapping)] if isinstance(rules, list) else (), None


def authorize(lister: RbacLister, attrs: Attributes) -> tuple[Decision, str]:
    """Decide ``attrs`` as kube-apiserver's privileged-group and RBAC authorizers do, in that order.

    Args:
        lister: the cached RBAC objects.
        attrs: the question.

    Returns:
        ``(Decision.ALLOW, reason)`` naming the granting binding (``RBAC: allowed by ClusterRoleBinding "x" of
        ClusterRole "y" to Group "z"``; ``""`` for ``system:masters``), or ``(Decision.NO_OPINION, reason)``
        where the reason is ``""`` or ``RBAC: `` and the bindings' resolution errors (a missing role), one
        error alone or ``[e1, e2]`` as Kubernetes' ``utilerrors.NewAggregate`` prints them. RBAC never denies.
    """
    if PRIVILEGED_GROUP in attrs.user.groups:
        return Decision.ALLOW, ""
    errors: list[str] = []
    scopes: list[tuple[str, str, Iterable[Obj]]] = [("ClusterRoleBinding", "", lister.cluster_role_bindings())]
    if attrs.namespace:
        scopes.append(("RoleBinding", attrs.namespace, lister.role_bindings(attrs.namespace)))
    for kind, namespace, bindings in scopes:
        for binding in bindings:
            subject = _subject(attrs.user, binding, namespace)
            if subject is None:
                continue
            role_ref = binding.get("roleRef")
            role_ref = role_ref if isinstance(role_ref, Mapping) else {}
            rules, error = _role_rules(lister, role_ref, namespace)
            if error is not None:
                errors.append(error)
                continue
            for rule in rules:
                if rule_allows(attrs, rule):
                    name = _meta(binding, "name") + (f"/{namespace}" if namespace else "")
                    source = (f'{kind} "{name}" of {role_ref.get("kind")} "{role_ref.get("name")}" to '
                              f"{_describe_subject(subject, namespace)}")
                    return Decision.ALLOW, f"RBAC: allowed by {source}"
    if not errors:
        return Decision.NO_OPINION, ""
    return Decision.NO_OPINION, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
