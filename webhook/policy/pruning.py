"""Pruning: a copy of JSON data keeping only what a field tree says a set of programs can read (pure).

:mod:`webhook.policy.projection` works out, from the programs' parse trees, the field trees
(:data:`~webhook.policy.projection.Tree`) of ``object`` and ``oldObject``; this module applies them:
:func:`project` prunes one value, :class:`Projection` the pair a plan binds (see
:mod:`webhook.policy.plan` and :class:`webhook.policy.engine.context.RequestContext`).
:meth:`Projection.apply_sized` also counts, in the same walk, the size of the pruned copies as
:func:`json_size` (hence :func:`webhook.policy.budget.measure`) counts it, so that the inline work estimate
does not walk them again (issue 34).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from webhook.policy.projection import ALL, EACH, KEYS, Tree, union

__all__ = ["Projection", "json_size", "project"]

# A tree is turned once into Python source, one function per map or list the tree descends into, compiled
# together (as dataclasses and attrs generate their methods): a map's kept fields are tested one after the
# other with what each keeps written out, so pruning a request's object costs one call per kept map or list,
# without the interpreted loop over the tree's fields and their modes that closures needed (issue 34).

_Prune: TypeAlias = Callable[[Any], Any]
_SizedPrune: TypeAlias = Callable[[Any, list[int]], Any]
#: The name standing for "emptied" (presence and type only) where a child is pruned by a generated function;
#: None keeps it whole.
_EMPTY = "_empty"
_CONTAINERS = (dict, list)
#: The exact classes :func:`json_size` counts 8 for (JSON's scalars but strings).
_SCALARS = frozenset({bool, int, float, type(None)})


def _empty(value: Any) -> Any:
    """Presence and type only: a map becomes ``{}``, a list keeps its length with each element emptied."""
    if isinstance(value, dict):
        return {}
    if isinstance(value, list):
        return [v if v.__class__ not in _CONTAINERS else _empty(v) for v in value]
    return value


def json_size(values: Iterable[Any]) -> tuple[int, int, int]:
    """How large JSON-like ``values`` are taken together, in one walk (no serialization).

    The counting of :func:`webhook.policy.budget.measure` (its one definition): strings and keys count their
    length plus 2 and 3, containers 2, any other value 8; maps (dict subclasses too) and lists count their
    entries.

    Returns:
        ``(bytes, largest_collection, longest_string)``: the bytes, the entries of the largest list or map (at
        least 1), the characters of the longest string or key (at least 1).
    """
    total = 0
    largest = longest = 1
    stack = list(values)
    pop, extend = stack.pop, stack.extend
    while stack:
        v = pop()
        kind = v.__class__
        if kind is str:
            n = len(v)
            total += n + 2
            if n > longest:
                longest = n
        elif kind is dict or (kind is not list and isinstance(v, dict)):
            n = len(v)
            total += 2
            if n > largest:
                largest = n
            for key in v:
                n = len(key)
                total += n + 3
                if n > longest:
                    longest = n
            extend(v.values())
        elif kind is list or isinstance(v, list):
            n = len(v)
            total += 2
            if n > largest:
                largest = n
            extend(v)
        else:
            total += 8
    return total, largest, longest


def _add(value: Any, acc: list[int]) -> Any:
    """``value``, its :func:`json_size` added to ``acc`` (``[bytes, largest_collection, longest_string]``).

    A map or list of strings, scalars and empty maps (an emptied list, a map of limits or labels) is counted
    here; anything deeper by :func:`json_size`'s walk.
    """
    kind = value.__class__
    if kind is dict or kind is list:
        n = 2
        s = acc[2]
        if kind is dict:
            for key in value:
                m = len(key)
                n += m + 3
                if m > s:
                    s = m
            values: Any = value.values()
        else:
            values = value
        for v in values:
            c = v.__class__
            if c is str:
                m = len(v)
                n += m + 2
                if m > s:
                    s = m
            elif c in _SCALARS:
                n += 8
            elif c is dict and not v:
                n += 2
            else:
                _add_walked(v, acc)
        acc[0] += n
        if len(value) > acc[1]:
            acc[1] = len(value)
        if s > acc[2]:
            acc[2] = s
        return value
    _add_walked(value, acc)
    return value


def _add_walked(value: Any, acc: list[int]) -> None:
    """:func:`json_size` of ``value`` added to ``acc``."""
    b, c, s = json_size((value,))
    acc[0] += b
    if c > acc[1]:
        acc[1] = c
    if s > acc[2]:
        acc[2] = s


class _Source:
    """The functions generated for field trees: source lines, named ``_p0``, ``_p1``, … (each after its callees).

    Args:
        sized: generate the sized pruners instead, named ``_q0``, …: each takes a second argument, a list
            ``[bytes, largest_collection, longest_string]`` to which it adds the :func:`json_size` of the copy it
            returns (:func:`_sized_node`).
    """

    def __init__(self, sized: bool = False) -> None:
        self.sized = sized
        self.lines: list[str] = []
        #: The longest field name of the generated maps (the sized pruners do not compare it, see :func:`_sized_node`).
        self.longest_key = 1
        self.names: dict[tuple[tuple[tuple[str, str | None], ...], str | None, str | None], str] = {}

    def pruner(self, tree: Tree) -> str | None:
        """The name of the function pruning a value by ``tree``; None keeps the value whole.

        :data:`_EMPTY` when the value keeps only its presence and type; otherwise the functions it needs are
        appended to :attr:`lines`, each defined once per shape.
        """
        if tree is ALL:
            return None
        each, keys = tree.get(EACH), tree.get(KEYS)
        each_fn = None if each is None else self.pruner(each)
        if each is not None and each_fn is None:
            return None  # every element and every value kept whole: the same as the whole map or list
        fields = {k: self.pruner(sub if each is None else union(sub, each)) for k, sub in tree.items()
                  if k not in (EACH, KEYS)}
        if each is None and keys is None and not fields:
            return _EMPTY
        element = each if keys is None else keys if each is None else union(each, keys)
        element_fn = _EMPTY if element is None else self.pruner(element)
        other = each_fn if each is not None else _EMPTY if keys is not None else None
        return self._node(fields, other, element_fn)

    def _node(self, fields: dict[str, str | None], other: str | None, element: str | None) -> str:
        """Define the function pruning a map and a list; its name (an existing one for the same shape).

        Args:
            fields: what each named field keeps: a function's name, :data:`_EMPTY`, or None (whole).
            other: what every other key of a map keeps, as ``fields``; None drops them.
            element: what each element of a list keeps, as ``fields`` (None: the list is kept whole).
        """
        shape = (tuple(fields.items()), other, element)
        known = self.names.get(shape)
        if known is not None:
            return known  # the same code as a function already defined (a list's element and a map's value)
        name = self.names[shape] = f"_{'q' if self.sized else 'p'}{len(self.names)}"
        if self.sized:
            self.longest_key = max([self.longest_key, *map(len, fields)])
            self.lines.extend(_sized_node(name, fields, other, element))
            return name
        out = [f"def {name}(value):",
               "    if value.__class__ is dict or isinstance(value, dict):",
               "        out = {}"]
        if other is None:
            for key, fn in fields.items():
                k = repr(key)
                out.append(f"        if {k} in value:")
                if fn is None:
                    out.append(f"            out[{k}] = value[{k}]")
                elif fn == _EMPTY:
                    out.append(f"            v = value[{k}]")
                    out.append(f"            out[{k}] = {_kept(fn)}")
                else:
                    out.append(f"            out[{k}] = {fn}(value[{k}])")
        else:
            out.append("        for key, v in value.items():")
            branch = "if"
            for key, fn in fields.items():
                out.append(f"            {branch} key == {key!r}:")
                out.append(f"                out[key] = {'v' if fn is None else _kept(fn)}")
                branch = "elif"
            if fields:
                out.append("            else:")
                out.append(f"                out[key] = {_kept(other)}")
            else:
                out.append(f"            out[key] = {_kept(other)}")
        out.append("        return out")
        out.append("    if isinstance(value, list):")
        if element is None:
            out.append("        return value")
        else:  # emptied elements are _empty's list, its elements' common case (a map becomes {}) written out
            out.append(f"        return [{_kept(element)} for v in value]")
        out.append("    return value  # a scalar, or a type the tree did not expect: kept as it is")
        self.lines.extend(out)
        return name


def _sized_node(name: str, fields: dict[str, str | None], other: str | None, element: str | None) -> list[str]:
    """The source of the sized pruner ``name`` (``_Source._node``'s arguments): the same copy as the plain one.

    Its size is counted as :func:`json_size` counts the copy, in locals added to the accumulator ``acc`` once
    per map (``n`` bytes, ``s`` the longest string): a map's named keys by their lengths, known here (their
    length is not compared with the longest string: the caller starts from the longest named key), other keys
    by theirs; a string or scalar kept whole inline; anything else kept whole by :func:`_add`'s walk, an
    emptied list by :func:`_add` of :func:`_empty`'s copy, a pruned child by its own sized pruner.
    """
    strings = other is not None or any(fn is None or fn == _EMPTY for fn in fields.values())

    def keep(fn: str | None, target: str, pad: str) -> list[str]:
        # ``target`` = what ``fn`` keeps of ``v``, its size counted.
        if fn is not None and fn != _EMPTY:
            return [f"{pad}{target} = {fn}(v, acc)"]
        whole = ["if v.__class__ is str:", "    m = len(v)", "    n += m + 2", "    if m > s:", "        s = m",
                 "elif v.__class__ in _SCALARS:", "    n += 8", "else:", "    _add(v, acc)"]
        if fn is None:
            return [f"{pad}{target} = v", *(pad + line for line in whole)]
        # Emptied: a string or a scalar (the common case) is kept as it is, tested first.
        return [f"{pad}if v.__class__ is str:", f"{pad}    {target} = v", *(f"{pad}{line}" for line in whole[1:5]),
                f"{pad}elif v.__class__ in _SCALARS:", f"{pad}    {target} = v", f"{pad}    n += 8",
                f"{pad}elif v.__class__ is dict:", f"{pad}    {target} = {{}}", f"{pad}    n += 2",
                f"{pad}elif v.__class__ is list:", f"{pad}    {target} = _add(_empty(v), acc)",
                f"{pad}else:", f"{pad}    {target} = _add(v, acc)"]

    out = [f"def {name}(value, acc):",
           "    if value.__class__ is dict or isinstance(value, dict):",
           "        out = {}",
           "        n = 2"]
    if strings:
        out.append("        s = 1")
    if other is None:
        for key, fn in fields.items():
            k = repr(key)
            out.append(f"        if {k} in value:")
            out.append(f"            v = value[{k}]")
            out.append(f"            n += {len(key) + 3}")
            out.extend(keep(fn, f"out[{k}]", " " * 12))
    else:
        out.append("        for key, v in value.items():")
        out.append("            m = len(key)")
        out.append("            n += m + 3")
        out.append("            if m > s:")
        out.append("                s = m")
        branch = "if"
        for key, fn in fields.items():
            out.append(f"            {branch} key == {key!r}:")
            out.extend(keep(fn, "out[key]", " " * 16))
            branch = "elif"
        if fields:
            out.append("            else:")
            out.extend(keep(other, "out[key]", " " * 16))
        else:
            out.extend(keep(other, "out[key]", " " * 12))
    out.append("        acc[0] += n")
    if other is not None or len(fields) > 1:  # the largest collection starts at 1
        out.extend(["        if len(out) > acc[1]:",
                    "            acc[1] = len(out)"])
    if strings:
        out.extend(["        if s > acc[2]:",
                    "            acc[2] = s"])
    out.extend(["        return out",
                "    if isinstance(value, list):"])
    if element is None:
        out.append("        return _add(value, acc)")
    else:
        # Emptied elements are _empty's list (see _kept), measured in one walk.
        out.extend(["        return _add(_empty(value), acc)"] if element == _EMPTY else
                   ["        acc[0] += 2",
                    "        if len(value) > acc[1]:",
                    "            acc[1] = len(value)",
                    f"        return [{element}(v, acc) for v in value]"])
    out.append("    return _add(value, acc)  # a scalar, or a type the tree did not expect: kept as it is")
    return out


def _kept(fn: str) -> str:
    """The expression keeping ``v`` by ``fn``: :data:`_EMPTY` or a generated function's name.

    An emptied map is ``{}`` and a value that is not exactly a dict or a list is kept as it is (what
    :func:`_empty` gives), without the call.
    """
    if fn == _EMPTY:
        return "{} if v.__class__ is dict else v if v.__class__ is not list else _empty(v)"
    return f"{fn}(v)"


def _pruners(*trees: Tree) -> tuple[_Prune | None, ...]:
    """The functions pruning values by each of ``trees`` (None keeps a value whole); see :func:`_generated`.

    They are generated and compiled together: the shapes the trees share (``object``'s and ``oldObject``'s
    containers) are one function, and one compilation serves both (a plan's projection step on the event
    loop: 17-23 ms compiled apart, 5-9 ms together, for the served Pod Security and example policies).
    """
    return tuple(None if r is None else _empty if r == _EMPTY else r for r in _generated(_Source(), trees))


def _sized_pruners(*trees: Tree) -> tuple[tuple[_SizedPrune, ...], int]:
    """The sized pruners of ``trees``, and the longest key the trees name (at least 1).

    ``fn(value, acc)`` is what :func:`_pruners`' function gives (``value`` kept whole for None), its
    :func:`json_size` added to ``acc`` (``[bytes, largest_collection, longest_string]``) but for the lengths of
    the keys the tree names: ``acc`` must start with a longest string no shorter than the longest key.
    """
    source = _Source(sized=True)
    roots = _generated(source, trees)
    return tuple(_add if r is None else _sized_empty if r == _EMPTY else r for r in roots), source.longest_key


def _sized_empty(value: Any, acc: list[int]) -> Any:
    """:func:`_empty` of ``value`` (a root's pruning when its tree keeps only presence and type), its size added."""
    return _add(_empty(value), acc)


def _generated(source: _Source, trees: tuple[Tree, ...]) -> tuple[Any, ...]:
    """Each tree's compiled root function out of ``source``, or None (whole) or :data:`_EMPTY`."""
    roots = tuple(source.pruner(tree) for tree in trees)
    named = tuple(r for r in roots if r is not None and r != _EMPTY)
    compiled = dict(zip(named, _compiled("\n".join(source.lines), named), strict=True)) if named else {}
    return tuple(compiled.get(r, r) if r is not None else None for r in roots)


def _pruner(tree: Tree) -> _Prune | None:
    """The function pruning a value by ``tree``; None keeps the value whole."""
    return _pruners(tree)[0]


@functools.lru_cache(maxsize=256)
def _compiled(source: str, roots: tuple[str, ...]) -> tuple[_Prune, ...]:
    """The functions ``roots`` of ``source`` (generated by :class:`_Source`), compiled once per source.

    Programs reading the same fields share their trees, and compiling costs ~20 µs a generated line (~7 ms for
    the Pod Security tree).
    """
    namespace: dict[str, Any] = {"_empty": _empty, "_add": _add, "_SCALARS": _SCALARS}
    exec(compile(source, f"<pruner {' '.join(roots)}>", "exec"), namespace)  # the source is generated above
    return tuple(namespace[root] for root in roots)


def project(value: Any, tree: Tree) -> Any:
    """A copy of ``value`` with only what ``tree`` keeps (the original is never modified).

    Maps keep the tree's field names they have (every key under :data:`EACH` or :data:`KEYS`), each
    pruned by its subtree; lists keep every element, pruned by the :data:`EACH`/:data:`KEYS`
    subtree (emptied without one); anything else, including a value whose type is not what the tree
    expects, is kept as it is. Kept subtrees are shared with ``value``, not copied.

    Args:
        value: JSON data (dicts, lists, scalars), e.g. a Pod.
        tree: the field tree (see :func:`reads`).
    """
    fn = _pruner(tree)
    return value if fn is None else fn(value)


@dataclass(frozen=True, slots=True, eq=False)
class Projection:
    """The pruning of ``object`` and ``oldObject`` for a set of programs.

    Attributes:
        object: the field tree of ``object`` (:data:`ALL` keeps it whole).
        old_object: the field tree of ``oldObject``.
    """

    object: Tree
    old_object: Tree
    _object: _Prune | None
    _old_object: _Prune | None
    #: The sized pruners of both roots and the longest key the trees name, generated on the first
    #: :meth:`apply_sized` (empty until then).
    _sized: list[tuple[tuple[_SizedPrune, ...], int]] = field(default_factory=list)

    @classmethod
    def of(cls, trees: Mapping[str, Tree]) -> Projection | None:
        """The projection for :func:`reads`' trees, or None when it would keep both roots whole."""
        obj, old = trees.get("object", ALL), trees.get("oldObject", ALL)
        prune_object, prune_old = _pruners(obj, old)
        if prune_object is None and prune_old is None:
            return None
        return cls(obj, old, prune_object, prune_old)

    def apply(self, obj: Any, old: Any) -> tuple[Any, Any]:
        """``(object, oldObject)`` pruned: new maps and lists where pruned, kept values shared."""
        return (obj if self._object is None else self._object(obj),
                old if self._old_object is None else self._old_object(old))

    def apply_sized(self, obj: Any, old: Any) -> tuple[Any, Any, tuple[int, int, int]]:
        """What :meth:`apply` gives, and the pruned pair's :func:`json_size`, counted in the same walk.

        The sized pruners are generated and compiled on the first call (a plan's projection is applied sized
        by :class:`webhook.policy.engine.context.RequestContext`; the memo's only plainly).

        Returns:
            ``(object, oldObject, (bytes, largest_collection, longest_string))``: the bytes and the largest
            collection are what :func:`json_size` gives for ``(object, oldObject)`` pruned; the longest string is
            at least its one and at most the longer of it and the longest field name of the trees.
        """
        if not self._sized:
            self._sized.append(_sized_pruners(self.object, self.old_object))
        (prune_object, prune_old), longest_key = self._sized[0]
        acc = [0, 1, longest_key]
        pruned_obj = prune_object(obj, acc)
        pruned_old = prune_old(old, acc)
        return pruned_obj, pruned_old, (acc[0], acc[1], acc[2])
