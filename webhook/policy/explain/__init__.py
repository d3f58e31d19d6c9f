"""Explain a decision: why each policy matched or not, every value it computed, and why it failed (pure; no I/O).

* :mod:`~webhook.policy.explain.explainer`: evaluate a request as the engine does, recording each step;
* :mod:`~webhook.policy.explain.match`: each resource rule tried, the selectors and the labels they saw;
* :mod:`~webhook.policy.explain.operands`: the top-level operands of an expression, from its parse tree;
* :mod:`~webhook.policy.explain.shown`: values bounded for display;
* :mod:`~webhook.policy.explain.trace`: the explanation as data (``as_dict`` for JSON and YAML);
* :mod:`~webhook.policy.explain.render`: the explanation as an indented text tree.

Nothing here is on the engine's decision path: an explanation is computed only when asked for
(``tollgate test --explain``, the server's ``/explain`` with ``serve --explain``).
"""

from webhook.policy.explain.explainer import (
    EXPLAIN_WORK_FACTOR,
    explain,
    explain_mutating,
    explain_validating,
    explain_work,
)
from webhook.policy.explain.render import render_explanation, render_policy
from webhook.policy.explain.trace import Explanation, PolicyTrace

__all__ = ["EXPLAIN_WORK_FACTOR", "Explanation", "PolicyTrace", "explain", "explain_mutating", "explain_validating",
           "explain_work", "render_explanation", "render_policy"]
