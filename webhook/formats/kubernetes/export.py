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

``autogen.podControllers`` exports as Kyverno's generated ValidatingAdmissionPolicies do: the pod
controllers join the match rules, and ``object`` / ``oldObject`` are read through variables that pick
the Pod of the controller's template by ``request.resource`` (:func:`pod_expression`). A mutation that
returns map literals is rewritten to return MutatingAdmissionPolicy's ``Object{...}`` /
``JSONPatch{...}`` literals (:func:`typed_mutation`). ``onUnsynced`` is dropped, and ``background: true``
not carried over (the PolicyReports come from Tollgate's audit), which :attr:`Export.notes` say.

What blocks an export (one :class:`Blocker` each): a tenant ``AdmissionPolicy``; ``spec.references``
and the resource library (Tollgate-only); ``autogen.podControllers`` on a policy with mutations or
whose own rules may select a controller; ``paramRef.selector`` (Tollgate binds the list of matching
ConfigMaps, Kubernetes evaluates once per ConfigMap); a mutation's map literal with a key that is not a
constant field name; typed literals in an expression a ValidatingAdmissionPolicy compiles; a call to
Kyverno's CEL libraries; a policy that is not Ready.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.cel import ast as celast
from webhook.policy.cel import library, typed_literals
from webhook.policy.cel.env import environment
from webhook.policy.cel.scope import RESOURCE_FUNCTIONS
from webhook.policy.compiler import compile_policy
from webhook.policy.matching import selects_core_pods
from webhook.policy.model import PolicySpec, ResourceRule
from webhook.policy.request import POD_CONTROLLERS
from webhook.policy.vocabulary import Action, OnUnsynced, PatchType, PolicyKind

__all__ = [
    "ADMISSION_GROUP",
    "BINDING_FIELDS",
    "MAP_FIELDS",
    "MUTATING_VERSIONS",
    "PARAM_REF_FIELDS",
    "POD_VARIABLES",
    "POLICY_FIELDS",
    "TEMPLATE_PATH_VARIABLE",
    "Blocker",
    "Export",
    "blockers",
    "export_policy",
    "pod_expression",
    "replace_identifiers",
    "template_path_expression",
    "typed_mutation",
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


# --- autogen.podControllers: the Pod of a controller's template, as variables -----------------------------------

#: The variables an exported ``autogen.podControllers`` policy reads instead of ``object`` / ``oldObject``.
POD_VARIABLES = {"object": "tollgatePod", "oldObject": "tollgateOldPod"}
#: ``metav1.ObjectMeta``'s fields: a pod template's metadata is an ObjectMeta (``k8s.io/api/core/v1``
#: ``PodTemplateSpec``), and the Pod built from it carries each one the template sets.
_OBJECT_META = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
                "ownerReferences", "finalizers", "managedFields")


def _pod_of(workload: str, template: str) -> str:
    """CEL for the Pod Tollgate builds from a template (``webhook.policy.engine.context.synthesize_pod``)."""
    entries = ", ".join(f"?'{f}': {template}.?metadata.?{f}" for f in _OBJECT_META if f != "namespace")
    namespace = f"?'namespace': {template}.?metadata.?namespace.or({workload}.?metadata.?namespace)"
    return (f"{{'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {{{entries}, {namespace}}}, "
            f"'spec': {template}.?spec.orValue({{}})}}")


def pod_expression(root: str) -> str:
    """CEL for what a policy with ``autogen.podControllers`` sees as ``root`` (``object`` or ``oldObject``).

    On a pod controller's request, a Pod made of the controller's template (Tollgate's
    ``synthesize_pod``: the template's metadata, the controller's namespace, the template's spec) at the
    template path of :data:`webhook.policy.request.POD_CONTROLLERS` (``spec.template``, and
    ``spec.jobTemplate.spec.template`` for CronJobs), chosen by ``request.resource``; on any other
    request ``root`` itself; null stays null (``object`` on DELETE, ``oldObject`` on CREATE). Kyverno's
    generated ValidatingAdmissionPolicies pick the pod spec the same way (``kyverno/kyverno``
    ``pkg/cel/autogen``).
    """
    by_path: dict[tuple[str, ...], list[str]] = {}
    for (group, resource), path in POD_CONTROLLERS.items():
        by_path.setdefault(path, []).append(f"'{group}/{resource}'")
    text = root
    for path, names in sorted(by_path.items(), key=lambda item: len(item[0])):
        template = ".".join((root, *path))
        test = (f"request.resource.group + '/' + request.resource.resource == {names[0]}" if len(names) == 1
                else f"request.resource.group + '/' + request.resource.resource in [{', '.join(sorted(names))}]")
        text = f"{test} ? {_pod_of(root, template)} :\n{text}"
    return f"{root} == null ? null :\n{text}"


#: The variable holding Tollgate's message prefix on a controller's request (``spec.template: ``).
TEMPLATE_PATH_VARIABLE = "tollgateTemplatePath"


def template_path_expression() -> str:
    """CEL for the prefix Tollgate gives a message about a template's Pod (``webhook.policy.engine.prepare``).

    ``'spec.template: '``, ``'spec.jobTemplate.spec.template: '`` for CronJobs, ``''`` on any other
    request, chosen by ``request.resource`` as :func:`pod_expression` chooses the Pod.
    """
    by_path: dict[tuple[str, ...], list[str]] = {}
    for (group, resource), path in POD_CONTROLLERS.items():
        by_path.setdefault(path, []).append(f"'{group}/{resource}'")
    text = "''"
    for path, names in sorted(by_path.items(), key=lambda item: len(item[0])):
        test = f"request.resource.group + '/' + request.resource.resource in [{', '.join(sorted(names))}]"
        text = f"{test} ? '{'.'.join(path)}: ' :\n{text}"
    return text


def _string_literal(text: str) -> str:
    """``text`` as a CEL double-quoted string literal (JSON's escapes are CEL's for these characters)."""
    return json.dumps(text, ensure_ascii=False)


def _prefixed_message(validation: dict[str, Any]) -> None:
    """Give a validation's message Tollgate's template-path prefix, through ``messageExpression``.

    As the engine's ``_message``: the messageExpression, else the message, else ``failed expression:
    <expression>``; the ``message`` stays the fallback Kubernetes uses when the messageExpression fails.
    """
    prefix = f"variables.{TEMPLATE_PATH_VARIABLE}"
    expression = validation.get("messageExpression")
    message = str(validation.get("message") or "").strip()
    if isinstance(expression, str) and expression.strip():
        validation["messageExpression"] = f"{prefix} + ({expression})"
    elif message:
        validation["messageExpression"] = f"{prefix} + {_string_literal(message)}"
    elif "\n" not in str(validation.get("expression", "")).strip():
        default = "failed expression: " + str(validation["expression"]).strip()
        validation["messageExpression"] = f"{prefix} + {_string_literal(default)}"


def _parsed(text: str) -> celast.CheckedAst | None:
    try:
        return celast.decode(environment().env.compile(text, disable_check=True).serialize())
    except (RuntimeError, ValueError):
        return None


def _edit(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def replace_identifiers(text: str, replacements: dict[str, str]) -> str | None:
    """``text`` with each identifier of ``replacements`` (``object``) replaced (``variables.tollgatePod``).

    Works on the parsed expression, so string literals, fields (``x.object``) and map keys are left
    alone. Returns None when the text does not parse or a macro's variable has one of the names.
    """
    tree = _parsed(text)
    if tree is None:
        return None
    edits = []
    for node in tree.root.walk():
        if node.kind == "comprehension" and (node.name in replacements or node.iter_var2 in replacements):
            return None
        if node.kind == "ident" and node.name in replacements:
            start = tree.offsets.get(node.id, -1)
            if text[start:start + len(node.name)] != node.name:
                return None
            edits.append((start, start + len(node.name), replacements[node.name]))
    return _edit(text, edits)


def _controller_rules(rules: tuple[ResourceRule, ...]) -> list[dict[str, Any]]:
    """:func:`~webhook.policy.matching.autogen_rules` of ``rules`` as RuleWithOperations on the wire."""
    by_group: dict[str, set[str]] = {}
    for group, resource in POD_CONTROLLERS:
        by_group.setdefault(group, set()).add(resource)
    return [{"apiGroups": [group], "apiVersions": sorted(rule.api_versions), "resources": sorted(resources),
             "operations": sorted(str(o) for o in rule.operations), "scope": str(rule.scope)}
            for rule in rules if selects_core_pods(rule) for group, resources in sorted(by_group.items())]


def _selects_a_controller(spec: PolicySpec) -> str | None:
    """A pod controller the policy's own rules may select (Tollgate then evaluates the controller itself)."""
    for rule in spec.resource_rules:
        for group, resource in POD_CONTROLLERS:
            if not ({group, "*"} & rule.api_groups):
                continue
            if any(r in ("*", "*/*", resource) or r.startswith(f"{resource}/") or r.startswith("*/")
                   for r in rule.resources):
                return f"{group}/{resource}" if group else resource
    return None


# --- map-literal mutations as typed literals ----------------------------------------------------------------

#: Fields whose value is a map, not an object, in every Kubernetes object (``metav1.ObjectMeta``): a map
#: literal there stays a map literal when the rest becomes ``Object.<path>{...}``.
MAP_FIELDS = frozenset({"metadata.labels", "metadata.annotations"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _string_end(text: str, start: int) -> int | None:
    """The end of the one-line single- or double-quoted string literal at ``start`` (None for other forms)."""
    quote = text[start:start + 1]
    if quote not in ("'", '"') or text[start:start + 3] == quote * 3:
        return None
    i = start + 1
    while i < len(text) and text[i] not in (quote, "\n"):
        i += 2 if text[i] == "\\" else 1
    return i + 1 if i < len(text) and text[i] == quote else None


def _typed_edits(text: str, tree: celast.CheckedAst, node: celast.Node, type_name: str,
                 fields: tuple[str, ...] | None) -> list[tuple[int, int, str]] | None:
    """Edits that make the map literal ``node`` the typed literal ``type_name{...}``, or None if it cannot be.

    ``fields``: the only keys allowed (``JSONPatch``'s), or None for ``Object``, whose map-literal
    values (and list elements) become ``Object.<path>{...}`` too, except under :data:`MAP_FIELDS`.
    """
    start = tree.offsets.get(node.id, -1)
    if text[start:start + 1] != "{":
        return None
    edits = [(start, start, type_name)]
    for key, value in node.entries:
        if key is None or key.kind != "const" or not isinstance(key.value, str) or not _IDENTIFIER.match(key.value):
            return None
        if fields is not None and key.value not in fields:
            return None
        key_start = tree.offsets.get(key.id, -1)
        key_end = _string_end(text, key_start)
        if key_end is None:
            return None
        edits.append((key_start, key_end, key.value))
        if fields is not None:
            continue
        path = f"{type_name}.{key.value}"
        if path.removeprefix("Object.") in MAP_FIELDS:
            continue
        values = value.args if value.kind == "list" else [value]
        for v in values:
            if v.kind == "struct" and not v.name:
                inner = _typed_edits(text, tree, v, path, None)
                if inner is None:
                    return None
                edits += inner
    return edits


def typed_mutation(expression: str, patch_type: PatchType) -> str | None:
    """A mutation that returns map literals, rewritten to return MutatingAdmissionPolicy's typed literals.

    ``applyConfiguration``: a returned ``{'spec': {...}}`` becomes ``Object{spec: Object.spec{...}}``
    (maps under :data:`MAP_FIELDS` stay maps, as ``Object.metadata{labels: {...}}``); ``jsonPatch``: each
    ``{'op': ..., 'path': ..., 'value': ...}`` of a returned list becomes ``JSONPatch{op: ..., ...}``
    (``k8s.io/apiserver/pkg/cel/mutation``: the type names spell the field path from the root). Results
    are found through ``?:`` branches and ``cel.bind`` bodies.

    Returns:
        The rewritten expression (unchanged when it returns no map literal), or None when a literal has
        a key that is not a constant identifier (or, for ``JSONPatch``, not one of its fields).
    """
    tree = _parsed(expression)
    if tree is None:
        return None
    edits: list[tuple[int, int, str]] = []
    found: list[tuple[celast.Node, str, tuple[str, ...] | None]]
    for result in _results(tree.root):
        if patch_type is PatchType.APPLY_CONFIGURATION:
            found = [(result, "Object", None)] if result.kind == "struct" and not result.name else []
        else:
            found = [(e, "JSONPatch", typed_literals.JSONPATCH_FIELDS) for e in
                     (result.args if result.kind == "list" else []) if e.kind == "struct" and not e.name]
        for node, type_name, allowed in found:
            more = _typed_edits(expression, tree, node, type_name, allowed)
            if more is None:
                return None
            edits += more
    return _edit(expression, edits)


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
        found += _autogen_blockers(spec)
    if spec.param_ref is not None and spec.param_ref.selector is not None:
        found.append(Blocker("spec.paramRef.selector", "Tollgate binds params to the list of matching ConfigMaps; "
                                                       "a Kubernetes binding evaluates the policy once per "
                                                       "matching ConfigMap"))
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
        typed = typed_mutation(m.expression, m.patch_type)
        found += [Blocker(path, problem) for problem in _untyped_maps(typed or m.expression, m.patch_type)]
    return found


def _autogen_blockers(spec: PolicySpec) -> list[Blocker]:
    """What keeps ``autogen.podControllers`` from exporting as :func:`pod_expression` variables."""
    path = "spec.autogen.podControllers"
    found = []
    if spec.mutations:
        found.append(Blocker(path, "mutations of a Pod made from a template would patch the controller at the "
                                   "Pod's paths; Kubernetes has no such expansion"))
    direct = _selects_a_controller(spec)
    if direct is not None:
        found.append(Blocker(path, f"the policy's own rules may select {direct}, which Tollgate then evaluates "
                                   "as itself, not as its template's Pod; the exported expressions could not "
                                   "tell the two apart"))
    taken = sorted({*POD_VARIABLES.values(), TEMPLATE_PATH_VARIABLE} & {v.name for v in spec.variables})
    if taken:
        found.append(Blocker(path, f"variable {', '.join(taken)} is the name the export gives the template's Pod"))
    for where, text in _expressions(spec):
        if not where.startswith("spec.mutations") and replace_identifiers(text, POD_VARIABLES) is None:
            found.append(Blocker(where, "object/oldObject could not be replaced by the template's Pod (the "
                                        "expression does not parse as written, or a macro variable has that name)"))
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


def _typed_mutations(raw: dict[str, Any]) -> None:
    """Rewrite, in place, the map literals the raw spec's mutations return as typed literals."""
    mutations = [dict(m) for m in raw.get("mutations") or []]
    for m in mutations:
        patch_type = PatchType(str(m.get("patchType")))
        key = _mutation_field(patch_type)
        body = dict(m.get(key) or {})
        typed = typed_mutation(str(body.get("expression", "")), patch_type)
        if typed is not None:
            body["expression"] = typed
        m[key] = body
    if mutations:
        raw["mutations"] = mutations


def _autogen(raw: dict[str, Any], spec: PolicySpec) -> None:
    """Rewrite, in place, the raw spec of an ``autogen.podControllers`` policy as the API server can run it.

    The controllers join the match rules (and the excludes) beside every rule that selects Pods, as
    :func:`webhook.policy.matching.autogen_rules` routes them; ``object`` and ``oldObject`` become the
    variables of :data:`POD_VARIABLES` (:func:`pod_expression`), declared first, and in
    ``matchConditions`` (which Kubernetes evaluates before any variable) the expression itself. Each
    validation's message gets Tollgate's template-path prefix (:func:`template_path_expression`).
    """
    match = raw["match"]
    match["resourceRules"] = match["resourceRules"] + _controller_rules(spec.resource_rules)
    match["excludeResourceRules"] = match["excludeResourceRules"] + _controller_rules(spec.exclude_resource_rules)
    inline = {root: f"({pod_expression(root)})" for root in POD_VARIABLES}
    by_variable = {root: f"variables.{name}" for root, name in POD_VARIABLES.items()}
    used: set[str] = set()

    def rewritten(text: str, replacements: dict[str, str]) -> str:
        new = replace_identifiers(text, replacements)
        assert new is not None  # blockers() found every expression rewritable
        if replacements is by_variable:
            used.update(root for root in POD_VARIABLES if replace_identifiers(text, {root: ""}) != text)
        return new

    def each(field_name: str, keys: tuple[str, ...], replacements: dict[str, str]) -> list[dict[str, Any]]:
        out = []
        for raw_item in raw.get(field_name) or []:
            item = dict(raw_item)
            for key in keys:
                if isinstance(item.get(key), str):
                    item[key] = rewritten(item[key], replacements)
            out.append(item)
        return out

    if raw.get("validations"):
        raw["validations"] = [dict(v) for v in raw["validations"]]
        for validation in raw["validations"]:
            _prefixed_message(validation)
    if raw.get("matchConditions"):
        raw["matchConditions"] = each("matchConditions", ("expression",), inline)
    variables = each("variables", ("expression",), by_variable)
    for field_name, keys in (("validations", ("expression", "messageExpression")),
                             ("auditAnnotations", ("valueExpression",))):
        if raw.get(field_name):
            raw[field_name] = each(field_name, keys, by_variable)
    pod_variables = [{"name": POD_VARIABLES[root], "expression": pod_expression(root)}
                     for root in POD_VARIABLES if root in used]
    if raw.get("validations"):
        pod_variables.append({"name": TEMPLATE_PATH_VARIABLE, "expression": template_path_expression()})
    raw["variables"] = pod_variables + variables


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
    if spec.on_unsynced is not OnUnsynced.DENY and _reads_a_cache(spec):
        out.notes.append(f"spec.onUnsynced: dropped ({spec.on_unsynced} while a cache syncs is Tollgate's; the API "
                         "server answers from its own informers)")
    _typed_mutations(source["spec"])
    if spec.pod_controllers:
        _autogen(source["spec"], spec)
        out.notes.append("spec.autogen.podControllers: exported as rules for the controllers and, in place of "
                         "object/oldObject, variables holding the Pod of a controller's template")
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
