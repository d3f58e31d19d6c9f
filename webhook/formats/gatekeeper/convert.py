"""A Gatekeeper ConstraintTemplate and one of its Constraints → a Tollgate policy (pure; no I/O).

Gatekeeper evaluates a template's ``K8sNativeValidation`` code once per constraint of the kind the
template defines (``spec.crd.spec.names.kind``; the template's name is that kind in lower case), so each
constraint gives one ``ClusterAdmissionPolicy``, named ``<Kind>/<constraint>``. The semantics are
Gatekeeper's CEL driver's (open-policy-agent/gatekeeper ``pkg/drivers/k8scel/driver.go``,
``schema/schema.go``, ``transform/cel_snippets.go``) and its matcher's (``pkg/mutation/match/match.go``,
``pkg/wildcard/wildcard.go``):

==============================================  =============================================================
Gatekeeper                                      Tollgate spec
==============================================  =============================================================
the driver's variables                          two leading ``variables``: ``anyObject`` (``object``, or
                                                ``oldObject`` on DELETE) and ``params`` (the constraint's
                                                ``spec.parameters`` as a CEL literal; ``null`` without them)
source ``variables``, ``validations``           the same, after them (``expression``, ``message``,
(``expression``, ``message``,                   ``messageExpression``)
``messageExpression``)
source ``matchCondition`` (the driver's JSON     ``matchConditions``
name: singular)
source ``failurePolicy`` (default ``Fail``)      ``failurePolicy``
constraint ``match.kinds``                      ``match.resourceRules`` (each kind's resource; ``*`` for a
                                                wildcard), CREATE and UPDATE (Gatekeeper's webhook's
                                                operations), and the generated matchCondition
constraint ``match.namespaces``,                the generated matchCondition :data:`MATCH_CONDITION`: the
``excludedNamespaces``, ``scope``, ``name``,    matcher's rules in CEL over ``request`` (a Namespace is
``kinds``                                       matched by its own name; a cluster-scoped object by neither
                                                list; globs ``pre*``, ``*suf``, ``*mid*``)
constraint ``match.labelSelector``              ``match.objectSelector``
constraint ``match.namespaceSelector``          ``match.namespaceSelector`` (and Gatekeeper's exemption:
                                                Namespaces labelled ``admission.gatekeeper.sh/ignore``)
``enforcementAction`` ``deny`` / ``warn`` /     ``validationActions`` ``[Deny]`` / ``[Warn]`` / ``[Audit]``
``dryrun`` (default ``deny``)                   and ``background: true`` (Gatekeeper audits every constraint)
``enforcementAction: scoped``                   the actions of the ``validation.gatekeeper.sh`` (or ``*``)
``scopedEnforcementActions``                    enforcement point (none: ``[Audit]``); ``background`` when
                                                ``audit.gatekeeper.sh`` (or ``*``) is listed
==============================================  =============================================================

Refused, each a :class:`~webhook.formats.imported.Problem` (the policy is not Ready and answers per its
failurePolicy): a template without ``K8sNativeValidation`` code (Rego only: Tollgate does not run Rego),
a constraint whose template is missing, a variable named ``params`` or ``anyObject`` or a name with the
driver's reserved prefix ``gatekeeper_internal_``, a ``failurePolicy`` other than Fail/Ignore, an
unknown ``enforcementAction``, ``match.source: Generated`` (expansion only), malformed fields.
Notes: ``generateVAP`` (Tollgate serves the policy itself), Rego code beside the CEL (unused, as
gator prefers the CEL driver).
"""

from __future__ import annotations

import json
import math
from typing import Any

from webhook.formats.common import check_version, internal_object, name_of, spec_of
from webhook.formats.imported import Imported, Problem, SourceRef
from webhook.formats.kinds import GATEKEEPER_TEMPLATE, ImportKind
from webhook.formats.kubernetes.convert import library_problems
from webhook.policy.provenance import imported_name
from webhook.policy.resources import resource_for_kind
from webhook.policy.selectors import SelectorError, parse_label_selector

__all__ = ["ADMISSION_TARGET", "IGNORE_LABEL", "MATCH_CONDITION", "cel_literal", "constraint_kind",
           "convert_constraint", "template_problems", "template_source"]

#: The one target Gatekeeper's admission templates name.
ADMISSION_TARGET = "admission.k8s.gatekeeper.sh"
#: The engine name of Gatekeeper's CEL driver (``schema.Name``).
CEL_ENGINE = "K8sNativeValidation"
#: The name of the matchCondition carrying the constraint's ``match`` (Gatekeeper's matcher in CEL).
MATCH_CONDITION = "tollgate.dev/gatekeeper-match"
#: Namespaces with this label are exempt from Gatekeeper's admission webhook (its chart's namespaceSelector).
IGNORE_LABEL = "admission.gatekeeper.sh/ignore"
#: The driver's reserved names (``schema.ReservedPrefix``, ``ParamsName``, ``ObjectName``).
_RESERVED_PREFIX = "gatekeeper_internal_"
_DRIVER_VARIABLES = ("params", "anyObject")
#: ``transform.BindObjectV1Beta1``.
ANY_OBJECT = 'has(request.operation) && request.operation == "DELETE" && object == null ? oldObject : object'
#: Gatekeeper's webhook's operations (its chart's default; DELETE only with ``enableDeleteOperations``).
_OPERATIONS = ["CREATE", "UPDATE"]
_ACTIONS = {"deny": "Deny", "warn": "Warn", "dryrun": "Audit"}
_WEBHOOK_POINT = "validation.gatekeeper.sh"
_AUDIT_POINT = "audit.gatekeeper.sh"
_ALL_POINTS = "*"
_MATCH_FIELDS = frozenset({"kinds", "namespaces", "excludedNamespaces", "labelSelector", "namespaceSelector",
                           "scope", "name", "source"})
_SOURCE_FIELDS = frozenset({"validations", "variables", "matchCondition", "failurePolicy", "generateVAP"})


def _get(d: Any, *path: str | int) -> Any:
    for part in path:
        if isinstance(part, int):
            if not isinstance(d, list) or part >= len(d):
                return None
        elif not isinstance(d, dict):
            return None
        d = d[part] if isinstance(part, int) else d.get(part)
    return d


def constraint_kind(template: dict[str, Any]) -> str:
    """The kind of the template's constraints (``spec.crd.spec.names.kind``; '' when absent)."""
    kind = _get(template, "spec", "crd", "spec", "names", "kind")
    return kind if isinstance(kind, str) else ""


def template_source(template: dict[str, Any]) -> tuple[str, dict[str, Any] | None, list[Problem]]:
    """The template's ``K8sNativeValidation`` source: ``(its path, the source, problems)``.

    Gatekeeper's templates name one target, ``admission.k8s.gatekeeper.sh``, whose ``code`` lists one
    entry per engine; when both CEL and Rego are given, gator and the webhook run the CEL (the k8scel
    driver comes first in the client's drivers).

    Returns:
        The path (``spec.targets[0].code[0].source``), the source (None when there is none: a Rego-only
        template, which is a problem) and the problems found.
    """
    source = SourceRef(GATEKEEPER_TEMPLATE.kind, name_of(template))
    targets = _get(template, "spec", "targets")
    if not isinstance(targets, list) or not targets:
        return "spec.targets", None, [Problem(source, "spec.targets", "required (one target, "
                                                                     f"{ADMISSION_TARGET})")]
    if len(targets) != 1:
        return "spec.targets", None, [Problem(source, "spec.targets", "Gatekeeper supports exactly one target")]
    target = targets[0]
    if not isinstance(target, dict) or target.get("target") != ADMISSION_TARGET:
        return "spec.targets[0].target", None, [Problem(source, "spec.targets[0].target",
                                                        f"must be {ADMISSION_TARGET}")]
    code = target.get("code")
    for i, entry in enumerate(code if isinstance(code, list) else []):
        if isinstance(entry, dict) and entry.get("engine") == CEL_ENGINE:
            path = f"spec.targets[0].code[{i}].source"
            body = entry.get("source")
            if not isinstance(body, dict):
                return path, None, [Problem(source, path, "must be an object")]
            return path, body, []
    return "spec.targets[0]", None, [Problem(
        source, "spec.targets[0]", f"a Rego-only template: Tollgate runs only {CEL_ENGINE} (CEL) code "
        f"(spec.targets[0].code[].engine: {CEL_ENGINE}); rewrite the Rego in CEL or keep it on Gatekeeper")]


def template_problems(template: dict[str, Any]) -> list[Problem]:
    """What keeps a template from being honoured, whatever its constraints (see the module docstring)."""
    source = SourceRef(GATEKEEPER_TEMPLATE.kind, name_of(template))
    problems = check_version(GATEKEEPER_TEMPLATE, template, source)
    kind = constraint_kind(template)
    if not kind:
        problems.append(Problem(source, "spec.crd.spec.names.kind", "required"))
    elif name_of(template) != kind.lower():
        problems.append(Problem(source, "metadata.name", f"must be the lower-case constraint kind "
                                                         f"{kind.lower()!r}, as Gatekeeper requires"))
    path, body, found = template_source(template)
    problems += found
    if body is None:
        return problems
    for field in body:
        if field not in _SOURCE_FIELDS:
            problems.append(Problem(source, f"{path}.{field}", "unknown field: Gatekeeper's driver ignores it "
                                                               "(matchConditions is spelt matchCondition)"
                                    if field == "matchConditions" else "unknown field: Tollgate cannot honour it"))
    for i, v in enumerate(_list(body, "variables")):
        name = v.get("name") if isinstance(v, dict) else None
        if not isinstance(name, str) or not name:
            problems.append(Problem(source, f"{path}.variables[{i}].name", "required"))
        elif name in _DRIVER_VARIABLES:
            problems.append(Problem(source, f"{path}.variables[{i}].name",
                                    f"{name!r} is a reserved keyword (the driver binds variables.{name})"))
        elif name.startswith(_RESERVED_PREFIX):
            problems.append(Problem(source, f"{path}.variables[{i}].name",
                                    f"cannot have {_RESERVED_PREFIX!r} as a prefix"))
    for i, c in enumerate(_list(body, "matchCondition")):
        name = c.get("name") if isinstance(c, dict) else None
        if isinstance(name, str) and name.startswith(_RESERVED_PREFIX):
            problems.append(Problem(source, f"{path}.matchCondition[{i}].name",
                                    f"cannot have {_RESERVED_PREFIX!r} as a prefix"))
    if body.get("failurePolicy", "Fail") not in ("Fail", "Ignore"):
        problems.append(Problem(source, f"{path}.failurePolicy",
                                f"unrecognized failure policy {body.get('failurePolicy')!r}: must be Fail or Ignore"))
    for field in ("validations", "variables", "matchCondition"):
        if field in body and not isinstance(body[field], list):
            problems.append(Problem(source, f"{path}.{field}", "must be a list"))
    return problems


def _list(body: dict[str, Any], field: str) -> list[Any]:
    value = body.get(field)
    return value if isinstance(value, list) else []


# -- params as a CEL literal -------------------------------------------------------------------------------------

def cel_literal(value: Any) -> str:
    """A JSON value as a CEL literal: maps, lists, strings, ints, doubles, bools, null.

    Strings are double-quoted with CEL's escapes; a float is written with a fraction or exponent so
    that CEL reads a double (``1.0``), an int as an int, as the API server's unstructured JSON decodes
    them (Gatekeeper passes the constraint as unstructured). The elements of a list or map whose
    elements may differ in type are ``dyn(...)``: the checker refuses a mixed aggregate literal, while
    Gatekeeper's parameters are dynamic.

    Raises:
        ValueError: a value JSON cannot hold (NaN, infinity, a non-string map key, another type).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} is not a JSON number")
        text = repr(value)
        return text if any(c in text for c in ".eE") else text + ".0"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_element(v, _mixed(value)) for v in value) + "]"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("a map key is not a string")
        mixed = _mixed(list(value.values()))
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_element(v, mixed)}" for k, v in value.items()) \
            + "}"
    raise ValueError(f"{type(value).__name__} is not a JSON value")


def _mixed(values: list[Any]) -> bool:
    """Whether a literal's elements could differ in CEL type (anything but scalars of one type)."""
    kinds = {type(v) for v in values}
    return len(values) > 1 and (len(kinds) > 1 or not kinds <= {str, int, float, bool})


def _element(value: Any, mixed: bool) -> str:
    """An element of a list or map literal; ``dyn(...)`` in a mixed one, which cel's checker would refuse."""
    return f"dyn({cel_literal(value)})" if mixed else cel_literal(value)


# -- the constraint's match ----------------------------------------------------------------------------------------

def _glob(pattern: str, subject: str) -> str:
    """``wildcard.Matches`` in CEL: ``*x*`` contains, ``*x`` suffix, ``x*`` prefix, else equality."""
    if len(pattern) > 1 and pattern.startswith("*") and pattern.endswith("*"):
        return f"{subject}.contains({json.dumps(pattern[1:-1])})"
    if pattern.startswith("*"):
        return f"{subject}.endsWith({json.dumps(pattern[1:])})"
    if pattern.endswith("*"):
        return f"{subject}.startsWith({json.dumps(pattern[:-1])})"
    return f"{subject} == {json.dumps(pattern)}"


def _generate_name_glob(pattern: str, subject: str) -> str:
    """``wildcard.MatchesGenerateName``: only ``*x*`` and ``x*`` can match a generateName."""
    if len(pattern) > 1 and pattern.startswith("*") and pattern.endswith("*"):
        return f"{subject}.contains({json.dumps(pattern[1:-1])})"
    if pattern.endswith("*"):
        return f"{subject}.startsWith({json.dumps(pattern[:-1])})"
    return "false"


_IS_NAMESPACE = "(request.kind.kind == 'Namespace' && request.kind.group == '')"
_REQUEST_NAMESPACE = "(has(request.namespace) ? request.namespace : '')"
#: The namespace the matcher reads: a Namespace's own name, else the request's ('' when cluster-scoped).
_NAME = "(has(request.name) ? request.name : '')"
_NAMESPACE = f"({_IS_NAMESPACE} ? {_NAME} : {_REQUEST_NAMESPACE})"
_OBJ = "(object != null ? object : oldObject)"


def _strings(raw: Any, path: str, source: SourceRef, problems: list[Problem]) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        problems.append(Problem(source, path, "must be a list of strings"))
        return []
    return list(raw)


def _kinds_parts(kinds: Any, source: SourceRef, problems: list[Problem]) -> tuple[list[dict[str, Any]], str | None]:
    """``match.kinds`` → resourceRules and its CEL (None: every kind)."""
    every = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": _OPERATIONS,
              "scope": "*"}]
    if kinds is None or kinds == []:
        return every, None
    if not isinstance(kinds, list):
        problems.append(Problem(source, "spec.match.kinds", "must be a list"))
        return every, None
    rules: list[dict[str, Any]] = []
    terms: list[str] = []
    for i, entry in enumerate(kinds):
        if not isinstance(entry, dict):
            problems.append(Problem(source, f"spec.match.kinds[{i}]", "must be an object"))
            continue
        names = _strings(entry.get("kinds"), f"spec.match.kinds[{i}].kinds", source, problems)
        groups = _strings(entry.get("apiGroups"), f"spec.match.kinds[{i}].apiGroups", source, problems)
        any_kind = not names or "*" in names
        any_group = not groups or "*" in groups
        resources = ["*"] if any_kind else sorted({resource_for_kind(k).plural for k in names})
        rules.append({"apiGroups": ["*"] if any_group else groups, "apiVersions": ["*"], "resources": resources,
                      "operations": _OPERATIONS, "scope": "*"})
        parts = []
        if not any_kind:
            parts.append(f"request.kind.kind in {json.dumps(names)}")
        if not any_group:
            parts.append(f"request.kind.group in {json.dumps(groups)}")
        terms.append(" && ".join(parts) if parts else "true")
    if not rules or "true" in terms:
        return rules or every, None
    return rules, " || ".join(f"({t})" for t in terms)


def _match(match: Any, source: SourceRef, problems: list[Problem], notes: list[Problem]) -> dict[str, Any]:
    """The Tollgate ``match`` and the generated matchCondition (key ``condition``) of a constraint's ``match``."""
    if match is None:
        match = {}
    if not isinstance(match, dict):
        problems.append(Problem(source, "spec.match", "must be an object"))
        match = {}
    for field in match:
        if field not in _MATCH_FIELDS:
            problems.append(Problem(source, f"spec.match.{field}", "unknown field: Tollgate cannot honour it"))
    rules, kinds = _kinds_parts(match.get("kinds"), source, problems)
    out: dict[str, Any] = {"resourceRules": rules}
    terms = [kinds] if kinds else []
    scope = match.get("scope", "*")
    if scope == "Cluster":
        terms.append(f"({_IS_NAMESPACE} || {_REQUEST_NAMESPACE} == '')")
    elif scope == "Namespaced":
        terms.append(f"(!{_IS_NAMESPACE} && {_REQUEST_NAMESPACE} != '')")
    elif scope not in ("*", None):
        problems.append(Problem(source, "spec.match.scope", f"must be *, Cluster or Namespaced, got {scope!r}"))
    namespaces = _strings(match.get("namespaces"), "spec.match.namespaces", source, problems)
    if namespaces:
        terms.append(f"({_NAMESPACE} == '' || " + " || ".join(_glob(n, _NAMESPACE) for n in namespaces) + ")")
    excluded = _strings(match.get("excludedNamespaces"), "spec.match.excludedNamespaces", source, problems)
    if excluded:
        terms.append("!(" + " || ".join(f"({_NAMESPACE} != '' && {_glob(n, _NAMESPACE)})" for n in excluded) + ")")
    name = match.get("name")
    if isinstance(name, str) and name:
        generate = f"(has({_OBJ}.metadata.generateName) ? {_OBJ}.metadata.generateName : '')"
        terms.append(f"({_glob(name, _NAME)} || {_generate_name_glob(name, generate)})")
    elif name is not None and name != "":
        problems.append(Problem(source, "spec.match.name", "must be a string"))
    source_field = match.get("source")
    if source_field == "Generated":
        notes.append(Problem(source, "spec.match.source", "Generated: it selects only resources Gatekeeper's "
                                                          "expansion generates, never an admission request"))
        terms.append("false")
    elif source_field not in (None, "", "All", "Original"):
        problems.append(Problem(source, "spec.match.source", f"must be All, Original or Generated, got "
                                                             f"{source_field!r}"))
    for field, ours in (("labelSelector", "objectSelector"), ("namespaceSelector", "namespaceSelector")):
        selector = match.get(field)
        if selector is None:
            continue
        try:
            parse_label_selector(selector, f"spec.match.{field}")
        except SelectorError as e:
            problems.append(Problem(source, e.path, str(e).split(": ", 1)[-1]))
            continue
        if isinstance(selector, dict) and selector:
            out[ours] = selector
    ignore = {"key": IGNORE_LABEL, "operator": "DoesNotExist"}
    own = out.get("namespaceSelector")
    out["namespaceSelector"] = {"matchExpressions": [*_requirements(own), ignore]}
    if terms:
        out["condition"] = {"name": MATCH_CONDITION, "expression": " && ".join(terms) if len(terms) > 1
                            else terms[0]}
    return out


def _requirements(selector: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not selector:
        return []
    labels = selector.get("matchLabels") or {}
    return ([{"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())]
            + [dict(e) for e in selector.get("matchExpressions") or []])


# -- enforcementAction -----------------------------------------------------------------------------------------

def _actions(spec: dict[str, Any], source: SourceRef, problems: list[Problem]) -> tuple[list[str], bool]:
    """``(validationActions, background)`` of a constraint's ``enforcementAction``.

    Follows Gatekeeper's ``pkg/util/enforcement_action.go`` (actions, enforcement points).
    """
    action = spec.get("enforcementAction", "deny")
    if action in (None, ""):
        action = "deny"
    if isinstance(action, str) and action.lower() in _ACTIONS:
        return [_ACTIONS[action.lower()]], True
    if action != "scoped":
        problems.append(Problem(source, "spec.enforcementAction", f"unrecognized enforcementAction {action!r}: "
                                                                  "must be deny, dryrun, warn or scoped"))
        return ["Deny"], True
    scoped = spec.get("scopedEnforcementActions")
    if not isinstance(scoped, list) or not scoped:
        problems.append(Problem(source, "spec.scopedEnforcementActions",
                                "required with enforcementAction: scoped (a list of {action, enforcementPoints})"))
        return ["Deny"], True
    webhook: set[str] = set()
    audit = False
    for i, entry in enumerate(scoped):
        path = f"spec.scopedEnforcementActions[{i}]"
        scoped_action = entry.get("action") if isinstance(entry, dict) else None
        points = entry.get("enforcementPoints") if isinstance(entry, dict) else None
        if not isinstance(scoped_action, str) or scoped_action.lower() not in _ACTIONS:
            problems.append(Problem(source, f"{path}.action", f"must be deny, dryrun or warn, got {scoped_action!r}"))
            continue
        if not isinstance(points, list):
            problems.append(Problem(source, f"{path}.enforcementPoints", "must be a list of {name}"))
            continue
        names = {p.get("name") for p in points if isinstance(p, dict)}
        if names & {_WEBHOOK_POINT, _ALL_POINTS}:
            webhook.add(_ACTIONS[scoped_action.lower()])
        if names & {_AUDIT_POINT, _ALL_POINTS}:
            audit = True
    if "Deny" in webhook:
        return ["Deny"], audit  # deny wins over warn at the webhook; Tollgate cannot say both
    if "Warn" in webhook:
        return ["Warn"], audit
    return ["Audit"], audit


# -- the conversion ------------------------------------------------------------------------------------------------

def convert_constraint(kind: ImportKind, constraint: dict[str, Any], template: dict[str, Any] | None) -> Imported:
    """A constraint with its template as a Tollgate policy (see the module docstring's table).

    Args:
        kind: the constraint's kind (:func:`webhook.formats.kinds.constraint_import_kind`).
        constraint: the constraint object.
        template: the ConstraintTemplate whose name is the constraint kind in lower case, or None when absent.

    Returns:
        The :class:`Imported` policy: with problems, its object carries them and is not Ready.
    """
    ref = SourceRef(kind.kind, name_of(constraint))
    template_ref = SourceRef(GATEKEEPER_TEMPLATE.kind, kind.kind.lower())
    spec_in = spec_of(constraint)
    problems = check_version(kind, constraint, ref)
    notes: list[Problem] = []
    for field in spec_in:
        if field not in ("match", "parameters", "enforcementAction", "scopedEnforcementActions"):
            problems.append(Problem(ref, f"spec.{field}", "unknown field: Tollgate cannot honour it"))
    actions, background = _actions(spec_in, ref, problems)
    match = _match(spec_in.get("match"), ref, problems, notes)
    condition = match.pop("condition", None)
    spec: dict[str, Any] = {"validationActions": actions, "background": background, "match": match}
    try:
        params = cel_literal(spec_in.get("parameters"))
    except ValueError as e:
        problems.append(Problem(ref, "spec.parameters", str(e)))
        params = "null"
    variables: list[Any] = [{"name": "anyObject", "expression": ANY_OBJECT}, {"name": "params", "expression": params}]
    conditions: list[Any] = [condition] if condition else []
    authored = 0
    rebased: tuple[tuple[str, tuple[str | int, ...], int], ...] = ()
    if template is None:
        problems.append(Problem(ref, "kind", f"no ConstraintTemplate {kind.kind.lower()} defines kind {kind.kind}"))
        spec["validations"] = []
    else:
        template_ref = SourceRef(GATEKEEPER_TEMPLATE.kind, name_of(template))
        problems += template_problems(template)
        source_path, body, _ = template_source(template)
        if body is not None:
            at = _parts(source_path)
            rebased = (("validations", (*at, "validations"), 0), ("variables", (*at, "variables"), 2),
                       ("matchConditions", (*at, "matchCondition"), 0))
            variables += _list(body, "variables")
            own = _list(body, "matchCondition")
            authored = len(own)
            conditions = [*own, *conditions]
            spec["validations"] = [{k: v for k, v in entry.items() if k in ("expression", "message",
                                                                            "messageExpression")}
                                   if isinstance(entry, dict) else entry for entry in _list(body, "validations")]
            spec["failurePolicy"] = body.get("failurePolicy", "Fail")
            if body.get("generateVAP") is True:
                notes.append(Problem(template_ref, "spec.targets[0]", "generateVAP: Tollgate serves the policy "
                                                                      "itself and generates no "
                                                                      "ValidatingAdmissionPolicy"))
            problems += library_problems({"variables": _list(body, "variables"),
                                          "validations": _list(body, "validations"),
                                          "matchConditions": own}, template_ref, kyverno=False)
        else:
            spec["validations"] = []
    spec["variables"] = variables
    if conditions:
        spec["matchConditions"] = conditions
    if not spec["validations"]:
        spec["validations"] = [{"expression": "true"}] if not problems else [{"expression": "false"}]
    missing = template is None
    obj = internal_object(imported_name(kind.kind, ref.name), spec,
                          sources=(ref,) if missing else (template_ref, ref), problems=problems,
                          carried=(template, constraint), generation=_get(constraint, "metadata", "generation"))
    return Imported(obj, template_ref, ref, tuple(problems), tuple(notes), authored_conditions=authored,
                    missing_policy=missing, rebased=rebased)


def _parts(path: str) -> tuple[str | int, ...]:
    """``spec.targets[0].code[1].source`` → ``("spec", "targets", 0, "code", 1, "source")``."""
    out: list[str | int] = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        out.append(name)
        for index in rest.rstrip("]").split("][") if rest else ():
            out.append(int(index))
    return tuple(out)
