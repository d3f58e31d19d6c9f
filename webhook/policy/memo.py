"""The decision memo: fused programs' passes remembered by exactly what they read (pure; no I/O).

A fused group's program (:mod:`webhook.policy.plan`) is ``(v1) && (v2) && ...`` over the
validations of policies with no params, selectors, references, matchConditions or variables routed
through a per-policy scope. When the program reads nothing but ``object``, ``oldObject`` and
``.field`` selections of ``request`` and ``namespaceObject`` (:func:`key_roots`), its value is a
function of

    key = the exact JSON of ``object`` and ``oldObject`` pruned to the program's own reads
          (:func:`webhook.policy.projection.reads`: evaluated on the pruned copy a program yields
          what it yields on the whole object, property-tested), plus the ``request`` and
          ``namespaceObject`` fields it selects, whole.

The memo stores only the keys of programs that evaluated ``true`` (every policy of the group
passes); anything else — ``false``, an error, the iteration budget — is not stored and takes the
per-policy path as before. It cannot serve a stale verdict:

* **the policy set**: entries belong to one :class:`~webhook.policy.plan.FusedGroup` (its
  ``serial``, never reused in the process); a policy edit builds new plans with new groups, and
  the old entries age out;
* **the Namespace**: a program selecting ``namespaceObject.metadata`` keys on the whole metadata
  as cached (labels, annotations, its resourceVersion), and so on for any other field;
* **params, references, variables**: a program reading ``params`` or ``variables``, calling a
  function that reads the per-policy scope or the caches (:data:`SCOPE_FUNCTIONS`), using
  ``request`` or ``namespaceObject`` other than by selecting a field, or binding a comprehension
  variable under a root variable's name, is not memoized;
* **the request**: the key holds every byte of what the program reads; JSON keeps ``1`` and
  ``1.0``, ``true`` and ``1``, ``null`` and an absent field apart. Maps with the same content in a
  different key order give a different key: a miss, never a wrong hit.

Kubernetes' CEL environment has no clock, randomness or I/O outside those functions, so such a
program's value depends on nothing else. Replicas of one workload (the Pods of a Deployment or a
Job, re-created objects, the same Pod admitted again after a dry run) share most keys: their Pod
Security fields are identical where their names, labels and images differ.

Bounded by bytes (the keys' length plus :data:`ENTRY_OVERHEAD`), least recently used first out.
Not thread-safe: the server evaluates on one event loop (evaluation workers are processes).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.policy.cel.ast import Node, decode_expr, expr_bytes
from webhook.policy.cel.env import VARIABLES
from webhook.policy.cel.scope import RESOURCE_FUNCTIONS
from webhook.policy.projection import ALL, Tree, reads_of, union_reads
from webhook.policy.pruning import Projection

__all__ = ["DEFAULT_MAX_BYTES", "ENTRY_OVERHEAD", "MIN_HIT_RATIO", "MIN_LOOKUPS", "PROBE_EVERY", "SCOPE_FUNCTIONS",
           "TYPE_NAMES", "DecisionMemo", "HitRatio", "MemoSpec", "key_roots", "memo_key", "memo_spec", "union_spec"]

#: The default budget: 16 MiB of keys (a 3-container Pod's Pod Security key is 100-400 bytes).
DEFAULT_MAX_BYTES = 16 * 1024 * 1024

#: Bytes counted per entry besides its key and the group's 8-byte serial (the OrderedDict slot, the bytes header).
ENTRY_OVERHEAD = 120

#: Functions whose value depends on more than their arguments: the per-policy scope's variables and
#: params, and the caches of ``spec.references``.
SCOPE_FUNCTIONS = frozenset({"__tg_var", "__tg_params"}) | RESOURCE_FUNCTIONS

#: Variables the key covers whole (pruned by the program's reads).
_KEYED = frozenset({"object", "oldObject"})
#: Variables the key covers by the top-level fields the program selects.
_SELECTED = ("request", "namespaceObject")

#: CEL's type identifiers (``type(x) == list``): constants, not inputs.
TYPE_NAMES = frozenset({"bool", "bytes", "double", "int", "list", "map", "null_type", "string", "type", "uint"})


@dataclass(frozen=True, slots=True)
class MemoSpec:
    """What keys one program's passes.

    Attributes:
        projection: the pruning of ``object``/``oldObject`` to what the program reads.
        request_fields: the fields of ``request`` the program selects (``request.operation`` ...).
        namespace_fields: the fields of ``namespaceObject`` it selects (``namespaceObject.metadata`` ...).
    """

    projection: Projection
    request_fields: tuple[str, ...] = ()
    namespace_fields: tuple[str, ...] = ()


def key_roots(root: Node) -> dict[str, frozenset[str]] | None:
    """The top-level fields a program selects of ``request`` and ``namespaceObject``, or None if not memoizable.

    A program is memoizable when its value depends only on ``object``, ``oldObject`` and fields it
    selects of ``request`` and ``namespaceObject``: every identifier is one of those, a CEL type
    name (:data:`TYPE_NAMES`) or a name some comprehension of the program binds (``all``, ``map``,
    ``cel.bind``... expand to comprehensions); ``request`` and ``namespaceObject`` appear only as
    ``.field`` selections; no comprehension binds the name of a root variable; and no
    :data:`SCOPE_FUNCTIONS` function is called. So ``params``, ``variables``, a bare ``request``,
    an unchecked namespaced call such as ``resource.Get`` (a ``resource`` identifier) make it None.

    Args:
        root: the program's parse tree (:func:`webhook.policy.cel.ast.decode_expr`).

    Returns:
        ``{"request": fields, "namespaceObject": fields}`` (either may be empty).
    """
    nodes = list(root.walk())
    bound = {name for n in nodes if n.kind == "comprehension" for name in (n.name, n.iter_var2, n.accu_var) if name}
    if bound & (frozenset(VARIABLES) | TYPE_NAMES | {"resource"}):
        return None
    selected: dict[str, set[str]] = {name: set() for name in _SELECTED}
    selections = dict.fromkeys(_SELECTED, 0)
    uses = dict.fromkeys(_SELECTED, 0)
    for node in nodes:
        if node.kind == "ident":
            if node.name in _SELECTED:
                uses[node.name] += 1
            elif node.name not in _KEYED and node.name not in TYPE_NAMES and node.name not in bound:
                return None
        elif node.kind == "call" and node.name in SCOPE_FUNCTIONS:
            return None
        elif node.kind == "select" and node.target is not None and node.target.kind == "ident" \
                and node.target.name in _SELECTED:
            selected[node.target.name].add(node.name)
            selections[node.target.name] += 1
    if uses != selections:  # a bare request or namespaceObject (compared, passed, returned): not keyed here
        return None
    return {name: frozenset(fields) for name, fields in selected.items()}


@functools.lru_cache(maxsize=1024)
def _key_roots_of(expr: bytes) -> dict[str, frozenset[str]] | None:
    """:func:`key_roots` of an encoded ``cel.expr.Expr``, cached.

    A plan rebuilt with an unchanged fused program (another policy was edited) is analysed again in microseconds.
    """
    return key_roots(decode_expr(expr))


def memo_spec(serialized: bytes, trees: Mapping[str, Tree] | None = None,
              interned: dict[str, MemoSpec] | None = None) -> MemoSpec | None:
    """What keys a program's passes in the memo, or None when they cannot be memoized.

    Args:
        serialized: the program's ``Expression.serialize()``.
        trees: what the program can read of ``object``/``oldObject``, or a superset (a fused program: the
            union of its policies' ``reads``, computed when they compiled); by default its own
            :func:`webhook.policy.projection.reads_of`.
        interned: specs by what they read, shared by the programs of one index (so programs that read the
            same fields share one spec and a request builds their key once); None: not shared.

    Returns:
        None when the program is not :func:`key_roots`, did not decode, or may read ``object`` or
        ``oldObject`` whole (its key would be the whole object: a full encoding per request that hits only
        on exact replicas).
    """
    try:
        roots = _key_roots_of(expr_bytes(serialized))
    except (ValueError, IndexError):
        return None
    if roots is None:
        return None
    if trees is None:
        trees = reads_of((serialized,))
    if trees.get("object", ALL) is ALL or trees.get("oldObject", ALL) is ALL:
        return None
    request_fields, namespace_fields = tuple(sorted(roots["request"])), tuple(sorted(roots["namespaceObject"]))
    # Programs reading the same fields share one spec, so a request builds their key once.
    reading = repr((trees.get("object"), trees.get("oldObject"), request_fields, namespace_fields))
    spec = interned.get(reading) if interned is not None else None
    if spec is None:
        projection = Projection.of(trees)
        if projection is None:  # pragma: no cover - both trees are bounded here, so both prune
            return None
        spec = MemoSpec(projection, request_fields, namespace_fields)
        if interned is not None:
            if len(interned) >= MAX_INTERNED_SPECS:
                interned.clear()
            interned[reading] = spec
    return spec


#: Most specs one index shares (see :func:`memo_spec`); past it the table starts over.
MAX_INTERNED_SPECS = 4096


def union_spec(specs: Sequence[MemoSpec]) -> MemoSpec | None:
    """One spec that reads what each of ``specs`` reads (a key of it decides every one of their programs).

    Returns:
        None when the union would keep ``object`` or ``oldObject`` whole.
    """
    trees = union_reads({"object": s.projection.object, "oldObject": s.projection.old_object} for s in specs)
    request_fields = {f for spec in specs for f in spec.request_fields}
    namespace_fields = {f for spec in specs for f in spec.namespace_fields}
    if trees["object"] is ALL or trees["oldObject"] is ALL:
        return None
    projection = Projection.of(trees)
    if projection is None:  # pragma: no cover - both trees are bounded here, so both prune
        return None
    return MemoSpec(projection, tuple(sorted(request_fields)), tuple(sorted(namespace_fields)))


def memo_key(spec: MemoSpec, obj: Any, old: Any, request: dict[str, Any],
             namespace: dict[str, Any] | None) -> bytes | None:
    """The exact JSON of what a program reads; None when it cannot be encoded.

    Args:
        spec: from :func:`memo_spec`.
        obj: the view's ``object`` (the request's, or the Pod synthesized from its template).
        old: the view's ``oldObject``.
        request: the ``request`` variable as bound (the AdmissionRequest without object/oldObject).
        namespace: the ``namespaceObject`` as bound (None for cluster-scoped requests or when not cached).

    Returns:
        ``[object, oldObject, {request field: value}, {namespaceObject field: value} or null]``, pruned,
        encoded by orjson; a field absent from the request is absent from its map (``has()`` tells them apart).
    """
    pruned_obj, pruned_old = spec.projection.apply(obj, old)
    parts: list[Any] = [pruned_obj, pruned_old]
    if spec.request_fields:
        parts.append({f: request[f] for f in spec.request_fields if f in request})
    if spec.namespace_fields:
        parts.append(None if namespace is None else {f: namespace[f] for f in spec.namespace_fields if f in namespace})
    try:
        return orjson.dumps(parts)
    except TypeError:  # not JSON (an int above 64 bits, a non-string key): no memo
        return None


#: Lookups of a group before its hit ratio may turn its lookups off, and the window they are counted over.
MIN_LOOKUPS = 256
#: A group whose hits are below this share of its lookups is not looked up (nor remembered) any more...
MIN_HIT_RATIO = 0.02
#: ...except once every this many requests, so a workload that changes is noticed.
PROBE_EVERY = 256


class HitRatio:
    """How often an optional step paid off lately, and whether to try it for the next request.

    A step that only saves work when it succeeds (a memo lookup that hits, a fused program that passes) is tried
    until ``min_tries`` tries show successes below ``min_ratio`` of them; then :meth:`worth_trying` says no except
    once every ``probe_every`` requests, so a workload that changes is noticed. The counts halve once they reach
    ``2 * min_tries``, so the ratio follows the recent tries. Skipping must be safe for the caller: it only
    gives up a saving.

    Attributes:
        tries: tries counted in the current window.
        successes: the successes among them.
    """

    __slots__ = ("min_ratio", "min_tries", "probe_every", "since_probe", "successes", "tries")

    def __init__(self, min_tries: int, min_ratio: float, probe_every: int) -> None:
        self.min_tries, self.min_ratio, self.probe_every = min_tries, min_ratio, probe_every
        self.tries = self.successes = self.since_probe = 0

    def worth_trying(self) -> bool:
        """Whether to try the step for this request (counts a skip towards the next probe)."""
        if self.tries < self.min_tries or self.successes >= self.min_ratio * self.tries:
            return True
        self.since_probe += 1
        if self.since_probe >= self.probe_every:
            self.since_probe = 0
            return True
        return False

    def count(self, success: bool) -> None:
        """Count one try and whether it succeeded."""
        if self.tries >= 2 * self.min_tries:
            self.tries //= 2
            self.successes //= 2
        self.tries += 1
        self.successes += success


class DecisionMemo:
    """Keys of fused programs that evaluated ``true``, least recently used evicted past ``max_bytes``.

    A group whose lookups keep missing (its program reads what differs from request to request, e.g. image
    tags) costs a key per request and fills the memo with entries nobody asks for again. After
    :data:`MIN_LOOKUPS` lookups with fewer than :data:`MIN_HIT_RATIO` of them hits, :meth:`worth_trying`
    says no for that group, but yes once every :data:`PROBE_EVERY` requests (counts halve every
    ``2 * MIN_LOOKUPS`` lookups, so the ratio follows the workload).

    Args:
        max_bytes: budget over every entry (8 + key length + :data:`ENTRY_OVERHEAD`); 0 stores nothing.

    Attributes:
        hits: lookups that found their key.
        misses: lookups that did not.
        evictions: entries dropped for the budget.
        skipped: lookups not made because the group's hit ratio was too low.
        bytes: bytes currently counted.
    """

    __slots__ = ("_entries", "_groups", "bytes", "evictions", "hits", "max_bytes", "misses", "skipped")

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        # Keys are the group's serial (8 bytes) + the key: bytes are not tracked by the garbage collector.
        self._entries: OrderedDict[bytes, int] = OrderedDict()  # a union's entry holds its mask
        #: group serial -> its lookups and hits (:class:`HitRatio`)
        self._groups: dict[int, HitRatio] = {}
        self.hits = self.misses = self.evictions = self.skipped = self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def worth_trying(self, group: int) -> bool:
        """Whether to build a key and look group ``group`` up for this request (see the class docstring)."""
        stats = self._groups.get(group)
        if stats is None or stats.worth_trying():
            return True
        self.skipped += 1
        return False

    def passed(self, group: int, key: bytes) -> bool:
        """Whether group ``group``'s program evaluated ``true`` on ``key`` (counts a hit or a miss)."""
        stats = self._groups.get(group)
        if stats is None:
            if len(self._groups) >= _MAX_GROUPS:  # groups of plans long replaced
                self._groups.clear()
            stats = self._groups[group] = HitRatio(MIN_LOOKUPS, MIN_HIT_RATIO, PROBE_EVERY)
        entry = group.to_bytes(8, "little") + key
        hit = entry in self._entries
        stats.count(hit)
        if hit:
            self._entries.move_to_end(entry)
            self.hits += 1
            return True
        self.misses += 1
        return False

    def passed_set(self, union: int, key: bytes) -> int | None:
        """The groups that passed on ``key`` under union ``union`` (a bit mask, see :meth:`remember_set`), or None.

        A union is one key over several groups' reads (:func:`union_spec`): one lookup instead of one per group
        when requests differ only in what none of them reads. Counts a hit or a miss.
        """
        entry = union.to_bytes(8, "little") + key
        mask = self._entries.get(entry)
        if mask is None:
            self.misses += 1
            return None
        self._entries.move_to_end(entry)
        self.hits += 1
        return mask

    def remember_set(self, union: int, key: bytes, mask: int) -> None:
        """Record that the groups in ``mask`` (bits in the union's own order) passed on ``key``."""
        self._store(union.to_bytes(8, "little") + key, mask)

    def remember(self, group: int, key: bytes) -> None:
        """Record that group ``group``'s program evaluated ``true`` on ``key``."""
        self._store(group.to_bytes(8, "little") + key, 0)

    def _store(self, entry: bytes, value: int) -> None:
        cost = len(entry) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return
        if entry in self._entries:
            self._entries.move_to_end(entry)
            self._entries[entry] = value
            return
        self._entries[entry] = value
        self.bytes += cost
        while self.bytes > self.max_bytes:
            old, _ = self._entries.popitem(last=False)
            self.bytes -= len(old) + ENTRY_OVERHEAD
            self.evictions += 1

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        self._entries.clear()
        self._groups.clear()
        self.bytes = 0


#: Groups whose hit ratio is tracked at most (the table is emptied past it).
_MAX_GROUPS = 4096
