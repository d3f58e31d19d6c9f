"""Pruning by generated code: on random field trees and random values, the generated pruners give what the
closure pruners they replaced gave (kept in this file as the reference), share what those shared, and never
change their input; field names that are not identifiers are quoted in the generated source, not run."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.policy.budget import InputSize, measure
from webhook.policy.projection import ALL, EACH, KEYS, Tree, union
from webhook.policy.pruning import Projection, _Source, json_size, project

# -- the reference: the closure pruners of webhook/policy/pruning.py before they were generated (at 841f558) -----

_Prune = Callable[[Any], Any]
_KEEP, _EMPTY, _CALL = 0, 1, 2
_CONTAINERS = (dict, list)


def _empty(value: Any) -> Any:
    if isinstance(value, dict):
        return {}
    if isinstance(value, list):
        return [v if v.__class__ not in _CONTAINERS else _empty(v) for v in value]
    return value


def _mode(fn: _Prune | None) -> tuple[int, _Prune]:
    if fn is None:
        return _KEEP, _empty
    return (_EMPTY, _empty) if fn is _empty else (_CALL, fn)


def _reference_pruner(tree: Tree) -> _Prune | None:
    if tree is ALL:
        return None
    each, keys = tree.get(EACH), tree.get(KEYS)
    each_fn = None if each is None else _reference_pruner(each)
    if each is not None and each_fn is None:
        return None
    fields = {k: _mode(_reference_pruner(sub if each is None else union(sub, each))) for k, sub in tree.items()
              if k not in (EACH, KEYS)}
    if each is None and keys is None and not fields:
        return _empty
    element = each if keys is None else keys if each is None else union(each, keys)
    element_mode = _mode(_empty if element is None else _reference_pruner(element))
    other: tuple[int, _Prune] | None = (_mode(each_fn) if each is not None
                                        else (_EMPTY, _empty) if keys is not None else None)
    return _reference_node(fields, other, element_mode)


def _reference_node(fields: dict[str, tuple[int, _Prune]], other: tuple[int, _Prune] | None,
                    element: tuple[int, _Prune]) -> _Prune:
    element_mode, element_fn = element
    listed = tuple((k, mode, fn) for k, (mode, fn) in fields.items())

    def prune(value: Any) -> Any:
        if value.__class__ is dict or isinstance(value, dict):
            out = {}
            if other is None:
                for key, mode, fn in listed:
                    if key in value:
                        v = value[key]
                        out[key] = v if mode == _KEEP or (mode == _EMPTY and v.__class__ not in _CONTAINERS) \
                            else fn(v)
            else:
                get = fields.get
                for key, v in value.items():
                    mode, fn = get(key, other)
                    out[key] = v if mode == _KEEP or (mode == _EMPTY and v.__class__ not in _CONTAINERS) else fn(v)
            return out
        if isinstance(value, list):
            if element_mode == _KEEP:
                return value
            if element_mode == _EMPTY:
                return _empty(value)
            return [element_fn(v) for v in value]
        return value

    return prune


def _reference_project(value: Any, tree: Tree) -> Any:
    fn = _reference_pruner(tree)
    return value if fn is None else fn(value)


# -- random trees and values ----------------------------------------------------------------------------------------

class Mapping(dict):  # type: ignore[type-arg]
    """A dict subclass: kept as it is where a field is only tested for presence, pruned where it is descended."""


class Sequence(list):  # type: ignore[type-arg]
    """A list subclass."""


# Field names the trees and the values share, with the iteration segments as plain keys of a value too, and names
# that are not Python identifiers (quotes, a newline, a backslash: the generated source must quote them).
NAMES = st.sampled_from(["a", "b", "c", "d", EACH, KEYS, "x'y", 'q"\n\\', "def", "value"])
SEGMENTS = st.sampled_from(["a", "b", "c", "d", EACH, KEYS, "x'y", 'q"\n\\', "def", "value"])

TREES: st.SearchStrategy[Any] = st.recursive(
    st.just(ALL) | st.just({}),
    lambda children: st.dictionaries(SEGMENTS, children, max_size=4),
    max_leaves=12)

SCALARS = st.none() | st.booleans() | st.integers(-2, 2) | st.text(max_size=3)
VALUES: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda children: (st.lists(children, max_size=6) | st.dictionaries(NAMES, children, max_size=5)
                      | st.lists(children, max_size=3).map(Sequence)
                      | st.dictionaries(NAMES, children, max_size=3).map(Mapping)),
    max_leaves=30)


def _nodes(value: Any) -> set[int]:
    """The ids of every map and list in ``value``."""
    found: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            found.add(id(v))
            stack.extend(v.values())
        elif isinstance(v, list):
            found.add(id(v))
            stack.extend(v)
    return found


def _typed(value: Any) -> Any:
    """``value`` with each map and list tagged by its exact class and maps by their key order (== ignores both)."""
    if isinstance(value, dict):
        return (value.__class__.__name__, [(k, _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return (value.__class__.__name__, [_typed(v) for v in value])
    return (value.__class__.__name__, value)


@settings(max_examples=500, deadline=None)
@given(tree=TREES, value=VALUES)
def test_generated_pruners_give_what_the_closures_gave(tree: Any, value: Any) -> None:
    before = copy.deepcopy(value)
    expected, got = _reference_project(value, tree), project(value, tree)
    assert _typed(got) == _typed(expected)
    # The same parts of the input are shared (kept whole), the rest are new maps and lists.
    inputs = _nodes(value)
    assert _nodes(got) & inputs == _nodes(expected) & inputs
    assert _typed(value) == _typed(before)


@settings(max_examples=200, deadline=None)
@given(obj_tree=TREES, old_tree=TREES, obj=VALUES, old=VALUES)
def test_a_projection_prunes_both_roots_as_the_closures_did(obj_tree: Any, old_tree: Any, obj: Any,
                                                            old: Any) -> None:
    projection = Projection.of({"object": obj_tree, "oldObject": old_tree})
    if projection is None:
        assert _reference_pruner(obj_tree) is None and _reference_pruner(old_tree) is None
        return
    got = projection.apply(obj, old)
    assert _typed(got) == _typed((_reference_project(obj, obj_tree), _reference_project(old, old_tree)))


def test_shared_code_is_generated_once() -> None:
    # A list's element and a map's value pruned alike, and equal subtrees under different fields, are one function.
    source = _Source()
    source.pruner({"a": {EACH: {"x": {}}}, "b": {EACH: {"x": {}}}, "c": {KEYS: {"x": {}}}})
    # {x}; a's and b's (maps' values and lists' elements by {x}); c's (maps' values emptied); the root.
    assert sum(line.startswith("def ") for line in source.lines) == 4


# -- sized pruning: the copy and its size in one walk ---------------------------------------------------------------

@settings(max_examples=500, deadline=None)
@given(obj_tree=TREES, old_tree=TREES, obj=VALUES, old=VALUES)
def test_a_sized_projection_gives_the_same_copies_and_what_measure_gives_for_them(obj_tree: Any, old_tree: Any,
                                                                                 obj: Any, old: Any) -> None:
    """The inline work estimate adds the sizes counted while pruning instead of measuring the pruned copies: they
    must be what ``measure`` gives for them (never less: a costly request would run on the event loop)."""
    projection = Projection.of({"object": obj_tree, "oldObject": old_tree})
    if projection is None:
        return
    before = copy.deepcopy((obj, old))
    pruned_obj, pruned_old, size = projection.apply_sized(obj, old)
    expected = projection.apply(obj, old)
    assert _typed((pruned_obj, pruned_old)) == _typed(expected)
    inputs = _nodes((obj, old))
    assert _nodes((pruned_obj, pruned_old)) & inputs == _nodes(expected) & inputs
    measured = measure([pruned_obj, pruned_old])
    assert (size[0], size[1]) == (measured.bytes, measured.largest_collection)
    # The longest string is never below measure's, and above it only up to the longest name the trees give a key.
    assert measured.longest_string <= size[2] <= max(measured.longest_string, _longest_name(obj_tree),
                                                     _longest_name(old_tree))
    assert _typed((obj, old)) == _typed(before)


def _longest_name(tree: Any) -> int:
    """The longest field name in ``tree`` (the iteration segments are not names)."""
    if tree is ALL:
        return 1
    return max([1, *(len(k) for k in tree if k not in (EACH, KEYS)), *map(_longest_name, tree.values())])


@settings(max_examples=300, deadline=None)
@given(value=VALUES)
def test_json_size_is_what_measure_gives(value: Any) -> None:
    assert InputSize(*json_size([value, value])) == measure([value, value])
