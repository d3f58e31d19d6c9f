"""AdmissionHandler: engine outcome → AdmissionResponse, and engine failures per failurePolicy (no sockets)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.admission import handler as handler_module
from webhook.admission.handler import AdmissionHandler
from webhook.admission.patch import decode_patch
from webhook.policy import PolicyIndex
from webhook.policy.lookups import InMemoryLookups

NO_PRIVILEGED = policy("no-privileged", validations=[{
    "expression": "object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))",
    "message": "privileged containers are not allowed"}])
ADD_LABEL = policy("add-label", operations=("CREATE",), mutations=[{
    "patchType": "ApplyConfiguration",
    "applyConfiguration": {"expression": "{'metadata': {'labels': {'team': 'a'}}}"}}])


def make(*policies: dict[str, Any]) -> AdmissionHandler:
    index = PolicyIndex()
    for p in policies:
        assert index.upsert(p).result.policy is not None
    return AdmissionHandler(index, InMemoryLookups(namespaces=[{"metadata": {"name": "default"}}]))


def req(obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
    r = request(obj, **kw)
    r.setdefault("uid", "uid-1")
    return r


def test_validate_denies_with_the_policy_message_and_echoes_the_uid() -> None:
    h = make(NO_PRIVILEGED)
    d = h.validate(req(pod(privileged=True)))  # type: ignore[arg-type]
    assert d.decision == "denied"
    assert d.response["uid"] == "uid-1" and d.response["allowed"] is False
    assert "privileged containers are not allowed" in d.response["status"]["message"]
    assert [(r.policy, r.result) for r in d.results] == [("no-privileged", "fail")]
    assert h.validate(req(pod())).decision == "allowed"  # type: ignore[arg-type]


def test_mutate_returns_a_jsonpatch() -> None:
    d = make(ADD_LABEL).mutate(req(pod()))  # type: ignore[arg-type]
    assert d.decision == "patched" and d.response["patchType"] == "JSONPatch"
    assert {"op": "add", "path": "/metadata/labels", "value": {"team": "a"}} in decode_patch(d.response["patch"])


def _explode(*_a: Any, **_kw: Any) -> Any:
    raise RuntimeError("engine bug")


@pytest.mark.parametrize("endpoint", ["validate", "mutate"])
@pytest.mark.parametrize(("failure_policies", "allowed"), [
    (("Fail",), False), (("Ignore",), True), (("Ignore", "Fail"), False)])
def test_engine_exception_is_answered_per_failure_policy(monkeypatch: pytest.MonkeyPatch, endpoint: str,
                                                         failure_policies: tuple[str, ...], allowed: bool) -> None:
    monkeypatch.setattr(handler_module, f"evaluate_{'validating' if endpoint == 'validate' else 'mutating'}",
                        _explode)
    h = make(*(policy(f"p{i}", failurePolicy=fp) for i, fp in enumerate(failure_policies)))
    d = getattr(h, endpoint)(req(pod()))
    assert d.response["uid"] == "uid-1"
    assert d.response["allowed"] is allowed
    assert {r.result for r in d.results} == {"error"}
    if allowed:
        assert "engine bug" in d.response["warnings"][0]
    else:
        assert d.decision == "error" and d.response["status"]["code"] == 500
        assert "engine bug" in d.response["status"]["message"]


def test_index_failure_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    h = make(policy("p", failurePolicy="Ignore"))
    monkeypatch.setattr(h.index, "candidates", _explode)
    d = h.validate(req(pod()))  # type: ignore[arg-type]
    assert d.response == {"uid": "uid-1", "allowed": False,
                          "status": {"code": 500, "reason": "InternalError",
                                     "message": "tollgate: evaluation failed: RuntimeError: engine bug"}}


def annotate(name: str, size: int, *, failure_policy: str = "Ignore", **kw: Any) -> dict[str, Any]:
    return policy(name, operations=("CREATE",), failurePolicy=failure_policy, mutations=[{
        "patchType": "ApplyConfiguration",
        "applyConfiguration": {"expression": "{'metadata': {'annotations': {'" + name + "': '" + "x" * size + "'}}}"}}],
        **kw)


def limited(*policies: dict[str, Any], max_patch_bytes: int) -> AdmissionHandler:
    h = make(*policies)
    return AdmissionHandler(h.index, h.lookups, max_patch_bytes=max_patch_bytes)


def test_an_ignore_policys_patch_over_the_limit_is_dropped_with_a_warning_and_the_others_kept() -> None:
    tenant = annotate("bloat", 4000, kind="AdmissionPolicy", namespace="default")
    h = limited(tenant, annotate("small", 10), ADD_LABEL, max_patch_bytes=2000)
    d = h.mutate(req(pod()))  # type: ignore[arg-type]
    assert d.decision == "patched"
    ops = decode_patch(d.response["patch"])
    assert {"op": "add", "path": "/metadata/labels", "value": {"team": "a"}} in ops
    assert any(op["path"].startswith("/metadata/annotations") and "small" in str(op) for op in ops)
    assert "bloat" not in str(ops)
    [warning] = d.response["warnings"]
    assert warning.startswith("default/bloat: JSONPatch of ") and "exceeds the 2000-byte limit" in warning
    assert warning.endswith("(failurePolicy: Ignore)")
    results = {r.policy: r for r in d.results}
    assert results["default/bloat"].result == "error"
    assert results["default/bloat"].actions == frozenset({"Warn", "Ignored"})
    assert results["add-label"].result == results["small"].result == "pass"


def test_a_fail_policys_patch_over_the_limit_fails_the_review() -> None:
    h = limited(annotate("bloat", 4000, failure_policy="Fail"), ADD_LABEL, max_patch_bytes=2000)
    d = h.mutate(req(pod()))  # type: ignore[arg-type]
    assert d.decision == "error" and d.response["allowed"] is False
    assert d.response["status"]["code"] == 500
    assert "exceeds the 2000-byte limit" in d.response["status"]["message"]
    assert "patch" not in d.response


def test_a_patch_within_the_limit_is_untouched() -> None:
    d = limited(annotate("small", 10), ADD_LABEL, max_patch_bytes=2000).mutate(req(pod()))  # type: ignore[arg-type]
    assert d.decision == "patched" and "warnings" not in d.response
    assert {r.result for r in d.results} == {"pass"}


def test_decide_routes_by_endpoint_and_refuses_a_misspelt_one() -> None:
    h = make(NO_PRIVILEGED, ADD_LABEL)
    assert h.decide("validate", req(pod(privileged=True))).decision == "denied"  # type: ignore[arg-type]
    assert h.decide("mutate", req(pod(privileged=True))).decision == "patched"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="muate"):
        h.decide("muate", req(pod()))  # type: ignore[arg-type]
