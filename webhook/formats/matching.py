"""``matchConstraints`` and a binding's ``matchResources`` as one Tollgate ``match`` (pure; no I/O).

The API server evaluates a policy for a request when the policy's ``matchConstraints`` select it
*and* its binding's ``matchResources`` do (``generic/policy_matcher.go``: ``DefinitionMatches``,
then ``BindingMatches``; a binding without ``matchResources``, or without ``resourceRules``, does
not narrow the resources). Both are ``admissionregistration.k8s.io`` MatchResources; their
intersection is written exactly in Tollgate's terms:

* ``resourceRules``: one rule per pair of a policy rule and a binding rule, each field the
  intersection of the two (``*`` is everything; in ``resources``, ``*`` is every resource and no
  subresource, ``pods/*`` every subresource of pods, ``*/scale`` every scale subresource, ``*/*``
  everything). An empty intersection drops the pair.
* ``excludeResourceRules``: both lists; ``namespaceSelector``/``objectSelector``: every
  requirement of both (``matchLabels`` as ``In`` requirements).
* What Tollgate's rules do not have becomes one generated ``matchCondition`` (CEL over
  ``request``, evaluated after the rules as the API server's matcher decides before any
  expression): ``resourceNames`` (a rule with names matches a request only for those names;
  an excluding rule with names excludes only those) and ``matchPolicy: Exact`` (the policy sees
  only requests for the resource its rules name, not one the API server converted from another
  version — Tollgate's webhook configurations are ``Equivalent``, so without ``Exact`` nothing is
  added).

Fields are checked as the API server validates them (``validation.go``'s ``validateRule``: every
list required, ``*`` alone when present, known operations and scopes), with the field's path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.formats.imported import ConversionError
from webhook.policy.selectors import SelectorError, parse_label_selector

__all__ = ["EVERYTHING", "GENERATED_CONDITION", "Intersection", "MatchResources", "NamedRule", "intersect",
           "parse_match", "parse_rule", "rule_condition"]

#: The name of the matchCondition written for what Tollgate's rules cannot say (resourceNames, Exact).
GENERATED_CONDITION = "tollgate.dev/imported-match"

_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT", "*"})
_SCOPES = frozenset({"Cluster", "Namespaced", "*"})
_MATCH_POLICIES = frozenset({"Exact", "Equivalent"})
#: A request for a namespaced object (a Namespace itself is cluster-scoped, though its requests name it as namespace).
_NAMESPACED = ("(has(request.namespace) && request.namespace != '' && "
               "!(request.resource.group == '' && request.resource.resource == 'namespaces'))")


@dataclass(frozen=True, slots=True)
class NamedRule:
    """A NamedRuleWithOperations, checked; every list as written (``*`` alone when present)."""

    api_groups: tuple[str, ...]
    api_versions: tuple[str, ...]
    resources: tuple[str, ...]
    operations: tuple[str, ...]
    scope: str = "*"
    resource_names: tuple[str, ...] = ()

    def as_tollgate(self) -> dict[str, Any]:
        """The rule in a Tollgate ``match`` (without ``resourceNames``, which conditions carry)."""
        return {"apiGroups": list(self.api_groups), "apiVersions": list(self.api_versions),
                "resources": list(self.resources), "operations": list(self.operations), "scope": self.scope}


@dataclass(frozen=True, slots=True)
class MatchResources:
    """A checked MatchResources: rules, excludes, both selectors (raw, checked) and ``matchPolicy``."""

    rules: tuple[NamedRule, ...]
    excludes: tuple[NamedRule, ...] = ()
    namespace_selector: dict[str, Any] | None = None
    object_selector: dict[str, Any] | None = None
    match_policy: str = "Equivalent"


def _strings(raw: dict[str, Any], field: str, path: str, allowed: frozenset[str] | None = None, *,
             empty_ok: bool = False) -> tuple[str, ...]:
    """A required list of strings (``empty_ok``: ``""`` is a value, the core API group)."""
    value = raw.get(field)
    if not value:
        raise ConversionError(f"{path}.{field}", "required")
    if not isinstance(value, list) or not all(isinstance(v, str) and (v or empty_ok) for v in value):
        raise ConversionError(f"{path}.{field}", "must be a list of strings" if empty_ok else
                              "must be a list of non-empty strings")
    if "*" in value and len(value) > 1:
        raise ConversionError(f"{path}.{field}", "if '*' is present, it must be the only entry")
    if allowed is not None:
        bad = sorted(set(value) - allowed)
        if bad:
            raise ConversionError(f"{path}.{field}", f"unsupported value(s) {bad}: must be among {sorted(allowed)}")
    return tuple(value)


def parse_rule(raw: Any, path: str) -> NamedRule:
    """One ``NamedRuleWithOperations``, checked as the API server does.

    Raises:
        ConversionError: a missing or malformed field, with its path.
    """
    if not isinstance(raw, dict):
        raise ConversionError(path, "must be an object")
    resources = _strings(raw, "resources", path)
    for i, r in enumerate(resources):
        if r.count("/") > 1 or r.startswith("/") or r.endswith("/"):
            raise ConversionError(f"{path}.resources[{i}]", f"{r!r} is not a resource or resource/subresource")
    scope = raw.get("scope", "*")
    if scope not in _SCOPES:
        raise ConversionError(f"{path}.scope", f"must be one of {sorted(_SCOPES)}, got {scope!r}")
    names = raw.get("resourceNames") or []
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConversionError(f"{path}.resourceNames", "must be a list of non-empty strings")
    return NamedRule(api_groups=_strings(raw, "apiGroups", path, empty_ok=True),
                     api_versions=_strings(raw, "apiVersions", path), resources=resources,
                     operations=_strings(raw, "operations", path, _OPERATIONS),
                     scope=scope, resource_names=tuple(names))


def _selector(raw: dict[str, Any], field: str, path: str) -> dict[str, Any] | None:
    value = raw.get(field)
    try:
        parse_label_selector(value, f"{path}.{field}")
    except SelectorError as e:
        raise ConversionError(e.path, str(e).split(": ", 1)[1]) from None
    return value if isinstance(value, dict) and value else None


def parse_match(raw: Any, path: str, *, rules_required: bool) -> MatchResources:
    """A MatchResources (a policy's ``matchConstraints`` or a binding's ``matchResources``), checked.

    Args:
        raw: the field's value (None: absent).
        path: its path (``spec.matchConstraints``).
        rules_required: a policy's ``matchConstraints`` needs ``resourceRules``; a binding's
            ``matchResources`` without them does not narrow the resources (every resource).

    Raises:
        ConversionError: a missing or malformed field, with its path.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConversionError(path, "must be an object")
    raw_rules = raw.get("resourceRules") or []
    if not isinstance(raw_rules, list):
        raise ConversionError(f"{path}.resourceRules", "must be a list")
    if rules_required and not raw_rules:
        raise ConversionError(f"{path}.resourceRules", "required")
    raw_excludes = raw.get("excludeResourceRules") or []
    if not isinstance(raw_excludes, list):
        raise ConversionError(f"{path}.excludeResourceRules", "must be a list")
    match_policy = raw.get("matchPolicy", "Equivalent")
    if match_policy not in _MATCH_POLICIES:
        raise ConversionError(f"{path}.matchPolicy", f"must be one of {sorted(_MATCH_POLICIES)}, got {match_policy!r}")
    rules = tuple(parse_rule(r, f"{path}.resourceRules[{i}]") for i, r in enumerate(raw_rules))
    if not rules:
        rules = (NamedRule(("*",), ("*",), ("*/*",), ("*",)),)  # a binding without resourceRules: every resource
    return MatchResources(
        rules=rules,
        excludes=tuple(parse_rule(r, f"{path}.excludeResourceRules[{i}]") for i, r in enumerate(raw_excludes)),
        namespace_selector=_selector(raw, "namespaceSelector", path),
        object_selector=_selector(raw, "objectSelector", path),
        match_policy=str(match_policy))


#: What selects every request: a binding's ``matchResources`` without rules or selectors; the match an import
#: whose match rules cannot be read falls back to (answered per its failurePolicy, never selecting nothing).
EVERYTHING = MatchResources(rules=(NamedRule(("*",), ("*",), ("*/*",), ("*",)),))


# -- intersection ---------------------------------------------------------------------------------------------

def _meet(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...]:
    """Two lists where ``*`` means everything: the values both select (``()``: none)."""
    if "*" in a:
        return tuple(b)
    if "*" in b:
        return tuple(a)
    return tuple(v for v in a if v in b)


#: Subresource parts of a ``resources`` entry: none (the resource itself), any subresource, or both.
_NONE, _ANY, _ALL = "", "*", "**"


def _parts(entry: str) -> tuple[str, str]:
    name, slash, sub = entry.partition("/")
    if not slash:
        return name, _NONE
    if name == "*" and sub == "*":
        return "*", _ALL
    return name, sub  # sub "*" is _ANY: every subresource of ``name``


def _meet_sub(a: str, b: str) -> str | None:
    if a == _ALL:
        return b
    if b == _ALL:
        return a
    if a == b:
        return a
    if a == _ANY and b != _NONE:
        return b
    if b == _ANY and a != _NONE:
        return a
    return None


def _meet_resource(a: str, b: str) -> list[str]:
    """The ``resources`` entries that name what both ``a`` and ``b`` name."""
    (name_a, sub_a), (name_b, sub_b) = _parts(a), _parts(b)
    name = name_b if name_a == "*" else name_a if name_b == "*" else name_a if name_a == name_b else None
    sub = _meet_sub(sub_a, sub_b)
    if name is None or sub is None:
        return []
    if sub == _NONE:
        return [name]
    if sub == _ALL:
        return ["*/*"] if name == "*" else [name, f"{name}/*"]
    return [f"{name}/{sub}"]


def _meet_rules(a: NamedRule, b: NamedRule) -> NamedRule | None:
    """The nameless rule selecting what both select (their resourceNames are left to conditions), or None."""
    scope = b.scope if a.scope == "*" else a.scope if b.scope == "*" else a.scope if a.scope == b.scope else None
    resources: list[str] = []
    for x in a.resources:
        for y in b.resources:
            resources += [r for r in _meet_resource(x, y) if r not in resources]
    groups, versions, operations = (_meet(a.api_groups, b.api_groups), _meet(a.api_versions, b.api_versions),
                                    _meet(a.operations, b.operations))
    if scope is None or not (resources and groups and versions and operations):
        return None
    return NamedRule(groups, versions, tuple(resources), operations, scope)


# -- generated condition ---------------------------------------------------------------------------------------

def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _resource_condition(entry: str) -> str:
    name, sub = _parts(entry)
    parts = [] if name == "*" else [f"request.resource.resource == {json.dumps(name)}"]
    if sub == _NONE:
        parts.append("(!has(request.subResource) || request.subResource == '')")
    elif sub == _ANY:
        parts.append("(has(request.subResource) && request.subResource != '')")
    elif sub != _ALL:
        parts.append(f"(has(request.subResource) && request.subResource == {json.dumps(sub)})")
    return " && ".join(parts) if parts else "true"


def rule_condition(rule: NamedRule) -> str:
    """CEL over ``request`` that is true exactly when ``rule`` (with its resourceNames) selects the request.

    Follows ``rules.go``: operation, group, version, resource and subresource, scope (a Namespace
    object is cluster-scoped), then ``request.name`` among ``resourceNames`` when any are given.
    """
    parts = []
    if "*" not in rule.operations:
        parts.append(f"request.operation in {_cel_list(rule.operations)}")
    if "*" not in rule.api_groups:
        parts.append(f"request.resource.group in {_cel_list(rule.api_groups)}")
    if "*" not in rule.api_versions:
        parts.append(f"request.resource.version in {_cel_list(rule.api_versions)}")
    resources = [_resource_condition(r) for r in rule.resources]
    if "true" not in resources:
        parts.append("(" + " || ".join(f"({r})" for r in resources) + ")" if len(resources) > 1 else resources[0])
    if rule.scope == "Namespaced":
        parts.append(_NAMESPACED)
    elif rule.scope == "Cluster":
        parts.append(f"!{_NAMESPACED}")
    if rule.resource_names:
        parts.append(f"(has(request.name) && request.name in {_cel_list(rule.resource_names)})")
    return "(" + " && ".join(parts) + ")" if parts else "true"


def _names_condition(match: MatchResources) -> list[str]:
    """What ``match``'s resourceNames add: a named rule selects only its names, a named exclude excludes only them."""
    out = []
    if any(r.resource_names for r in match.rules):
        out.append(" || ".join(rule_condition(r) for r in match.rules))
    for r in match.excludes:
        if r.resource_names:
            out.append(f"!{rule_condition(r)}")
    return out


#: Under ``matchPolicy: Exact``, the request is for the resource the rules name (the API server did not convert it).
_EXACT = ("(!has(request.requestResource) || (request.requestResource.group == request.resource.group && "
          "request.requestResource.version == request.resource.version && "
          "request.requestResource.resource == request.resource.resource))")


def _selector_requirements(raw: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not raw:
        return []
    labels = raw.get("matchLabels") or {}
    return ([{"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())]
            + [dict(e) for e in raw.get("matchExpressions") or []])


def _selector_and(*selectors: dict[str, Any] | None) -> dict[str, Any] | None:
    if sum(1 for s in selectors if s) <= 1:
        return next((dict(s) for s in selectors if s), None)
    return {"matchExpressions": [r for s in selectors for r in _selector_requirements(s)]}


@dataclass(frozen=True, slots=True)
class Intersection:
    """A Tollgate ``match`` and the generated matchCondition (None when the rules say everything)."""

    match: dict[str, Any]
    condition: dict[str, str] | None


def intersect(policy: MatchResources, binding: MatchResources | None = None) -> Intersection | None:
    """What both ``policy`` and ``binding`` select, as a Tollgate ``match`` plus a generated matchCondition.

    Returns:
        The intersection, or None when no request can be selected by both (no pair of rules overlaps).
    """
    both = (policy,) if binding is None else (policy, binding)
    rules: list[NamedRule] = []
    for p in policy.rules:
        for b in (binding.rules if binding is not None else (NamedRule(("*",), ("*",), ("*/*",), ("*",)),)):
            meet = _meet_rules(p, b)
            if meet is not None and meet not in rules:
                rules.append(meet)
    if not rules:
        return None
    match: dict[str, Any] = {"resourceRules": [r.as_tollgate() for r in rules]}
    excludes = [r.as_tollgate() for m in both for r in m.excludes if not r.resource_names]
    if excludes:
        match["excludeResourceRules"] = excludes
    for field, value in (("namespaceSelector", _selector_and(*(m.namespace_selector for m in both))),
                         ("objectSelector", _selector_and(*(m.object_selector for m in both)))):
        if value:
            match[field] = value
    parts = [c for m in both for c in _names_condition(m)]
    if any(m.match_policy == "Exact" for m in both):
        parts.append(_EXACT)
    condition = None
    if parts:
        text = " && ".join(f"({p})" for p in parts) if len(parts) > 1 else parts[0]
        condition = {"name": GENERATED_CONDITION, "expression": text}
    return Intersection(match, condition)
