"""Read-only view of a checked CEL AST, decoded from ``Expression.serialize()`` (pure; no I/O).

cel-expr-python exposes no AST, but ``serialize()`` returns a ``google.protobuf.Any`` holding a
``cel.expr.CheckedExpr`` (or ``ParsedExpr`` when compiled with ``disable_check``). This module decodes
that protobuf wire format directly (no protobuf dependency) into :class:`Node` trees plus the
checker's type of every node, so that Tollgate can run the compile-time validators Kubernetes runs
(literal regexes, durations, timestamps, homogeneous aggregate literals; see
``webhook.policy.cel.validators``) and estimate costs.

Field numbers follow ``cel/expr/syntax.proto`` and ``cel/expr/checked.proto`` (cel-spec).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# Wire types.
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(field_number, wire_type, value)`` of one protobuf message.

    ``value`` is an int (varint, fixed64, fixed32) or bytes (length-delimited).

    Raises:
        ValueError: truncated or unsupported (group) encoding.
    """
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == _VARINT:
            val, pos = _varint(buf, pos)
            yield num, wt, val
        elif wt == _I64:
            yield num, wt, int.from_bytes(buf[pos:pos + 8], "little")
            pos += 8
        elif wt == _LEN:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise ValueError("truncated protobuf field")
            yield num, wt, buf[pos:pos + n]
            pos += n
        elif wt == _I32:
            yield num, wt, int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


@dataclass(slots=True)
class Node:
    """One ``cel.expr.Expr``.

    ``kind`` is one of ``const``, ``ident``, ``select``, ``call``, ``list``, ``struct``,
    ``comprehension``. ``value`` holds a constant's Python value (``None`` for null; int, float,
    str, bytes, bool), ``name`` an identifier, the selected field, or the called function,
    ``target`` a member call's receiver or a select's operand, ``args`` call arguments, list
    elements or comprehension parts (iter_range, accu_init, loop_condition, loop_step, result),
    ``entries`` struct/map ``(key or None, value)`` pairs, ``test_only`` marks ``has()``.
    """

    id: int = 0
    kind: str = ""
    value: Any = None
    const_kind: str = ""
    name: str = ""
    target: Node | None = None
    args: list[Node] = field(default_factory=list)
    entries: list[tuple[Node | None, Node]] = field(default_factory=list)
    test_only: bool = False
    accu_var: str = ""
    iter_var2: str = ""
    optional_indices: tuple[int, ...] = ()

    def walk(self) -> Iterator[Node]:
        """This node and every descendant, pre-order."""
        yield self
        if self.target is not None:
            yield from self.target.walk()
        for a in self.args:
            yield from a.walk()
        for k, v in self.entries:
            if k is not None:
                yield from k.walk()
            yield from v.walk()


_CONST = {1: "null", 2: "bool", 3: "int", 4: "uint", 5: "double", 6: "string", 7: "bytes"}


def _const(node: Node, buf: bytes) -> None:
    node.kind = "const"
    for num, _wt, val in fields(buf):
        node.const_kind = _CONST.get(num, "other")
        if num == 1:
            node.value = None
        elif num == 2:
            node.value = bool(val)
        elif num == 3:
            node.value = _signed(val)
        elif num == 4:
            node.value = val
        elif num == 5:
            node.value = struct.unpack("<d", val.to_bytes(8, "little"))[0]
        elif num == 6:
            node.value = val.decode("utf-8", "replace")
        elif num == 7:
            node.value = bytes(val)


def decode_expr(buf: bytes) -> Node:
    """Decode one ``cel.expr.Expr`` message."""
    node = Node()
    for num, _wt, val in fields(buf):
        if num == 2:
            node.id = _signed(val)
        elif num == 3:
            _const(node, val)
        elif num == 4:
            node.kind = "ident"
            node.name = next((v.decode() for n, _, v in fields(val) if n == 1), "")
        elif num == 5:
            node.kind = "select"
            for n, _, v in fields(val):
                if n == 1:
                    node.target = decode_expr(v)
                elif n == 2:
                    node.name = v.decode()
                elif n == 3:
                    node.test_only = bool(v)
        elif num == 6:
            node.kind = "call"
            for n, _, v in fields(val):
                if n == 1:
                    node.target = decode_expr(v)
                elif n == 2:
                    node.name = v.decode()
                elif n == 3:
                    node.args.append(decode_expr(v))
        elif num == 7:
            node.kind = "list"
            opt: list[int] = []
            for n, wt, v in fields(val):
                if n == 1:
                    node.args.append(decode_expr(v))
                elif n == 2 and wt == _LEN:
                    pos = 0
                    while pos < len(v):
                        i, pos = _varint(v, pos)
                        opt.append(i)
                elif n == 2:
                    opt.append(v)
            node.optional_indices = tuple(opt)
        elif num == 8:
            node.kind = "struct"
            for n, _, v in fields(val):
                if n == 1:
                    node.name = v.decode()
                elif n == 2:
                    key: Node | None = None
                    value = Node()
                    for en, _, ev in fields(v):
                        if en == 3:
                            key = decode_expr(ev)
                        elif en == 4:
                            value = decode_expr(ev)
                    node.entries.append((key, value))
        elif num == 9:
            node.kind = "comprehension"
            parts: dict[int, Node] = {}
            for n, _, v in fields(val):
                if n in (2, 4, 5, 6, 7):
                    parts[n] = decode_expr(v)
                elif n == 1:
                    node.name = v.decode()
                elif n == 3:
                    node.accu_var = v.decode()
                elif n == 8:
                    node.iter_var2 = v.decode()
            node.args = [parts.get(i, Node()) for i in (2, 4, 5, 6, 7)]
    return node


#: Primitive and well-known type names as the checker reports them (cel/expr/checked.proto).
_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "timestamp", 3: "duration"}


def type_name(buf: bytes) -> str:
    """A ``cel.expr.Type`` as text: ``int``, ``list(string)``, ``map(string, dyn)``, ``dyn``..."""
    for num, _wt, val in fields(buf):
        if num == 1:
            return "dyn"
        if num == 2:
            return "null_type"
        if num == 3:
            return _PRIMITIVES.get(val, "dyn")
        if num == 4:
            return _PRIMITIVES.get(val, "dyn")
        if num == 5:
            return _WELL_KNOWN.get(val, "dyn")
        if num == 6:
            elem = next((type_name(v) for n, _, v in fields(val) if n == 1), "dyn")
            return f"list({elem})"
        if num == 7:
            kv = {n: type_name(v) for n, _, v in fields(val)}
            return f"map({kv.get(1, 'dyn')}, {kv.get(2, 'dyn')})"
        if num == 9:
            return str(val.decode())
        if num == 10:
            return "dyn"  # an unresolved type parameter behaves like dyn
        if num == 11:
            return "type"
        if num == 12:
            return "error"
        if num == 14:
            name = next((v.decode() for n, _, v in fields(val) if n == 1), "")
            params = [type_name(v) for n, _, v in fields(val) if n == 2]
            return f"{name}({', '.join(params)})" if params else name
    return "dyn"


@dataclass(slots=True)
class CheckedAst:
    """A decoded expression: root node, checker types by node id, source offsets by node id."""

    root: Node
    types: dict[int, str]
    offsets: dict[int, int]
    checked: bool

    def type_of(self, node: Node) -> str:
        """The checker's type of ``node`` (``dyn`` when unknown or unchecked)."""
        return self.types.get(node.id, "dyn")


def _map_entries(buf: bytes) -> tuple[int, bytes | int]:
    key: int = 0
    value: bytes | int = b""
    for n, _, v in fields(buf):
        if n == 1:
            key = _signed(v)
        elif n == 2:
            value = v
    return key, value


def unpack(serialized: bytes) -> tuple[bool, bytes]:
    """Open ``Expression.serialize()`` output: an ``Any`` holding a CheckedExpr or a ParsedExpr.

    Returns:
        ``(checked, payload)``: whether it is a CheckedExpr, and the message's bytes.

    Raises:
        ValueError: not a serialized CEL expression.
    """
    type_url, payload = "", b""
    for num, _wt, val in fields(serialized):
        if num == 1:
            type_url = val.decode()
        elif num == 2:
            payload = val
    checked = type_url.endswith("CheckedExpr")
    if not (checked or type_url.endswith("ParsedExpr")):
        raise ValueError(f"not a CEL expression: {type_url!r}")
    return checked, payload


def expr_bytes(serialized: bytes) -> bytes:
    """The ``cel.expr.Expr`` message of ``Expression.serialize()`` output, without source info or types.

    Raises:
        ValueError: not a serialized CEL expression, or one without an expression.
    """
    checked, payload = unpack(serialized)
    expr_field = 4 if checked else 2
    for num, _wt, val in fields(payload):
        if num == expr_field and isinstance(val, bytes):
            return val
    raise ValueError("not a serialized CEL expression: no expression in it")


def decode(serialized: bytes) -> CheckedAst:
    """Decode ``Expression.serialize()`` output (an ``Any`` of CheckedExpr or ParsedExpr).

    Raises:
        ValueError: not a serialized CEL expression.
    """
    checked, payload = unpack(serialized)
    root = Node()
    types: dict[int, str] = {}
    offsets: dict[int, int] = {}
    expr_field = 4 if checked else 2
    info_field = 5 if checked else 3
    for num, _wt, val in fields(payload):
        if num == expr_field:
            root = decode_expr(val)
        elif checked and num == 3:
            key, t = _map_entries(val)
            types[key] = type_name(t) if isinstance(t, bytes) else "dyn"
        elif num == info_field:
            for n, _, v in fields(val):
                if n == 4:
                    key, off = _map_entries(v)
                    offsets[key] = int(off) if isinstance(off, int) else 0
    return CheckedAst(root, types, offsets, checked)
