"""Hostile AdmissionReview bodies over a real TLS connection (property-based, CI-sized).

Every body gets an HTTP 4xx with a reason, or a 200 AdmissionResponse that
echoes ``request.uid``; never a 5xx, a crash or a hang. ``bench/fuzz_admission.py``
runs the same property with many more examples.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.component.server.conftest import Served
from tests.component.server.test_admission_tls import (
    PRIVILEGED_POLICY,
    pod_create,
    start,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20,
)
FIELDS = ["uid", "kind", "resource", "subResource", "namespace", "name", "operation", "userInfo", "object",
          "oldObject", "dryRun", "options", "requestKind"]


def corrupted_review(data: st.DataObject) -> bytes:
    request: dict[str, Any] = pod_create("fuzz", privileged=data.draw(st.booleans()))
    for field in data.draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        request[field] = data.draw(json_values)
    if data.draw(st.booleans()):
        path = data.draw(st.sampled_from([("object", "spec"), ("object", "metadata"), ("userInfo", "groups"),
                                          ("object", "spec", "containers")]))
        node: Any = request
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node[path[-1]] = data.draw(json_values)
    review = {"apiVersion": data.draw(st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "v1"])),
              "kind": "AdmissionReview", "request": request}
    body = json.dumps(review).encode()
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(body))))
    if cut is not None:
        body = body[:cut]
    if data.draw(st.integers(0, 9)) == 0:
        body = body.replace(b'"fuzz"', b'"\xff\xfe"')  # invalid UTF-8
    return body


async def check(served: Served, body: bytes, content_type: str = "application/json") -> None:
    status, reply = await served.post("/validate", body, headers={"Content-Type": content_type})
    assert status < 500, (status, reply, body[:200])
    if status == 200:
        sent = json.loads(body)
        assert reply["response"]["uid"] == sent["request"]["uid"]
        assert isinstance(reply["response"]["allowed"], bool)
    else:
        assert 400 <= status < 500 and reply["message"]


async def test_structured_garbage_never_gets_a_5xx(served: Served) -> None:
    await start(served, PRIVILEGED_POLICY)
    bodies: list[bytes] = []

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        bodies.append(corrupted_review(data))

    collect()
    for body in bodies:
        await check(served, body)


async def test_shapes_that_hurt_parsers(served: Served) -> None:
    await start(served, PRIVILEGED_POLICY)
    deep = b'{"a":' * 5000 + b"1" + b"}" * 5000
    huge_array = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                             "request": dict(pod_create("h"), object={"spec": {"containers": [{}] * 20000}})}).encode()
    for body in (deep, huge_array, b"\x00" * 100, b"\xff\xfe\xfd", b"null", b'"string"', b"1e999999"):
        await check(served, body)
    await check(served, json.dumps({"x": 1}).encode(), content_type="application/x-www-form-urlencoded")
