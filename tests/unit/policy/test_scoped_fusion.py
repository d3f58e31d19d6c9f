"""Scoped fused groups: a policy with params, references, matchConditions or auditAnnotations as ONE program.

Each case is decided three ways (per policy, by the plan, by the plan with the decision memo, twice) and the
outcomes must agree; the cases that must deny deny. An earlier attempt evaluated such a program without the
policy's scope, so ``params`` was null and a params policy passed what its params deny: these are the tests
that catch it (never fail open).
"""

from __future__ import annotations

from typing import Any

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import InMemoryLookups, PolicyIndex, RequestCoordinates, evaluate_validating
from webhook.policy.engine import RequestContext, ValidationOutcome
from webhook.policy.engine.fused import fused_passes
from webhook.policy.lookups import CONFIGMAPS
from webhook.policy.memo import DecisionMemo
from webhook.policy.model import Reference
from webhook.policy.vocabulary import Result

CONFIGMAP_REF = Reference("v1", "configmaps")


def _configmap(registries: str, name: str = "allowed", namespace: str = "tollgate-system") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {"registries": registries}}


def params_policy(*, not_found: str = "Deny", **spec: Any) -> dict[str, Any]:
    """Images must start with one of the registries its params list; an auditAnnotation names them."""
    return policy("by-params", failurePolicy="Fail",
                  paramRef={"name": "allowed", "namespace": "tollgate-system", "parameterNotFoundAction": not_found},
                  variables=[{"name": "registries", "expression": "params.data.registries.split(',')"}],
                  validations=[{"expression": "object.spec.containers.all(c, variables.registries.exists(r, "
                                              "c.image.startsWith(r)))", "message": "registry not allowed"}],
                  auditAnnotations=[{"key": "registries", "valueExpression": "variables.registries.join(',')"}],
                  **spec)


def references_policy(**spec: Any) -> dict[str, Any]:
    """As :func:`params_policy`, the list read by ``resource.Get`` from the ConfigMap cache."""
    return policy("by-references", failurePolicy="Fail",
                  references=[{"apiVersion": "v1", "resource": "configmaps"}],
                  variables=[{"name": "cm", "expression": 'resource.Get("v1", "configmaps", "tollgate-system", '
                                                          '"allowed")'}],
                  validations=[{"expression": "variables.cm != null && object.spec.containers.all(c, "
                                              "variables.cm.data.registries.split(',').exists(r, "
                                              "c.image.startsWith(r)))", "message": "registry not allowed"}],
                  **spec)


def _outcome(out: ValidationOutcome) -> tuple[Any, ...]:
    return (out.allowed, out.code, out.reason, out.message, out.warnings, out.audit_annotations,
            [(r.policy, r.result, r.message, sorted(r.actions)) for r in out.results])


def decide(doc: dict[str, Any], lookups: InMemoryLookups, req: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """The outcome, the same on every path; asserts the plan has the policy in a scoped group."""
    req = req or request(pod(images=("good.io/app:1",)))
    index = PolicyIndex()
    index.upsert(doc)
    coords = RequestCoordinates.of(req)
    plan = index.plan(coords).compile_all()
    assert [g.scoped is not None and g.program is not None for g in plan.groups] == [True]
    per_policy = _outcome(evaluate_validating(req, index.candidates(coords), lookups))
    memo = DecisionMemo()
    for memo_or_none in (None, memo, memo):
        assert _outcome(evaluate_validating(req, plan, lookups, memo=memo_or_none)) == per_policy
    return per_policy


def fused_count(doc: dict[str, Any], lookups: InMemoryLookups, req: dict[str, Any]) -> int:
    """How many policies the fused programs proved passing for ``req``."""
    index = PolicyIndex()
    index.upsert(doc)
    plan = index.plan(RequestCoordinates.of(req)).compile_all()
    return len(fused_passes(plan, RequestContext(req, lookups), None, annotations={}))


def good(registries: str = "good.io/") -> InMemoryLookups:
    cm = _configmap(registries)
    return InMemoryLookups(configmaps=[cm], objects={CONFIGMAP_REF: [cm]})


BAD_POD = request(pod(images=("good.io/app:1", "evil.io/miner:1")))
GOOD_POD = request(pod(images=("good.io/app:1",)))


def test_a_params_policy_whose_params_deny_denies() -> None:
    allowed, *_ = decide(params_policy(), good(), BAD_POD)
    assert allowed is False
    # Params that allow the image: the scoped program proves the pass, and the annotation is carried.
    out = decide(params_policy(), good("good.io/,evil.io/"), BAD_POD)
    assert out[0] is True and out[5] == {"by-params.registries": "good.io/,evil.io/"}
    assert fused_count(params_policy(), good("good.io/,evil.io/"), BAD_POD) == 1
    # The same object with params that deny is never proved passing.
    assert fused_count(params_policy(), good(), BAD_POD) == 0


def test_a_references_policy_whose_referenced_object_denies_denies() -> None:
    allowed, *_ = decide(references_policy(), good(), BAD_POD)
    assert allowed is False
    # Not cached at all: variables.cm is null, the policy denies.
    allowed, *_ = decide(references_policy(), InMemoryLookups(objects={CONFIGMAP_REF: []}), GOOD_POD)
    assert allowed is False
    assert decide(references_policy(), good(), GOOD_POD)[0] is True
    assert fused_count(references_policy(), good(), GOOD_POD) == 1


def test_a_match_condition_that_errors_is_answered_per_failure_policy() -> None:
    doc = params_policy(matchConditions=[{"name": "labelled", "expression": "object.metadata.labels['x'] == 'y'"}])
    allowed, _, _, message, *_ = decide(doc, good("good.io/,evil.io/"), BAD_POD)
    assert allowed is False and "spec.matchConditions[0].expression" in message


def test_a_false_match_condition_skips_not_passes() -> None:
    doc = params_policy(matchConditions=[{"name": "never", "expression": "object.metadata.name == 'other'"}])
    out = decide(doc, good("good.io/,evil.io/"), BAD_POD)
    assert out[0] is True and [r[1] for r in out[6]] == [Result.SKIP]
    assert fused_count(doc, good("good.io/,evil.io/"), BAD_POD) == 0
    # True, the policy is evaluated: its params deny.
    doc = params_policy(matchConditions=[{"name": "always", "expression": "object.metadata.name == 'web'"}])
    assert decide(doc, good(), BAD_POD)[0] is False
    assert fused_count(doc, good(), GOOD_POD) == 1


def test_unsynced_caches_answer_per_on_unsynced() -> None:
    unsynced = InMemoryLookups(configmaps=[_configmap("good.io/")], objects={CONFIGMAP_REF: [_configmap("good.io/")]},
                               unsynced=[CONFIGMAPS, CONFIGMAP_REF.cache])
    for doc in (params_policy(onUnsynced="Deny"), references_policy(onUnsynced="Deny")):
        allowed, _, _, message, *_ = decide(doc, unsynced, GOOD_POD)
        assert allowed is False and "has not synced" in message
        assert fused_count(doc, unsynced, GOOD_POD) == 0


def test_params_not_found_under_deny_is_an_error_per_failure_policy() -> None:
    allowed, _, _, message, *_ = decide(params_policy(), InMemoryLookups(), GOOD_POD)
    assert allowed is False and "no params found" in message
    assert fused_count(params_policy(), InMemoryLookups(), GOOD_POD) == 0
    out = decide(params_policy(not_found="Allow"), InMemoryLookups(), GOOD_POD)
    assert out[0] is True and [r[1] for r in out[6]] == [Result.SKIP]


def test_an_audit_annotation_that_errors_is_reported_as_the_per_policy_path_does() -> None:
    doc = params_policy()
    doc["spec"]["auditAnnotations"] = [{"key": "first", "valueExpression": "'ok'"},
                                       {"key": "broken", "valueExpression": "params.data.nope"}]
    out = decide(doc, good(), GOOD_POD)
    assert out[0] is False and out[5] == {"by-params.first": "ok"}
    assert fused_count(doc, good(), GOOD_POD) == 0


def test_without_an_annotations_dict_a_policy_with_audit_annotations_is_left_per_policy() -> None:
    index = PolicyIndex()
    index.upsert(params_policy())
    plan = index.plan(RequestCoordinates.of(GOOD_POD)).compile_all()
    assert fused_passes(plan, RequestContext(GOOD_POD, good()), None) == {}


def test_a_pass_is_never_remembered_across_params_or_referenced_objects() -> None:
    for doc in (params_policy(), references_policy()):
        index = PolicyIndex()
        index.upsert(doc)
        plan = index.plan(RequestCoordinates.of(BAD_POD)).compile_all()
        memo = DecisionMemo()
        for _ in range(3):
            assert evaluate_validating(BAD_POD, plan, good("good.io/,evil.io/"), memo=memo).allowed
        # The same object, the list edited: decided on the new list, not on a remembered pass.
        assert not evaluate_validating(BAD_POD, plan, good(), memo=memo).allowed


def test_a_pass_carries_its_audit_annotations_on_every_request_the_memo_sees() -> None:
    doc = policy("annotated", validations=[{"expression": "object.metadata.name == 'web'"}],
                 auditAnnotations=[{"key": "images", "valueExpression": "object.spec.containers[0].image"}])
    out = decide(doc, InMemoryLookups(), GOOD_POD)
    assert out[0] is True and out[5] == {"annotated.images": "good.io/app:1"}


def test_a_scoped_group_reached_after_the_deadline_is_answered_as_the_per_policy_path_does() -> None:
    index = PolicyIndex()
    index.upsert(references_policy())
    plan = index.plan(RequestCoordinates.of(GOOD_POD)).compile_all()
    # The deadline passes after fused_passes' own first check: the scoped group must not be evaluated.
    ticks = iter([0.0])
    ctx = RequestContext(GOOD_POD, good(), deadline=1.0, clock=lambda: next(ticks, 2.0))
    assert fused_passes(plan, ctx, None, annotations={}) == {}
    assert fused_passes(plan, RequestContext(GOOD_POD, good(), deadline=1.0, clock=lambda: 0.0), None,
                        annotations={}) != {}
