"""What ``tollgate lint`` warns about an ApplyConfiguration: lists whose merge is unknown or refused (pure).

An ApplyConfiguration's lists merge per the schema of the kind it mutates (:mod:`webhook.policy.merge`).
For the resources a policy's rules select, this reads the shape of each ``applyConfiguration``
expression from its parse tree (map and ``Object{...}`` literals, list literals, ``.map()`` results;
anything else is a value known only at run time, which may be a list) and names:

* each list (or run-time value) set under a kind or field Tollgate has no schema for (a custom
  resource, a wildcard rule, a free-form field): it replaces the object's list, the documented
  fallback, where the API server would follow the CRD's ``x-kubernetes-list-type``;
* each atomic list, map or struct it sets: the API server refuses the patch
  (``may not mutate atomic arrays, maps or structs``), and so does Tollgate when it runs.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.cel import ast as celast
from webhook.policy.cel.env import environment
from webhook.policy.merge import UNKNOWN, MergeSchema, list_strategies, merge_schema
from webhook.policy.model import PolicySpec, ResourceRule
from webhook.policy.vocabulary import PatchType

__all__ = ["mutation_warnings", "patch_shape"]


def patch_shape(expression: str) -> Any:
    """The shape of what an expression returns (see :func:`webhook.policy.merge.list_strategies`).

    Returns:
        Nested dicts for map literals (keys that are string constants), ``[shape, ...]`` for list
        literals and ``.map()`` results, ``...`` for a value known only at run time, ``0`` for a
        scalar; ``...`` when the expression does not compile.
    """
    try:
        compiled = environment().compile(expression)
    except RuntimeError:
        return ...
    if not compiled.checked:
        return ...
    tree = celast.decode(compiled.checked)
    return _shape(tree.root, tree)


def _shape(node: celast.Node, tree: celast.CheckedAst) -> Any:
    kind = tree.type_of(node)
    if node.kind == "call" and node.name == "dyn" and node.target is None and len(node.args) == 1:
        return _shape(node.args[0], tree)  # a typed literal is a map literal in dyn() (cel/typed_literals.py)
    if node.kind == "struct" and not node.name:
        out: dict[str, Any] = {}
        for key, value in node.entries:
            if key is not None and key.kind == "const" and isinstance(key.value, str):
                out[key.value] = _shape(value, tree)
        return out
    if node.kind == "list":
        return [_shape(element, tree) for element in node.args]
    if node.kind == "call" and node.name == "_?_:_" and len(node.args) == 3:
        return _union(_shape(node.args[1], tree), _shape(node.args[2], tree))
    if node.kind == "comprehension" and kind.startswith("list("):
        step = node.args[3] if len(node.args) > 3 else None
        if step is not None and step.kind == "call" and step.name == "_+_" and len(step.args) == 2 \
                and step.args[1].kind == "list":
            return [_shape(element, tree) for element in step.args[1].args] or [...]
        return [...]
    if kind.startswith("list("):
        return [...]
    if kind.startswith(("map(", "dyn")) or kind == "dyn":
        return ...
    return 0


def _union(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _union(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}}
    if isinstance(a, list) and isinstance(b, list):
        return [*a, *b]
    if a is ... or b is ...:
        return ...
    return a if isinstance(a, dict | list) else b


def _resources(rule: ResourceRule, schema: MergeSchema) -> list[tuple[str, Any]]:
    """``(resource as written in messages, its root type)`` for each resource the rule selects."""
    out: list[tuple[str, Any]] = []
    for resource in sorted(rule.resources):
        if resource == "*" or resource.startswith("*/") or "*" in rule.api_groups:
            out.append((f"{resource} (any group)" if "*" in rule.api_groups else resource, UNKNOWN))
            continue
        for group in sorted(rule.api_groups):
            known = [(v, r) for g, v, r in schema.resources() if g == group and r == resource
                     and ("*" in rule.api_versions or v in rule.api_versions)]
            name = f"{resource}.{group}" if group else resource
            if not known:
                out.append((name, UNKNOWN))
            for version, found in known:
                out.append((name, schema.root_for_resource(group, version, found)))
    return out


def mutation_warnings(spec: PolicySpec, schema: MergeSchema | None = None) -> list[tuple[str, str]]:
    """Warnings about the lists each ApplyConfiguration of ``spec`` sets, one per list and strategy.

    Args:
        spec: a parsed policy.
        schema: the merge schema (default: the shipped one).

    Returns:
        ``[(spec path, message)]``, e.g. ``("spec.mutations[0].applyConfiguration.expression",
        "widgets.example.com: no schema for .spec.parts (a custom resource or a kind Tollgate does not
        know): the list replaces the object's whole")``.
    """
    schema = schema or merge_schema()
    targets = [t for rule in spec.resource_rules for t in _resources(rule, schema)]
    warnings: list[tuple[str, str]] = []
    for i, mutation in enumerate(spec.mutations):
        if mutation.patch_type is not PatchType.APPLY_CONFIGURATION:
            continue
        path = f"spec.mutations[{i}].applyConfiguration.expression"
        shape = patch_shape(mutation.expression)
        found: dict[tuple[str, str], list[str]] = {}
        for name, root in targets:
            for finding in list_strategies(shape, root, schema):
                names = found.setdefault((finding.path, finding.strategy), [])
                if name not in names:
                    names.append(name)
        for (where, strategy), names in found.items():
            what = ", ".join(names)
            if strategy == "unknown":
                warnings.append((path, f"{what}: the merge strategy of {where} is unknown (no schema: a custom "
                                       "resource, a wildcard or a kind Tollgate does not know); a list there "
                                       "replaces the object's whole"))
            else:
                warnings.append((path, f"{what}: {where} is atomic: the API server refuses an ApplyConfiguration "
                                       "that sets it (may not mutate atomic arrays, maps or structs), and so "
                                       "does Tollgate"))
    return warnings
