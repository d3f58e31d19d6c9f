"""A Kubernetes ValidatingAdmissionPolicy or MutatingAdmissionPolicy and one of its bindings → a Tollgate policy.

Follows the API server's admission-policy plugin (``generic/policy_dispatcher.go``, ``validating/``
and ``mutating/``) and the ``admissionregistration.k8s.io`` v1/v1beta1 API reference. The policy is
evaluated once per binding, so each binding gives one ``ClusterAdmissionPolicy``:

========================================  ==============================================================
source                                    Tollgate spec
========================================  ==============================================================
policy ``failurePolicy``                  ``failurePolicy``
policy ``matchConstraints`` ∩ binding     ``match`` (+ a generated matchCondition for ``resourceNames``
``matchResources``                        and ``matchPolicy: Exact``; :mod:`.matching`)
policy ``matchConditions``, ``variables``  the same, expressions as written
``validations``, ``auditAnnotations``     the same (ValidatingAdmissionPolicy)
``mutations``                             the same (MutatingAdmissionPolicy)
binding ``validationActions``             ``validationActions`` (a MutatingAdmissionPolicyBinding has
                                          none: ``[Deny]`` enforces a failure under ``Fail``)
policy ``paramKind`` v1 ConfigMap +       ``paramRef`` (``name``, ``namespace``,
binding ``paramRef``                      ``parameterNotFoundAction``)
MutatingAdmissionPolicy                   a note when ``IfNeeded``: Tollgate invokes each mutation once
``reinvocationPolicy``
========================================  ==============================================================

The field-for-field part is :mod:`webhook.formats.kubernetes.export`'s export mapping (``POLICY_FIELDS``,
``BINDING_FIELDS``, ``PARAM_REF_FIELDS``) applied in reverse, so export and import cannot drift: a
policy exported and imported again is the policy it was (its test).

A ValidatingAdmissionPolicy has no field for background scans: as Tollgate's own policies (and
Kyverno's reports of them, off by default), it is audited when asked, by the annotation
``policies.tollgate.dev/background: "true"`` on the policy or the binding (the binding's wins).

Refused, each a :class:`~webhook.formats.imported.Problem` naming the field: a ``paramKind``
other than ``v1 ConfigMap`` (Tollgate's params cache), ``paramRef.selector`` (the API server
evaluates the policy once per selected object; Tollgate binds one object), ``paramKind`` without a
binding ``paramRef``, a missing or malformed field, an unknown field, an unsupported
``apiVersion``, a binding whose policy is not there, and
a binding whose ``matchResources`` selects nothing the policy selects. Match rules that cannot be read
(a typo the API server would refuse) select what the readable side selects, every request when neither
is (``Imported.match_unreadable``): answered per ``failurePolicy``, never selecting nothing.
"""

from __future__ import annotations

from typing import Any

from webhook.formats.common import (
    check_fields,
    check_version,
    internal_object,
    name_of,
    spec_of,
    validation_actions,
)
from webhook.formats.imported import ConversionError, Imported, Problem, SourceRef
from webhook.formats.kinds import ImportKind
from webhook.formats.kubernetes.export import BINDING_FIELDS, PARAM_REF_FIELDS, POLICY_FIELDS
from webhook.formats.libraries import unsupported_calls
from webhook.formats.matching import EVERYTHING, Intersection, MatchResources, intersect, parse_match
from webhook.policy.provenance import imported_name

__all__ = ["BACKGROUND_ANNOTATION", "convert_binding", "expressions"]

_POLICY_FIELDS = {
    False: ("paramKind", "matchConstraints", "validations", "failurePolicy", "auditAnnotations", "matchConditions",
            "variables"),
    True: ("paramKind", "matchConstraints", "mutations", "failurePolicy", "matchConditions", "variables",
           "reinvocationPolicy"),
}
_BINDING_FIELDS = {False: ("policyName", "paramRef", "matchResources", "validationActions"),
                   True: ("policyName", "paramRef", "matchResources")}
#: The policy's fields copied as written: :data:`~webhook.formats.kubernetes.export.POLICY_FIELDS` (the
#: export mapping) in reverse, but the match rules, which are intersected with the binding's (:mod:`.matching`).
POLICY_COPIED = tuple((tollgate, kubernetes) for tollgate, kubernetes in POLICY_FIELDS
                      if not tollgate.startswith("spec.match."))


def get_path(obj: Any, path: str) -> Any:
    """The value at a dotted ``path`` (``spec.paramRef.name``) of a raw object, or None."""
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted ``path`` of a raw object, creating the objects on the way."""
    *parents, last = path.split(".")
    for part in parents:
        obj = obj.setdefault(part, {})
    obj[last] = value


def copy_fields(source: dict[str, Any], target: dict[str, Any], mapping: tuple[tuple[str, str], ...]) -> None:
    """Every field of ``source`` present at a mapping's Kubernetes path, set at its Tollgate path of ``target``."""
    for tollgate, kubernetes in mapping:
        value = get_path(source, kubernetes)
        if value is not None:
            set_path(target, tollgate, value)


def expressions(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """``(path, expression)`` of every CEL expression of a policy spec in VAP/MAP/Kyverno shape, in field order."""
    out: list[tuple[str, str]] = []

    def add(path: str, value: Any) -> None:
        if isinstance(value, str) and value:
            out.append((path, value))

    for field, key in (("matchConditions", "expression"), ("variables", "expression"),
                       ("validations", "expression"), ("auditAnnotations", "valueExpression")):
        entries = spec.get(field)
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict):
                add(f"spec.{field}[{i}].{key}", entry.get(key))
                if field == "validations":
                    add(f"spec.{field}[{i}].messageExpression", entry.get("messageExpression"))
    mutations = spec.get("mutations")
    for i, m in enumerate(mutations if isinstance(mutations, list) else []):
        if isinstance(m, dict):
            for body in ("applyConfiguration", "jsonPatch"):
                if isinstance(m.get(body), dict):
                    add(f"spec.mutations[{i}].{body}.expression", m[body].get("expression"))
    return out


def library_problems(spec: dict[str, Any], source: SourceRef, *, kyverno: bool) -> list[Problem]:
    """A problem for every use of a library Tollgate lacks (see :mod:`webhook.formats.libraries`)."""
    return [Problem(source, path, f"{finding}, which Tollgate does not implement", unsupported_library=True)
            for path, text in expressions(spec) for finding in unsupported_calls(text, kyverno=kyverno)]


#: The annotation that asks for a ValidatingAdmissionPolicy's background scans (PolicyReports).
BACKGROUND_ANNOTATION = "policies.tollgate.dev/background"


def _background(policy_obj: dict[str, Any], binding_obj: dict[str, Any], policy: SourceRef, binding: SourceRef
                ) -> tuple[bool, list[Problem]]:
    """``background`` from :data:`BACKGROUND_ANNOTATION` (the binding's over the policy's; default false)."""
    value: bool = False
    problems: list[Problem] = []
    for source, obj in ((policy, policy_obj), (binding, binding_obj)):
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(BACKGROUND_ANNOTATION) if isinstance(annotations, dict) else None
        if raw is None:
            continue
        if raw not in ("true", "false"):
            problems.append(Problem(source, f"metadata.annotations[{BACKGROUND_ANNOTATION}]",
                                    f'must be "true" or "false", got {raw!r}'))
            continue
        value = raw == "true"
    return value, problems


def _params(policy_spec: dict[str, Any], binding_spec: dict[str, Any], policy: SourceRef, binding: SourceRef
            ) -> tuple[dict[str, Any] | None, list[Problem], list[Problem]]:
    """The Tollgate ``paramRef`` from the policy's ``paramKind`` and the binding's ``paramRef``."""
    kind, ref = policy_spec.get("paramKind"), binding_spec.get("paramRef")
    problems: list[Problem] = []
    if kind is None:
        note = [Problem(binding, "spec.paramRef", f"ignored: {policy} has no spec.paramKind (the API server ignores "
                                                  "it too)")]
        return None, [], note if ref is not None else []
    if not isinstance(kind, dict) or (kind.get("apiVersion"), kind.get("kind")) != ("v1", "ConfigMap"):
        shown = f"{kind.get('apiVersion')} {kind.get('kind')}" if isinstance(kind, dict) else repr(kind)
        problems.append(Problem(policy, "spec.paramKind", f"{shown}: Tollgate reads params only from ConfigMaps "
                                                          "(its params cache): paramKind must be v1 ConfigMap"))
    if ref is None:
        problems.append(Problem(binding, "spec.paramRef", f"required: {policy} has a spec.paramKind"))
        return None, problems, []
    if not isinstance(ref, dict):
        return None, [*problems, Problem(binding, "spec.paramRef", "must be an object")], []
    name, selector, namespace = ref.get("name"), ref.get("selector"), ref.get("namespace")
    action = ref.get("parameterNotFoundAction")
    if selector is not None:
        problems.append(Problem(binding, "spec.paramRef.selector", "the API server evaluates the policy once per "
                                "selected object; Tollgate binds params to one object: name one with paramRef.name"))
    elif not isinstance(name, str) or not name:
        problems.append(Problem(binding, "spec.paramRef.name", "required (one of name or selector)"))
    if namespace is not None and not isinstance(namespace, str):
        problems.append(Problem(binding, "spec.paramRef.namespace", "must be a string"))
    if action not in ("Allow", "Deny"):
        problems.append(Problem(binding, "spec.paramRef.parameterNotFoundAction",
                                f"required: Allow or Deny, got {action!r}" if action is not None else
                                "required: Allow or Deny"))
    if problems:
        return None, problems, []
    out: dict[str, Any] = {}
    copy_fields({"spec": binding_spec}, out, PARAM_REF_FIELDS)  # the export's paramRef mapping, in reverse
    return out["spec"]["paramRef"], [], []


def _match(policy_spec: dict[str, Any], binding_spec: dict[str, Any], policy: SourceRef, binding: SourceRef
           ) -> tuple[Intersection | None, list[Problem], bool]:
    """The intersection, its problems, and whether a side was unreadable.

    A side that cannot be read (a typo the API server would refuse: ``operator: Notin``, ``spec: []``,
    ``matchResources: "x"``) never makes the policy select nothing: the intersection is what the
    readable side selects (every request when neither is), so those requests are answered per the
    policy's ``failurePolicy`` (never fail open).
    """
    problems: list[Problem] = []
    constraints: MatchResources | None = None
    resources: MatchResources | None = None
    try:
        constraints = parse_match(policy_spec.get("matchConstraints"), "spec.matchConstraints", rules_required=True)
    except ConversionError as e:
        problems.append(Problem(policy, e.path, e.message))
    try:
        resources = (parse_match(binding_spec["matchResources"], "spec.matchResources", rules_required=False)
                     if binding_spec.get("matchResources") is not None else None)
    except ConversionError as e:
        problems.append(Problem(binding, e.path, e.message))
    if problems:
        return intersect(constraints or EVERYTHING, resources), problems, True
    assert constraints is not None
    both = intersect(constraints, resources)
    if both is None:
        return None, [Problem(binding, "spec.matchResources", f"selects nothing that {policy}'s "
                                                              "spec.matchConstraints select")], False
    return both, [], False


def convert_binding(kind: ImportKind, binding_obj: dict[str, Any], policy_kind: ImportKind,
                    policy_obj: dict[str, Any] | None) -> Imported:
    """One binding and the policy it names, as the Tollgate policy the API server's evaluation amounts to.

    Args:
        kind: the binding's kind (ValidatingAdmissionPolicyBinding or MutatingAdmissionPolicyBinding).
        binding_obj: the binding.
        policy_kind: the kind it binds.
        policy_obj: the policy its ``spec.policyName`` names, or None when it is not there.

    Returns:
        The :class:`Imported` policy: with problems, its object carries them and is not Ready (answered
        per ``failurePolicy`` when its match rules could be read; selecting nothing when they could not,
        e.g. a binding without its policy).
    """
    mutating = kind.mutating
    binding = SourceRef(kind.kind, name_of(binding_obj))
    binding_spec = spec_of(binding_obj)
    policy_name = binding_spec.get("policyName")
    policy = SourceRef(policy_kind.kind, policy_name if isinstance(policy_name, str) else "")
    name = imported_name(policy_kind.kind, policy.name, binding.name)
    problems = check_version(kind, binding_obj, binding) + check_fields(binding_spec, _BINDING_FIELDS[mutating],
                                                                         binding)
    if not policy.name:
        problems.append(Problem(binding, "spec.policyName", "required"))
    if policy_obj is None:
        if policy.name:
            problems.append(Problem(binding, "spec.policyName", f"no {policy} (a binding without its policy "
                                                                "enforces nothing)"))
        if not mutating:  # the binding's own fields are still checked
            problems += validation_actions(binding_spec.get("validationActions"), "spec.validationActions", binding,
                                           required=True)[1]
        try:
            parse_match(binding_spec.get("matchResources"), "spec.matchResources", rules_required=False)
        except ConversionError as e:
            problems.append(Problem(binding, e.path, e.message))
        obj = internal_object(name, {}, sources=(binding,), problems=problems)
        return Imported(obj, policy, binding, tuple(problems), missing_policy=True)

    policy_spec = spec_of(policy_obj)
    problems = (check_version(policy_kind, policy_obj, policy) + check_fields(policy_spec, _POLICY_FIELDS[mutating],
                                                                              policy) + problems)
    notes: list[Problem] = []
    internal: dict[str, Any] = {"spec": {}}
    copy_fields(policy_obj, internal, POLICY_COPIED)
    spec: dict[str, Any] = internal["spec"]
    if mutating:
        spec["validationActions"] = ["Deny"]
        reinvocation = policy_spec.get("reinvocationPolicy", "Never")
        if reinvocation == "IfNeeded":
            notes.append(Problem(policy, "spec.reinvocationPolicy", "IfNeeded: Tollgate invokes the mutations once "
                                                                    "per request (a later mutation never reinvokes "
                                                                    "them)"))
        elif reinvocation != "Never":
            problems.append(Problem(policy, "spec.reinvocationPolicy",
                                    f"must be Never or IfNeeded, got {reinvocation!r}"))
    else:
        for tollgate_path, binding_path in BINDING_FIELDS:  # the export's binding mapping, in reverse
            value = get_path(binding_obj, binding_path)
            if tollgate_path == "spec.validationActions":
                value, found = validation_actions(value, binding_path, binding, required=True)
                problems += found
            if value is not None:
                set_path(internal, tollgate_path, value)
        background, found = _background(policy_obj, binding_obj, policy, binding)
        problems += found
        spec["background"] = background
    both, found, unreadable = _match(policy_spec, binding_spec, policy, binding)
    problems += found
    if both is not None:
        spec["match"] = both.match
    param_ref, found, noted = _params(policy_spec, binding_spec, policy, binding)
    problems += found
    notes += noted
    if param_ref is not None:
        spec["paramRef"] = param_ref
    conditions = policy_spec.get("matchConditions")
    authored = len(conditions) if isinstance(conditions, list) else 0
    if both is not None and both.condition is not None and isinstance(conditions, list | None):
        spec["matchConditions"] = [*(conditions or []), both.condition]
    problems += library_problems(policy_spec, policy, kyverno=False)
    obj = internal_object(name, spec, sources=(policy, binding), problems=problems, carried=(policy_obj, binding_obj),
                          generation=(policy_obj.get("metadata") or {}).get("generation"))
    return Imported(obj, policy, binding, tuple(problems), tuple(notes), authored_conditions=authored,
                    match_unreadable=unreadable)
