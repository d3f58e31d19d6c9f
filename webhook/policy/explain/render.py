"""An explanation as readable text: one indented tree per policy (text in, text out; pure).

What ``tollgate test --explain`` prints after its table and the server's ``/explain?format=text``
answers. Each value is one line, cut to :data:`~webhook.policy.explain.shown.MAX_TEXT` characters.
"""

from __future__ import annotations

import json
import re

from webhook.policy.explain.operands import Role
from webhook.policy.explain.shown import Shown, show
from webhook.policy.explain.trace import Evaluated, Explanation, OperandTrace, PolicyTrace

__all__ = ["render_explanation", "render_policy"]

_SPACE = re.compile(r"\s+")
_STEP = "  "


def _one_line(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _value(value: Shown | None, error: str | None, note: str | None = None) -> str:
    if error is not None:
        return f"error: {_one_line(error)}"
    if value is None:
        return f"({note})" if note else "(not evaluated)"
    size = f"  ({value.type} of {value.size})" if value.size is not None and value.type in ("list", "map") else ""
    return value.text() + size


def _operand(o: OperandTrace) -> str:
    what = {Role.OPERAND: "", Role.RANGE: "range ", Role.CONDITION: "condition ", Role.THEN: "then ",
            Role.ELSE: "else ", Role.BOUND: "", Role.FAILING: "elements failing ",
            Role.MATCHING: "elements satisfying "}.get(o.role, f"{o.role}: ")
    return f"{what}{_one_line(o.text)} = {_value(o.value, o.error, o.note)}"


def _evaluated(lines: list[str], depth: int, head: str, e: Evaluated, *, show_value: bool = True) -> None:
    pad = _STEP * depth
    lines.append(f"{pad}{head}{_one_line(e.expression)}")
    if show_value:
        lines.append(f"{pad}{_STEP}= {_value(e.value, e.error)}")
    for o in e.operands:
        lines.append(f"{pad}{_STEP}{_STEP}{_operand(o)}")
    if e.more_operands:
        lines.append(f"{pad}{_STEP}{_STEP}... {e.more_operands} more operand(s) not shown")


def render_policy(trace: PolicyTrace, depth: int = 0) -> list[str]:
    """The lines of one policy's tree, indented ``depth`` steps."""
    pad = _STEP * depth
    inner = pad + _STEP
    actions = f" [{', '.join(trace.actions)}]" if trace.actions and trace.result in ("fail", "error") else ""
    lines = [f"{pad}{trace.policy} ({trace.endpoint}): {trace.result}{actions}"]
    if trace.message and trace.match.selected:
        lines.append(f"{inner}message: {_one_line(trace.message)}")
    match = trace.match
    lines.append(f"{inner}match: {match.reason}")
    for r in match.rules + match.excludes:
        mark = "matches " if r.matched else "no match"
        why = f"  ({r.mismatch})" if r.mismatch else ""
        lines.append(f"{inner}{_STEP}{mark} {r.path}: {r.rule}{why}")
    for s in match.selectors:
        seen = "; ".join(f"{of}: {json.dumps(labels, sort_keys=True) if labels is not None else 'none'}"
                         for of, labels in s.seen)
        mark = "matches " if s.matched else "no match"
        lines.append(f"{inner}{_STEP}{mark} {s.path} {s.selector}" + (f"  (labels of {seen})" if seen else "")
                     + (f"  ({s.note})" if s.note else ""))
    for step in trace.steps:
        lines.append(f"{inner}before evaluation: {_one_line(step)}")
    if trace.params is not None:
        lines.append(f"{inner}params = {_value(trace.params, None)}")
    if trace.conditions:
        lines.append(f"{inner}matchConditions:")
        for c in trace.conditions:
            _evaluated(lines, depth + 2, f"{c.name}: ", c.evaluated)
    if trace.variables:
        lines.append(f"{inner}variables:")
        for v in trace.variables:
            lines.append(f"{inner}{_STEP}{v.name} = {_value(v.evaluated.value, v.evaluated.error)}")
            for o in v.evaluated.operands:
                lines.append(f"{inner}{_STEP * 3}{_operand(o)}")
    if trace.validations:
        lines.append(f"{inner}validations:")
        for i, val in enumerate(trace.validations):
            _evaluated(lines, depth + 2, f"[{i}] {val.result}: ", val.evaluated)
            if val.message:
                lines.append(f"{inner}{_STEP * 2}message: {_one_line(val.message)}")
            if val.message_problem:
                lines.append(f"{inner}{_STEP * 2}messageExpression not used: {_one_line(val.message_problem)}")
    if trace.annotations:
        lines.append(f"{inner}auditAnnotations:")
        for a in trace.annotations:
            lines.append(f"{inner}{_STEP}{a.key} = {_value(a.evaluated.value, a.evaluated.error)}")
    if trace.patch is not None:
        lines.append(f"{inner}patch: {show(trace.patch).text()}")
    for w in trace.warnings:
        lines.append(f"{inner}warning: {_one_line(w)}")
    return lines


def render_explanation(explanation: Explanation) -> str:
    """The whole explanation: the request and decision on one line, then every policy's tree; ends with a newline."""
    r = explanation.request
    where = f"{r.get('namespace')}/{r.get('name')}" if r.get("namespace") else str(r.get("name"))
    sub = f"/{r['subResource']}" if r.get("subResource") else ""
    decision = "allowed" if explanation.allowed else "denied"
    lines = [f"{r.get('kind')}{sub} {where} {r.get('operation')} by {r.get('username') or '(no user)'} on "
             f"/{explanation.endpoint}: {decision}"]
    if explanation.note:
        lines.append(f"{_STEP}note: {explanation.note}")
    if explanation.message:
        lines.append(f"{_STEP}message: {_one_line(explanation.message)}")
    if explanation.patch is not None:
        lines.append(f"{_STEP}patch: {show(explanation.patch).text()}")
    for w in explanation.warnings:
        lines.append(f"{_STEP}warning: {_one_line(w)}")
    if not explanation.policies:
        lines.append(f"{_STEP}no policy may select this request")
    for trace in explanation.policies:
        lines += render_policy(trace, 1)
    return "\n".join(lines) + "\n"
