"""EvaluationPool and IsolatedEvaluator with real worker processes (no network sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest

from tests.unit.policy.helpers import pod, policy
from tests.unit.policy.helpers import request as raw_request
from webhook.admission.handler import AdmissionHandler
from webhook.admission.isolation.evaluators import IsolatedEvaluator
from webhook.admission.isolation.pool import EvaluationAborted, EvaluationPool
from webhook.admission.limits import OutputLimits
from webhook.admission.patch import decode_patch
from webhook.admission.review import AdmissionRequest
from webhook.policy import PolicyIndex
from webhook.policy.lookups import InMemoryLookups
from webhook.policy.model import Reference
from webhook.policy.request import RequestCoordinates
from webhook.server.settings import DEFAULTS

NAMESPACES = [{"metadata": {"name": "default", "labels": {"team": "a"}}}]


def request(obj: dict[str, Any]) -> AdmissionRequest:
    return cast(AdmissionRequest, raw_request(obj))


@asynccontextmanager
async def evaluator(*policies: dict[str, Any], limits: OutputLimits | None = None,
                    configmaps: tuple[dict[str, Any], ...] = (), objects: dict[Reference, Any] | None = None,
                    **pool_options: Any) -> AsyncIterator[IsolatedEvaluator]:
    index = PolicyIndex()
    for p in policies:
        index.upsert(p)
    handler = AdmissionHandler(index, InMemoryLookups(namespaces=NAMESPACES, configmaps=configmaps, objects=objects))
    pool = EvaluationPool(workers=1, memory_limit_bytes=DEFAULTS.eval_memory_limit_bytes, limits=limits,
                          **pool_options)
    await pool.start()
    try:
        yield IsolatedEvaluator(handler, pool)
    finally:
        await pool.close()


async def test_a_changed_policy_reaches_the_worker() -> None:
    deny_priv = policy("p", validations=[{"expression": "!object.spec.containers.exists(c, "
                                                        "c.?securityContext.?privileged.orValue(false))"}])
    async with evaluator(deny_priv) as ev:
        assert (await ev("validate", request(pod(privileged=True)), 5)).decision == "denied"
        ev.handler.index.upsert(policy("p", validations=[{"expression": "true"}]))
        assert (await ev("validate", request(pod(privileged=True)), 5)).decision == "allowed"
        ev.handler.index.remove("p")
        assert (await ev("validate", request(pod(privileged=True)), 5)).results == ()


PODS_CREATE = RequestCoordinates.of({"resource": {"group": "", "version": "v1", "resource": "pods"},
                                     "operation": "CREATE"})


async def test_a_worker_that_lost_a_policy_asks_for_it_again() -> None:
    async with evaluator(policy("p", validations=[{"expression": "object.metadata.name == 'web'"}])) as ev:
        token = ev._token(ev.handler.index.candidates(PODS_CREATE)[0])
        assert token is not None
        proc = ev.pool._idle.get_nowait()
        proc.known.add(token[0])  # the server believes the worker has it; the worker does not
        ev.pool._idle.put_nowait(proc)
        decision = await ev("validate", request(pod(name="other")), 5)
        assert decision.decision == "denied"


async def test_lookups_are_answered_from_the_servers_caches() -> None:
    params = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "limits", "namespace": "default", "labels": {"tollgate.dev/params": "true"}},
              "data": {"max": "1"}}
    p = policy("p", paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
               paramRef={"selector": {"matchLabels": {"tollgate.dev/params": "true"}}, "namespace": "default"},
               validations=[{"expression": "object.spec.containers.size() <= int(params[0].data.max)",
                             "messageExpression": "'team ' + namespaceObject.metadata.labels.team"}])
    async with evaluator(p, configmaps=(params,)) as ev:
        decision = await ev("validate", request(pod(images=("a", "b"))), 5)
    assert decision.decision == "denied"
    assert "team a" in decision.response["status"]["message"]


async def test_reference_reads_are_answered_from_the_servers_caches() -> None:
    # resource.Get / resource.List in a worker are round trips to the server's caches (a labels map included).
    deployments = Reference("apps/v1", "deployments")
    web = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "default", "labels": {"tier": "web"}}}
    p = policy("p", references=[{"apiVersion": "apps/v1", "resource": "deployments",
                                 "indexes": [{"name": "tier", "expression": "object.metadata.labels.tier"}]}],
               validations=[{"expression": 'resource.List("apps/v1", "deployments", "default", {"tier": "web"})'
                                           '.items.size() == 1'},
                            {"expression": 'resource.ByIndex("apps/v1", "deployments", "tier", "web").items'
                                           '.map(d, d.metadata.name) == ["web"]'},
                            {"expression": 'resource.Get("apps/v1", "deployments", "default", "web") == null',
                             "message": "web exists"}])
    async with evaluator(p, objects={deployments: [web]}) as ev:
        decision = await ev("validate", request(pod()), 5)
    assert decision.decision == "denied"
    assert decision.response["status"]["message"] == "p: web exists"


@pytest.mark.parametrize(("failure_policy", "allowed"), [("Fail", False), ("Ignore", True)])
async def test_a_patch_over_the_cap_is_answered_per_failure_policy(failure_policy: str, allowed: bool) -> None:
    many = policy("m", failurePolicy=failure_policy, mutations=[{
        "patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": "{'metadata': {'annotations': {'big': object.metadata.name + '" + "x" * 2000 + "'}}}"}}])
    async with evaluator(many, limits=OutputLimits(max_patch_bytes=1000)) as ev:
        decision = await ev("mutate", request(pod()), 5)
    assert decision.response["allowed"] is allowed
    assert "patch" not in decision.response
    text = decision.response.get("status", {}).get("message", "") or " ".join(decision.response.get("warnings", []))
    assert "exceeds the 1000-byte limit" in text


async def test_a_patch_within_the_cap_is_sent() -> None:
    label = policy("m", mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": "{'metadata': {'labels': {'team': 'a'}}}"}}])
    async with evaluator(label) as ev:
        decision = await ev("mutate", request(pod()), 5)
    assert decision.decision == "patched"
    assert decode_patch(decision.response["patch"]) == [{"op": "add", "path": "/metadata/labels",
                                                         "value": {"team": "a"}}]


async def test_no_free_worker_before_the_deadline_is_busy() -> None:
    pool = EvaluationPool(workers=1, memory_limit_bytes=DEFAULTS.eval_memory_limit_bytes)
    await pool.start()
    try:
        held = pool._idle.get_nowait()
        with pytest.raises(EvaluationAborted) as e:
            await pool.evaluate("validate", raw_request(pod()), [], InMemoryLookups(), 0.05)
        assert e.value.reason == "busy"
        pool._idle.put_nowait(held)
    finally:
        await pool.close()


class BrokenLookups(InMemoryLookups):
    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise KeyError("cache gone")


@pytest.mark.parametrize(("failure_policy", "allowed"), [("Fail", False), ("Ignore", True)])
async def test_a_failing_cache_read_is_answered_per_failure_policy(failure_policy: str, allowed: bool) -> None:
    p = policy("p", failurePolicy=failure_policy, paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
               paramRef={"name": "limits", "namespace": "default"},
               validations=[{"expression": "params.data.max == '1'"}])
    async with evaluator(p) as ev:
        ev.handler.lookups = BrokenLookups(namespaces=NAMESPACES)
        decision = await ev("validate", request(pod()), 5)
        assert decision.response["allowed"] is allowed
        assert "cache gone" in str(decision.response)
        # The worker survived: the next review is evaluated normally.
        ev.handler.lookups = InMemoryLookups(namespaces=NAMESPACES)
        assert (await ev("validate", request(pod()), 5)).response["uid"] == "uid-1"


async def test_a_worker_holding_too_much_memory_is_replaced_after_answering() -> None:
    restarts: list[str] = []
    deny = policy("p", validations=[{"expression": "object.metadata.name == 'web'"}])
    async with evaluator(deny, recycle_rss_bytes=1, on_restart=restarts.append) as ev:
        for name, expected in (("web", "allowed"), ("other", "denied"), ("web", "allowed")):
            decision = await ev("validate", request(pod(name=name)), 10)
            assert decision.decision == expected  # every answer is still used
        assert restarts == ["recycled"] * 3
        # The replacement compiled the policy before it joined the idle queue.
        replacement = await asyncio.wait_for(ev.pool._idle.get(), 30)
        token = ev._token(ev.handler.index.candidates(PODS_CREATE)[0])
        assert token is not None and token[0] in replacement.known
        ev.pool._idle.put_nowait(replacement)


async def test_a_worker_evaluated_denial_keeps_each_policys_code_and_reason() -> None:
    invalid = policy("needs-team", validations=[{"expression": "has(object.metadata.labels)", "reason": "Invalid",
                                                 "message": "a team label is required"}])
    async with evaluator(invalid) as ev:
        decision = await ev("validate", request(pod()), 5)
    assert decision.response["status"]["code"] == 422
    assert decision.response["status"]["reason"] == "Invalid"
    [result] = decision.results
    assert (result.policy, result.result, result.code, result.reason) == ("needs-team", "fail", 422, "Invalid")
    assert result.actions == frozenset({"Deny"})


async def test_a_tenant_patch_over_the_cap_under_ignore_loses_only_its_own_changes() -> None:
    tenant = policy("bloat", kind="AdmissionPolicy", namespace="default", failurePolicy="Ignore", mutations=[{
        "patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": "{'metadata': {'annotations': {'big': '" + "x" * 2000 + "'}}}"}}])
    label = policy("label", mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": "{'metadata': {'labels': {'team': 'a'}}}"}}])
    async with evaluator(tenant, label, limits=OutputLimits(max_patch_bytes=1000)) as ev:
        decision = await ev("mutate", request(pod()), 5)
    assert decision.decision == "patched"
    assert decode_patch(decision.response["patch"]) == [{"op": "add", "path": "/metadata/labels",
                                                         "value": {"team": "a"}}]
    assert "default/bloat" in decision.response["warnings"][0]
