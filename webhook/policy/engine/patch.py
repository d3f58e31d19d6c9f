"""The JSONPatch of a mutation: what turns the request's object into the mutated one.

``jsonpatch.make_patch`` compares the two documents node by node in Python: 330 µs for a defaulted
2.4 KB Pod whose labels changed, a third of ``/mutate``'s CPU through a real API server
(docs/performance.md, "Through a real API server"). An ApplyConfiguration merge keeps every subtree it
does not touch as the same object (:mod:`webhook.policy.merge`), and a JSONPatch mutation leaves most
subtrees equal, so :func:`json_patch` walks the objects' maps itself, skips a member that is the same
object or serializes to the same JSON (orjson: ``true``, ``1`` and ``1.0`` stay different, as they do
for ``make_patch``, where Python's ``==`` would call them equal), and hands only what differs below a
map or a list of unchanged length (a list that grew or shrank, a scalar, a changed type) to
``jsonpatch.make_patch``, with that subtree's path as prefix.
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import orjson
from jsonpointer import escape


def json_patch(src: Any, dst: Any) -> list[dict[str, Any]]:
    """RFC 6902 operations that turn ``src`` into ``dst``.

    Args:
        src: the object as the request carried it (JSON values: dict, list, str, int, float, bool, None).
        dst: the object as the mutations left it; it may share subtrees with ``src``.

    Returns:
        The operations, ``[]`` when the two are equal. Applying them to ``src`` gives a document equal to
        ``dst``. Within a map the operations are per member, within a list of unchanged length per
        element; a list whose length changed gets ``jsonpatch.make_patch``'s operations for that list
        (its ``path`` and ``from`` prefixed).
    """
    ops: list[dict[str, Any]] = []
    _diff(src, dst, "", ops)
    return ops


def _diff(src: Any, dst: Any, path: str, ops: list[dict[str, Any]]) -> None:
    if src is dst:
        return
    if type(src) is dict and type(dst) is dict:
        for key in src:
            if key not in dst:
                ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in dst.items():
            if key not in src:
                ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": value})
                continue
            old = src[key]
            if old is not value:
                _diff(old, value, f"{path}/{escape(key)}", ops)
        return
    if type(src) is list and type(dst) is list and len(src) == len(dst):
        # Elements changed in place (every container's imagePullPolicy set): per index, as for a map's
        # members. make_patch would search the list for moved runs (250 us for two containers).
        for i, (old, value) in enumerate(zip(src, dst, strict=True)):
            if old is not value:
                _diff(old, value, f"{path}/{i}", ops)
        return
    try:
        if orjson.dumps(src) == orjson.dumps(dst):
            return
    except TypeError:
        pass  # not serializable by orjson (an integer past 64 bits): make_patch decides
    for op in jsonpatch.make_patch(src, dst).patch:
        prefixed = dict(op, path=path + op["path"])
        if "from" in op:
            prefixed["from"] = path + op["from"]
        ops.append(prefixed)
