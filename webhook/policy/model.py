"""The ``tollgate.dev/v1alpha1`` policy spec as frozen dataclasses (pure; no I/O).

``parse_policy`` turns a ClusterAdmissionPolicy / AdmissionPolicy custom
resource (a raw dict) into a :class:`PolicySpec`, raising
:class:`PolicySpecError` with the spec path of the first problem, e.g.
``spec.validations[2].reason: must be one of [...]``. Field names and
defaults follow ``docs/design/policy-api.md``; where it is silent they
follow ValidatingAdmissionPolicy (VAP) and MutatingAdmissionPolicy.

One module, longer than most: the spec's dataclasses and the parser that builds them are read
together, field by field, in the order of the spec (and of docs/design/policy-api.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from webhook.policy.cel.rewrites import names_variable
from webhook.policy.selectors import LabelSelector, SelectorError, parse_label_selector
from webhook.policy.vocabulary import (
    POLICY_KINDS,
    Action,
    FailurePolicy,
    OnUnsynced,
    Operation,
    ParameterNotFoundAction,
    PatchType,
    PolicyKind,
    Scope,
    StatusReason,
    policy_key,
)

#: The actions ``validationActions`` may list (``Ignored`` is the engine's word, never the author's).
VALIDATION_ACTIONS = frozenset({Action.DENY, Action.WARN, Action.AUDIT})
MAX_MATCH_CONDITIONS = 64

_E = TypeVar("_E", bound=StrEnum)
_QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class PolicySpecError(ValueError):
    """The CR's spec is malformed; ``path`` is the spec path (``spec.x[0].y``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.detail = message


@dataclass(frozen=True, slots=True)
class ResourceRule:
    """An ``admissionregistration.k8s.io`` RuleWithOperations (all sets; ``*`` allowed)."""

    api_groups: frozenset[str]
    api_versions: frozenset[str]
    resources: frozenset[str]
    operations: frozenset[Operation]
    scope: Scope = Scope.ALL


@dataclass(frozen=True, slots=True)
class NamedExpression:
    """A ``matchConditions`` entry or a ``variables`` entry: ``name`` + CEL ``expression``."""

    name: str
    expression: str


@dataclass(frozen=True, slots=True)
class Validation:
    """One ``spec.validations`` entry."""

    expression: str
    message: str | None = None
    message_expression: str | None = None
    reason: StatusReason = StatusReason.INVALID


@dataclass(frozen=True, slots=True)
class AuditAnnotation:
    """One ``spec.auditAnnotations`` entry."""

    key: str
    value_expression: str


@dataclass(frozen=True, slots=True)
class Mutation:
    """One ``spec.mutations`` entry: ``patch_type`` JSONPatch or ApplyConfiguration."""

    patch_type: PatchType
    expression: str


@dataclass(frozen=True, slots=True)
class ParamRef:
    """``spec.paramRef``: a ConfigMap by ``name`` or a list of them by ``selector``."""

    name: str | None
    namespace: str | None
    selector: LabelSelector | None
    parameter_not_found_action: ParameterNotFoundAction = ParameterNotFoundAction.DENY


@dataclass(frozen=True, slots=True)
class ReferenceIndex:
    """One entry of ``spec.references[].indexes``: a CEL index over the reference's cached objects.

    The expression sees the cached object as ``object`` and yields a string or a list of strings
    (its index values; ``null``, an error or a non-string yield none). ``resource.ByIndex(apiVersion,
    resource, name, value)`` then returns the objects with ``value`` among them in O(1), as client-go's
    ``Indexer.ByIndex`` does, instead of listing and filtering every object per request.

    Attributes:
        name: the index's name within its reference (a CEL identifier).
        expression: CEL over ``object``.
    """

    name: str
    expression: str

    @property
    def indexer_name(self) -> str:
        """The informer Indexer's index name: content-addressed, so equal definitions share one index."""
        digest = hashlib.sha256(self.expression.encode()).hexdigest()[:16]
        return f"tollgate.dev/{self.name}.{digest}"


@dataclass(frozen=True, slots=True, order=True)
class Reference:
    """One entry of ``spec.references``: a resource whose cached objects the policy's CEL may read.

    Read with ``resource.Get(apiVersion, resource, namespace, name)`` and
    ``resource.List(apiVersion, resource, namespace[, labels])`` (Kyverno's
    resource library signatures, served from an informer cache, never from
    the API server; see ``docs/writing-policies.md``).

    Attributes:
        api_version: ``v1`` or ``group/version``, e.g. ``networking.k8s.io/v1``.
        resource: the plural resource name, e.g. ``ingresses`` (no subresources).
    """

    api_version: str
    resource: str
    #: ``indexes``: named CEL indexes over the cached objects (not part of the cache's identity).
    indexes: tuple[ReferenceIndex, ...] = dataclasses.field(default=(), compare=False)

    @property
    def group(self) -> str:
        """The API group (``""`` for core)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        """The version, e.g. ``v1``."""
        return self.api_version.rpartition("/")[2]

    @property
    def cache(self) -> str:
        """The cache's name for ``is_synced`` and messages: ``networking.k8s.io/v1/ingresses``."""
        return f"{self.api_version}/{self.resource}"


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """A parsed policy. ``namespace`` is None for a ClusterAdmissionPolicy."""

    kind: PolicyKind
    name: str
    namespace: str | None
    generation: int
    failure_policy: FailurePolicy
    validation_actions: frozenset[Action]
    on_unsynced: OnUnsynced
    resource_rules: tuple[ResourceRule, ...]
    exclude_resource_rules: tuple[ResourceRule, ...]
    namespace_selector: LabelSelector
    object_selector: LabelSelector
    pod_controllers: bool
    match_conditions: tuple[NamedExpression, ...]
    param_ref: ParamRef | None
    variables: tuple[NamedExpression, ...]
    validations: tuple[Validation, ...]
    audit_annotations: tuple[AuditAnnotation, ...]
    mutations: tuple[Mutation, ...]
    #: ``spec.background``: also evaluate existing objects in the background and
    #: write the results to PolicyReports (default false; see policy-api.md).
    background: bool = False
    #: ``spec.references``: the cached resources its CEL may read (see :class:`Reference`).
    references: tuple[Reference, ...] = ()

    @property
    def key(self) -> str:
        """Store key: ``namespace/name`` or ``name`` (:func:`~webhook.policy.vocabulary.policy_key`)."""
        return policy_key(self.namespace, self.name)

    @property
    def reads_authorizer(self) -> bool:
        """Whether an expression names the ``authorizer`` variable (its checks read the RBAC caches)."""
        texts = [e.expression for e in (*self.match_conditions, *self.variables)]
        texts += [t for v in self.validations for t in (v.expression, v.message_expression) if t]
        texts += [a.value_expression for a in self.audit_annotations]
        texts += [m.expression for m in self.mutations]
        return any(mentions_authorizer(t) for t in texts)


def _list(spec: dict[str, Any], field: str, path: str) -> list[Any]:
    value = spec.get(field)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PolicySpecError(f"{path}.{field}", "must be a list")
    return value


def _str(d: dict[str, Any], field: str, path: str, *, required: bool = True) -> str | None:
    value = d.get(field)
    if value is None or value == "":
        if required:
            raise PolicySpecError(f"{path}.{field}", "required")
        return None
    if not isinstance(value, str):
        raise PolicySpecError(f"{path}.{field}", "must be a string")
    return value


def _enum(d: dict[str, Any], field: str, path: str, enum: type[_E], default: str,
          allowed: frozenset[_E] | None = None) -> _E:
    """``d[field]`` (or ``default``) as a member of ``enum``, restricted to ``allowed`` when given."""
    value = d.get(field, default)
    members = allowed if allowed is not None else frozenset(enum)
    if not isinstance(value, str) or value not in members:
        raise PolicySpecError(f"{path}.{field}", f"must be one of {sorted(str(m) for m in members)}, got {value!r}")
    return enum(value)


def _strset(d: dict[str, Any], field: str, path: str, default: tuple[str, ...] = ()) -> frozenset[str]:
    value = d.get(field)
    if value is None:
        return frozenset(default)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicySpecError(f"{path}.{field}", "must be a list of strings")
    return frozenset(value)


def _rule(raw: Any, path: str) -> ResourceRule:
    if not isinstance(raw, dict):
        raise PolicySpecError(path, "must be an object")
    names = _strset(raw, "operations", path, ("*",))
    bad = names - frozenset(Operation)
    if bad:
        raise PolicySpecError(f"{path}.operations", f"unknown operation(s) {sorted(bad)}")
    operations = frozenset(Operation(o) for o in names)
    resources = _strset(raw, "resources", path)
    if not resources:
        raise PolicySpecError(f"{path}.resources", "required")
    return ResourceRule(
        api_groups=_strset(raw, "apiGroups", path, ("*",)),
        api_versions=_strset(raw, "apiVersions", path, ("*",)),
        resources=resources,
        operations=operations,
        scope=_enum(raw, "scope", path, Scope, "*"),
    )


def _named(raw: Any, path: str, *, identifier: bool) -> NamedExpression:
    if not isinstance(raw, dict):
        raise PolicySpecError(path, "must be an object")
    name = _str(raw, "name", path)
    assert name is not None
    # Variable names are CEL identifiers; matchCondition names are qualified names (like label keys).
    if identifier and not name.isidentifier():
        raise PolicySpecError(f"{path}.name", f"{name!r} is not a valid CEL identifier")
    expr = _str(raw, "expression", path)
    assert expr is not None
    return NamedExpression(name, expr)


def _selector(raw: Any, path: str) -> LabelSelector:
    try:
        return parse_label_selector(raw, path)
    except SelectorError as e:
        raise PolicySpecError(e.path, str(e).split(": ", 1)[1]) from None


def _actions(spec: dict[str, Any], p: str) -> frozenset[Action]:
    names = _strset(spec, "validationActions", p, ("Deny",))
    if not names or names - VALIDATION_ACTIONS:
        allowed = sorted(str(a) for a in VALIDATION_ACTIONS)
        raise PolicySpecError(f"{p}.validationActions", f"must be a non-empty subset of {allowed}")
    actions = frozenset(Action(a) for a in names)
    if {Action.DENY, Action.WARN} <= actions:
        raise PolicySpecError(f"{p}.validationActions", "Deny and Warn may not be combined")
    return actions


def _match_part(obj: dict[str, Any], *, lenient: bool) -> tuple[PolicySpec, dict[str, Any]]:
    """Identity, failurePolicy, actions and match rules as a spec without expressions, and the raw spec.

    ``lenient`` reads an unreadable failurePolicy as ``Fail`` and unreadable actions as ``[Deny]``.
    """
    raw_kind = obj.get("kind")
    if not isinstance(raw_kind, str) or raw_kind not in POLICY_KINDS:
        raise PolicySpecError("kind", f"must be one of {sorted(str(k) for k in POLICY_KINDS)}, got {raw_kind!r}")
    kind = PolicyKind(raw_kind)
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise PolicySpecError("metadata.name", "required")
    namespace = meta.get("namespace") if kind is PolicyKind.NAMESPACED else None
    if kind is PolicyKind.NAMESPACED and not namespace:
        raise PolicySpecError("metadata.namespace", "required for AdmissionPolicy")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise PolicySpecError("spec", "required")
    p = "spec"
    try:
        failure_policy = _enum(spec, "failurePolicy", p, FailurePolicy, "Fail")
    except PolicySpecError:
        if not lenient:
            raise
        failure_policy = FailurePolicy.FAIL  # an unreadable failurePolicy fails closed
    try:
        actions = _actions(spec, p)
        on_unsynced = _enum(spec, "onUnsynced", p, OnUnsynced, "Deny")
    except PolicySpecError:
        if not lenient:
            raise
        actions, on_unsynced = frozenset({Action.DENY}), OnUnsynced.DENY

    match = spec.get("match") or {}
    if not isinstance(match, dict):
        raise PolicySpecError(f"{p}.match", "must be an object")
    rules = tuple(_rule(r, f"{p}.match.resourceRules[{i}]")
                  for i, r in enumerate(_list(match, "resourceRules", f"{p}.match")))
    if not rules:
        raise PolicySpecError(f"{p}.match.resourceRules", "at least one rule is required")
    excludes = tuple(
        _rule(r, f"{p}.match.excludeResourceRules[{i}]")
        for i, r in enumerate(_list(match, "excludeResourceRules", f"{p}.match"))
    )
    autogen = spec.get("autogen") or {}
    if not isinstance(autogen, dict):
        raise PolicySpecError(f"{p}.autogen", "must be an object")
    pod_controllers = autogen.get("podControllers", False)
    if not isinstance(pod_controllers, bool):
        raise PolicySpecError(f"{p}.autogen.podControllers", "must be a boolean")
    generation = meta.get("generation", 0)
    part = PolicySpec(
        kind=kind, name=name, namespace=namespace, generation=generation if isinstance(generation, int) else 0,
        failure_policy=failure_policy, validation_actions=actions, on_unsynced=on_unsynced, resource_rules=rules,
        exclude_resource_rules=excludes,
        namespace_selector=_selector(match.get("namespaceSelector"), f"{p}.match.namespaceSelector"),
        object_selector=_selector(match.get("objectSelector"), f"{p}.match.objectSelector"),
        pod_controllers=pod_controllers, match_conditions=(), param_ref=None, variables=(), validations=(),
        audit_annotations=(), mutations=(),
    )
    return part, spec


def parse_policy_match(obj: dict[str, Any]) -> PolicySpec:
    """Parse only what decides which requests a policy selects, and how it fails.

    Used for a policy that is not Ready, so its failurePolicy can answer the
    requests it selects (VAP: "Failures can occur from ... invalid or
    mis-configured policy definitions"). An unreadable ``failurePolicy`` reads
    as ``Fail`` and unreadable ``validationActions`` as ``[Deny]``: never open
    by accident.

    Returns:
        A spec with the identity, failurePolicy, validationActions and match
        fields set, and no expressions.

    Raises:
        PolicySpecError: the identity or the match rules themselves are malformed.
    """
    return _match_part(obj, lenient=True)[0]


def parse_policy(obj: dict[str, Any]) -> PolicySpec:
    """Parse a policy custom resource.

    Args:
        obj: the CR as a raw dict (``apiVersion``, ``kind``, ``metadata``, ``spec``).

    Returns:
        The parsed spec, with defaults filled in: failurePolicy ``Fail``,
        validationActions ``[Deny]``, onUnsynced ``Deny``, scope ``*``.

    Raises:
        PolicySpecError: the first malformed field, with its path.
    """
    head, spec = _match_part(obj, lenient=False)
    namespace = head.namespace
    p = "spec"

    conditions = tuple(_named(c, f"{p}.matchConditions[{i}]", identifier=False)
                       for i, c in enumerate(_list(spec, "matchConditions", p)))
    if len(conditions) > MAX_MATCH_CONDITIONS:
        raise PolicySpecError(f"{p}.matchConditions", f"at most {MAX_MATCH_CONDITIONS} entries")
    variables = tuple(_named(v, f"{p}.variables[{i}]", identifier=True)
                      for i, v in enumerate(_list(spec, "variables", p)))
    for kind_name, entries in (("matchConditions", conditions), ("variables", variables)):
        seen: set[str] = set()
        for i, e in enumerate(entries):
            if e.name in seen:
                raise PolicySpecError(f"{p}.{kind_name}[{i}].name", f"duplicate name {e.name!r}")
            seen.add(e.name)

    validations = []
    for i, v in enumerate(_list(spec, "validations", p)):
        vp = f"{p}.validations[{i}]"
        if not isinstance(v, dict):
            raise PolicySpecError(vp, "must be an object")
        reason = _enum(v, "reason", vp, StatusReason, "Invalid")
        validations.append(
            Validation(
                expression=_str(v, "expression", vp) or "",
                message=_str(v, "message", vp, required=False),
                message_expression=_str(v, "messageExpression", vp, required=False),
                reason=reason,
            )
        )

    audits: list[AuditAnnotation] = []
    for i, a in enumerate(_list(spec, "auditAnnotations", p)):
        ap = f"{p}.auditAnnotations[{i}]"
        if not isinstance(a, dict):
            raise PolicySpecError(ap, "must be an object")
        key = _str(a, "key", ap) or ""
        # As VAP: a qualified name of at most 63 characters, unique within the policy.
        if len(key) > 63 or not _QUALIFIED_NAME.match(key):
            raise PolicySpecError(f"{ap}.key", f"must be a qualified name of at most 63 characters "
                                               f"([A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]), got {key!r}")
        if any(existing.key == key for existing in audits):
            raise PolicySpecError(f"{ap}.key", f"duplicate key {key!r}")
        audits.append(AuditAnnotation(key, _str(a, "valueExpression", ap) or ""))

    mutations = []
    for i, m in enumerate(_list(spec, "mutations", p)):
        mp = f"{p}.mutations[{i}]"
        if not isinstance(m, dict):
            raise PolicySpecError(mp, "must be an object")
        patch_type = _enum(m, "patchType", mp, PatchType, "")
        field = "jsonPatch" if patch_type is PatchType.JSON_PATCH else "applyConfiguration"
        body = m.get(field)
        if not isinstance(body, dict):
            raise PolicySpecError(f"{mp}.{field}", f"required for patchType {patch_type}")
        mutations.append(Mutation(patch_type, _str(body, "expression", f"{mp}.{field}") or ""))

    if not validations and not mutations and not audits:
        raise PolicySpecError(p, "at least one of validations, auditAnnotations or mutations is required")

    param_ref = None
    raw_ref = spec.get("paramRef")
    if raw_ref is not None:
        rp = f"{p}.paramRef"
        if not isinstance(raw_ref, dict):
            raise PolicySpecError(rp, "must be an object")
        ref_name = _str(raw_ref, "name", rp, required=False)
        has_selector = raw_ref.get("selector") is not None
        if (ref_name is None) == (not has_selector):
            raise PolicySpecError(rp, "exactly one of name or selector is required")
        ref_ns = _str(raw_ref, "namespace", rp, required=False)
        if namespace is not None and ref_ns not in (None, namespace):
            raise PolicySpecError(
                f"{rp}.namespace", f"an AdmissionPolicy may only read params from its own namespace {namespace!r}"
            )
        param_ref = ParamRef(
            name=ref_name,
            namespace=ref_ns or namespace,
            selector=_selector(raw_ref["selector"], f"{rp}.selector") if has_selector else None,
            parameter_not_found_action=_enum(raw_ref, "parameterNotFoundAction", rp, ParameterNotFoundAction, "Deny"),
        )

    background = spec.get("background", False)
    if not isinstance(background, bool):
        raise PolicySpecError(f"{p}.background", "must be a boolean")

    return dataclasses.replace(
        head, match_conditions=conditions, param_ref=param_ref, variables=variables, validations=tuple(validations),
        audit_annotations=tuple(audits), mutations=tuple(mutations), background=background,
        references=parse_references(spec))


#: The caches an ``authorizer`` check reads (:mod:`webhook.policy.rbac`), as kube-apiserver's RBAC authorizer reads
#: its listers: held as reference caches of every policy that :attr:`PolicySpec.reads_authorizer`.
RBAC_REFERENCES = tuple(Reference("rbac.authorization.k8s.io/v1", r)
                        for r in ("clusterrolebindings", "rolebindings", "clusterroles", "roles"))

def mentions_authorizer(text: str) -> bool:
    """Whether CEL ``text`` names the ``authorizer`` variable outside string literals.

    A comprehension variable of that name counts too: the caches it starts are then unused, never missing.
    """
    return names_variable(text, "authorizer")


def authorizer_references(spec: Any) -> tuple[Reference, ...]:
    """:data:`RBAC_REFERENCES` when any string of a raw policy ``spec`` :func:`mentions_authorizer`, else ``()``.

    For the informers started before a policy is parsed (:mod:`webhook.caches.references`): any string counts, so
    a policy never waits for a cache nobody started.
    """
    stack = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if mentions_authorizer(node):
                return RBAC_REFERENCES
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return ()


_API_VERSION = re.compile(r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9]+(?:(?:alpha|beta)[0-9]+)?$")
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: Most entries in ``spec.references``.
MAX_REFERENCES = 16


#: Most indexes per reference.
MAX_INDEXES = 8
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _indexes(raw: dict[str, Any], path: str) -> tuple[ReferenceIndex, ...]:
    out: list[ReferenceIndex] = []
    for j, entry in enumerate(_list(raw, "indexes", path)):
        ip = f"{path}.indexes[{j}]"
        if not isinstance(entry, dict):
            raise PolicySpecError(ip, "must be an object")
        name = _str(entry, "name", ip) or ""
        if not _IDENTIFIER.match(name):
            raise PolicySpecError(f"{ip}.name", f"must be an identifier, got {name!r}")
        if any(i.name == name for i in out):
            raise PolicySpecError(f"{ip}.name", f"duplicate index name {name!r}")
        out.append(ReferenceIndex(name, _str(entry, "expression", ip) or ""))
    if len(out) > MAX_INDEXES:
        raise PolicySpecError(f"{path}.indexes", f"at most {MAX_INDEXES} entries")
    return tuple(out)


def parse_references(spec: dict[str, Any]) -> tuple[Reference, ...]:
    """``spec.references`` of a raw policy spec, in the order written.

    Args:
        spec: the CR's ``spec`` (a raw dict).

    Returns:
        One :class:`Reference` per entry; ``()`` when absent.

    Raises:
        PolicySpecError: not a list of ``{apiVersion, resource, indexes}`` objects, a
            malformed apiVersion, resource or index (a subresource such as
            ``pods/log`` is not a cache), a duplicate, or more than
            :data:`MAX_REFERENCES` entries.
    """
    p = "spec.references"
    refs: list[Reference] = []
    for i, raw in enumerate(_list(spec, "references", "spec")):
        rp = f"{p}[{i}]"
        if not isinstance(raw, dict):
            raise PolicySpecError(rp, "must be an object")
        api_version = _str(raw, "apiVersion", rp) or ""
        resource = _str(raw, "resource", rp) or ""
        if not _API_VERSION.match(api_version):
            raise PolicySpecError(f"{rp}.apiVersion", f"must be v1 or group/version, got {api_version!r}")
        if not _RESOURCE.match(resource):
            raise PolicySpecError(f"{rp}.resource", f"must be a plural resource name such as ingresses, got "
                                                    f"{resource!r}")
        ref = Reference(api_version, resource, _indexes(raw, rp))
        if ref in refs:
            raise PolicySpecError(rp, f"duplicate reference {ref.cache}")
        refs.append(ref)
    if len(refs) > MAX_REFERENCES:
        raise PolicySpecError(p, f"at most {MAX_REFERENCES} entries")
    return tuple(refs)
