"""Whether a policy can be judged on a stored object: what its CEL reads of the audit's request (pure; no I/O).

Background audit evaluates an existing object as admission would evaluate its
creation (``webhook.audit.evaluate.audit_request``): operation ``CREATE``,
empty ``userInfo``, no ``oldObject``, ``dryRun`` false, no ``options``. A
verdict that depends on those made-up fields says nothing about the object, so
a policy whose programs read them is *not auditable* (Kyverno refuses
``background: true`` on policies reading ``request.userInfo`` for the same
reason). This module decides it from the parse trees
(:mod:`webhook.policy.cel.ast`), never from the expression text: a string
literal ``'userInfo'`` reads nothing, and ``request['userInfo']``,
``cel.bind(r, request, r.userInfo)`` or a variable reading ``oldObject`` are
all seen.

**What is analysed.** What audit evaluates: ``matchConditions``, every
validation's ``expression`` and ``messageExpression``, and the variables they
reach (variables are evaluated lazily, so one no program reaches is not
read). ``auditAnnotations`` and mutations are not evaluated by the audit.

**Dead branches.** The audit's request is partly known, so branches it can
never take are not analysed: ``request.operation`` is ``"CREATE"``,
``has(request.operation)`` is true, ``object == null`` is false. Gatekeeper's
``variables.anyObject`` (``has(request.operation) && request.operation ==
'DELETE' && object == null ? oldObject : object``) therefore reads
``object`` only, and a policy built on it is auditable, as Gatekeeper audits
it. Folding is exact: a condition folds only when its value is certain on
every audit request (``false && x`` is false even when ``x`` errors, as in
CEL), so skipping the other branch cannot change a verdict.

**Reads.** :func:`audit_reads` names what live code reads: a root variable
(``object``, ``oldObject``, ``namespaceObject``, ``params``), a request field
(``request.userInfo``, ``request.namespace``, ...; ``request.object`` and
``request.oldObject`` are named ``object`` and ``oldObject``), or ``request``
itself when the whole request map is used (compared, passed to a function,
iterated, returned). Selecting a field, ``has()``, ``type()`` and comparing
with a literal read only that path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.cel.ast import Node, decode_expr, expr_bytes
from webhook.policy.compiler import CompiledPolicy

__all__ = ["NOT_AUDITABLE_READS", "REQUEST_KEYS", "audit_reads", "not_auditable", "reads_namespace_object"]

#: Reads a stored object cannot supply (the audit's request makes them up), which make a policy not auditable:
#: who asked, whether it was a dry run, the request's options, the object before an update, the request whole.
NOT_AUDITABLE_READS = ("request.userInfo", "request.dryRun", "request.options", "oldObject", "request")

#: Keys every audit request holds (``request.namespace`` only for namespaced objects, so it is not here).
REQUEST_KEYS = frozenset({"uid", "kind", "resource", "requestKind", "requestResource", "name", "operation",
                          "userInfo", "object", "oldObject", "dryRun", "options"})

#: The roots of a CEL evaluation (``variables`` is routed through ``__tg_var``).
_ROOTS = frozenset({"object", "oldObject", "request", "params", "namespaceObject", "variables"})

Path = tuple[str, ...]


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


_UNKNOWN: Any = _Unknown()


@dataclass(frozen=True, slots=True)
class _TypeName:
    """A CEL type value (``type(x)``, or the identifiers ``map``, ``list``, ...)."""

    name: str


#: CEL type identifiers a program can compare ``type(x)`` with.
_TYPE_IDENTS = frozenset({"map", "list", "string", "int", "uint", "double", "bool", "bytes", "null_type"})

#: Facts about the audit request: a path's exact value.
_CONSTANTS: Mapping[Path, Any] = {("request", "operation"): "CREATE"}
#: Paths known to be maps (never null).
_MAPS = frozenset({("request",), ("object",), ("request", "object")})
#: Keys known present at a path (``has()`` of them is true).
_KEYS: Mapping[Path, frozenset[str]] = {("request",): REQUEST_KEYS}


@dataclass(frozen=True, slots=True)
class _Value:
    """What an expression's value is known to be.

    Attributes:
        path: the value *is* the root variable's field at this path (e.g. ``("request", "userInfo")``).
        const: its exact value (a scalar, None for null, or a :class:`_TypeName`), else :data:`_UNKNOWN`.
        is_map: it is certainly a map (so never null).
    """

    path: Path | None = None
    const: Any = _UNKNOWN
    is_map: bool = False

    @property
    def known(self) -> bool:
        return self.const is not _UNKNOWN


_OPAQUE = _Value()


def _at(path: Path) -> _Value:
    return _Value(path, _CONSTANTS.get(path, _UNKNOWN), path in _MAPS)


#: ``(path, whole)`` → the spec path of the expression whose evaluation reads it first.
_Marks = dict[tuple[Path, bool], str]


@dataclass(slots=True)
class _Analysis:
    """One policy's analysis: the marks of every live read, and each variable's value and marks."""

    variables: Mapping[str, tuple[str, bytes]]  # name → (spec path, Expr bytes)
    marks: _Marks = field(default_factory=dict)
    origin: str = ""
    _variable_values: dict[str, tuple[_Value, _Marks] | None] = field(default_factory=dict)

    # -- marking --------------------------------------------------------------------------------------
    def mark(self, value: _Value, *, whole: bool) -> None:
        """Record that ``value``'s path is read (``whole``: its whole value is used)."""
        if value.path is not None:
            self.marks.setdefault((value.path, whole), self.origin)

    def use(self, node: Node, env: dict[str, _Value]) -> None:
        """Evaluate ``node`` and use its value whole (passed to a function, returned, ...)."""
        self.mark(self.value(node, env), whole=True)

    def branch(self, node: Node, env: dict[str, _Value]) -> tuple[_Value, _Marks]:
        """Evaluate ``node`` keeping its marks apart (the caller decides whether they count)."""
        saved, self.marks = self.marks, {}
        try:
            return self.value(node, env), self.marks
        finally:
            self.marks = saved

    def keep(self, marks: _Marks) -> None:
        for key, origin in marks.items():
            self.marks.setdefault(key, origin)

    # -- evaluation -----------------------------------------------------------------------------------
    def value(self, node: Node, env: dict[str, _Value]) -> _Value:
        """What ``node``'s value is known to be, marking what its evaluation reads."""
        kind = node.kind
        if kind == "const":
            return _Value(const=node.value)
        if kind == "ident":
            return self._ident(node.name, env)
        if kind == "select":
            base = self.value(node.target, env) if node.target is not None else _OPAQUE
            return self._select(base, node.name, test_only=node.test_only)
        if kind == "list":
            for element in node.args:
                self.use(element, env)
            return _OPAQUE
        if kind == "struct":
            for key, val in node.entries:
                if key is not None:
                    self.use(key, env)
                self.use(val, env)
            return _Value(is_map=not node.name)
        if kind == "comprehension":
            return self._comprehension(node, env)
        if kind == "call":
            return self._call(node, env)
        raise ValueError(f"unknown CEL expression kind {kind!r}")

    def _ident(self, name: str, env: dict[str, _Value]) -> _Value:
        if name in env:
            return env[name]
        bare = name.lstrip(".")
        head, *rest = bare.split(".")
        if head in _ROOTS:
            value = _at((head,))
            for part in rest:  # a qualified name over a root: ``request.userInfo`` as one identifier
                value = self._select(value, part, test_only=False)
            return value
        if bare in _TYPE_IDENTS:
            return _Value(const=_TypeName(bare))
        return _OPAQUE

    def _select(self, base: _Value, name: str, *, test_only: bool) -> _Value:
        if base.path is None:
            return _OPAQUE
        selected = _at((*base.path, name))
        self.mark(selected, whole=False)
        if test_only:
            keys = _KEYS.get(base.path)
            return _Value(const=True) if keys is not None and name in keys else _OPAQUE
        return selected

    def _comprehension(self, node: Node, env: dict[str, _Value]) -> _Value:
        iter_range, accu_init, condition, step, result = node.args
        if iter_range.kind == "list" and not iter_range.args:
            # cel.bind(name, init, body) (and the has() rewrite): the body sees ``name`` as ``init``.
            return self.value(result, {**env, node.accu_var: self.value(accu_init, env)})
        self.use(iter_range, env)
        inner = {**env, node.name: _OPAQUE, node.accu_var: _OPAQUE}
        if node.iter_var2:
            inner[node.iter_var2] = _OPAQUE
        self.use(accu_init, env)
        self.use(condition, inner)
        self.use(step, inner)
        self.use(result, {**env, node.accu_var: _OPAQUE})
        return _OPAQUE

    def _call(self, node: Node, env: dict[str, _Value]) -> _Value:
        name, target, args = node.name, node.target, node.args
        if target is None:
            special = _CALLS.get((name, len(args)))
            if special is not None:
                return special(self, args, env)
            if name in ("_[_]", "_[?_]", "_?._") and len(args) == 2:
                return self._index(args[0], args[1], env)
            if name == "__tg_var" and len(args) == 1 and args[0].kind == "const" and isinstance(args[0].value, str):
                return self._variable(args[0].value)
            if name == "__tg_params" and not args:
                self.marks.setdefault((("params",), True), self.origin)
                return _OPAQUE
        # Anything else uses its receiver and arguments whole.
        if target is not None:
            self.use(target, env)
        for a in args:
            self.use(a, env)
        return _OPAQUE

    def _index(self, container: Node, key: Node, env: dict[str, _Value]) -> _Value:
        base = self.value(container, env)
        index = self.value(key, env)
        if isinstance(index.const, str):
            return self._select(base, index.const, test_only=False)
        self.mark(index, whole=True)
        self.mark(base, whole=True)  # a computed key may be any field
        return _OPAQUE

    def _variable(self, name: str) -> _Value:
        if name not in self._variable_values:
            spec = self.variables.get(name)
            if spec is None:
                raise ValueError(f"unknown variable {name!r}")
            self._variable_values[name] = None  # a cycle is an error, not a loop
            saved_origin, self.origin = self.origin, spec[0]
            try:
                self._variable_values[name] = self.branch(decode_expr(spec[1]), {})
            finally:
                self.origin = saved_origin
        entry = self._variable_values[name]
        if entry is None:
            raise ValueError(f"variable {name!r} refers to itself")
        value, marks = entry
        self.keep(marks)
        return value

    # -- operators that fold --------------------------------------------------------------------------
    def _and_or(self, args: list[Node], env: dict[str, _Value], decisive: bool) -> _Value:
        """``_&&_`` (``decisive`` False) or ``_||_`` (True): one decisive arm decides, whatever the others do."""
        arms = [self.branch(a, env) for a in args]
        for value, marks in arms:
            if value.const is decisive:
                self.keep(marks)
                return _Value(const=decisive)
        for value, marks in arms:
            self.keep(marks)
            self.mark(value, whole=True)
        if all(value.const is (not decisive) for value, _ in arms):
            return _Value(const=not decisive)
        return _OPAQUE

    def _and(self, args: list[Node], env: dict[str, _Value]) -> _Value:
        return self._and_or(args, env, False)

    def _or(self, args: list[Node], env: dict[str, _Value]) -> _Value:
        return self._and_or(args, env, True)

    def _not(self, args: list[Node], env: dict[str, _Value]) -> _Value:
        value = self.value(args[0], env)
        self.mark(value, whole=False)
        return _Value(const=not value.const) if isinstance(value.const, bool) else _OPAQUE

    def _conditional(self, args: list[Node], env: dict[str, _Value]) -> _Value:
        condition = self.value(args[0], env)
        self.mark(condition, whole=True)
        if isinstance(condition.const, bool):
            return self.value(args[1] if condition.const else args[2], env)  # the other branch is never taken
        for branch in args[1:]:
            self.use(branch, env)
        return _OPAQUE

    def _equals(self, args: list[Node], env: dict[str, _Value], negate: bool = False) -> _Value:
        left, right = self.value(args[0], env), self.value(args[1], env)
        # Compared with a literal a value is read shallowly (a scalar is kept whole anyway); with anything else,
        # the whole value takes part (``request == x`` reads all of the request).
        self.mark(left, whole=not right.known)
        self.mark(right, whole=not left.known)
        equal = _fold_equals(left, right)
        return _OPAQUE if equal is None else _Value(const=equal != negate)

    def _not_equals(self, args: list[Node], env: dict[str, _Value]) -> _Value:
        return self._equals(args, env, negate=True)

    def _type(self, args: list[Node], env: dict[str, _Value]) -> _Value:
        value = self.value(args[0], env)
        self.mark(value, whole=False)
        if value.is_map:
            return _Value(const=_TypeName("map"))
        return _OPAQUE


def _fold_equals(left: _Value, right: _Value) -> bool | None:
    """``left == right`` when both are known (same scalar type, or null against a map), else None."""
    if left.known and right.known and type(left.const) is type(right.const):
        return bool(left.const == right.const)
    for a, b in ((left, right), (right, left)):
        if a.is_map and b.const is None:
            return False
    return None


_CALLS: Mapping[tuple[str, int], Callable[[_Analysis, list[Node], dict[str, _Value]], _Value]] = {
    ("_&&_", 2): _Analysis._and,
    ("_||_", 2): _Analysis._or,
    ("!_", 1): _Analysis._not,
    ("_?_:_", 3): _Analysis._conditional,
    ("_==_", 2): _Analysis._equals,
    ("_!=_", 2): _Analysis._not_equals,
    ("type", 1): _Analysis._type,
}


def _read_name(path: Path, whole: bool) -> str | None:
    """The name of a read (see the module docstring); None for reading only the request map's presence."""
    head = path[0]
    if head != "request":
        return head
    if len(path) == 1:
        return "request" if whole else None
    return path[1] if path[1] in ("object", "oldObject") else f"request.{path[1]}"


def _programs(policy: CompiledPolicy) -> list[tuple[str, Any]]:
    """``(spec path, cel Expression)`` of every program audit evaluates directly."""
    out = [(program.path, program.program.program) for _, program in policy.match_conditions]
    for validation in policy.validations:
        out.append((validation.expression.path, validation.expression.program.program))
        if validation.message_expression is not None:
            out.append((validation.message_expression.path, validation.message_expression.program.program))
    return out


def audit_reads(policy: CompiledPolicy) -> dict[str, str]:
    """What the programs audit evaluates read, on the audit's request.

    Args:
        policy: a compiled (Ready) policy.

    Returns:
        Read name (``object``, ``oldObject``, ``namespaceObject``, ``params``, ``request``,
        ``request.<field>``; see the module docstring) → the spec path of the first expression reading
        it (``spec.validations[0].expression``, or ``spec.variables[i].expression`` for a read inside a
        variable). Sorted by name.

    Raises:
        ValueError: a program that cannot be decoded or analysed (a variable referring to itself, an
            expression kind this analysis does not know).
    """
    positions = {v.name: i for i, v in enumerate(policy.spec.variables)}
    variables = {name: (f"spec.variables[{positions.get(name, 0)}].expression",
                        expr_bytes(compiled.program.serialize()))
                 for name, compiled in policy.variables.items()}
    analysis = _Analysis(variables)
    for path, program in _programs(policy):
        analysis.origin = path
        analysis.use(decode_expr(expr_bytes(program.serialize())), {})
    reads: dict[str, str] = {}
    for (read_path, whole), origin in analysis.marks.items():
        name = _read_name(read_path, whole)
        if name is not None and name not in reads:
            reads[name] = origin
    return dict(sorted(reads.items()))


def not_auditable(policy: CompiledPolicy) -> str | None:
    """Why ``policy`` cannot be judged on stored objects, or None when it can.

    A policy without validations has nothing to audit; a policy whose live CEL reads any of
    :data:`NOT_AUDITABLE_READS` would judge the audit's made-up request, not the object.

    Returns:
        One line, e.g. ``"it reads request.userInfo (spec.validations[0].expression), which a stored object does
        not have"``.
    """
    if not policy.validations:
        return "it has no validations (only validations are audited)"
    try:
        reads = audit_reads(policy)
    except ValueError as e:
        return f"its CEL could not be analysed: {e}"
    bad = [f"{name} ({origin})" for name, origin in reads.items() if name in NOT_AUDITABLE_READS]
    if not bad:
        return None
    return f"it reads {' and '.join(bad)}, which a stored object does not have"


def reads_namespace_object(policy: CompiledPolicy) -> bool:
    """Whether the programs audit evaluates read ``namespaceObject`` (True when the analysis fails)."""
    try:
        return "namespaceObject" in audit_reads(policy)
    except ValueError:
        return True
