"""Evaluation bounds: the work estimate, the static limit at compile time, and the inline budget per request.

cel-cpp cannot be interrupted and holds the GIL, so Tollgate refuses at compile time what no input can
make cheap (the constant part of the work estimate above 10⁷, Kubernetes' per-binding budget) and
evaluates a request inline only when its estimated work at the sizes it actually reads is under the
budget; otherwise the engine raises OverBudget before evaluating anything and the server uses a worker.
"""

from __future__ import annotations

import copy
import json
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.policy.helpers import pod, policy, request
from webhook.files.yamlio import load_paths
from webhook.policy import (
    InMemoryLookups,
    PolicyIndex,
    RequestCoordinates,
    budget,
    compile_policy,
    evaluate_mutating,
    evaluate_validating,
)
from webhook.policy.budget import (
    INLINE_WORK_BUDGET,
    InputSize,
    OverBudget,
    body_bound,
    cached_size,
    estimated_work,
    measure,
)
from webhook.policy.cel.cost import MAX_STATIC_WORK, work_at
from webhook.policy.cel.env import environment
from webhook.policy.engine.context import RequestContext, synthesize_pod
from webhook.policy.vocabulary import Endpoint

ROOT = Path(__file__).resolve().parents[3]


def _work(expression: str) -> dict[tuple[int, int, int], int]:
    estimated = environment().compile(expression).estimated
    assert estimated is not None
    return estimated.work


# -- the model ---------------------------------------------------------------------------------------------------

def test_literal_ranges_count_exactly() -> None:
    assert _work("1 in lists.range(1000)")[(0, 0, 0)] < _work("1 in lists.range(100000)")[(0, 0, 0)] // 50
    pairwise = _work("sets.contains(lists.range(50000), lists.range(50000))")
    assert pairwise[(0, 0, 0)] >= 50000 * 50000


def test_a_string_check_on_each_container_is_linear() -> None:
    work = _work("object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))")
    # C containers of at most S characters each: C·S, never B·C, C², S² or B².
    assert all(max(b, k, s) <= 1 and not (b and (k or s)) for b, k, s in work), work


def test_nested_splits_of_the_input_are_quadratic_in_its_longest_string() -> None:
    work = _work("object.metadata.annotations.x.split(',').all(a, object.metadata.annotations.x.split(',').size() > 0)")
    assert any(s >= 1 and b + s >= 2 for b, _k, s in work), work
    small, large = work_at(work, 1_000, 5, 1_000), work_at(work, 2_000, 5, 2_000)
    assert large > 3 * small  # doubling the input more than triples the bound


def test_a_variable_derived_from_a_split_is_iterated_by_its_size() -> None:
    # spec.variables reach later expressions with their bounds: a list built by split() is not the input's own
    # list, so a loop over it is not bounded by C.
    derived = policy("v", variables=[{"name": "parts", "expression": "object.metadata.annotations.x.split('')"}],
                     validations=[{"expression": "variables.parts.all(p, p != 'z')"}])
    own = policy("o", variables=[{"name": "parts", "expression": "object.spec.containers"}],
                 validations=[{"expression": "variables.parts.all(p, p.name != 'z')"}])
    d, o = compile_policy(derived).policy, compile_policy(own).policy
    assert d is not None and o is not None
    big_string = work_at(d.work, 10_000, 3, 10_000)
    assert big_string > 10 * work_at(o.work, 10_000, 3, 10_000)


@settings(max_examples=300, deadline=None)
@given(work=st.dictionaries(st.tuples(*[st.integers(0, 3)] * 3), st.integers(0, 10**6), max_size=12),
       sizes=st.tuples(st.integers(0, 10**7), st.integers(1, 10**5), st.integers(1, 10**6)))
def test_the_compiled_work_function_is_work_at(work: dict[tuple[int, int, int], int],
                                               sizes: tuple[int, int, int]) -> None:
    assert budget._work_function(budget._Same(work))(*sizes) == work_at(work, *sizes)


def test_measure_reads_bytes_largest_collection_and_longest_string() -> None:
    size = measure([{"a": ["x" * 5, "y"], "bb": {"k": 1, "l": 2, "m": 3}}])
    assert size.largest_collection == 3 and size.longest_string == 5
    assert size.bytes >= len(json.dumps({"a": ["xxxxx", "y"], "bb": {"k": 1, "l": 2, "m": 3}})) // 2
    assert measure([]) == InputSize(0, 1, 1)


# -- compile time ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expression", [
    "sets.contains(lists.range(50000), lists.range(50000))",
    " && ".join(["-1 in lists.range(100000)"] * 30),
    "lists.range(5000).map(x, lists.range(5000)).size() > 0",
])
def test_work_no_input_can_shrink_is_refused_at_compile_time(expression: str) -> None:
    result = compile_policy(policy("costly", validations=[{"expression": expression}]))
    assert result.policy is None
    message = result.condition["message"]
    assert result.condition["reason"] == "CompileError"
    assert message.startswith("spec.validations[0].expression: estimated cost"), message
    assert f"{MAX_STATIC_WORK:,}" in message
    assert result.matchable is not None and result.matchable.error  # still answered per failurePolicy


def test_the_static_limit_adds_up_the_whole_policy() -> None:
    one = "-1 in lists.range(100000)"
    assert compile_policy(policy("few", validations=[{"expression": one}] * 3)).policy is not None
    many = compile_policy(policy("many", validations=[{"expression": one}] * 30))
    assert many.policy is None and "spec.validations[" in many.condition["message"]


def test_ordinary_policies_pass_the_static_limit() -> None:
    for doc in load_paths([ROOT / "policies"]):
        if doc.kind in ("ClusterAdmissionPolicy", "AdmissionPolicy"):
            result = compile_policy(doc.obj)
            assert result.policy is not None, result.condition


# -- per request -------------------------------------------------------------------------------------------------

def _shipped() -> tuple[PolicyIndex, InMemoryLookups]:
    docs = list(load_paths([ROOT / "policies"]))
    index = PolicyIndex()
    for d in docs:
        if d.kind in ("ClusterAdmissionPolicy", "AdmissionPolicy"):
            index.upsert(d.obj)
    return index, InMemoryLookups(namespaces=[d.obj for d in docs if d.kind == "Namespace"],
                                  configmaps=[d.obj for d in docs if d.kind == "ConfigMap"])


def _plan(index: PolicyIndex, req: dict[str, Any]) -> Any:
    plan = index.plan(RequestCoordinates.of(req))
    while index.compile_pending():
        pass
    return plan


def test_the_shipped_policies_on_an_ordinary_pod_stay_inline() -> None:
    index, lookups = _shipped()
    req = request(pod(images=("docker.io/library/nginx:latest", "registry.example.com/app:1"), privileged=True))
    outcome = evaluate_validating(req, _plan(index, req), lookups, work_budget=INLINE_WORK_BUDGET,
                                  body_bytes=len(json.dumps(req)))
    assert not outcome.allowed  # evaluated, not refused


def test_the_estimate_is_the_work_at_the_measured_pruned_views_and_cached_objects() -> None:
    """The sizes counted while pruning replace measuring the pruned views: the estimate is what the plan's work
    gives at measure's sizes of the pruned views, the params and the Namespace (the longest string may be the
    trees' longest field name, an upper bound), for a projected view and for a workload's Pod view."""
    index, lookups = _shipped()
    workload = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                "spec": {"template": {"metadata": {"labels": {"app": "a" * 70}}, "spec": pod()["spec"]}}}
    for obj in (pod(images=("docker.io/library/nginx:latest",), privileged=True), workload):
        req = request(obj)
        plan = _plan(index, req)
        ctx = RequestContext(req, lookups)
        ctx.project(plan.projections)
        got = estimated_work(plan, ctx, Endpoint.VALIDATE)
        views = dict.fromkeys(v for _p, v in plan.entries)
        assert any(ctx.is_projected(v) for v in views)
        fresh = RequestContext(req, lookups)
        fresh.project(plan.projections)
        size = measure([o for v in views for o in fresh.view_objects(v)]
                       + budget._cached_inputs(plan, fresh))
        for v in views:
            assert ctx.view_size(v)[:2] == astuple(measure(fresh.view_objects(v)))[:2]
        assert work_at(plan.work, size.bytes, size.largest_collection, size.longest_string) <= got
        assert got <= work_at(plan.work, size.bytes, size.largest_collection, max(size.longest_string, 64))


SPLIT_TWICE = "object.metadata.annotations.x.split('').all(a, object.metadata.annotations.x.split('').size() > 0)"
QUADRATIC = policy("split-twice", kind="AdmissionPolicy", namespace="team-a",
                   validations=[{"expression": SPLIT_TWICE}])


def _annotated(length: int) -> dict[str, Any]:
    p = pod(namespace="team-a")
    p["metadata"]["annotations"] = {"x": "y" * length}
    return request(p, namespace="team-a")


def test_quadratic_work_on_a_large_input_is_refused_before_anything_is_evaluated() -> None:
    index = PolicyIndex()
    index.upsert(QUADRATIC)
    req = _annotated(3000)  # evaluated inline this takes over a second
    with pytest.raises(OverBudget) as raised:
        evaluate_validating(req, _plan(index, req), InMemoryLookups(), work_budget=INLINE_WORK_BUDGET)
    assert raised.value.work > INLINE_WORK_BUDGET
    small = _annotated(20)
    outcome = evaluate_validating(small, _plan(index, small), InMemoryLookups(), work_budget=INLINE_WORK_BUDGET)
    assert outcome.allowed and outcome.results  # the same policy on a small input stays inline


def test_the_mutating_endpoint_checks_its_own_programs() -> None:
    mutating = copy.deepcopy(QUADRATIC)
    mutating["spec"]["validations"] = []
    mutating["spec"]["mutations"] = [{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": f"{SPLIT_TWICE} ? {{'metadata': {{'labels': {{'ok': 'true'}}}}}} : {{}}"}}]
    index = PolicyIndex()
    assert index.upsert(mutating).ready
    req = _annotated(3000)
    with pytest.raises(OverBudget):
        evaluate_mutating(req, _plan(index, req), InMemoryLookups(), work_budget=INLINE_WORK_BUDGET)
    small = _annotated(20)
    patched = evaluate_mutating(small, _plan(index, small), InMemoryLookups(), work_budget=INLINE_WORK_BUDGET)
    assert {"op": "add", "path": "/metadata/labels", "value": {"ok": "true"}} in patched.patch


def test_without_a_budget_nothing_is_refused() -> None:
    index = PolicyIndex()
    index.upsert(QUADRATIC)
    req = _annotated(200)
    assert evaluate_validating(req, _plan(index, req), InMemoryLookups()).allowed


def test_a_conditional_list_keeps_the_count_of_its_branches() -> None:
    # `has(...) ? [] : <the input's list>` is one of the input's lists: iterating it is bounded by C, not by B.
    guarded = _work("(has(object.spec.x) ? [] : object.spec.containers).all(c, c.name != 'x')")
    plain = _work("object.spec.containers.all(c, c.name != 'x')")
    assert guarded.get((1, 0, 0), 0) <= plain.get((1, 0, 0), 0) + 1, (guarded, plain)
    assert guarded.get((0, 1, 0), 0) > 0


def test_concatenating_each_elements_strings_sums_to_the_input_not_more() -> None:
    # Per container, its name and the Pod's name, each at most S characters: C·S, or B summed over the containers,
    # never B per container (B·C) or B².
    work = _work("object.spec.containers.all(c, (c.name + '-' + object.metadata.name).size() < 100)")
    assert all(b <= 1 and not (b and k) for b, k, _s in work), work


def _params_policy() -> dict[str, Any]:
    return policy("split-params", paramRef={"name": "big", "namespace": "default"},
                  validations=[{"expression": "params.data.x.split('').all(a, params.data.x.split('').size() > 0)"}])


@pytest.mark.parametrize("length", [20, 3000])
def test_the_quick_bound_counts_params_a_small_request_does_not_hide_a_large_configmap(length: int) -> None:
    """With ``body_bytes`` the request is not measured, but its params are: a small Pod reading a large ConfigMap
    quadratically is still refused, the same Pod with a small one stays inline."""
    index = PolicyIndex()
    assert index.upsert(_params_policy()).ready
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big", "namespace": "default"},
                 "data": {"x": "y" * length}}
    req = request(pod())
    lookups = InMemoryLookups(configmaps=[configmap])
    _refused_only_when_long(index, req, lookups, length)


def _refused_only_when_long(index: PolicyIndex, req: dict[str, Any], lookups: InMemoryLookups, length: int) -> None:
    """The request with its body's length: over the inline budget when the cached string is long, else evaluated."""
    body = len(json.dumps(req))
    if length > 1000:
        with pytest.raises(OverBudget):
            evaluate_validating(req, _plan(index, req), lookups, work_budget=INLINE_WORK_BUDGET, body_bytes=body)
    else:
        assert evaluate_validating(req, _plan(index, req), lookups, work_budget=INLINE_WORK_BUDGET,
                                   body_bytes=body).results


def _namespace_policy() -> dict[str, Any]:
    expression = ("namespaceObject.metadata.annotations.x.split('')"
                  ".all(a, namespaceObject.metadata.annotations.x.split('').size() > 0)")
    return policy("split-namespace", validations=[{"expression": expression}])


@pytest.mark.parametrize("length", [20, 3000])
def test_the_quick_bound_counts_the_namespace_a_small_request_does_not_hide_a_large_one(length: int) -> None:
    """``namespaceObject`` is read from the cache like params: a small Pod in a Namespace with a long annotation
    read quadratically is refused, the same Pod in a Namespace with a short one stays inline."""
    index = PolicyIndex()
    assert index.upsert(_namespace_policy()).ready
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "default", "annotations": {"x": "y" * length}}}
    req = request(pod())
    lookups = InMemoryLookups(namespaces=[namespace])
    _refused_only_when_long(index, req, lookups, length)


# -- the quick bound and the cached sizes --------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=4), children, max_size=6),
    max_leaves=40)


def _dominates(bound: InputSize, size: InputSize) -> bool:
    return (bound.bytes >= size.bytes and bound.largest_collection >= size.largest_collection
            and bound.longest_string >= size.longest_string)


@settings(max_examples=300, deadline=None)
@given(obj=JSON, old=JSON, spaced=st.booleans())
def test_the_body_bound_is_no_smaller_than_the_measured_views(obj: Any, old: Any, spaced: bool) -> None:
    """Whatever the object and oldObject, compact or not, ASCII or not: the body's length bounds what measure gives
    for the request's object view and for the Pod synthesized from a template inside it."""
    template = {"spec": {"template": {"metadata": {"labels": {"a": obj}}, "spec": old}}}
    req = {"uid": "u", "namespace": "ns", "object": obj, "oldObject": old}
    separators = (", ", ": ") if spaced else (",", ":")
    body = len(json.dumps({"request": req}, separators=separators, ensure_ascii=spaced).encode())
    assert _dominates(body_bound(body, 1), measure([obj, old]))
    workload = {"metadata": {"namespace": "n" * 63}, **template}
    body = len(json.dumps({"request": {"object": workload}}, separators=separators, ensure_ascii=spaced).encode())
    pod_view = synthesize_pod(workload, ("spec", "template"))
    assert _dominates(body_bound(body, 2), measure([workload, None, pod_view, None]))


def test_a_body_of_small_numbers_measures_four_times_its_bytes() -> None:
    # The worst case of measure against JSON: a scalar counts 8 and takes 2 bytes.
    zeros = [0] * 1000
    body = len(json.dumps(zeros, separators=(",", ":")))
    assert measure([zeros]).bytes > 3.9 * body
    assert body_bound(body, 1).bytes >= measure([zeros]).bytes


EQUAL = policy("unchanged", validations=[{"expression": "object == oldObject"}])


def test_the_quick_bound_is_never_below_the_measured_estimate() -> None:
    """The quick bound is returned as the estimate: it must not undercut the measured one (a body of small
    numbers measures about four times its length)."""
    index = PolicyIndex()
    assert index.upsert(EQUAL).ready
    p = pod()
    p["spec"]["numbers"] = [0] * 2000
    req = request(p, operation="UPDATE", old=copy.deepcopy(p))
    plan = _plan(index, req)
    body = len(json.dumps({"request": req}, separators=(",", ":")))
    measured = estimated_work(plan, RequestContext(req, InMemoryLookups()), Endpoint.VALIDATE)
    quick = estimated_work(plan, RequestContext(req, InMemoryLookups()), Endpoint.VALIDATE, body_bytes=body,
                           budget=10**30)
    assert measured > 4 * body and quick >= measured


def test_cached_objects_are_measured_once_per_object(monkeypatch: pytest.MonkeyPatch) -> None:
    small = {"metadata": {"name": "a"}, "data": {"x": "y"}}
    large = {"metadata": {"name": "a"}, "data": {"x": "y" * 500, "z": "w"}}
    assert cached_size([small, None, large]) == measure([small, None, large])
    calls: list[Any] = []
    real = budget.measure
    monkeypatch.setattr(budget, "measure", lambda values: calls.append(values) or real(values))
    assert cached_size([small]) == measure([small]) and cached_size([large]) == measure([large])
    assert not calls  # both remembered
    # An object updated as the informers do it, a new dict, is measured anew, even when an equal one is cached.
    updated = copy.deepcopy(large)
    updated["data"]["z"] = "w" * 700
    assert cached_size([updated]).longest_string == 700 and len(calls) == 1
    assert cached_size([copy.deepcopy(small)]) == measure([small]) and len(calls) == 2
