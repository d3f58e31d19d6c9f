"""The JSONPatch of a mutation: what turns the request's object into the mutated one.

``jsonpatch.make_patch`` compares the two documents node by node in Python: 330 µs for a defaulted
2.4 KB Pod whose labels changed, a third of ``/mutate``'s CPU through a real API server
(docs/performance.md, "Through a real API server"). An ApplyConfiguration merge keeps every subtree it
does not touch as the same object (:mod:`webhook.policy.merge`), and a JSONPatch mutation leaves most
subtrees equal, so :func:`json_patch` walks the objects' maps itself, skips a member that is the same
object or serializes to the same JSON (orjson: ``true``, ``1`` and ``1.0`` stay different, as they do
for ``make_patch``, where Python's ``==`` would call them equal), and hands only a list that grew or
shrank to ``jsonpatch.make_patch``, with that list's path as prefix. A scalar that changed, or a member
whose type changed (a map became a list, a scalar a map), is one ``replace`` of that member: make_patch's
own answer for it, without its walk and deep copies (three quarters of the diff's time for a Pod whose
containers' ``imagePullPolicy`` changed, issue 34).
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import orjson
from jsonpointer import escape

from webhook.policy.merge import SCALAR_TYPES

#: A member :func:`_diff` did not find in ``src``.
_ABSENT: Any = object()
#: A map replaced by a list or a list by a map.
_MAP_AND_LIST = frozenset({(dict, list), (list, dict)})


def json_patch(src: Any, dst: Any) -> list[dict[str, Any]]:
    """RFC 6902 operations that turn ``src`` into ``dst``.

    Args:
        src: the object as the request carried it (JSON values: dict, list, str, int, float, bool, None).
        dst: the object as the mutations left it; it may share subtrees with ``src``.

    Returns:
        The operations, ``[]`` when the two are equal. Applying them to ``src`` gives a document equal to
        ``dst``. Within a map the operations are per member, within a list of unchanged length per
        element; a changed scalar or a changed type is one ``replace`` of it (what ``make_patch`` gives);
        a list whose length changed gets ``jsonpatch.make_patch``'s operations for that list (its ``path``
        and ``from`` prefixed). Values in the operations may be ``dst``'s own subtrees (not copies).
    """
    ops: list[dict[str, Any]] = []
    _diff(src, dst, "", ops)
    return ops


def _diff(src: Any, dst: Any, path: str, ops: list[dict[str, Any]]) -> None:
    if src is dst:
        return
    if type(src) is dict and type(dst) is dict:
        if not src.keys() <= dst.keys():  # a member removed (one C-level pass when none was)
            for key in src:
                if key not in dst:
                    ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in dst.items():
            old = src.get(key, _ABSENT)
            if old is value:
                continue  # the same object: a subtree the mutations did not touch, or the same scalar
            if old is _ABSENT:
                ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": value})
            else:
                _diff(old, value, f"{path}/{escape(key)}", ops)
        return
    if type(src) is list and type(dst) is list and len(src) == len(dst):
        # Elements changed in place (every container's imagePullPolicy set): per index, as for a map's
        # members. make_patch would search the list for moved runs (250 us for two containers).
        for i, (old, value) in enumerate(zip(src, dst, strict=True)):
            if old is not value:
                _diff(old, value, f"{path}/{i}", ops)
        return
    scalar_src, scalar_dst = type(src) in SCALAR_TYPES, type(dst) in SCALAR_TYPES  # a subclass goes to make_patch
    if scalar_src and scalar_dst:
        # Two JSON scalars are the same JSON iff they have the same type and value (1, 1.0, true differ).
        if type(src) is not type(dst) or src != dst:
            ops.append({"op": "replace", "path": path, "value": dst})
        return
    if scalar_src or scalar_dst or (type(src), type(dst)) in _MAP_AND_LIST:
        # A changed type: make_patch's answer is one replace of the whole member (the root's too), here
        # without its walk and copies.
        ops.append({"op": "replace", "path": path, "value": dst})
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
