"""Why a policy selects a request or not: each rule tried, the selectors and the labels they saw (pure; no I/O).

The answers are :mod:`webhook.policy.matching`'s (the only matcher): :func:`rules_view` decides whether
and how the rules select the request, :func:`rule_matches` each rule, :func:`selectors_match` the
labels. This module only words them: which rule selected the request, the first field of each other
rule that does not match, and the labels each selector saw.
"""

from __future__ import annotations

from webhook.policy.engine.context import RequestContext
from webhook.policy.explain.trace import MatchTrace, RuleCheck, SelectorCheck
from webhook.policy.matching import View, has_selectors, resource_names, rule_matches, rules_view, selectors_match
from webhook.policy.model import PolicySpec, ResourceRule
from webhook.policy.request import RequestCoordinates
from webhook.policy.selectors import LabelSelector
from webhook.policy.vocabulary import PolicyKind, Scope

__all__ = ["describe_request", "describe_rule", "describe_selector", "match_trace"]

_AS_POD = {"group": "", "version": "v1", "resource": "pods"}


def _names(values: frozenset[str]) -> str:
    return ",".join(f'"{v}"' if v == "" else v for v in sorted(values))


def describe_rule(rule: ResourceRule) -> str:
    """One line: ``operations=CREATE,UPDATE apiGroups="" apiVersions=v1 resources=pods`` (and ``scope=`` if set)."""
    text = (f"operations={_names(frozenset(str(o) for o in rule.operations))} apiGroups={_names(rule.api_groups)} "
            f"apiVersions={_names(rule.api_versions)} resources={_names(rule.resources)}")
    return text if rule.scope is Scope.ALL else f"{text} scope={rule.scope}"


def describe_request(coords: RequestCoordinates) -> str:
    """One line: ``CREATE pods (group "", v1) in namespace default`` or ``... cluster-scoped``."""
    resource = coords.resource + (f"/{coords.sub_resource}" if coords.sub_resource else "")
    where = f"in namespace {coords.namespace}" if coords.namespaced else "cluster-scoped"
    return f'{coords.operation} {resource} (group "{coords.group}", {coords.version}) {where}'


def _mismatch(rule: ResourceRule, coords: RequestCoordinates, *, group: str | None = None,
              version: str | None = None, resource: str | None = None) -> str:
    """The first field of ``rule`` that does not match (the order :func:`rule_matches` checks them in)."""
    if coords.operation not in rule.operations and "*" not in rule.operations:
        return f"operation {coords.operation} is not in {_names(frozenset(str(o) for o in rule.operations))}"
    g = coords.group if group is None else group
    if g not in rule.api_groups and "*" not in rule.api_groups:
        return f'apiGroup "{g}" is not in {_names(rule.api_groups)}'
    v = coords.version if version is None else version
    if v not in rule.api_versions and "*" not in rule.api_versions:
        return f"apiVersion {v} is not in {_names(rule.api_versions)}"
    if rule.scope is Scope.CLUSTER and coords.namespaced:
        return "scope Cluster, but the object is namespaced"
    if rule.scope is Scope.NAMESPACED and not coords.namespaced:
        return "scope Namespaced, but the object is cluster-scoped"
    name = resource_names(coords.resource if resource is None else resource, coords.sub_resource)[0]
    return f"resource {name} is not in {_names(rule.resources)}"


def _check(path: str, rule: ResourceRule, coords: RequestCoordinates, **override: str) -> RuleCheck:
    matched = rule_matches(rule, coords, **override)
    return RuleCheck(path, describe_rule(rule), matched, None if matched else _mismatch(rule, coords, **override))


def _rule_checks(spec: PolicySpec, coords: RequestCoordinates, suffix: str = "",
                 **override: str) -> tuple[list[RuleCheck], list[RuleCheck]]:
    rules = [_check(f"spec.match.resourceRules[{i}]{suffix}", r, coords, **override)
             for i, r in enumerate(spec.resource_rules)]
    excludes = [_check(f"spec.match.excludeResourceRules[{i}]{suffix}", r, coords, **override)
                for i, r in enumerate(spec.exclude_resource_rules)]
    return rules, excludes


def describe_selector(selector: LabelSelector) -> str:
    """The selector in label-query syntax (``team=a,tier in (db,web),!legacy``); ``{}`` matches everything."""
    parts = []
    for r in selector.requirements:
        values = ",".join(sorted(r.values))
        if r.operator == "In":
            parts.append(f"{r.key}={values}" if len(r.values) == 1 else f"{r.key} in ({values})")
        elif r.operator == "NotIn":
            parts.append(f"{r.key} notin ({values})")
        elif r.operator == "Exists":
            parts.append(r.key)
        else:
            parts.append(f"!{r.key}")
    return ",".join(parts) or "{}"


def _labels(obj: object) -> dict[str, str] | None:
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return dict(labels) if isinstance(labels, dict) else {}


def _selector_checks(spec: PolicySpec, ctx: RequestContext) -> list[SelectorCheck]:
    """Each non-empty selector with the labels it saw, as :func:`selectors_match` applies them."""
    coords, request = ctx.coords, ctx.request
    out = []
    sel = spec.namespace_selector
    if not sel.empty:
        path, text = "spec.match.namespaceSelector", describe_selector(sel)
        if coords.namespaced:
            namespace = ctx.namespace_object()
            labels = _labels(namespace)
            of = f"Namespace {coords.namespace}" + ("" if namespace is not None else " (not cached: no labels)")
            out.append(SelectorCheck(path, text, [(of, labels)], sel.matches(labels)))
        elif coords.is_namespace_object:
            obj = request.get("object") or request.get("oldObject")
            out.append(SelectorCheck(path, text, [("the Namespace itself", _labels(obj))], sel.matches_object(obj)))
        else:
            out.append(SelectorCheck(path, text, [], True, "not applied: the object is cluster-scoped"))
    sel = spec.object_selector
    if not sel.empty:
        seen = [(key, _labels(request.get(key))) for key in ("object", "oldObject") if request.get(key) is not None]
        matched = sel.matches_object(request.get("object")) or sel.matches_object(request.get("oldObject"))
        out.append(SelectorCheck("spec.match.objectSelector", describe_selector(sel), seen, matched))
    return out


def match_trace(spec: PolicySpec, ctx: RequestContext) -> MatchTrace:
    """Why ``spec``'s match selects ``ctx``'s request or not.

    Returns:
        ``selected`` and ``view`` as :func:`rules_view` and :func:`selectors_match` decide; every rule
        tried (with ``autogen.podControllers``, the rules again on the Pod of a controller's template
        when they do not select the controller itself), the selectors with the labels they saw, and one
        line saying why.
    """
    coords = ctx.coords
    request = describe_request(coords)
    if spec.kind is PolicyKind.NAMESPACED and not (coords.namespaced and coords.namespace == spec.namespace):
        return MatchTrace(False, f"an AdmissionPolicy of namespace {spec.namespace} selects only requests in its "
                                 f"own namespace; this is {request}")
    view = rules_view(spec, coords)
    rules, excludes = _rule_checks(spec, coords)
    template = ".".join(coords.template or ())
    as_pod: list[RuleCheck] = []
    plain = any(r.matched for r in rules) and not any(e.matched for e in excludes)
    if not plain and spec.pod_controllers and coords.template is not None:
        # As rules_view: the rules again, on the Pod of the controller's template.
        as_pod, more_excludes = _rule_checks(spec, coords, f" (autogen: the Pod of {template})", **_AS_POD)
        excludes += more_excludes
    trace = MatchTrace(False, "", str(view) if view is not None else None, rules + as_pod, excludes)
    if view is None:
        excluded = next((e for e in excludes if e.matched), None)
        if excluded is not None and any(r.matched for r in trace.rules):
            trace.reason = f"{request}: excluded by {excluded.path}"
        else:
            trace.reason = f"no resource rule selects {request}"
        return trace
    selecting = next(r for r in (as_pod if view is View.POD_TEMPLATE else rules) if r.matched)
    if has_selectors(spec):
        trace.selectors = _selector_checks(spec, ctx)
        if not selectors_match(spec, coords, ctx.request, ctx.namespace_object):
            failing = next((s for s in trace.selectors if not s.matched), None)
            trace.reason = (f"{request}: selected by {selecting.path}, but "
                            f"{failing.path if failing else 'a selector'} does not match")
            return trace
    trace.selected = True
    trace.reason = f"{request}: selected by {selecting.path}"
    return trace
