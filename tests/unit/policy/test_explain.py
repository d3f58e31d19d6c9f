"""An explanation's verdict is the engine's: per policy, on the shipped policies and the Pod Security corpus."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.policy.helpers import pod, policy, request
from tests.unit.policy.test_plan import EXTRA, LOOKUPS, POLICIES, _container, _corpus, _request_for
from webhook.policy import InMemoryLookups, PolicyIndex, RequestCoordinates, evaluate_mutating, evaluate_validating
from webhook.policy.budget import OverBudget, estimated_work
from webhook.policy.compiler import CompiledPolicy, compile_policy
from webhook.policy.engine import RequestContext
from webhook.policy.explain import EXPLAIN_WORK_FACTOR, explain_mutating, explain_validating, explain_work
from webhook.policy.plan import build_plan
from webhook.policy.vocabulary import Endpoint

NAMESPACES = [{"metadata": {"name": "default", "labels": {"env": "prod"}}},
              {"metadata": {"name": "team-a", "labels": {"env": "dev"}}}]
PARAMS = {"metadata": {"name": "limits", "namespace": "default", "labels": {"tollgate.dev/params": "true"}},
          "data": {"max": "2"}}

#: Policies whose verdict depends on the steps the explainer words itself: matchConditions (a false one after
#: an erroring one), message fallbacks, auditAnnotations, an unused erroring variable, an error after a failure,
#: params present and missing, selectors.
SEMANTICS = [
    policy("x-cond-false-after-error", matchConditions=[
        {"name": "errs", "expression": "object.spec.containers[9].name == 'x'"},
        {"name": "app-only", "expression": "object.metadata.name.startsWith('app')"}],
        validations=[{"expression": "false"}]),
    policy("x-cond-error", failurePolicy="Ignore", matchConditions=[
        {"name": "errs", "expression": "object.spec.containers[9].name == 'x'"}],
        validations=[{"expression": "false"}]),
    policy("x-message-fallback", validations=[
        {"expression": "size(object.spec.containers) < 2", "messageExpression": "string(1/0)",
         "message": "too many containers"},
        {"expression": "object.metadata.name != 'web'", "messageExpression": "'   '"}]),
    policy("x-fail-then-error", validations=[
        {"expression": "object.metadata.name == 'never'"},
        {"expression": "object.spec.nope.x == 1"}]),
    policy("x-error-then-fallback", failurePolicy="Ignore", validations=[
        {"expression": "object.spec.nope.x == 1"},
        {"expression": "object.metadata.name == 'never'", "messageExpression": "string(1/0)"}]),
    policy("x-annotation", validationActions=["Audit"], auditAnnotations=[
        {"key": "images", "valueExpression": "object.spec.containers.map(c, c.image).join(',')"},
        {"key": "none", "valueExpression": "null"}],
        validations=[{"expression": "object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))"}]),
    policy("x-annotation-type", failurePolicy="Ignore", auditAnnotations=[
        {"key": "bad", "valueExpression": "dyn(size(object.spec.containers))"}]),
    policy("x-unused-variable", variables=[{"name": "broken", "expression": "object.spec.nope.x"},
                                           {"name": "count", "expression": "size(object.spec.containers)"}],
           validations=[{"expression": "variables.count <= 3"}]),
    policy("x-params", paramRef={"name": "limits", "namespace": "default"},
           validations=[{"expression": "size(object.spec.containers) <= int(params.data.max)",
                         "messageExpression": "'at most ' + params.data.max + ' containers'"}]),
    policy("x-params-missing", paramRef={"name": "absent", "namespace": "default"},
           validations=[{"expression": "true"}]),
    policy("x-params-allow", paramRef={"name": "absent", "namespace": "default", "parameterNotFoundAction": "Allow"},
           validations=[{"expression": "true"}]),
    policy("x-ns-selector", namespaceSelector={"matchLabels": {"env": "prod"}},
           validations=[{"expression": "object.metadata.name != 'web'"}]),
    policy("x-obj-selector", objectSelector={"matchExpressions": [{"key": "app", "operator": "Exists"}]},
           validations=[{"expression": "false"}]),
    policy("x-warn-and-audit", validationActions=["Warn", "Audit"],
           validations=[{"expression": "object.spec.containers.exists(c, c.name == 'c1')"}]),
]
LOOKUPS_WITH_PARAMS = InMemoryLookups(namespaces=NAMESPACES, configmaps=[PARAMS])


def _index(objs: list[dict[str, Any]]) -> PolicyIndex:
    index = PolicyIndex()
    for p in objs:
        index.upsert(p)
    return index


@functools.cache
def _shipped() -> PolicyIndex:
    return _index([*POLICIES, *EXTRA, *SEMANTICS])


def _verdicts(req: dict[str, Any], candidates: list[CompiledPolicy],
              lookups: InMemoryLookups) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The engine's decision and the explanation's, each as (allowed, code, message, warnings, per-policy results)."""
    out = evaluate_validating(req, candidates, lookups)
    engine = (out.allowed, out.message, out.warnings,
              sorted((r.policy, str(r.result), r.message, sorted(r.actions)) for r in out.results))
    explained = explain_validating(req, candidates, lookups)
    selected = [t for t in explained.policies if t.match.selected]
    mine = (explained.allowed, explained.message, explained.warnings,
            sorted((t.policy, t.result, t.message, t.actions) for t in selected))
    return engine, mine


def test_the_explained_verdict_is_the_engines_on_every_corpus_request() -> None:
    index = _shipped()
    reqs = _corpus()
    assert len(reqs) > 300
    results: set[str] = set()
    for req in reqs:
        candidates = index.candidates(RequestCoordinates.of(req))
        engine, explained = _verdicts(req, candidates, LOOKUPS_WITH_PARAMS)
        assert explained == engine, req.get("name") or (req.get("object") or {}).get("metadata")
        results.update(r[1] for r in engine[3])
    # The corpus reaches every result the engine gives, so each derivation is compared.
    assert results == {"pass", "fail", "error", "skip"}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(containers=st.lists(_container, min_size=1, max_size=4),
       labels=st.dictionaries(st.sampled_from(["team", "tier", "app"]), st.sampled_from(["db", "payments", "x"]),
                              max_size=3),
       name=st.sampled_from(["web", "app-1", "db"]), kind=st.sampled_from(["Pod", "Deployment"]),
       namespace=st.sampled_from(["default", "team-a", "elsewhere"]))
def test_the_explained_verdict_is_the_engines_on_generated_pods(
        containers: list[dict[str, Any]], labels: dict[str, str], name: str, kind: str, namespace: str) -> None:
    spec: dict[str, Any] = {"containers": containers}
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec}
    if kind == "Deployment":
        obj = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace},
               "spec": {"template": {"metadata": {"labels": labels}, "spec": spec}}}
    req = _request_for(obj, "gen")
    candidates = _shipped().candidates(RequestCoordinates.of(req))
    engine, explained = _verdicts(req, candidates, LOOKUPS_WITH_PARAMS)
    assert explained == engine


def _compiled(obj: dict[str, Any]) -> CompiledPolicy:
    result = compile_policy(obj)
    assert result.matchable is not None, result.condition
    return result.matchable


def test_a_policy_that_does_not_select_the_request_is_explained_but_has_no_result() -> None:
    deployments = _compiled(policy("deploys", resources=("deployments",), groups=("apps",)))
    explained = explain_validating(request(pod()), [deployments], LOOKUPS)
    (trace,) = explained.policies
    assert not trace.match.selected and trace.result == "skip"
    assert trace.match.rules[0].mismatch == 'apiGroup "" is not in apps'
    assert not trace.validations and not trace.variables
    assert evaluate_validating(request(pod()), [deployments], LOOKUPS).results == []


def test_every_match_condition_is_evaluated_and_the_first_false_one_decides() -> None:
    p = _compiled(SEMANTICS[0])
    trace = explain_validating(request(pod(name="web")), [p], LOOKUPS).policies[0]
    assert [c.name for c in trace.conditions] == ["errs", "app-only"]
    errs, app_only = trace.conditions
    assert errs.evaluated.error is not None and "spec.matchConditions[0].expression" in errs.evaluated.error
    assert app_only.evaluated.value is not None and app_only.evaluated.value.value is False
    # A false condition shows its operands: the receiver the call was made on.
    assert [(o.text, o.value.value if o.value else None) for o in app_only.evaluated.operands] == [
        ("object.metadata.name", "web")]
    assert (trace.result, trace.message) == ("skip", "matchCondition app-only is false")
    assert not trace.validations  # the policy does not apply: its validations are not evaluated


def test_a_failed_validation_shows_its_operands_and_its_message() -> None:
    p = _compiled(policy("two", validations=[
        {"expression": "object.metadata.name.startsWith('app') && size(object.spec.containers) == 1",
         "message": "one app container"}]))
    trace = explain_validating(request(pod(name="web", images=("a", "b"))), [p], LOOKUPS).policies[0]
    (validation,) = trace.validations
    assert validation.result == "fail" and validation.message == "one app container"
    shown = [(o.text, o.value.value if o.value else o.error) for o in validation.evaluated.operands]
    assert shown == [("object.metadata.name.startsWith('app')", False), ("size(object.spec.containers) == 1", False)]


def test_an_all_macro_shows_the_elements_that_fail_its_predicate() -> None:
    p = _compiled(policy("registries", validations=[
        {"expression": "object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))"}]))
    req = request(pod(images=("registry.example.com/a", "docker.io/b", "quay.io/c")))
    (validation,) = explain_validating(req, [p], LOOKUPS).policies[0].validations
    by_role = {o.role: o for o in validation.evaluated.operands}
    failing = by_role["elements failing the predicate"]
    assert failing.value is not None
    assert [c["image"] for c in failing.value.value] == ["docker.io/b", "quay.io/c"]
    assert by_role["range"].value is not None and by_role["range"].value.size == 3


def test_a_bind_shows_the_value_it_binds() -> None:
    p = _compiled(policy("bound", validations=[
        {"expression": "cel.bind(n, object.metadata.name, n == 'x' && n != '')"}]))
    (validation,) = explain_validating(request(pod(name="web")), [p], LOOKUPS).policies[0].validations
    (bound,) = validation.evaluated.operands
    assert (bound.text, bound.value.value if bound.value else None) == ("n = object.metadata.name", "web")


def test_selectors_show_the_labels_they_saw() -> None:
    p = _compiled(SEMANTICS[11])  # namespaceSelector env=prod
    lookups = InMemoryLookups(namespaces=NAMESPACES)
    trace = explain_validating(request(pod(namespace="team-a"), namespace="team-a"), [p], lookups).policies[0]
    (selector,) = trace.match.selectors
    assert (selector.selector, selector.seen, selector.matched) == ("env=prod", [("Namespace team-a", {"env": "dev"})],
                                                                     False)
    assert not trace.match.selected and "namespaceSelector does not match" in trace.match.reason
    uncached = explain_validating(request(pod(namespace="gone"), namespace="gone"), [p], lookups).policies[0]
    assert uncached.match.selectors[0].seen == [("Namespace gone (not cached: no labels)", None)]


def test_an_admission_policy_of_another_namespace_says_so() -> None:
    p = _compiled(policy("tenant", kind="AdmissionPolicy", namespace="team-a"))
    trace = explain_validating(request(pod()), [p], LOOKUPS).policies[0]
    assert not trace.match.selected and "namespace team-a selects only requests in its own namespace" in \
        trace.match.reason


def test_an_excluded_request_names_the_exclude_rule() -> None:
    p = _compiled(policy("excl", excludeResourceRules=[{"apiGroups": [""], "apiVersions": ["*"],
                                                        "resources": ["pods"], "operations": ["CREATE"]}]))
    trace = explain_validating(request(pod()), [p], LOOKUPS).policies[0]
    assert trace.match.reason.endswith("excluded by spec.match.excludeResourceRules[0]")


def test_the_steps_before_evaluation_are_the_engines() -> None:
    p = _compiled(SEMANTICS[9])  # params missing, Deny
    trace = explain_validating(request(pod()), [p], LOOKUPS).policies[0]
    assert trace.result == "error" and trace.steps == ["spec.paramRef: no params found: ConfigMap absent"]
    with_params = explain_validating(request(pod(images=("a", "b", "c"))), [_compiled(SEMANTICS[8])],
                                     LOOKUPS_WITH_PARAMS).policies[0]
    assert with_params.params is not None and with_params.params.value["data"] == {"max": "2"}
    assert (with_params.result, with_params.message) == ("fail", "at most 2 containers")


def test_explaining_mutations_gives_the_engines_result_and_patch() -> None:
    adds = _compiled(policy("adds", mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": "{'metadata': {'labels': {'seen': object.metadata.name}}}"}}],
        variables=[{"name": "n", "expression": "object.metadata.name"}]))
    skipped = _compiled(policy("only-db", matchConditions=[
        {"name": "db", "expression": "object.metadata.name == 'db'"}],
                               mutations=[{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}]))
    req = request(pod(name="web", labels={}))
    explained = explain_mutating(req, [adds, skipped], LOOKUPS)
    engine = evaluate_mutating(req, [adds, skipped], LOOKUPS)
    assert explained.patch == engine.patch and explained.allowed == engine.allowed
    first, second = explained.policies
    assert (first.result, first.message) == ("pass", "mutated")
    assert first.variables[0].evaluated.value is not None and first.variables[0].evaluated.value.value == "web"
    assert (second.result, second.message) == ("skip", "matchCondition db is false")


def test_an_explanation_over_its_budget_is_refused_before_anything_is_evaluated() -> None:
    p = _compiled(policy("quadratic", validations=[
        {"expression": "object.spec.containers.all(a, object.spec.containers.all(b, a.name != b.name || a == b))"}]))
    req = request(pod(images=tuple(f"i{i}" for i in range(40))))
    ctx = RequestContext(req, LOOKUPS)
    work = explain_work(build_plan(ctx.coords, [p], validating=False), ctx, Endpoint.VALIDATE)
    assert work == EXPLAIN_WORK_FACTOR * estimated_work(build_plan(ctx.coords, [p]), ctx, Endpoint.VALIDATE) > 0
    with pytest.raises(OverBudget) as refused:
        explain_validating(req, [p], LOOKUPS, work_budget=work - 1)
    assert refused.value.work == work
    assert explain_validating(req, [p], LOOKUPS, work_budget=work).policies[0].result == "pass"


def test_each_mutating_policy_of_a_chain_shows_its_own_patch() -> None:
    first = _compiled(policy("a-label", mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": "{'metadata': {'labels': {'a': 'x'}}}"}}]))
    second = _compiled(policy("b-label", mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": "{'metadata': {'labels': {'b': object.metadata.?labels.?a.orValue('none')}}}"}}]))
    req = request(pod(labels={"keep": "1"}))
    explained = explain_mutating(req, [first, second], LOOKUPS)  # evaluation order, as the index gives it
    assert explained.patch == evaluate_mutating(req, [first, second], LOOKUPS).patch
    assert [(t.policy, t.patch) for t in explained.policies] == [
        ("a-label", [{"op": "add", "path": "/metadata/labels/a", "value": "x"}]),
        ("b-label", [{"op": "add", "path": "/metadata/labels/b", "value": "x"}]),  # it saw a-label's change
    ]


def test_operands_and_values_are_bounded() -> None:
    from webhook.policy.explain.explainer import MAX_OPERANDS_PER_EXPLANATION
    from webhook.policy.explain.operands import MAX_OPERANDS
    from webhook.policy.explain.shown import MAX_ITEMS, MAX_STRING

    chain = " && ".join(f"object.metadata.name == 'n{i}'" for i in range(MAX_OPERANDS + 3))
    many = _compiled(policy("many", validations=[{"expression": chain}] * 10))
    req = request(pod(name="x" * (MAX_STRING + 50), images=tuple(f"i{i}" for i in range(MAX_ITEMS + 5))))
    trace = explain_validating(req, [many], LOOKUPS).policies[0]
    first = trace.validations[0].evaluated
    assert len(first.operands) == MAX_OPERANDS and first.more_operands == 3
    evaluated = [o for v in trace.validations for o in v.evaluated.operands if o.value is not None]
    assert len(evaluated) == MAX_OPERANDS_PER_EXPLANATION
    assert trace.validations[-1].evaluated.operands[0].note is not None

    checks = _compiled(policy("checks", validations=[{"expression": "object.metadata.name == 'short'"},
                                                     {"expression": "object.spec.containers.all(c, c.name == '')"}]))
    name, containers = explain_validating(req, [checks], LOOKUPS).policies[0].validations
    (long_name,) = name.evaluated.operands
    assert long_name.value is not None and long_name.value.truncated and long_name.value.size == MAX_STRING + 50
    assert long_name.value.value == "x" * MAX_STRING + "…"
    rng, _failing = containers.evaluated.operands
    assert rng.value is not None and rng.value.truncated and rng.value.size == MAX_ITEMS + 5
    assert len(rng.value.value) == MAX_ITEMS + 1 and rng.value.value[-1] == "… 5 more"


def test_a_variable_that_errors_is_shown_with_its_error_and_operands_and_decides_nothing_unread() -> None:
    p = _compiled(policy("v", variables=[{"name": "first", "expression": "object.spec.containers[5].name"},
                                         {"name": "count", "expression": "size(object.spec.containers)"}],
                         validations=[{"expression": "variables.count <= 3"}]))
    trace = explain_validating(request(pod()), [p], LOOKUPS).policies[0]
    first, count = trace.variables
    assert first.evaluated.error == "variables.first: Index error: index=5 size=1"
    assert [o.text for o in first.evaluated.operands] == ["object.spec.containers[5]"]
    assert count.evaluated.value is not None and count.evaluated.value.value == 1
    assert trace.result == "pass"  # the engine never reads the broken variable


SECRET_PARAMS = {"metadata": {"name": "shop", "namespace": "default", "labels": {"owner": "ops"}},
                 "data": {"max": "2", "allowed": "a,b", "token": "s3cr3t"}}
READS_SOME_PARAMS = policy(
    "x-reads-some-params", paramRef={"name": "shop", "namespace": "default"},
    variables=[{"name": "allowed", "expression": "params.data.allowed.split(',')"}],
    validations=[{"expression": "size(object.spec.containers) <= int(params.data.max)",
                  "messageExpression": "'at most ' + params.data.max"},
                 {"expression": "object.spec.containers.all(c, c.image in variables.allowed)"}])


def test_only_the_params_fields_a_policy_reads_are_shown() -> None:
    lookups = InMemoryLookups(namespaces=NAMESPACES, configmaps=[SECRET_PARAMS])
    req, candidates = request(pod(images=("a", "b", "c"))), [_compiled(READS_SOME_PARAMS)]
    trace = explain_validating(req, candidates, lookups).policies[0]
    assert trace.params is not None and trace.params.value == {"data": {"max": "2", "allowed": "a,b"}}
    assert "s3cr3t" not in str(trace.as_dict()) and "ops" not in str(trace.as_dict())
    engine, explained = _verdicts(req, candidates, lookups)  # the verdict on the fields read is the engine's
    assert engine == explained and trace.result == "fail" and trace.message.startswith("at most 2; ")
    assert trace.variables[0].evaluated.value is not None and trace.variables[0].evaluated.value.value == ["a", "b"]


def test_an_operand_shows_params_only_as_read() -> None:
    # ``params.data`` compared with a literal keeps its presence and type only: its operand shows no field of it.
    p = _compiled(policy("x-params-presence", paramRef={"name": "shop", "namespace": "default"},
                         validations=[{"expression": "params.data == null || params.data.max == '9'"}]))
    trace = explain_validating(request(pod()), [p], InMemoryLookups(configmaps=[SECRET_PARAMS])).policies[0]
    assert trace.result == "fail" and "s3cr3t" not in str(trace.as_dict()), trace.as_dict()
    assert trace.params is not None and trace.params.value == {"data": {"max": "2"}}


def test_a_policy_that_uses_params_whole_shows_them_whole() -> None:
    p = _compiled(policy("x-params-whole", paramRef={"name": "shop", "namespace": "default"},
                         validations=[{"expression": "string(params).size() < 10"}]))
    trace = explain_validating(request(pod()), [p], InMemoryLookups(configmaps=[SECRET_PARAMS])).policies[0]
    assert trace.params is not None and trace.params.value["data"]["token"] == "s3cr3t"


def test_splitting_and_compiling_operands_is_paid_from_the_work_budget() -> None:
    from webhook.policy.explain import explainer

    long = " && ".join(f"object.metadata.name != 'n{i}'" for i in range(40)) + " && object.metadata.name == 'never'"
    p = _compiled(policy("long", validations=[{"expression": f"({long}) || {j} < 0"} for j in range(8)]))
    req = request(pod())
    plan_work = explain_work(build_plan(RequestCoordinates.of(req), [p], validating=False),
                             RequestContext(req, LOOKUPS), Endpoint.VALIDATE)
    one = explainer.operand_work(f"({long}) || 0 < 0", split=True) + sum(
        explainer.operand_work(text, split=False) for text in (f"({long})", "0 < 0"))
    trace = explain_validating(req, [p], LOOKUPS, work_budget=plan_work + 3 * one).policies[0]
    explained = [v for v in trace.validations if v.evaluated.operands[0].value is not None]
    spent = [v for v in trace.validations if v.evaluated.operands[0].note == explainer._SPENT]
    assert (len(explained), len(spent)) == (3, 5), trace.as_dict()
    assert trace.result == "fail" and all(v.result == "fail" for v in trace.validations)  # the verdict is whole
    unlimited = explain_validating(req, [p], LOOKUPS).policies[0]
    assert all(v.evaluated.operands[0].value is not None for v in unlimited.validations)
