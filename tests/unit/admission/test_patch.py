"""JSONPatch encoding for ``AdmissionResponse.patch`` (pure)."""

from __future__ import annotations

import base64

import jsonpatch
import orjson
import pytest

from webhook.admission.patch import decode_patch, encode_patch


def test_patch_is_base64_of_a_json_array_that_applies() -> None:
    ops = [{"op": "add", "path": "/metadata/labels/team~1name", "value": "a"},
           {"op": "remove", "path": "/spec/containers/0/securityContext"}]
    encoded = encode_patch(ops)
    assert orjson.loads(base64.b64decode(encoded)) == ops
    assert decode_patch(encoded) == ops
    obj = {"metadata": {"labels": {}}, "spec": {"containers": [{"securityContext": {"privileged": True}}]}}
    # "~1" is the RFC 6901 escape of "/", so the label key is "team/name".
    assert jsonpatch.apply_patch(obj, decode_patch(encoded)) == {
        "metadata": {"labels": {"team/name": "a"}}, "spec": {"containers": [{}]}}


def test_empty_patch_round_trips() -> None:
    assert decode_patch(encode_patch([])) == []


def test_decode_rejects_a_non_array() -> None:
    with pytest.raises(ValueError, match="array"):
        decode_patch(base64.b64encode(b'{"op": "add"}').decode())
