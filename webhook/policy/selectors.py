"""``metav1.LabelSelector`` semantics, precompiled (pure; no I/O).

Follows apimachinery's ``LabelSelectorAsSelector``: ``matchLabels`` and every
``matchExpressions`` requirement must hold; an empty selector ``{}`` matches
everything; operators ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``.
``NotIn`` and ``DoesNotExist`` match objects that lack the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


class SelectorError(ValueError):
    """A malformed LabelSelector; ``path`` names the offending field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` entry (or a ``matchLabels`` pair as ``In``)."""

    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` (``metadata.labels``, may be empty) satisfy it."""
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A compiled LabelSelector; ``None`` in a policy field means "match all"."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        """True for ``{}``, which selects everything."""
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with these labels is selected."""
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def matches_object(self, obj: Mapping[str, Any] | None) -> bool:
        """Whether ``obj`` (a raw Kubernetes object, or None) is selected."""
        if obj is None:
            return self.empty
        return self.matches((obj.get("metadata") or {}).get("labels"))


def parse_label_selector(raw: Any, path: str) -> LabelSelector:
    """Compile a LabelSelector dict.

    Args:
        raw: ``{"matchLabels": {...}, "matchExpressions": [{"key", "operator", "values"}]}``
            or None / ``{}``.
        path: the field's spec path, used in error messages.

    Returns:
        The compiled selector.

    Raises:
        SelectorError: wrong types, unknown operator, ``values`` missing for
            In/NotIn or present for Exists/DoesNotExist (as apimachinery's
            validation rejects them).
    """
    if raw is None:
        return LabelSelector()
    if not isinstance(raw, dict):
        raise SelectorError(path, "must be an object")
    reqs: list[Requirement] = []
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, dict):
        raise SelectorError(f"{path}.matchLabels", "must be a map of strings")
    for k, v in labels.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise SelectorError(f"{path}.matchLabels", "must be a map of strings")
        reqs.append(Requirement(k, "In", frozenset({v})))
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError(f"{path}.matchExpressions", "must be a list")
    for i, e in enumerate(exprs):
        p = f"{path}.matchExpressions[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("key"), str):
            raise SelectorError(p, "must have a string key")
        op = e.get("operator")
        if op not in OPERATORS:
            raise SelectorError(f"{p}.operator", f"must be one of {sorted(OPERATORS)}, got {op!r}")
        values = e.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{p}.values", "must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"{p}.values", f"must be non-empty for {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{p}.values", f"must be empty for {op}")
        reqs.append(Requirement(e["key"], op, frozenset(values)))
    return LabelSelector(tuple(reqs))
