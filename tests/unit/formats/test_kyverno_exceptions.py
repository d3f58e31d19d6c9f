"""Kyverno's CEL PolicyException (policies.kyverno.io) → a Tollgate exception: conversion, confinement, expiry.

The imported Kyverno policy is converted by the catalog and evaluated by the engine, so each test shows what
a request gets, not only what the converter returns.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.unit.policy.helpers import pod, request
from tests.unit.policy.imports_helpers import kyverno_vpol
from webhook.formats.catalog import import_policies
from webhook.formats.kyverno.exceptions import (
    KYVERNO_EXCEPTION_LABEL,
    compile_any_exception,
    compile_kyverno_exception,
    is_kyverno_exception,
)
from webhook.policy import InMemoryLookups, PolicyIndex, RequestCoordinates, compile_policy, evaluate_validating
from webhook.policy.exceptions import ExceptionCache, ExceptionSet
from webhook.policy.vocabulary import Result

T0 = datetime.datetime(2026, 11, 28, 6, 0, tzinfo=datetime.UTC)


def kyverno_exception(name: str = "debug", namespace: str = "team-a", *, version: str = "v1",
                      refs: tuple[tuple[str, str], ...] = (("ValidatingPolicy", "check-team"),),
                      **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"policyRefs": [{"kind": k, "name": n} for k, n in refs]}
    body.update(spec)
    return {"apiVersion": f"policies.kyverno.io/{version}", "kind": "PolicyException",
            "metadata": {"name": name, "namespace": namespace, "generation": 1}, "spec": body}


def exceptions(*objs: dict[str, Any]) -> ExceptionSet:
    compiled = [compile_kyverno_exception(o) for o in objs]
    assert all(c.exception is not None for c in compiled), [c.condition for c in compiled]
    return ExceptionSet.of(c.exception for c in compiled if c.exception is not None)


def decide(req: dict[str, Any], exc: ExceptionSet, *policies: dict[str, Any],
           now: datetime.datetime = T0) -> Any:
    index = PolicyIndex()
    for obj in policies or (kyverno_vpol(),):
        (imported,) = import_policies([obj]).policies
        index.upsert(imported.obj)
    return evaluate_validating(req, index.candidates(RequestCoordinates.of(req)), InMemoryLookups(),
                               exceptions=exc, now=lambda: now)


def unlabelled(namespace: str = "team-a", name: str = "debug") -> dict[str, Any]:
    return request(pod(name=name, namespace=namespace), namespace=namespace)


def test_without_an_exception_the_unlabelled_pod_is_denied() -> None:
    out = decide(unlabelled(), ExceptionSet())
    assert not out.allowed and out.results[0].result is Result.FAIL


@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1alpha1"])
def test_a_kyverno_exception_exempts_from_the_imported_validating_policy(version: str) -> None:
    out = decide(unlabelled(), exceptions(kyverno_exception(version=version)))
    assert out.allowed
    [r] = out.results
    assert r.result is Result.SKIP and r.policy == "ValidatingPolicy/check-team"
    assert r.exception == f"{KYVERNO_EXCEPTION_LABEL} team-a/debug"


def test_match_conditions_select_what_is_exempted() -> None:
    exc = exceptions(kyverno_exception(matchConditions=[
        {"name": "debug-only", "expression": "object.metadata.name.startsWith('debug')"}]))
    assert decide(unlabelled(name="debug-1"), exc).allowed
    assert not decide(unlabelled(name="web"), exc).allowed


def test_confined_to_its_own_namespace_though_kyverno_is_not() -> None:
    # Kyverno applies a PolicyException to every namespace; Tollgate keeps it to its own (tenant safety).
    exc = exceptions(kyverno_exception(namespace="team-a"))
    assert decide(unlabelled(namespace="team-a"), exc).allowed
    out = decide(unlabelled(namespace="team-b"), exc)
    assert not out.allowed and out.results[0].result is Result.FAIL


def test_a_namespaced_validating_policy_ref_names_the_twin_of_its_own_namespace() -> None:
    twin = kyverno_vpol()
    twin["kind"] = "NamespacedValidatingPolicy"
    twin["metadata"]["namespace"] = "team-a"
    result = compile_kyverno_exception(kyverno_exception(refs=(("NamespacedValidatingPolicy", "check-team"),)))
    assert result.exception is not None
    assert result.exception.policies == {"team-a/NamespacedValidatingPolicy/check-team"}
    out = decide(unlabelled(), ExceptionSet.of([result.exception]), twin)
    assert out.allowed and out.results[0].result is Result.SKIP


def test_expired_exceptions_exempt_nothing_from_the_instant_they_expire() -> None:
    exc = exceptions(kyverno_exception(expiresAt="2026-11-28T06:00:00Z"))
    before = T0 - datetime.timedelta(microseconds=1)
    assert decide(unlabelled(), exc, now=before).allowed
    assert not decide(unlabelled(), exc, now=T0).allowed


def test_exempts_from_the_named_policy_only() -> None:
    other = kyverno_vpol("no-default-sa", validations=[{"expression": "false", "message": "nope"}])
    out = decide(unlabelled(), exceptions(kyverno_exception()), kyverno_vpol(), other)
    assert not out.allowed
    by_policy = {r.policy: r.result for r in out.results}
    assert by_policy == {"ValidatingPolicy/check-team": Result.SKIP, "ValidatingPolicy/no-default-sa": Result.FAIL}


@pytest.mark.parametrize(("change", "path"), [
    ({"spec": {"policyRefs": []}}, "spec.policyRefs"),
    ({"spec": {"policyRefs": [{"kind": "ValidatingPolicy"}]}}, "spec.policyRefs[0].name"),
    ({"spec": {"policyRefs": [{"name": "p"}]}}, "spec.policyRefs[0].kind"),
    ({"spec": {"policyRefs": [{"name": "p", "kind": "MutatingPolicy"}]}}, "spec.policyRefs[0].kind"),
    ({"spec": {"policyRefs": [{"name": "p", "kind": "ValidatingPolicy"}], "images": ["nginx:*"]}}, "spec.images"),
    ({"spec": {"policyRefs": [{"name": "p", "kind": "ValidatingPolicy"}], "allowedValues": ["a"]}},
     "spec.allowedValues"),
    ({"spec": {"policyRefs": [{"name": "p", "kind": "ValidatingPolicy"}], "exceptions": []}}, "spec.exceptions"),
    ({"spec": {"policyRefs": [{"name": "p", "kind": "ValidatingPolicy"}], "reportResult": "fail"}},
     "spec.reportResult"),
    ({"spec": {"policyRefs": [{"name": "p", "kind": "ValidatingPolicy"}], "expiresAt": "tomorrow"}},
     "spec.expiresAt"),
    ({"spec": {"policyRefs": [{"name": "p", "kind": "ValidatingPolicy"}],
               "matchConditions": [{"name": "m", "expression": "object.metadata.name +"}]}},
     "spec.matchConditions[0].expression"),
    ({"apiVersion": "policies.kyverno.io/v2"}, "apiVersion"),
    ({"metadata": {"name": "e"}}, "metadata.namespace"),
])
def test_what_cannot_be_honoured_is_not_ready_at_its_spec_path(change: dict[str, Any], path: str) -> None:
    obj = {**kyverno_exception(), **change}
    result = compile_kyverno_exception(obj)
    assert result.exception is None and result.condition["status"] == "False"
    assert result.condition["message"].startswith(f"{path}:"), result.condition
    if path in ("spec.images", "spec.allowedValues"):
        assert "fine-grained exceptions" in result.condition["message"]


def test_report_result_pass_is_accepted_and_reported_as_skip() -> None:
    out = decide(unlabelled(), exceptions(kyverno_exception(reportResult="pass")))
    assert out.allowed and out.results[0].result is Result.SKIP


def test_compile_any_exception_dispatches_by_group() -> None:
    kyverno = kyverno_exception()
    tollgate = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "PolicyException",
                "metadata": {"name": "debug", "namespace": "team-a"},
                "spec": {"policies": [{"name": "no-priv"}], "reason": "TICKET-1"}}
    assert is_kyverno_exception(kyverno) and not is_kyverno_exception(tollgate)
    k, t = compile_any_exception(kyverno).exception, compile_any_exception(tollgate).exception
    assert k is not None and k.kind == KYVERNO_EXCEPTION_LABEL and k.source == kyverno
    assert t is not None and t.kind == "PolicyException"


def test_a_cache_fed_both_sources_keeps_same_named_exceptions_apart() -> None:
    cache = ExceptionCache(compile=compile_any_exception)
    tollgate = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "PolicyException",
                "metadata": {"name": "debug", "namespace": "team-a"},
                "spec": {"policies": [{"name": "no-priv"}], "reason": "TICKET-1"}}
    cache.on_add(tollgate)
    cache.on_add(kyverno_exception())
    assert len(cache.current) == 2
    assert set(cache.current.by_policy) == {"no-priv", "ValidatingPolicy/check-team"}
    cache.on_delete(kyverno_exception())
    assert set(cache.current.by_policy) == {"no-priv"}


def test_the_imported_policy_compiles() -> None:
    (imported,) = import_policies([kyverno_vpol()]).policies
    assert compile_policy(imported.obj).policy is not None


def test_an_evaluation_worker_compiles_kyverno_exceptions_from_their_source() -> None:
    import socket

    from webhook.admission.isolation.worker import Worker
    from webhook.admission.limits import OutputLimits

    compiled = compile_kyverno_exception(kyverno_exception())
    assert compiled.exception is not None and compiled.exception.source is not None
    a, b = socket.socketpair()
    try:
        worker = Worker(a, OutputLimits())
        exc = worker.exception_set([dict(compiled.exception.source)])
    finally:
        a.close()
        b.close()
    assert decide(unlabelled(), exc).results[0].exception == f"{KYVERNO_EXCEPTION_LABEL} team-a/debug"
