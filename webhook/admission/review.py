"""AdmissionReview wire types, parsing and response constructors (pure; no I/O).

``admission.k8s.io/v1`` and ``v1beta1`` (answered in the version they came
in). Two error channels, as kopf names them:

* a malformed *webhook call* raises :class:`ReviewError`, answered with an
  HTTP 4xx and a reason (the API server then applies the webhook's
  failurePolicy);
* a denied *API request* is a normal AdmissionResponse with
  ``allowed: false`` and ``status.code/reason/message`` (the user sees it).

Every response echoes ``request.uid``.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, cast

import orjson

from webhook.policy.request import AdmissionRequest, GroupVersionKind, GroupVersionResource, UserInfo

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


class StatusCause(TypedDict, total=False):
    """``metav1.StatusCause``: one reason a request failed (kubectl prints ``<field>: <message>``)."""

    type: str
    message: str
    field: str


class StatusDetails(TypedDict, total=False):
    """``metav1.StatusDetails``: what a denial is about (the resource, the object's name) and each cause."""

    name: str
    group: str
    kind: str
    causes: list[StatusCause]


class Status(TypedDict, total=False):
    """``metav1.Status`` subset carried by a denial (``response.status``)."""

    code: int
    reason: str
    message: str
    details: StatusDetails


class AdmissionResponse(TypedDict):
    """``AdmissionReview.response``."""

    uid: str
    allowed: bool
    status: NotRequired[Status]
    patch: NotRequired[str]
    patchType: NotRequired[Literal["JSONPatch"]]
    warnings: NotRequired[list[str]]
    auditAnnotations: NotRequired[dict[str, str]]


class ReviewError(ValueError):
    """A malformed webhook call: answer with HTTP ``http_status`` and ``reason``."""

    def __init__(self, http_status: int, reason: str) -> None:
        super().__init__(reason)
        self.http_status = http_status
        self.reason = reason


#: Optional ``request`` fields Tollgate reads, and the JSON type each must have when present (not null).
_OPTIONAL_FIELDS: tuple[tuple[str, type], ...] = (
    ("namespace", str), ("name", str), ("subResource", str), ("userInfo", dict), ("object", dict),
    ("oldObject", dict), ("dryRun", bool))


def parse_review(body: bytes) -> tuple[str, AdmissionRequest]:
    """Parse and validate an AdmissionReview body.

    Args:
        body: the raw HTTP body (UTF-8 JSON).

    Returns:
        ``(apiVersion, request)``; ``request`` is the decoded dict, checked for
        the fields Tollgate reads (types of ``uid``, ``kind``, ``resource``,
        ``operation``, ``namespace``, ``userInfo``, ``object``, ``oldObject``).

    Raises:
        ReviewError: 400 for bad JSON, wrong ``kind``/``apiVersion``, or a
            missing/ill-typed ``request`` field.
    """
    if not body:
        raise ReviewError(400, "empty body")
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ReviewError(400, f"malformed JSON: {e}") from None
    if not isinstance(review, dict):
        raise ReviewError(400, "an AdmissionReview must be a JSON object")
    if review.get("kind") != "AdmissionReview":
        raise ReviewError(400, f"kind must be AdmissionReview, got {review.get('kind')!r}"[:200])
    api_version = review.get("apiVersion")
    if api_version not in API_VERSIONS:
        raise ReviewError(400, f"apiVersion must be one of {list(API_VERSIONS)}, got {api_version!r}"[:200])
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError(400, "AdmissionReview.request is missing")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError(400, "AdmissionReview.request.uid is missing")
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise ReviewError(400, "request.operation must be CREATE, UPDATE, DELETE or CONNECT")
    get = request.get
    # Plain loops, no generators: these checks run on every review (a generator per check was half their cost).
    for field in ("kind", "resource"):
        value = get(field)
        if not isinstance(value, dict):
            raise ReviewError(400, f"request.{field} is missing or has the wrong type")
        for part in value.values():
            if not isinstance(part, str):
                raise ReviewError(400, f"request.{field} is missing or has the wrong type")
    for field, types in _OPTIONAL_FIELDS:  # inline: one function call per field was a tenth of the checks
        value = get(field)
        if value is not None and not isinstance(value, types):
            raise ReviewError(400, f"request.{field} has the wrong type")
    user = get("userInfo")
    if user:
        username = user.get("username")
        if username is not None and not isinstance(username, str):
            raise ReviewError(400, "request.userInfo.username has the wrong type")
        groups = user.get("groups")
        if groups is not None:
            if not isinstance(groups, list):
                raise ReviewError(400, "request.userInfo.groups has the wrong type")
            for group in groups:
                if not isinstance(group, str):
                    raise ReviewError(400, "request.userInfo.groups has the wrong type")
    return api_version, request  # type: ignore[return-value]


def allowed(uid: str, *, warnings: list[str] | None = None,
            audit_annotations: dict[str, str] | None = None) -> AdmissionResponse:
    """The request is admitted unchanged."""
    resp: AdmissionResponse = {"uid": uid, "allowed": True}
    if warnings:
        resp["warnings"] = warnings
    if audit_annotations:
        resp["auditAnnotations"] = audit_annotations
    return resp


def status_details(request: AdmissionRequest, causes: list[str]) -> StatusDetails:
    """``status.details`` of a policy denial of ``request``, as the API server fills it for its own policies.

    Follows the API server's ValidatingAdmissionPolicy denial
    (``admission.NewForbidden`` plus one cause per message): ``group`` and
    ``kind`` are the request's resource (``""``/``pods``), ``name`` the
    request's name, else the object's ``metadata.name`` or ``generateName``,
    else ``Unknown``; each cause carries only a message. kubectl shows a 422
    ``Invalid`` denial through these alone (``The pods "web" is invalid: :
    <message>``); without them it prints only "The request is invalid".

    Args:
        request: the AdmissionRequest denied.
        causes: one message per denying policy (``"<policy>: <message>"``).
    """
    raw = cast(dict[str, Any], request)
    resource: dict[str, Any] = raw.get("resource") or {}
    obj = raw.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        meta = {}
    name = raw.get("name") or meta.get("name") or meta.get("generateName") or "Unknown"
    return {"name": str(name), "group": str(resource.get("group", "")), "kind": str(resource.get("resource", "")),
            "causes": [{"message": message} for message in causes]}


def denied(uid: str, message: str, *, code: int = 403, reason: str = "Forbidden",
           warnings: list[str] | None = None, audit_annotations: dict[str, str] | None = None,
           details: StatusDetails | None = None) -> AdmissionResponse:
    """The request is rejected; ``message`` reaches the user (e.g. kubectl's error).

    ``details`` (see :func:`status_details`) names the object and lists each
    cause; kubectl prints a 422 ``Invalid`` denial from them.
    """
    status: Status = {"code": code, "reason": reason, "message": message}
    if details is not None:
        status["details"] = details
    resp: AdmissionResponse = {"uid": uid, "allowed": False, "status": status}
    if warnings:
        resp["warnings"] = warnings
    if audit_annotations:
        resp["auditAnnotations"] = audit_annotations
    return resp


def patched(uid: str, patch_b64: str, *, warnings: list[str] | None = None) -> AdmissionResponse:
    """The request is admitted with a base64 JSONPatch (``patchType: JSONPatch``)."""
    resp: AdmissionResponse = {"uid": uid, "allowed": True, "patch": patch_b64, "patchType": "JSONPatch"}
    if warnings:
        resp["warnings"] = warnings
    return resp


def errored(uid: str, message: str, *, code: int = 500) -> AdmissionResponse:
    """Evaluation failed and failurePolicy says deny: still a well-formed, uid-echoing response."""
    return {"uid": uid, "allowed": False, "status": {"code": code, "reason": "InternalError", "message": message}}


def review_body(api_version: str, response: AdmissionResponse) -> bytes:
    """Serialize ``{"apiVersion", "kind": "AdmissionReview", "response"}`` in the request's version."""
    return orjson.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "response": response})


__all__ = [
    "AdmissionRequest", "AdmissionResponse", "GroupVersionKind", "GroupVersionResource", "ReviewError", "Status",
    "StatusCause", "StatusDetails", "UserInfo", "allowed", "denied", "errored", "parse_review", "patched",
    "review_body", "status_details",
]
