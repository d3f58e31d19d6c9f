"""JSONPatch encoding for the mutating endpoint (pure; no I/O).

The engine computes RFC 6902 operations with the ``jsonpatch`` library; the
AdmissionResponse carries them base64-encoded with ``patchType: JSONPatch``.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson


def encode_patch(operations: list[dict[str, Any]]) -> str:
    """Base64 of the compact JSON array of operations, as ``AdmissionResponse.patch`` wants it."""
    return base64.b64encode(orjson.dumps(operations)).decode("ascii")


def decode_patch(patch_b64: str) -> list[dict[str, Any]]:
    """Inverse of :func:`encode_patch` (tests, ``tollgate test``)."""
    result = orjson.loads(base64.b64decode(patch_b64))
    if not isinstance(result, list):
        raise ValueError("a JSONPatch must be a JSON array")
    return result
