"""What an explanation says, as data: one :class:`PolicyTrace` per policy of an :class:`Explanation` (pure).

The shapes of ``tollgate test --explain -o json|yaml`` and of the server's ``/explain`` answer
(``as_dict``: camelCase keys, as Kubernetes objects spell them; empty sections left out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.policy.explain.shown import Shown, show

__all__ = ["AnnotationTrace", "ConditionTrace", "Evaluated", "Explanation", "MatchTrace", "OperandTrace",
           "PolicyTrace", "RuleCheck", "SelectorCheck", "ValidationTrace", "VariableTrace"]


def _value_dict(value: Shown | None, error: str | None) -> dict[str, Any]:
    if error is not None:
        return {"error": error}
    return value.as_dict() if value is not None else {}


@dataclass(slots=True)
class OperandTrace:
    """One top-level operand of a false or failed expression (:mod:`webhook.policy.explain.operands`).

    Attributes:
        text: the operand as written (for derived operands, the predicate).
        role: ``operand``, ``condition``, ``then``, ``else``, ``range``, ``bound``, ``elements failing the
            predicate`` or ``elements satisfying the predicate``.
        value: its value, or None with ``error`` (or neither: ``note`` says why it was not evaluated).
        error: the evaluation error.
        note: why there is no value (not evaluable on its own, the branch not taken, the cap reached).
    """

    text: str
    role: str
    value: Shown | None = None
    error: str | None = None
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"expression", "role", "value"|"error"|"note", ...}``."""
        out: dict[str, Any] = {"expression": self.text, "role": self.role, **_value_dict(self.value, self.error)}
        if self.note is not None:
            out["note"] = self.note
        return out


@dataclass(slots=True)
class Evaluated:
    """One expression's evaluation: its value or error, and the operands of a false or failed one.

    Attributes:
        path: the spec path (``spec.validations[0].expression``).
        expression: the expression as written.
        value: its value (None when it errored or was not evaluated).
        error: its evaluation error.
        operands: its top-level operands' values, when it was false or failed.
        more_operands: operands beyond the cap, not evaluated.
    """

    path: str
    expression: str
    value: Shown | None = None
    error: str | None = None
    operands: list[OperandTrace] = field(default_factory=list)
    more_operands: int = 0

    def as_dict(self) -> dict[str, Any]:
        """``{"path", "expression", "value"|"error", "operands"?}``."""
        out: dict[str, Any] = {"path": self.path, "expression": self.expression,
                               **_value_dict(self.value, self.error)}
        if self.operands:
            out["operands"] = [o.as_dict() for o in self.operands]
        if self.more_operands:
            out["moreOperands"] = self.more_operands
        return out


@dataclass(slots=True)
class ConditionTrace:
    """A ``matchCondition``: its name and evaluation."""

    name: str
    evaluated: Evaluated

    def as_dict(self) -> dict[str, Any]:
        """``{"name", ...Evaluated}``."""
        return {"name": self.name, **self.evaluated.as_dict()}


@dataclass(slots=True)
class VariableTrace:
    """A ``variables`` entry: its name and value."""

    name: str
    evaluated: Evaluated

    def as_dict(self) -> dict[str, Any]:
        """``{"name", ...Evaluated}``."""
        return {"name": self.name, **self.evaluated.as_dict()}


@dataclass(slots=True)
class ValidationTrace:
    """A validation: its result (``pass``, ``fail``, ``error``) and, when false, the message it gives.

    Attributes:
        result: ``pass`` (true), ``fail`` (false) or ``error``.
        evaluated: the expression's evaluation.
        message: the failure message as the engine words it (messageExpression, message, or
            ``failed expression: ...``); ``""`` unless ``fail``.
        message_problem: why a messageExpression was not used (the fallback's warning), if it was not.
    """

    result: str
    evaluated: Evaluated
    message: str = ""
    message_problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"result", ...Evaluated, "message"?, "messageProblem"?}``."""
        out: dict[str, Any] = {"result": self.result, **self.evaluated.as_dict()}
        if self.message:
            out["message"] = self.message
        if self.message_problem:
            out["messageProblem"] = self.message_problem
        return out


@dataclass(slots=True)
class AnnotationTrace:
    """An ``auditAnnotations`` entry: its key and value (null: no annotation)."""

    key: str
    evaluated: Evaluated

    def as_dict(self) -> dict[str, Any]:
        """``{"key", ...Evaluated}``."""
        return {"key": self.key, **self.evaluated.as_dict()}


@dataclass(slots=True)
class RuleCheck:
    """One resource rule tried against the request.

    Attributes:
        path: its spec path (``spec.match.resourceRules[0]``, ``…excludeResourceRules[0]``; an autogen
            try of a pod rule on a controller's template says ``(as pods of the template)``).
        rule: the rule in one line: ``CREATE,UPDATE /v1 pods`` (``group/version resources``, scope when set).
        matched: whether it selects the request.
        mismatch: the first field that does not match (``operation DELETE not in [CREATE, UPDATE]``), or None.
    """

    path: str
    rule: str
    matched: bool
    mismatch: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"path", "rule", "matched", "mismatch"?}``."""
        out: dict[str, Any] = {"path": self.path, "rule": self.rule, "matched": self.matched}
        if self.mismatch:
            out["mismatch"] = self.mismatch
        return out


@dataclass(slots=True)
class SelectorCheck:
    """A ``namespaceSelector`` or ``objectSelector`` and the labels it saw.

    Attributes:
        path: ``spec.match.namespaceSelector`` or ``spec.match.objectSelector``.
        selector: the selector in label-query syntax (``team in (a,b),!legacy``).
        seen: where the labels came from (``Namespace shop``, ``object``, ``oldObject``), with each set of
            labels seen; a Namespace that is not cached is seen with no labels.
        matched: whether it selects the request.
        note: why it was not applied (``cluster-scoped object``), if it was not.
    """

    path: str
    selector: str
    seen: list[tuple[str, dict[str, str] | None]]
    matched: bool
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"path", "selector", "labels": [{"of", "labels"}], "matched", "note"?}``."""
        out: dict[str, Any] = {"path": self.path, "selector": self.selector,
                               "labels": [{"of": of, "labels": labels} for of, labels in self.seen],
                               "matched": self.matched}
        if self.note:
            out["note"] = self.note
        return out


@dataclass(slots=True)
class MatchTrace:
    """Why the policy selected the request or did not.

    Attributes:
        selected: whether the policy applies (rules and selectors; matchConditions come after).
        reason: one line saying why.
        view: ``object``, or ``podTemplate`` when ``autogen.podControllers`` evaluates the Pod of a
            controller's template; None when not selected by the rules.
        rules: each resource rule tried, in order; the selecting one has ``matched``.
        excludes: each exclude rule tried.
        selectors: the label selectors, when the rules selected the request.
    """

    selected: bool
    reason: str
    view: str | None = None
    rules: list[RuleCheck] = field(default_factory=list)
    excludes: list[RuleCheck] = field(default_factory=list)
    selectors: list[SelectorCheck] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """``{"selected", "reason", "view"?, "rules", "excludes"?, "selectors"?}``."""
        out: dict[str, Any] = {"selected": self.selected, "reason": self.reason}
        if self.view:
            out["view"] = self.view
        out["rules"] = [r.as_dict() for r in self.rules]
        if self.excludes:
            out["excludes"] = [r.as_dict() for r in self.excludes]
        if self.selectors:
            out["selectors"] = [s.as_dict() for s in self.selectors]
        return out


@dataclass(slots=True)
class PolicyTrace:
    """One policy's explanation on one request.

    Attributes:
        policy: the policy's label (``name``, or ``namespace/name`` for an AdmissionPolicy).
        endpoint: ``validate`` or ``mutate``.
        result: ``pass``, ``fail``, ``error`` or ``skip`` (not selected, or a matchCondition false),
            as the engine decides it.
        message: the result's message as the engine words it.
        actions: how a ``fail``/``error`` is enforced (``Deny``, ``Warn``, ``Audit``; ``Ignored`` under
            ``failurePolicy: Ignore``).
        match: why it selected the request or not.
        steps: what decided the result before any expression ran (not Ready, unsynced cache, params),
            and the params it read, one line each.
        params: the ``params`` the policy read (a ConfigMap, or the selected ones), when it has a paramRef.
        conditions: each matchCondition.
        variables: each variable (evaluated when the validations are).
        validations: each validation.
        annotations: each auditAnnotation.
        patch: for ``mutate``: what the policy changed, as a JSONPatch from the object it received (None when
            it changed nothing, or when the chain's changes are not split per policy).
        warnings: the warnings evaluating it adds to the response.
    """

    policy: str
    endpoint: str
    result: str
    message: str
    actions: list[str]
    match: MatchTrace
    steps: list[str] = field(default_factory=list)
    params: Shown | None = None
    conditions: list[ConditionTrace] = field(default_factory=list)
    variables: list[VariableTrace] = field(default_factory=list)
    validations: list[ValidationTrace] = field(default_factory=list)
    annotations: list[AnnotationTrace] = field(default_factory=list)
    patch: list[dict[str, Any]] | None = None
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The camelCase form; empty sections are left out."""
        out: dict[str, Any] = {"policy": self.policy, "endpoint": self.endpoint, "result": self.result}
        if self.message:
            out["message"] = self.message
        if self.actions:
            out["actions"] = self.actions
        out["match"] = self.match.as_dict()
        if self.steps:
            out["steps"] = self.steps
        if self.params is not None:
            out["params"] = self.params.as_dict()
        for key, items in (("matchConditions", self.conditions), ("variables", self.variables),
                           ("validations", self.validations), ("auditAnnotations", self.annotations)):
            if items:
                out[key] = [i.as_dict() for i in items]
        if self.patch is not None:
            out["patch"] = show(self.patch).as_dict()
        if self.warnings:
            out["warnings"] = self.warnings
        return out


@dataclass(slots=True)
class Explanation:
    """A request's explanation: what it is, the decision, and every policy's trace.

    Attributes:
        request: ``{"uid", "kind", "namespace", "name", "operation", "resource", "subResource"?,
            "username"}`` of the AdmissionRequest.
        endpoint: ``validate`` or ``mutate``.
        allowed: the decision.
        message: a denial's message as the response carries it.
        warnings: ``response.warnings``.
        policies: one trace per policy explained, in evaluation order.
        patch: for ``mutate``: the response's JSONPatch (RFC 6902), None when nothing changed.
        note: what the decision covers when it is not the whole answer (only some policies explained).
    """

    request: dict[str, Any]
    endpoint: str
    allowed: bool
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    policies: list[PolicyTrace] = field(default_factory=list)
    patch: list[dict[str, Any]] | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """``{"request", "endpoint", "allowed", "note"?, "message"?, "warnings"?, "policies", "patch"?}``."""
        out: dict[str, Any] = {"request": self.request, "endpoint": self.endpoint, "allowed": self.allowed}
        if self.note:
            out["note"] = self.note
        if self.message:
            out["message"] = self.message
        if self.warnings:
            out["warnings"] = self.warnings
        out["policies"] = [p.as_dict() for p in self.policies]
        if self.patch is not None:
            out["patch"] = show(self.patch).as_dict()
        return out
