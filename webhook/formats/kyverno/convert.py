"""A Kyverno ``policies.kyverno.io`` ValidatingPolicy or MutatingPolicy → a Tollgate policy (pure; no I/O).

Every version (v1, v1beta1, v1alpha1: one spec, see :mod:`webhook.formats.kinds`) and the namespaced
twins ``NamespacedValidatingPolicy``/``NamespacedMutatingPolicy``, which become an ``AdmissionPolicy`` of
their namespace: it selects requests of that namespace only and reads (``resource.Get``/``List``) only
that namespace, as Kyverno confines them.

Kyverno's CEL policies are ValidatingAdmissionPolicy / MutatingAdmissionPolicy specs with their
binding folded in (Kyverno binds them itself) plus Kyverno's fields
(``api/policies.kyverno.io/v1beta1``, aliased by v1):

==========================================  ================================================================
Kyverno                                     Tollgate spec
==========================================  ================================================================
``matchConstraints``                        ``match`` (a generated matchCondition for ``resourceNames`` and
                                            ``matchPolicy: Exact``)
``failurePolicy``, ``matchConditions``,      the same, expressions as written
``variables``, ``validations``,
``auditAnnotations``, ``mutations``
``validationActions`` (default ``[Deny]``)   ``validationActions``
``evaluation.background.enabled``           ``background`` (default true, as Kyverno's)
(ValidatingPolicy)
``evaluation.admission.enabled: false``     ``validationActions: [Audit]`` (ValidatingPolicy: the admission
                                            result only annotates); refused for a MutatingPolicy
``autogen.podControllers``                  ``autogen.podControllers`` when Kyverno would generate rules
                                            (``pkg/cel/autogen``: one rule, ``"" v1 pods``, no selectors,
                                            excludes or names), restricted by a generated matchCondition to
                                            Kyverno's controllers (``controllers``, default: Deployments,
                                            DaemonSets, StatefulSets, ReplicaSets, Jobs, CronJobs — not
                                            ReplicationControllers, which Tollgate's autogen also covers)
``resource.Get`` / ``resource.List`` calls   ``references``: each literal ``apiVersion``/``resource`` read
policy annotations                          ``policies.tollgate.dev/severity``, ``/category`` (PolicyReports)
``policies.kyverno.io/severity``,
``/category``
==========================================  ================================================================

A MutatingPolicy's ``matchConditions`` that read ``variables.*`` get those variables bound in with
``cel.bind`` (Kyverno binds a MutatingPolicy's variables for its matchConditions; a ValidatingPolicy's see
none, as in Kyverno).

Notes (how a field is honoured differently): ``webhookConfiguration.timeoutSeconds`` (the webhook's
own timeout applies), ``evaluation.background.interval`` (the background audit's own schedule),
``autogen.validatingAdmissionPolicy``/``mutatingAdmissionPolicy`` (Tollgate serves the policy
itself), ``reinvocationPolicy: IfNeeded`` (invoked once), ``targetMatchConstraints`` and
``targetMatchConditions`` without
``mutateExisting``. Refused (problems): ``evaluation.mode: JSON`` (no admission request),
``evaluation.mutateExisting.enabled`` (Tollgate never mutates stored objects), a Kyverno library
Tollgate lacks, a ``resource.Get``/``List`` with a computed apiVersion or resource, an unknown
field, an unsupported ``apiVersion``.
"""

from __future__ import annotations

from typing import Any

from webhook.formats.common import (
    check_fields,
    check_version,
    internal_object,
    source_ref,
    spec_of,
    validation_actions,
)
from webhook.formats.imported import ConversionError, Imported, Problem, SourceRef
from webhook.formats.kinds import ImportKind
from webhook.formats.kubernetes.convert import expressions, library_problems
from webhook.formats.libraries import resource_reads
from webhook.formats.matching import intersect as intersect_match
from webhook.formats.matching import parse_match
from webhook.policy.cel.rewrites import inline_variables, referenced_variables
from webhook.policy.provenance import imported_name

__all__ = ["AUTOGEN_CONDITION", "KYVERNO_CONTROLLERS", "convert_kyverno"]

_VALIDATING_FIELDS = ("matchConstraints", "validations", "failurePolicy", "auditAnnotations", "matchConditions",
                      "variables", "autogen", "validationActions", "webhookConfiguration", "evaluation")
_MUTATING_FIELDS = ("matchConstraints", "failurePolicy", "targetMatchConstraints", "targetMatchConditions",
                    "matchConditions", "variables", "autogen", "mutations", "webhookConfiguration", "evaluation",
                    "reinvocationPolicy")
_COPIED = ("matchConditions", "variables", "validations", "auditAnnotations", "mutations")

#: Kyverno's pod controllers (``pkg/cel/autogen/config.go``): resource → (group, resource) of the request.
KYVERNO_CONTROLLERS = {"deployments": ("apps", "deployments"), "daemonsets": ("apps", "daemonsets"),
                       "statefulsets": ("apps", "statefulsets"), "replicasets": ("apps", "replicasets"),
                       "jobs": ("batch", "jobs"), "cronjobs": ("batch", "cronjobs")}
#: The controllers Tollgate's ``autogen.podControllers`` covers that Kyverno's never does.
_TOLLGATE_ONLY_CONTROLLERS = (("", "replicationcontrollers"),)
#: The name of the matchCondition that keeps autogen to the controllers Kyverno's would cover.
AUTOGEN_CONDITION = "tollgate.dev/kyverno-autogen-controllers"
_SEVERITY = {"policies.kyverno.io/severity": "policies.tollgate.dev/severity",
             "policies.kyverno.io/category": "policies.tollgate.dev/category"}


def _get(d: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


def _flag(spec: dict[str, Any], path: tuple[str, ...], default: bool, source: SourceRef,
          problems: list[Problem]) -> bool:
    value = _get(spec, *path)
    if value is None:
        return default
    if not isinstance(value, bool):
        problems.append(Problem(source, "spec." + ".".join(path), "must be a boolean"))
        return default
    return value


def _can_autogen(match: Any) -> bool:
    """Kyverno's ``CanAutoGen``: exactly one rule, ``""`` ``v1`` ``pods``, no names, selectors or excludes."""
    if not isinstance(match, dict) or match.get("excludeResourceRules"):
        return False
    for field in ("namespaceSelector", "objectSelector"):
        selector = match.get(field)
        if isinstance(selector, dict) and (selector.get("matchLabels") or selector.get("matchExpressions")):
            return False
    rules = match.get("resourceRules")
    if not isinstance(rules, list) or len(rules) != 1 or not isinstance(rules[0], dict):
        return False
    rule = rules[0]
    return (not rule.get("resourceNames") and rule.get("apiGroups") == [""] and rule.get("apiVersions") == ["v1"]
            and rule.get("resources") == ["pods"])


def _autogen(spec: dict[str, Any], source: SourceRef, problems: list[Problem]) -> tuple[bool, dict[str, str] | None]:
    """Whether Kyverno would generate pod-controller rules, and the condition keeping them to its controllers."""
    if not _can_autogen(spec.get("matchConstraints")):
        return False, None
    if not _flag(spec, ("autogen", "podControllers", "enabled"), True, source, problems):
        return False, None
    chosen = _get(spec, "autogen", "podControllers", "controllers")
    if chosen is None:
        chosen = list(KYVERNO_CONTROLLERS)
    if not isinstance(chosen, list) or not all(isinstance(c, str) for c in chosen):
        problems.append(Problem(source, "spec.autogen.podControllers.controllers", "must be a list of strings"))
        return False, None
    for i, c in enumerate(chosen):
        if c not in KYVERNO_CONTROLLERS:
            problems.append(Problem(source, f"spec.autogen.podControllers.controllers[{i}]",
                                    f"unknown controller {c!r}: must be among {sorted(KYVERNO_CONTROLLERS)}"))
    if not chosen:
        return False, None
    left_out = [KYVERNO_CONTROLLERS[c] for c in sorted(KYVERNO_CONTROLLERS) if c not in chosen]
    left_out += list(_TOLLGATE_ONLY_CONTROLLERS)
    excluded = " || ".join(f"(request.resource.group == '{g}' && request.resource.resource == '{r}')"
                           for g, r in left_out)
    return True, {"name": AUTOGEN_CONDITION, "expression": f"!({excluded})"}


def _references(spec: dict[str, Any], source: SourceRef) -> tuple[list[dict[str, str]], list[Problem]]:
    refs: list[dict[str, str]] = []
    problems: list[Problem] = []
    for path, text in expressions(spec):
        reads = resource_reads(text)
        problems += [Problem(source, path, p) for p in reads.problems]
        for api_version, resource in reads.references:
            ref = {"apiVersion": api_version, "resource": resource}
            if ref not in refs:
                refs.append(ref)
    return refs, problems


def _evaluation(spec: dict[str, Any], kind: ImportKind, source: SourceRef, problems: list[Problem],
                notes: list[Problem]) -> tuple[bool, bool]:
    """``(admission enabled, background enabled)``; problems for what Tollgate cannot do."""
    mode = _get(spec, "evaluation", "mode")
    if mode not in (None, "", "Kubernetes"):
        problems.append(Problem(source, "spec.evaluation.mode", f"{mode}: Tollgate evaluates Kubernetes admission "
                                                                "requests only (mode Kubernetes)"))
    admission = _flag(spec, ("evaluation", "admission", "enabled"), True, source, problems)
    background = _flag(spec, ("evaluation", "background", "enabled"), True, source, problems)
    if _get(spec, "evaluation", "background", "interval") is not None:
        notes.append(Problem(source, "spec.evaluation.background.interval", "Tollgate's background audit "
                             "re-evaluates on every change of a policy or object it reads, not on a per-policy "
                             "schedule"))
    if kind.mutating:
        if _flag(spec, ("evaluation", "mutateExisting", "enabled"), False, source, problems):
            problems.append(Problem(source, "spec.evaluation.mutateExisting.enabled",
                                    "Tollgate never mutates stored objects, only admission requests"))
        else:
            notes += [Problem(source, f"spec.{field}", "ignored (it selects what mutateExisting mutates, which is "
                                                       "off)")
                      for field in ("targetMatchConstraints", "targetMatchConditions") if spec.get(field) is not None]
        if not admission:
            problems.append(Problem(source, "spec.evaluation.admission.enabled",
                                    "false: a MutatingPolicy that does not mutate admission requests only mutates "
                                    "stored objects, which Tollgate never does"))
    elif not admission:
        notes.append(Problem(source, "spec.evaluation.admission.enabled", "false: evaluated at admission with "
                             "validationActions [Audit] (its result only annotates the request; PolicyReports come "
                             "from the background audit)"))
    return admission, background


def _notes(spec: dict[str, Any], kind: ImportKind, source: SourceRef) -> list[Problem]:
    notes = []
    if _get(spec, "webhookConfiguration", "timeoutSeconds") is not None:
        notes.append(Problem(source, "spec.webhookConfiguration.timeoutSeconds", "not per policy in Tollgate (the "
                                                                                 "webhook configuration's "
                                                                                 "timeoutSeconds applies)"))
    generated = "mutatingAdmissionPolicy" if kind.mutating else "validatingAdmissionPolicy"
    if _get(spec, "autogen", generated, "enabled") is True:
        notes.append(Problem(source, f"spec.autogen.{generated}.enabled", "Tollgate serves the policy itself and "
                                                                          "generates no Kubernetes admission policy "
                                                                          "from it"))
    if kind.mutating and spec.get("reinvocationPolicy") == "IfNeeded":
        notes.append(Problem(source, "spec.reinvocationPolicy", "IfNeeded: Tollgate invokes the mutations once per "
                                                                "request"))
    return notes


def _conditions_with_variables(spec: dict[str, Any]) -> list[Any] | None:
    """A MutatingPolicy's ``matchConditions`` with the ``variables.*`` they read bound in (None: none read any).

    Kyverno evaluates a MutatingPolicy's matchConditions with the policy's variables bound lazily
    (``pkg/cel/policies/mpol/compiler/policy.go``: ``appendVariables`` before ``match``; ``compiler.go``
    compiles the variables first); a ValidatingPolicy compiles its matchConditions before its variables,
    so there they stay undeclared. Tollgate's matchConditions see no variables (as ValidatingAdmissionPolicy's),
    so each variable a condition reads is bound in its expression, once and lazily, with ``cel.bind``
    (:func:`webhook.policy.cel.rewrites.inline_variables`); an error in a variable is the condition's error,
    answered per failurePolicy as Kyverno answers it.
    """
    conditions, variables = spec.get("matchConditions"), spec.get("variables")
    if not isinstance(conditions, list) or not isinstance(variables, list):
        return None
    if not any(isinstance(c, dict) and isinstance(c.get("expression"), str)
               and referenced_variables(c["expression"]) for c in conditions):
        return None
    inlined: dict[str, str] = {}
    for v in variables:
        if isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("expression"), str):
            text = inline_variables(v["expression"], inlined)
            if text is not None:
                inlined[v["name"]] = text
    out: list[Any] = []
    for c in conditions:
        text = c.get("expression") if isinstance(c, dict) else None
        bound = inline_variables(text, inlined) if isinstance(text, str) and referenced_variables(text) else None
        out.append({**c, "expression": bound} if bound is not None else c)
    return out


def convert_kyverno(kind: ImportKind, obj: dict[str, Any]) -> Imported:
    """A Kyverno ValidatingPolicy or MutatingPolicy as a Tollgate policy (see the module docstring's table).

    Returns:
        The :class:`Imported` policy: with problems, its object carries them and is not Ready.
    """
    source = source_ref(kind, obj)
    spec_in = spec_of(obj)
    problems = check_version(kind, obj, source) + check_fields(
        spec_in, _MUTATING_FIELDS if kind.mutating else _VALIDATING_FIELDS, source)
    notes = _notes(spec_in, kind, source)
    spec: dict[str, Any] = {}
    if "failurePolicy" in spec_in:
        spec["failurePolicy"] = spec_in["failurePolicy"]
    admission, background = _evaluation(spec_in, kind, source, problems, notes)
    if kind.mutating:
        spec["validationActions"] = ["Deny"]
        if spec_in.get("reinvocationPolicy") not in (None, "Never", "IfNeeded"):
            problems.append(Problem(source, "spec.reinvocationPolicy",
                                    f"must be Never or IfNeeded, got {spec_in.get('reinvocationPolicy')!r}"))
    else:
        actions, found = validation_actions(spec_in.get("validationActions"), "spec.validationActions", source,
                                            required=False)
        problems += found
        spec["validationActions"] = actions if admission else ["Audit"]
        spec["background"] = background
    conditions: list[dict[str, str]] = []
    try:
        both = intersect_match(parse_match(spec_in.get("matchConstraints"), "spec.matchConstraints",
                                           rules_required=True))
    except ConversionError as e:
        problems.append(Problem(source, e.path, e.message))
    else:
        assert both is not None  # one MatchResources always intersects with itself
        spec["match"] = both.match
        if both.condition is not None:
            conditions.append(both.condition)
    pod_controllers, autogen_condition = _autogen(spec_in, source, problems)
    if pod_controllers:
        spec["autogen"] = {"podControllers": True}
        assert autogen_condition is not None
        conditions.append(autogen_condition)
    for field in _COPIED:
        if field in spec_in:
            spec[field] = spec_in[field]
    authored = spec_in.get("matchConditions")
    bound = _conditions_with_variables(spec_in) if kind.mutating else None
    if bound is not None:
        spec["matchConditions"] = authored = bound
    if conditions and isinstance(authored, list | None):
        spec["matchConditions"] = [*(authored or []), *conditions]
    problems += library_problems(spec_in, source, kyverno=True)
    references, found = _references(spec_in, source)
    problems += found
    if references:
        spec["references"] = references
    raw_meta = obj.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    raw_annotations = meta.get("annotations")
    annotations: dict[str, Any] = raw_annotations if isinstance(raw_annotations, dict) else {}
    severity = {ours: str(annotations[theirs]) for theirs, ours in _SEVERITY.items() if theirs in annotations}
    internal = internal_object(imported_name(kind.kind, source.name), spec, sources=(source,), problems=problems,
                               carried=(obj,), extra_annotations=severity, generation=meta.get("generation"),
                               namespace=source.namespace)
    return Imported(internal, source, None, tuple(problems), tuple(notes),
                    authored_conditions=len(authored) if isinstance(authored, list) else 0)
