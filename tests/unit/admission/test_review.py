"""AdmissionReview parsing and response constructors (pure; no sockets).

Hostile inputs follow controller-runtime's pkg/webhook/admission/http_test.go:
empty body, bad JSON, wrong kind/apiVersion, missing request or uid, v1beta1
vs v1, and a uid in every reply.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from webhook.admission.review import (
    ReviewError,
    allowed,
    denied,
    errored,
    parse_review,
    patched,
    review_body,
    status_details,
)

REQUEST: dict[str, Any] = {
    "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
    "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"},
    "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
    "requestResource": {"group": "", "version": "v1", "resource": "pods"},
    "name": "web", "namespace": "default", "operation": "CREATE",
    "userInfo": {"username": "alice", "uid": "u1", "groups": ["system:authenticated"], "extra": {"k": ["v"]}},
    "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}},
    "oldObject": None, "dryRun": False,
    "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
}


def body(request: Any = None, *, api_version: str = "admission.k8s.io/v1", kind: str = "AdmissionReview",
         drop: str | None = None) -> bytes:
    review: dict[str, Any] = {"apiVersion": api_version, "kind": kind,
                              "request": copy.deepcopy(REQUEST) if request is None else request}
    if drop:
        del review[drop]
    return orjson.dumps(review)


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_both_versions_parse_and_are_answered_in_their_own(api_version: str) -> None:
    version, request = parse_review(body(api_version=api_version))
    assert version == api_version
    assert request["uid"] == REQUEST["uid"] and request["userInfo"]["username"] == "alice"
    out = orjson.loads(review_body(version, allowed(request["uid"])))
    assert out == {"apiVersion": api_version, "kind": "AdmissionReview",
                   "response": {"uid": REQUEST["uid"], "allowed": True}}


def test_delete_with_null_object_and_connect_parse() -> None:
    delete = dict(REQUEST, operation="DELETE", object=None, oldObject={"kind": "Pod"},
                  options={"kind": "DeleteOptions"})
    assert parse_review(body(delete))[1]["object"] is None
    connect = dict(REQUEST, operation="CONNECT", subResource="exec", object={"kind": "PodExecOptions"})
    assert parse_review(body(connect))[1]["subResource"] == "exec"


def _with(**changes: Any) -> dict[str, Any]:
    req = copy.deepcopy(REQUEST)
    for k, v in changes.items():
        if v is _MISSING:
            req.pop(k, None)
        else:
            req[k] = v
    return req


_MISSING = object()


@pytest.mark.parametrize(("raw", "reason"), [
    (b"", "empty body"),
    (b"{", "malformed JSON"),
    (b"\xff\xfe{}", "malformed JSON"),  # invalid UTF-8
    (b'{"a": 1} trailing', "malformed JSON"),
    (b"[]", "must be a JSON object"),
    (b"null", "must be a JSON object"),
    (b'"AdmissionReview"', "must be a JSON object"),
    (body(kind="Pod"), "kind must be AdmissionReview"),
    (body(api_version="admission.k8s.io/v2"), "apiVersion must be one of"),
    (body(api_version="v1"), "apiVersion must be one of"),
    (body(drop="request"), "request is missing"),
    (body([1, 2]), "request is missing"),
    (body(_with(uid=_MISSING)), "uid is missing"),
    (body(_with(uid="")), "uid is missing"),
    (body(_with(uid=42)), "uid is missing"),
    (body(_with(operation="PATCH")), "operation"),
    (body(_with(operation=["CREATE"])), "operation"),
    (body(_with(kind="Pod")), "request.kind"),
    (body(_with(resource={"resource": 1})), "request.resource"),
    (body(_with(namespace=7)), "request.namespace"),
    (body(_with(name={})), "request.name"),
    (body(_with(subResource=[])), "request.subResource"),
    (body(_with(userInfo="alice")), "request.userInfo"),
    (body(_with(userInfo={"username": 1})), "request.userInfo.username"),
    (body(_with(userInfo={"username": "a", "groups": "g"})), "request.userInfo.groups"),
    (body(_with(userInfo={"username": "a", "groups": [1]})), "request.userInfo.groups"),
    (body(_with(object=[])), "request.object"),
    (body(_with(oldObject="x")), "request.oldObject"),
    (body(_with(dryRun="true")), "request.dryRun"),
])
def test_malformed_reviews_raise_400_with_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(ReviewError) as info:
        parse_review(raw)
    assert info.value.http_status == 400
    assert reason in info.value.reason


def test_reason_does_not_echo_a_huge_kind() -> None:
    with pytest.raises(ReviewError) as info:
        parse_review(body(kind="K" * 100_000))
    assert len(info.value.reason) <= 200


def test_denied_carries_status_warnings_and_audit_annotations() -> None:
    resp = denied("u", "no privileged containers", code=422, reason="Invalid", warnings=["w"],
                  audit_annotations={"tollgate.dev/p": "{}"})
    assert resp == {"uid": "u", "allowed": False,
                    "status": {"code": 422, "reason": "Invalid", "message": "no privileged containers"},
                    "warnings": ["w"], "auditAnnotations": {"tollgate.dev/p": "{}"}}
    assert denied("u", "m")["status"] == {"code": 403, "reason": "Forbidden", "message": "m"}


def kubectl_prints(status: dict[str, Any]) -> str:
    """What kubectl (1.20 and later, ``cmdutil.CheckErr``) prints for a 422 ``Invalid`` error, transcribed."""
    details = status.get("details")
    if details is None:
        return "The request is invalid"
    head = f'The {details.get("kind", "")} "{details.get("name", "")}" is invalid'
    causes = list(dict.fromkeys(f'{c.get("field", "")}: {c.get("message", "")}' for c in details.get("causes", [])))
    if not causes:
        return head
    if len(causes) == 1:
        return f"{head}: {causes[0]}"
    return f"{head}: \n" + "\n".join(f"* {c}" for c in causes)


def test_an_invalid_denial_carries_details_kubectl_prints_the_policy_messages_from() -> None:
    causes = ["needs-team: a team label is required", "no-latest: image tags must be pinned"]
    resp = denied("u", "; ".join(causes), code=422, reason="Invalid",
                  details=status_details(REQUEST, causes))  # type: ignore[arg-type]
    assert resp["status"]["details"] == {"name": "web", "group": "", "kind": "pods",
                                         "causes": [{"message": c} for c in causes]}
    assert kubectl_prints(dict(resp["status"])) == (
        'The pods "web" is invalid: \n* : needs-team: a team label is required\n'
        "* : no-latest: image tags must be pinned")
    assert kubectl_prints({"code": 422, "reason": "Invalid", "message": "m"}) == "The request is invalid"


@pytest.mark.parametrize(("changes", "name"), [
    ({"name": ""}, "web"),
    ({"name": "", "object": {"metadata": {"generateName": "web-"}}}, "web-"),
    ({"name": None, "object": None}, "Unknown"),
])
def test_details_name_the_object_as_the_api_server_does_before_a_name_is_generated(
        changes: dict[str, Any], name: str) -> None:
    details = status_details({**REQUEST, **changes}, ["p: m"])  # type: ignore[typeddict-item]
    assert details["name"] == name


def test_allowed_omits_empty_optional_fields() -> None:
    assert allowed("u", warnings=[], audit_annotations={}) == {"uid": "u", "allowed": True}
    assert allowed("u", warnings=["w"])["warnings"] == ["w"]


def test_patched_and_errored() -> None:
    assert patched("u", "W10=") == {"uid": "u", "allowed": True, "patch": "W10=", "patchType": "JSONPatch"}
    err = errored("u", "boom")
    assert err["uid"] == "u" and err["allowed"] is False
    assert err["status"] == {"code": 500, "reason": "InternalError", "message": "boom"}
