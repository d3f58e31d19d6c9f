"""Linear-time list-building comprehensions for cel-expr-python (pure; no I/O).

CEL's ``map``/``filter`` macros (and ``sortBy``, built on ``map``) accumulate with
``@result + [x]``, which copies the accumulator on every step: O(n²) for n elements (4,000
elements: about 1 s). cel-cpp avoids the copy only with ``RuntimeOptions.enable_comprehension_list_append``,
which cel-expr-python 0.1.3 neither sets nor exposes (its runtime options are fixed in
``py_cel_env_internal.cc``; the YAML config has no runtime section).

:func:`chunk_list_comprehensions` rewrites the checked AST instead: every single-variable
comprehension whose accumulator starts as ``[]`` and ranges over a list of more than
:data:`CHUNK` elements runs over slices of :data:`CHUNK` elements, and the per-slice results are
joined with ext lists' native ``flatten()``::

    cel.bind(L, <range>,
        type(L) == list && size(L) > CHUNK
            ? lists.range((size(L) + CHUNK - 1) / CHUNK)
                .map(I, <comprehension over L.slice(I*CHUNK, min(size(L), I*CHUNK+CHUNK))>).flatten()
            : <comprehension over L>)

Copies drop from n²/2 to about n·CHUNK/2 + (n/CHUNK)²/2; the result, its order and its errors are
unchanged, and the iteration count grows by n/CHUNK (within cel-cpp's 10,000 budget only lists
close to it are affected). The rewritten tree is re-encoded as a ``ParsedExpr`` (fresh node ids,
no type map) and planned by ``Env.deserialize``, the same path ``disable_check`` compiles take.
"""

from __future__ import annotations

from webhook.policy.cel.ast import CheckedAst, fields
from webhook.policy.cel.library.lists import TYPED

#: Elements per slice.
CHUNK = 64

_LEN = 2
_L, _I = "__tg_chunk_l", "__tg_chunk_i"
_ANY_PARSED = "type.googleapis.com/cel.expr.ParsedExpr"


_SMALL = [bytes((i,)) for i in range(128)]


def _varint(n: int) -> bytes:
    if 0 <= n < 128:
        return _SMALL[n]
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num: int, wt: int, value: int | bytes) -> bytes:
    key = _varint(num << 3 | wt)
    if wt == _LEN:
        assert isinstance(value, bytes)
        return key + _varint(len(value)) + value
    if wt == 0:
        assert isinstance(value, int)
        return key + _varint(value)
    if wt == 1:
        assert isinstance(value, int)
        return key + value.to_bytes(8, "little")
    assert isinstance(value, int)
    return key + value.to_bytes(4, "little")


class _Builder:
    """Encodes ``cel.expr.Expr`` messages with fresh ids."""

    def __init__(self) -> None:
        self.next_id = 1

    def expr(self, kind_field: int, body: bytes) -> bytes:
        eid = self.next_id
        self.next_id += 1
        return _field(2, 0, eid) + _field(kind_field, _LEN, body)

    def ident(self, name: str) -> bytes:
        return self.expr(4, _field(1, _LEN, name.encode()))

    def int_const(self, v: int) -> bytes:
        return self.expr(3, _field(3, 0, v))

    def bool_const(self, v: bool) -> bytes:
        return self.expr(3, _field(2, 0, int(v)))

    def call(self, function: str, *args: bytes, target: bytes | None = None) -> bytes:
        body = (_field(1, _LEN, target) if target is not None else b"") + _field(2, _LEN, function.encode())
        body += b"".join(_field(3, _LEN, a) for a in args)
        return self.expr(6, body)

    def list_(self, *elements: bytes) -> bytes:
        return self.expr(7, b"".join(_field(1, _LEN, e) for e in elements))

    def comprehension(self, iter_var: str, iter_range: bytes, accu_var: str, accu_init: bytes, cond: bytes,
                      step: bytes, result: bytes) -> bytes:
        body = (_field(1, _LEN, iter_var.encode()) + _field(2, _LEN, iter_range) + _field(3, _LEN, accu_var.encode())
                + _field(4, _LEN, accu_init) + _field(5, _LEN, cond) + _field(6, _LEN, step)
                + _field(7, _LEN, result))
        return self.expr(9, body)


def _is_empty_list(expr: bytes) -> bool:
    for num, _wt, val in fields(expr):
        if num == 7:
            return not any(n == 1 for n, _, _v in fields(val))
    return False


class _Rewriter:
    def __init__(self, types: dict[int, str]) -> None:
        self.b = _Builder()
        self.changed = False
        self.types = types

    def _typed_call(self, body: bytes) -> bytes | None:
        """A ``sum``/``min``/``max`` call renamed to its typed variant, or None."""
        function, target = "", b""
        for num, _wt, val in fields(body):
            if num == 2:
                function = val.decode()
            elif num == 1:
                target = val
        if function not in TYPED or not target:
            return None
        target_id = next((v for n, _w, v in fields(target) if n == 2), None)
        rtype = self.types.get(target_id, "") if isinstance(target_id, int) else ""
        name = TYPED[function].get(rtype[5:-1]) if rtype.startswith("list(") else None
        if name is None:
            return None
        self.changed = True
        out = b""
        for num, wt, val in fields(body):
            if num == 2:
                out += _field(2, _LEN, name.encode())
            else:
                out += _field(num, wt, self.expr(val) if num in (1, 3) and wt == _LEN else val)
        return self.b.expr(6, out)

    def expr(self, buf: bytes) -> bytes:
        """Re-encode one Expr with fresh ids, rewriting chunkable comprehensions."""
        kind_field, body = 0, b""
        for num, _wt, val in fields(buf):
            if num in (3, 4, 5, 6, 7, 8, 9):
                kind_field, body = num, val
        if kind_field == 5:
            return self.b.expr(5, self._children(body, {1}))
        if kind_field == 6:
            typed = self._typed_call(body) if self.types else None
            return typed if typed is not None else self.b.expr(6, self._children(body, {1, 3}))
        if kind_field == 7:
            return self.b.expr(7, self._children(body, {1}))
        if kind_field == 8:
            out = b""
            for num, wt, val in fields(body):
                out += _field(num, wt, self._children(val, {3, 4}) if num == 2 else val)
            return self.b.expr(8, out)
        if kind_field == 9:
            return self._comprehension(body)
        return self.b.expr(kind_field, body) if kind_field else buf

    def _children(self, body: bytes, expr_fields: set[int]) -> bytes:
        out = b""
        for num, wt, val in fields(body):
            out += _field(num, wt, self.expr(val) if num in expr_fields and wt == _LEN else val)
        return out

    def _comprehension(self, body: bytes) -> bytes:
        parts: dict[int, bytes] = {}
        for num, _wt, val in fields(body):
            parts[num] = val
        chunkable = (8 not in parts and 4 in parts and _is_empty_list(parts[4])
                     and 2 in parts and not _is_empty_list(parts[2]))
        iter_var = parts.get(1, b"").decode()
        accu_var = parts.get(3, b"").decode()
        if not chunkable:
            out = b""
            for num, wt, val in fields(body):
                out += _field(num, wt, self.expr(val) if num in (2, 4, 5, 6, 7) and isinstance(val, bytes) else val)
            return self.b.expr(9, out)
        self.changed = True
        return self._chunked(self.expr(parts[2]), parts, iter_var, accu_var)

    def _inner(self, parts: dict[int, bytes], iter_var: str, accu_var: str, iter_range: bytes) -> bytes:
        return self.b.comprehension(iter_var, iter_range, accu_var, self.expr(parts[4]), self.expr(parts[5]),
                                    self.expr(parts[6]), self.expr(parts[7]))

    def _chunked(self, rng: bytes, parts: dict[int, bytes], iter_var: str, accu_var: str) -> bytes:
        b = self.b

        def size_l() -> bytes:
            return b.call("size", b.ident(_L))

        def start() -> bytes:
            return b.call("_*_", b.ident(_I), b.int_const(CHUNK))

        def end_guess() -> bytes:
            return b.call("_+_", start(), b.int_const(CHUNK))

        end = b.call("_?_:_", b.call("_>_", end_guess(), size_l()), size_l(), end_guess())
        sliced = b.call("slice", start(), end, target=b.ident(_L))
        chunk_body = self._inner(parts, iter_var, accu_var, sliced)
        count = b.call("_/_", b.call("_+_", size_l(), b.int_const(CHUNK - 1)), b.int_const(CHUNK))
        outer = b.comprehension(_I, b.call("lists.range", count), "@result", b.list_(), b.bool_const(True),
                                b.call("_+_", b.ident("@result"), b.list_(chunk_body)), b.ident("@result"))
        chunked = b.call("flatten", target=outer)
        plain = self._inner(parts, iter_var, accu_var, b.ident(_L))
        big = b.call("_&&_", b.call("_==_", b.call("type", b.ident(_L)), b.ident("list")),
                     b.call("_>_", size_l(), b.int_const(CHUNK)))
        body = b.call("_?_:_", big, chunked, plain)
        return b.comprehension("#unused", b.list_(), _L, rng, b.bool_const(False), b.ident(_L), body)


def has_chunkable(ast: CheckedAst) -> bool:
    """Whether :func:`chunk_list_comprehensions` would change ``ast`` (a cheap pre-check)."""
    for n in ast.root.walk():
        if n.kind == "comprehension" and not n.iter_var2 and n.args[1].kind == "list" and not n.args[1].args \
                and not (n.args[0].kind == "list" and not n.args[0].args):
            return True
        if n.kind == "call" and n.name in TYPED and n.target is not None and not n.args:
            rtype = ast.type_of(n.target)
            if rtype.startswith("list(") and rtype[5:-1] in TYPED[n.name]:
                return True
    return False


def chunk_list_comprehensions(serialized: bytes, types: dict[int, str] | None = None) -> bytes | None:
    """Rewrite ``Expression.serialize()`` output as described in the module docstring.

    Also renames ``sum``/``min``/``max`` on lists whose element type the checker knows to their typed
    variants (:data:`webhook.policy.cel.library.lists.TYPED`).

    Args:
        serialized: an ``Any`` holding a ``CheckedExpr`` or ``ParsedExpr``.
        types: the checker's types by node id (``CheckedAst.types``), when checked.

    Returns:
        A serialized ``ParsedExpr`` for ``Env.deserialize``, or None when nothing is chunkable.
    """
    payload, type_url = b"", ""
    for num, _wt, val in fields(serialized):
        if num == 1:
            type_url = val.decode()
        elif num == 2:
            payload = val
    expr_field = 4 if type_url.endswith("CheckedExpr") else 2
    expr = next((val for num, _wt, val in fields(payload) if num == expr_field), None)
    if expr is None:
        return None
    rewriter = _Rewriter(types or {})
    new_expr = rewriter.expr(expr)
    if not rewriter.changed:
        return None
    parsed = _field(2, _LEN, new_expr)
    return _field(1, _LEN, _ANY_PARSED.encode()) + _field(2, _LEN, parsed)
