"""Tollgate policies ↔ Kubernetes ValidatingAdmissionPolicy / MutatingAdmissionPolicy: the field mapping (pure).

One Tollgate policy is one object; Kubernetes splits it into a policy (what to check, how to fail)
and a binding (where, with which params, with which actions). The correspondence is declared once,
in :data:`POLICY_FIELDS`, :data:`BINDING_FIELDS` and :data:`PARAM_REF_FIELDS` (Tollgate path ↔
Kubernetes path), so an importer can apply it in reverse; :func:`export_policy` applies it forwards
after :func:`blockers` has found nothing Kubernetes cannot express faithfully.

Exported: ``failurePolicy``, the match rules and selectors (``matchConstraints``, ``matchPolicy:
Equivalent`` as Tollgate's webhook configurations route), ``matchConditions``, ``variables``,
``validations``, ``auditAnnotations`` (a ValidatingAdmissionPolicy and its binding with
``validationActions``) and ``mutations`` (a MutatingAdmissionPolicy, ``reinvocationPolicy: Never`` as
Tollgate never reinvokes, and its binding); ``paramRef`` by name becomes ``paramKind: v1 ConfigMap``
and the binding's ``paramRef``. Expressions are copied as written.

What blocks an export (one :class:`Blocker` each): a tenant ``AdmissionPolicy``; ``spec.references``
and the resource library (Tollgate-only); ``autogen.podControllers``; ``paramRef.selector`` (Tollgate
binds the list of matching ConfigMaps, Kubernetes evaluates once per ConfigMap); ``onUnsynced`` other
than ``Deny`` on a policy that reads a cache; a mutation that returns maps where
MutatingAdmissionPolicy requires ``Object{...}`` / ``JSONPatch{...}`` literals; typed literals in an
expression a ValidatingAdmissionPolicy compiles; a call to Kyverno's CEL libraries; a policy that is not
Ready. ``background: true`` is not carried over (the PolicyReports come from Tollgate's audit), which
:attr:`Export.notes` says.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.cel import ast as celast
from webhook.policy.cel import library, typed_literals
from webhook.policy.cel.env import environment
from webhook.policy.cel.scope import RESOURCE_FUNCTIONS
from webhook.policy.compiler import compile_policy
from webhook.policy.model import PolicySpec
from webhook.policy.vocabulary import Action, OnUnsynced, PatchType, PolicyKind

__all__ = [
    "ADMISSION_GROUP",
    "BINDING_FIELDS",
    "MUTATING_VERSIONS",
    "PARAM_REF_FIELDS",
    "POLICY_FIELDS",
    "Blocker",
    "Export",
    "blockers",
    "export_policy",
]

ADMISSION_GROUP = "admissionregistration.k8s.io"
#: Versions a MutatingAdmissionPolicy may be written in (v1 since Kubernetes 1.36, v1beta1 since 1.34).
MUTATING_VERSIONS = ("v1", "v1beta1")
#: Tollgate spec path → the Kubernetes policy's path (both ValidatingAdmissionPolicy and MutatingAdmissionPolicy
#: where the field applies to both).
POLICY_FIELDS: tuple[tuple[str, str], ...] = (
    ("spec.failurePolicy", "spec.failurePolicy"),
    ("spec.match.resourceRules", "spec.matchConstraints.resourceRules"),
    ("spec.match.excludeResourceRules", "spec.matchConstraints.excludeResourceRules"),
    ("spec.match.namespaceSelector", "spec.matchConstraints.namespaceSelector"),
    ("spec.match.objectSelector", "spec.matchConstraints.objectSelector"),
    ("spec.matchConditions", "spec.matchConditions"),
    ("spec.variables", "spec.variables"),
    ("spec.validations", "spec.validations"),
    ("spec.auditAnnotations", "spec.auditAnnotations"),
    ("spec.mutations", "spec.mutations"),
)
#: Tollgate spec path → the binding's path (ValidatingAdmissionPolicyBinding; a MutatingAdmissionPolicyBinding has
#: no validationActions).
BINDING_FIELDS: tuple[tuple[str, str], ...] = (
    ("spec.validationActions", "spec.validationActions"),
)
#: ``spec.paramRef`` → the binding's ``spec.paramRef`` (the policy gets ``paramKind: v1 ConfigMap``).
PARAM_REF_FIELDS: tuple[tuple[str, str], ...] = (
    ("spec.paramRef.name", "spec.paramRef.name"),
    ("spec.paramRef.namespace", "spec.paramRef.namespace"),
    ("spec.paramRef.parameterNotFoundAction", "spec.paramRef.parameterNotFoundAction"),
)
#: Fields of the policy that only a ValidatingAdmissionPolicy / only a MutatingAdmissionPolicy has.
_VALIDATING_ONLY = frozenset({"spec.validations", "spec.auditAnnotations"})
_MUTATING_ONLY = frozenset({"spec.mutations"})
_PARAM_KIND = {"apiVersion": "v1", "kind": "ConfigMap"}
_ACTION_ORDER = (Action.DENY, Action.WARN, Action.AUDIT)


@dataclass(frozen=True, slots=True)
class Blocker:
    """A feature Kubernetes cannot express faithfully: its spec path and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(slots=True)
class Export:
    """What exporting one policy gave: the objects (none when blocked), blockers and notes."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        obj = obj.setdefault(part, {})
    obj[last] = value


def _copy(src: dict[str, Any], dst: dict[str, Any], mapping: tuple[tuple[str, str], ...],
          skip: frozenset[str] = frozenset()) -> None:
    """Copy every present field of ``src`` to ``dst`` along ``mapping`` (reverse the pairs to import)."""
    for from_path, to_path in mapping:
        if from_path in skip:
            continue
        value = _get(src, from_path)
        if value is not None and value != [] and value != {}:
            _set(dst, to_path, value)


# --- what blocks an export ------------------------------------------------------------------------------------

def _expressions(spec: PolicySpec) -> Iterator[tuple[str, str]]:
    """``(spec path, expression)`` of every CEL expression of ``spec``."""
    for i, c in enumerate(spec.match_conditions):
        yield f"spec.matchConditions[{i}].expression", c.expression
    for i, v in enumerate(spec.variables):
        yield f"spec.variables[{i}].expression", v.expression
    for i, val in enumerate(spec.validations):
        yield f"spec.validations[{i}].expression", val.expression
        if val.message_expression:
            yield f"spec.validations[{i}].messageExpression", val.message_expression
    for i, a in enumerate(spec.audit_annotations):
        yield f"spec.auditAnnotations[{i}].valueExpression", a.value_expression
    for i, m in enumerate(spec.mutations):
        yield f"spec.mutations[{i}].{_mutation_field(m.patch_type)}.expression", m.expression


def _mutation_field(patch_type: PatchType) -> str:
    return "jsonPatch" if patch_type is PatchType.JSON_PATCH else "applyConfiguration"


def _reads_a_cache(spec: PolicySpec) -> bool:
    if spec.param_ref is not None or spec.references or not spec.namespace_selector.empty:
        return True
    return any("namespaceObject" in text for _, text in _expressions(spec))


def _results(node: celast.Node) -> Iterator[celast.Node]:
    """The nodes whose value an expression returns: through ``?:`` branches and ``cel.bind`` bodies."""
    if node.kind == "call" and node.name == "_?_:_" and len(node.args) == 3:
        yield from _results(node.args[1])
        yield from _results(node.args[2])
    elif node.kind == "comprehension" and node.name == "#unused" and len(node.args) == 5:
        yield from _results(node.args[4])
    else:
        yield node


def _untyped_maps(expression: str, patch_type: PatchType) -> list[str]:
    """What a mutation returns that MutatingAdmissionPolicy's compiler refuses: map literals, not typed ones."""
    try:
        literals = typed_literals.rewrite(expression)
        # Parsed only, so the tree's offsets are those of the typed-literal rewrite (no other rewrite).
        tree = celast.decode(environment().env.compile(literals.text, disable_check=True).serialize())
    except (typed_literals.TypedLiteralError, RuntimeError):
        return []
    typed = {lit.brace: lit.name for lit in literals.literals}

    def name_of(node: celast.Node) -> str | None:
        """The typed literal a map literal came from, ``map`` for a plain one, None for another node."""
        if node.kind != "struct" or node.name:
            return None
        return typed.get(literals.source_offset(tree.offsets.get(node.id, -1)), "map")

    problems: list[str] = []
    for result in _results(tree.root):
        if patch_type is PatchType.APPLY_CONFIGURATION:
            if name_of(result) == "map":
                problems.append("returns a map literal; a MutatingAdmissionPolicy's applyConfiguration returns "
                                "Object{...}")
        elif result.kind == "list" and any(name_of(e) == "map" for e in result.args):
            problems.append("returns map literals; a MutatingAdmissionPolicy's jsonPatch returns "
                            "[JSONPatch{op: ..., path: ..., value: ...}]")
    return sorted(set(problems))


def _resource_calls(expression: str) -> list[str]:
    try:
        return sorted({call.function for call in environment().compile(expression).resource_calls
                       if call.function in RESOURCE_FUNCTIONS})
    except RuntimeError:
        return []


def _kyverno_calls(expression: str) -> list[str]:
    """Kyverno library functions the expression calls (``image``, ``json.unmarshal``, ``regex.replace``, ...)."""
    try:
        checked = environment().compile(expression).checked
    except RuntimeError:
        return []
    if not checked:
        return []
    kyverno = library.kyverno_functions()
    return sorted({n.name for n in celast.decode(checked).root.walk()
                   if n.kind == "call" and n.name in kyverno and not (n.name == "math.round" and len(n.args) == 1)})


def blockers(obj: dict[str, Any]) -> list[Blocker]:
    """Every feature of a Tollgate policy that a ValidatingAdmissionPolicy / MutatingAdmissionPolicy cannot express.

    Args:
        obj: a ClusterAdmissionPolicy or AdmissionPolicy as a raw dict.

    Returns:
        One :class:`Blocker` per feature, in spec order; ``[]`` when the policy exports faithfully.
    """
    result = compile_policy(obj)
    if result.policy is None:
        return [Blocker("status", f"the policy is not Ready ({result.condition.get('reason')}): "
                                  f"{result.condition.get('message')}")]
    spec = result.policy.spec
    found: list[Blocker] = []
    if spec.kind is PolicyKind.NAMESPACED:
        found.append(Blocker("kind", "AdmissionPolicy is a tenant's namespaced policy (its namespace only, never "
                                     "exempting, ownerReferences protected); Kubernetes' policies are "
                                     "cluster-scoped"))
    if spec.references:
        found.append(Blocker("spec.references", "reading cached objects (resource.Get/List/ByIndex) is Tollgate's; "
                                                "Kubernetes' CEL cannot read other objects"))
    if spec.pod_controllers:
        found.append(Blocker("spec.autogen.podControllers", "Tollgate evaluates the rules on a Pod made from each "
                                                             "controller's template; Kubernetes has no such "
                                                             "expansion"))
    if spec.param_ref is not None and spec.param_ref.selector is not None:
        found.append(Blocker("spec.paramRef.selector", "Tollgate binds params to the list of matching ConfigMaps; "
                                                       "a Kubernetes binding evaluates the policy once per "
                                                       "matching ConfigMap"))
    if spec.on_unsynced is not OnUnsynced.DENY and _reads_a_cache(spec):
        found.append(Blocker("spec.onUnsynced", f"{spec.on_unsynced} while a cache syncs is Tollgate's; the API "
                                                "server has no such answer"))
    validating = bool(spec.validations or spec.audit_annotations)
    for path, text in _expressions(spec):
        functions = _resource_calls(text)
        if functions and not spec.references:
            found.append(Blocker(path, f"{', '.join(functions)} is Tollgate's resource library"))
        kyverno = _kyverno_calls(text)
        if kyverno:
            found.append(Blocker(path, f"{', '.join(kyverno)} is Kyverno's CEL library; Kubernetes' CEL has none"))
        in_mutation = path.startswith("spec.mutations")
        in_variable = path.startswith("spec.variables")
        names = sorted({lit.name.split(".")[0] for lit in typed_literals.rewrite(text).literals})
        if names and not in_mutation and (not in_variable or validating):
            found.append(Blocker(path, f"{'/'.join(names)}{{...}} literals compile only in a "
                                       "MutatingAdmissionPolicy's expressions"))
    for i, m in enumerate(spec.mutations):
        path = f"spec.mutations[{i}].{_mutation_field(m.patch_type)}.expression"
        found += [Blocker(path, problem) for problem in _untyped_maps(m.expression, m.patch_type)]
    return found


# --- the mapping, forwards -------------------------------------------------------------------------------------

def _metadata(name: str, source: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    labels = _get(source, "metadata.labels")
    if isinstance(labels, dict) and labels:
        meta["labels"] = dict(labels)
    meta["annotations"] = {"tollgate.dev/exported-from": f"{source.get('kind')}/{_get(source, 'metadata.name')}"}
    return meta


def _normalized(obj: dict[str, Any], spec: PolicySpec) -> dict[str, Any]:
    """The raw policy with Tollgate's defaults written out (Kubernetes' defaults may differ)."""
    out = {"spec": dict(obj.get("spec") or {})}
    out["spec"]["failurePolicy"] = str(spec.failure_policy)
    out["spec"]["validationActions"] = [str(a) for a in _ACTION_ORDER if a in spec.validation_actions]
    match = dict(out["spec"].get("match") or {})
    match["resourceRules"] = [_rule(r) for r in match.get("resourceRules") or []]
    match["excludeResourceRules"] = [_rule(r) for r in match.get("excludeResourceRules") or []]
    out["spec"]["match"] = match
    if spec.param_ref is not None:
        ref = dict(out["spec"].get("paramRef") or {})
        ref["parameterNotFoundAction"] = str(spec.param_ref.parameter_not_found_action)
        out["spec"]["paramRef"] = ref
    return out


def _rule(raw: dict[str, Any]) -> dict[str, Any]:
    """A resource rule with Tollgate's defaults (``*`` groups, versions and operations, scope ``*``) written out."""
    return {"apiGroups": raw.get("apiGroups", ["*"]), "apiVersions": raw.get("apiVersions", ["*"]),
            "resources": raw.get("resources", []), "operations": raw.get("operations", ["*"]),
            "scope": raw.get("scope", "*")}


def export_policy(obj: dict[str, Any], *, mutating_version: str = "v1") -> Export:
    """A Tollgate policy as Kubernetes admission policies and bindings, or what blocks it.

    Args:
        obj: a ClusterAdmissionPolicy or AdmissionPolicy as a raw dict.
        mutating_version: ``v1`` (Kubernetes 1.36+) or ``v1beta1`` (1.34+) for MutatingAdmissionPolicy.

    Returns:
        :class:`Export`: with validations or auditAnnotations, a ValidatingAdmissionPolicy and its
        ValidatingAdmissionPolicyBinding; with mutations, a MutatingAdmissionPolicy and its
        MutatingAdmissionPolicyBinding; nothing when anything blocks (``blockers`` says what).

    Raises:
        ValueError: ``mutating_version`` is not one of :data:`MUTATING_VERSIONS`.
    """
    if mutating_version not in MUTATING_VERSIONS:
        raise ValueError(f"mutating_version must be one of {', '.join(MUTATING_VERSIONS)}, got {mutating_version!r}")
    out = Export(blockers=blockers(obj))
    if out.blockers:
        return out
    compiled = compile_policy(obj).policy
    assert compiled is not None  # blockers() found it Ready
    spec = compiled.spec
    source = _normalized(obj, spec)
    name = spec.name
    if spec.background:
        out.notes.append("spec.background: not carried over (Kubernetes writes no PolicyReports; Tollgate's audit "
                         "does)")
    kinds = []
    if spec.validations or spec.audit_annotations:
        kinds.append(("ValidatingAdmissionPolicy", "v1", _MUTATING_ONLY, True))
    if spec.mutations:
        kinds.append(("MutatingAdmissionPolicy", mutating_version, _VALIDATING_ONLY, False))
    for kind, version, skip, validating in kinds:
        api_version = f"{ADMISSION_GROUP}/{version}"
        policy: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": _metadata(name, obj)}
        _copy(source, policy, POLICY_FIELDS, skip)
        _set(policy, "spec.matchConstraints.matchPolicy", "Equivalent")
        binding: dict[str, Any] = {"apiVersion": api_version, "kind": f"{kind}Binding",
                                   "metadata": _metadata(f"{name}-binding", obj), "spec": {"policyName": name}}
        if validating:
            _copy(source, binding, BINDING_FIELDS)
        else:
            _set(policy, "spec.reinvocationPolicy", "Never")
        if spec.param_ref is not None:
            _set(policy, "spec.paramKind", dict(_PARAM_KIND))
            _copy(source, binding, PARAM_REF_FIELDS)
        out.objects += [policy, binding]
    return out
