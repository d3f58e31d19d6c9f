"""An ApplyConfiguration merged into an object as the API server's structured merge does (pure; no I/O).

MutatingAdmissionPolicy applies an ``applyConfiguration`` with structured-merge-diff, the merge of
server-side apply (``plugin/policy/mutating/patch/smd.go``: the patch is converted to a typed value,
refused if it sets anything atomic, then merged into the object): maps and structs merge field by
field; a list with ``x-kubernetes-list-type: map`` merges item by item on its
``x-kubernetes-list-map-keys`` (containers by ``name``, ports by ``containerPort`` + ``protocol``, a
missing key taking its schema default); a ``set`` list is a union; an ``atomic`` list, map or struct
may not be set at all (``may not mutate atomic arrays, maps or structs: .spec.selector``). Items keep
the object's order, the patch's new items following the item they follow in the patch (SMD's
``visitListItems``); duplicate keys in the object are collapsed into the patch's item.

The types come from ``webhook/policy/data/merge-schema.json``, generated from the Kubernetes OpenAPI by
``tools/gen_merge_schema.py`` (every built-in kind of the Kubernetes version it names). For a kind it
does not describe (a custom resource, a kind of a newer Kubernetes) Tollgate falls back to what it
can do without a schema, which ``tollgate lint`` warns about: maps merge field by field and a list
replaces the object's list whole (what an atomic list's merge would leave), nothing is refused.

A ``null`` value unsets a scalar field or a map entry (the API server's typed round trip drops it);
on a map, struct or list that the object holds non-empty, it changes nothing (SMD keeps the object's).

Schema format (compact JSON): a type reference is a type name (``io.k8s.api.core.v1.PodSpec``), a
scalar or untyped marker (``@string``, ``@numeric``, ``@boolean``, ``@untyped``; ``@deduced``: free
form, maps merge and lists are atomic; ``@atomic``: an untyped atomic value), ``{"r": name, "a": 0|1}``
(a reference overriding atomicity), or an inline type: ``{"f": {field: ref}, "e": ref, "d": {field:
default}, "a": 1}`` for a struct or map (``e``: the type of undeclared keys; without ``e`` undeclared
fields are refused; ``a``: atomic) and ``{"l": ref, "t": "atomic"|"set"|"map", "k": [keys]}`` for a
list.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = [
    "SCALAR_TYPES",
    "UNKNOWN",
    "MergeError",
    "MergeSchema",
    "apply_configuration",
    "configuration_problem",
    "list_strategies",
    "merge",
    "merge_schema",
]

#: The type of a value Tollgate has no schema for (see the module docstring's fallback).
UNKNOWN = "@unknown"
_SCALARS = {"@string": "string", "@numeric": "numeric", "@boolean": "boolean", "@untyped": "untyped"}
_MISSING: Any = object()
#: Bound of a schema's memo of resolved references (the shipped schema has ~1,000 types).
_RESOLVED_MAX = 16_384
#: The most checks of patches :func:`apply_configuration` remembers per schema (then it forgets them all), and the
#: longest patch text it remembers one for (bytes): at most ~4 MB of texts.
_CHECKED_MAX = 1_024
_CHECKED_BYTES = 4_096
#: JSON scalars as parsed (exact types; a subclass is not one): immutable, so a merge (or a patch) may share them
#: instead of copying, and two of them are the same JSON iff they have the same type and value.
SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})


class MergeError(ValueError):
    """The ApplyConfiguration cannot be applied; the message is the API server's wording."""


@dataclass(frozen=True, slots=True)
class _Type:
    """A resolved type: ``kind`` is ``scalar``, ``struct``, ``list``, ``deduced``, ``atomic`` or ``unknown``."""

    kind: str
    node: Any = None
    atomic: bool = False
    scalar: str = ""


class MergeSchema:
    """The shipped merge schema: root types by kind and by resource, and the type table.

    Attributes:
        kubernetes: the Kubernetes version the schema describes (``1.35``).
        source: where the OpenAPI documents came from.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self.kubernetes: str = data.get("kubernetes", "")
        self.source: str = data.get("source", "")
        self._kinds: dict[str, str] = data["kinds"]
        self._resources: dict[str, str] = data["resources"]
        self._types: dict[str, Any] = data["types"]
        # resolve()'s answers: by the reference itself for a name or marker, by id for an inline type or an
        # override (a dict of the schema's data, kept alive by it; the entry keeps the dict to check identity).
        self._resolved: dict[Any, tuple[Any, _Type]] = {}
        # apply_configuration's checks of patches given with their JSON text: (root, text) -> the problem or None.
        self._checked: dict[tuple[str, bytes], str | None] = {}

    def root_for_kind(self, group: str, version: str, kind: str) -> Any:
        """The type reference of objects of ``group/version, Kind=kind``, or :data:`UNKNOWN`."""
        key = f"{group}/{version}/{kind}" if group else f"{version}/{kind}"
        return self._kinds.get(key, UNKNOWN)

    def root_for_resource(self, group: str, version: str, resource: str) -> Any:
        """The type reference of the objects written to ``resource`` (``pods``, ``deployments/scale``)."""
        key = f"{group}/{version}/{resource}" if group else f"{version}/{resource}"
        return self._resources.get(key, UNKNOWN)

    def resources(self) -> Iterator[tuple[str, str, str]]:
        """Every ``(group, version, resource)`` it describes (subresources as ``pods/status``)."""
        for key in self._resources:
            parts = key.split("/")
            if _is_version(parts[0]):  # the core group: v1/pods
                yield "", parts[0], "/".join(parts[1:])
            else:
                yield parts[0], parts[1], "/".join(parts[2:])

    def resolve(self, ref: Any) -> _Type:
        """The type a reference names (see the module docstring's format); memoized per reference.

        A merge resolves the same few references for every item of a list and every request (33 per
        ``always-pull-images`` mutation of a 3-container Pod); the answer depends on the reference only.
        """
        key = ref if isinstance(ref, str) else id(ref)
        hit = self._resolved.get(key)
        if hit is not None and (hit[0] is ref or isinstance(ref, str)):
            return hit[1]
        resolved = self._resolve(ref)
        if len(self._resolved) < _RESOLVED_MAX:
            self._resolved[key] = (ref, resolved)
        return resolved

    def _resolve(self, ref: Any) -> _Type:
        atomic: bool | None = None
        if isinstance(ref, dict) and "r" in ref:
            atomic = bool(ref.get("a"))
            ref = ref["r"]
        while isinstance(ref, str) and not ref.startswith("@"):
            ref = self._types.get(ref, UNKNOWN)
        if isinstance(ref, str):
            if ref in _SCALARS:
                return _Type("scalar", scalar=_SCALARS[ref])
            return _Type({"@deduced": "deduced", "@atomic": "atomic"}.get(ref, "unknown"))
        if "l" in ref:
            return _Type("list", ref, ref.get("t") == "atomic")
        return _Type("struct", ref, bool(ref.get("a")) if atomic is None else atomic)


def _is_version(text: str) -> bool:
    return text.startswith("v") and text[1:2].isdigit()


@functools.cache
def merge_schema() -> MergeSchema:
    """The schema shipped in ``webhook/policy/data/merge-schema.json`` (read once)."""
    text = resources.files("webhook.policy").joinpath("data/merge-schema.json").read_text(encoding="utf-8")
    return MergeSchema(json.loads(text))


# --- paths, as structured-merge-diff prints them ---------------------------------------------------------------

def _field(path: str, name: str) -> str:
    return f"{path}.{name}"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _key_identity(key: tuple[tuple[str, Any], ...] | Any) -> Any:
    """A hashable stand-in for an associative list item's key, equal for two keys iff their JSON is.

    The JSON text (:func:`_json`) tells ``1``, ``1.0`` and ``true`` apart where Python's ``==`` does not; keys
    of strings, integers, booleans and nulls (container names, ports, protocols) are tagged with their type
    instead, which tells them apart as well without serializing. Any other key is its JSON text: a text
    never equals a tuple, and no key of the first kind has the JSON of a key of the second.
    """
    if type(key) is tuple:
        tagged = []
        for field, value in key:
            kind = type(value)
            if kind is not str and kind is not int and kind is not bool and value is not None:
                return _json(key)
            tagged.append((field, kind, value))
        return tuple(tagged)
    kind = type(key)
    if kind is str or kind is int or kind is bool or key is None:
        return (kind, key)
    return _json(key)


def _key_text(key: tuple[tuple[str, Any], ...] | Any, keyed: bool) -> str:
    if keyed:
        return "[" + ",".join(f"{k}={_json(v)}" for k, v in key) + "]"
    return f"[={_json(key)}]"


# --- the patch as a typed value: refused fields, types and atomics ----------------------------------------------

def _element_type(schema: MergeSchema, t: _Type, key: str) -> Any:
    """The type reference of ``key`` in a struct or map type, or None when undeclared."""
    fields = t.node.get("f", {})
    if key in fields:
        return fields[key]
    return t.node.get("e")


def _check(schema: MergeSchema, value: Any, ref: Any, path: str, atomics: list[str]) -> None:
    """Validate ``value`` against ``ref`` (SMD's ObjectToTyped) and collect atomic paths (``validatePatch``).

    Raises:
        MergeError: an undeclared field, a value of the wrong type, a list-map item without its key.
    """
    t = schema.resolve(ref)
    if t.kind == "unknown" or value is None:
        return
    if t.kind == "scalar":
        _check_scalar(value, t.scalar, path)
        return
    if t.kind in ("deduced", "atomic"):
        if isinstance(value, dict):
            if t.kind == "atomic":
                atomics.append(path or ".")
            for k, v in value.items():
                _check(schema, v, "@deduced" if t.kind == "deduced" else "@atomic", _field(path, k), [])
        elif isinstance(value, list):
            atomics.append(path or ".")
        return
    if t.kind == "struct":
        if not isinstance(value, dict):
            raise MergeError(f"{path or '.'}: expected map, got {_kind_of(value)}")
        if t.atomic:
            atomics.append(path or ".")
        fields = t.node.get("f", {})
        for k, v in value.items():
            element = fields[k] if k in fields else t.node.get("e")
            if element is None:
                raise MergeError(f"{_field(path, k)}: field not declared in schema")
            if v is not None and type(v) in SCALAR_TYPES:
                leaf = schema.resolve(element)
                if leaf.kind == "scalar" and _scalar_ok(v, leaf.scalar):
                    continue  # what the call below would conclude, without building the path
            # validatePatch looks for atomics below declared fields only, not in a map's values.
            _check(schema, v, element, _field(path, k), atomics if k in fields else [])
        return
    if not isinstance(value, list):
        raise MergeError(f"{path or '.'}: expected list, got {_kind_of(value)}")
    if t.atomic:
        atomics.append(path or ".")
    element = t.node["l"]
    for i, item in enumerate(value):
        _check(schema, item, element, f"{path}[{i}]", atomics)
    if t.node.get("t") in ("map", "set"):
        seen: set[Any] = set()
        for i, identity in enumerate(_key_identities(schema, t, value, path)):
            if identity in seen:
                key = _item_key(schema, t, value[i], f"{path}[{i}]")
                raise MergeError(f"{path or '.'}: duplicate entries for key {_key_text(key, t.node['t'] == 'map')}")
            seen.add(identity)


def _kind_of(value: Any) -> str:
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else type(value).__name__


def _scalar_ok(value: Any, scalar: str) -> bool:
    if scalar == "string":
        return isinstance(value, str)
    if scalar == "numeric":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if scalar == "boolean":
        return isinstance(value, bool)
    return not isinstance(value, dict | list)


def _check_scalar(value: Any, scalar: str, path: str) -> None:
    if not _scalar_ok(value, scalar):
        raise MergeError(f"{path or '.'}: expected {scalar}, got {_kind_of(value)}")


def _map_keys(schema: MergeSchema, t: _Type) -> tuple[list[str], dict[str, Any]]:
    """A map list's key fields and their defaults (the item type's, when it is a struct)."""
    element = schema.resolve(t.node["l"])
    return t.node.get("k", []), element.node.get("d", {}) if element.kind == "struct" else {}


def _item_key(schema: MergeSchema, t: _Type, item: Any, path: str) -> Any:
    """An associative list item's key: ``((field, value), ...)`` for a map list, the value for a set."""
    if t.node.get("t") != "map":
        return item
    keys, defaults = _map_keys(schema, t)
    if not isinstance(item, dict):
        raise MergeError(f"{path}: expected map, got {_kind_of(item)}")
    key = _plain_item_key(item, keys, defaults)
    if key is None:
        missing = next(k for k in keys if item.get(k) is None and k not in defaults)
        raise MergeError(f'{path}: associative list with keys has an element that omits key field "{missing}" '
                         "(and doesn't have default value)")
    return key


def _key_identities(schema: MergeSchema, t: _Type, items: list[Any], path: str) -> list[Any]:
    """:func:`_key_identity` of each item's :func:`_item_key` (errors named ``{path}[{i}]``).

    The item type's keys and defaults are looked up once for the list, not once per item.
    """
    if t.node.get("t") != "map":
        return [_key_identity(item) for item in items]
    keys, defaults = _map_keys(schema, t)
    out = []
    for i, item in enumerate(items):
        key = _plain_item_key(item, keys, defaults) if type(item) is dict else None
        # Not a plain map, or a key missing: _item_key's answer (its error).
        out.append(_key_identity(key if key is not None else _item_key(schema, t, item, f"{path}[{i}]")))
    return out


def _plain_item_key(item: dict[str, Any], keys: list[str], defaults: dict[str, Any]) -> tuple[Any, ...] | None:
    """A map list item's key (each key field's value, else its default), or None when a key field has neither."""
    out = []
    for k in keys:
        v = item.get(k)
        if v is not None:
            out.append((k, v))
        elif k in defaults:
            out.append((k, defaults[k]))
        else:
            return None
    return tuple(out)


# --- the merge -------------------------------------------------------------------------------------------------

def _empty(value: Any) -> bool:
    return value is _MISSING or value is None or (isinstance(value, dict | list) and not value)


def _merge(schema: MergeSchema, lhs: Any, rhs: Any, ref: Any) -> Any:
    """``rhs`` (the patch) merged into ``lhs`` (the object); ``_MISSING`` when neither has a value."""
    if rhs is _MISSING:
        return lhs
    t = schema.resolve(ref)
    if isinstance(rhs, dict) or (rhs is None and isinstance(lhs, dict) and t.kind != "scalar"):
        return _merge_map(schema, lhs, rhs, t)
    if isinstance(rhs, list) or (rhs is None and isinstance(lhs, list) and t.kind != "scalar"):
        return _merge_list(schema, lhs, rhs, t)
    return rhs if type(rhs) in SCALAR_TYPES else copy.deepcopy(rhs)


def _merge_map(schema: MergeSchema, lhs: Any, rhs: Any, t: _Type) -> Any:
    if t.kind in ("scalar", "atomic") or t.atomic or (_empty(lhs) and _empty(rhs)):
        return copy.deepcopy(rhs)
    left = lhs if isinstance(lhs, dict) else {}
    right = rhs if isinstance(rhs, dict) else {}
    # The object's members the patch does not name are kept as they are (the same objects: the diff skips
    # them); each member the patch names is merged in its place, a new one appended in the patch's order.
    out: dict[str, Any] = dict(left)
    for key, rchild in right.items():
        if rchild is not None and type(rchild) in SCALAR_TYPES:
            out[key] = rchild  # what _merge gives a scalar of the patch, whatever the type
            continue
        if t.kind == "struct":
            element = _element_type(schema, t, key)
            element = "@deduced" if element is None else element
        else:
            element = UNKNOWN if t.kind == "unknown" else "@deduced"
        merged = _merge(schema, left.get(key, _MISSING), rchild, element)
        if (merged is None and rchild is None) or merged is _MISSING:
            out.pop(key, None)  # null unsets it
        else:
            out[key] = merged
    return out


def _merge_list(schema: MergeSchema, lhs: Any, rhs: Any, t: _Type) -> Any:
    if t.kind != "list" or t.atomic or (_empty(lhs) and _empty(rhs)):
        return copy.deepcopy(rhs)  # atomic, untyped or unknown: the patch's list replaces the object's
    left = lhs if isinstance(lhs, list) else []
    right = rhs if isinstance(rhs, list) else []
    element = t.node["l"]
    lkeys = _key_identities(schema, t, left, "")
    rkeys = _key_identities(schema, t, right, "")
    rhs_by_key = dict(zip(rkeys, right, strict=True))
    if len(rhs_by_key) == len(rkeys) and [k for k in lkeys if k in rhs_by_key] == rkeys:
        # Every item of the patch names one of the object's, in the object's order, neither naming a key twice
        # (a patch setting a field of each container by name; the object may repeat a key the patch does not
        # name): the walk below keeps the object's items in place, each named one merged with its patch item.
        # Without the walk's bookkeeping:
        return [_merge(schema, item, rhs_by_key.get(key, _MISSING), element) for item, key in zip(left, lkeys,
                                                                                                   strict=True)]
    return _merge_list_walk(schema, left, right, lkeys, rkeys, rhs_by_key, element)


def _merge_list_walk(schema: MergeSchema, left: list[Any], right: list[Any], lkeys: list[Any], rkeys: list[Any],
                     rhs_by_key: dict[Any, Any], element: Any) -> list[Any]:
    """SMD's ``visitListItems`` over an object's list and a patch's (see the module docstring)."""
    counts: dict[Any, int] = {}
    for k in lkeys:
        counts[k] = counts.get(k, 0) + 1
    lhs_by_key = {k: item for k, item in zip(lkeys, left, strict=True) if counts[k] == 1}  # a duplicate merges
    shared = [k for k in rkeys if k in counts]  # the patch's items the object has, in the patch's order
    next_shared = 0
    merged_keys: set[Any] = set()
    out: list[Any] = []

    def take(lchild: Any, rchild: Any) -> None:
        value = _merge(schema, lchild, rchild, element)
        if value is not _MISSING:
            out.append(value)

    li = ri = 0
    while li < len(left) or ri < len(right):
        if li < len(left) and ri < len(right):
            key = lkeys[li]
            if key == rkeys[ri]:
                merged_keys.add(key)
                take(lhs_by_key.get(key, _MISSING), rhs_by_key[key])
                li += 1
                ri += 1
                next_shared += 1
                continue
            if key in rhs_by_key and next_shared < len(shared) and shared[next_shared] != key:
                li += 1  # shared with the patch, but its turn comes later
                continue
        if li < len(left):
            key = lkeys[li]
            if key not in rhs_by_key:
                take(left[li], _MISSING)
                li += 1
                continue
            if key in merged_keys:
                li += 1  # already merged with the patch's item
        if ri < len(right):
            key = rkeys[ri]
            merged_keys.add(key)
            take(lhs_by_key.get(key, _MISSING), rhs_by_key[key])
            ri += 1
            if next_shared < len(shared) and shared[next_shared] == key:
                next_shared += 1
    return out


def apply_configuration(obj: dict[str, Any], patch: dict[str, Any], kind: tuple[str, str, str] | None,
                        schema: MergeSchema | None = None, *, patch_text: bytes | None = None) -> dict[str, Any]:
    """Merge an ApplyConfiguration into ``obj`` as MutatingAdmissionPolicy does.

    Args:
        obj: the object being admitted (not modified).
        patch: the ApplyConfiguration (``Object{...}`` or the map Tollgate also accepts).
        kind: ``(group, version, kind)`` of ``obj`` (the AdmissionRequest's ``kind``); None when unknown.
        schema: the merge schema (default: the shipped one, :func:`merge_schema`).
        patch_text: ``patch``'s JSON text (``orjson.dumps``), given only when ``patch`` is plain JSON data of
            exact types (dict, list, str, int, float, bool, None; no NaN or infinity, no subclass, no tuple):
            then two patches with the same text are the same data, and the check of the patch against the
            kind's type (a pure function of the two, :func:`configuration_problem`) is remembered per text
            (at most ``_CHECKED_MAX`` per schema, texts up to ``_CHECKED_BYTES``): a policy's
            ApplyConfiguration gives the same patch request after request (each container of a ReplicaSet's
            Pods by name), and its check was half the cost of the merge (issue 34).

    Returns:
        A new object: the merge.

    Raises:
        MergeError: what the API server refuses, in its words: ``failed to convert patch object to
            typed object: .spec.replicasx: field not declared in schema``, ``invalid ApplyConfiguration:
            may not mutate atomic arrays, maps or structs: .spec.selector``, a list-map item without its
            key, duplicate keys in the patch.
    """
    schema = schema or merge_schema()
    root = schema.root_for_kind(*kind) if kind is not None else UNKNOWN
    if patch_text is not None and type(root) is str and len(patch_text) <= _CHECKED_BYTES:
        key = (root, patch_text)
        checked = schema._checked
        problem = checked.get(key, _MISSING)
        if problem is _MISSING:
            problem = configuration_problem(patch, root, schema)
            if len(checked) >= _CHECKED_MAX:
                checked.clear()
            checked[key] = problem
    else:
        problem = configuration_problem(patch, root, schema)
    if problem is not None:
        raise MergeError(problem)
    try:
        merged = merge(obj, patch, root, schema)
    except MergeError as e:
        raise MergeError(f"failed to merge patch: {e}") from None
    return merged if isinstance(merged, dict) else dict(obj)


def configuration_problem(patch: Any, root: Any, schema: MergeSchema | None = None) -> str | None:
    """Why the API server refuses ``patch`` as an ApplyConfiguration of type ``root``, or None when it does not.

    structured-merge-diff's conversion of the patch to a typed object (``ObjectToTyped``: undeclared fields,
    wrong types, list-map items without their key, duplicate keys), then the patcher's ``validatePatch``
    (``plugin/policy/mutating/patch/smd.go``: no atomic list, map or struct may be set).

    Returns:
        The message :func:`apply_configuration` raises, or None.
    """
    atomics: list[str] = []
    try:
        _check(schema or merge_schema(), patch, root, "", atomics)
    except MergeError as e:
        return f"failed to convert patch object to typed object: {e}"
    if atomics:
        return f"invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {', '.join(atomics)}"
    return None


def merge(obj: Any, patch: Any, root: Any, schema: MergeSchema | None = None) -> Any:
    """SMD's typed merge of ``patch`` into ``obj`` under the type ``root``, without checking the patch.

    Args:
        obj: the object (not modified).
        patch: what to merge into it.
        root: a type reference (a type name, an inline type or a marker; see the module docstring).
        schema: the merge schema (default: the shipped one).

    Returns:
        The merged value: new containers where the patch names a member, the object's own subtrees (the
        same objects) where it does not, copies of the values taken from ``patch`` (its scalars shared:
        they are immutable).

    Raises:
        MergeError: an item of an associative list without its key and no default for it.
    """
    return _merge(schema or merge_schema(), obj, patch, root)


@dataclass(frozen=True, slots=True)
class ListStrategy:
    """How the list at ``path`` of an ApplyConfiguration merges: ``map``, ``set``, ``atomic`` or ``unknown``."""

    path: str
    strategy: str


def list_strategies(patch_shape: Any, root: Any, schema: MergeSchema | None = None) -> list[ListStrategy]:
    """Each list (or value that may be one) an ApplyConfiguration sets, and how it merges.

    Args:
        patch_shape: what the expression returns, as far as it is known: nested dicts for map
            literals, a list ``[item_shape, ...]`` for a list literal, ``...`` (Ellipsis) for a value
            only known at run time (it may be a list).
        root: the type reference of the object (:meth:`MergeSchema.root_for_kind`).
        schema: the merge schema (default: the shipped one).

    Returns:
        ``[ListStrategy(path, strategy)]``: ``unknown`` where Tollgate has no schema (a custom
        resource's field, a kind it does not know) and the value is or may be a list; ``atomic``
        where the schema makes it atomic (Kubernetes refuses the patch).
    """
    schema = schema or merge_schema()
    found: list[ListStrategy] = []

    def walk(shape: Any, ref: Any, path: str) -> None:
        t = schema.resolve(ref)
        if t.kind == "unknown":
            if isinstance(shape, dict):
                for k, v in shape.items():
                    walk(v, UNKNOWN, _field(path, k))
            elif isinstance(shape, list) or shape is ...:
                found.append(ListStrategy(path or ".", "unknown"))
            return
        if isinstance(shape, dict) and t.kind == "struct":
            if t.atomic:
                found.append(ListStrategy(path or ".", "atomic"))
                return
            for k, v in shape.items():
                element = _element_type(schema, t, k)
                if element is not None:
                    walk(v, element, _field(path, k))
        elif isinstance(shape, list) and t.kind == "list":
            if t.atomic:
                found.append(ListStrategy(path, "atomic"))
                return
            for item in shape:
                walk(item, t.node["l"], f"{path}[]")
        elif isinstance(shape, list) and t.kind in ("deduced", "atomic"):
            found.append(ListStrategy(path, "atomic"))

    walk(patch_shape, root, "")
    return found
