"""Compile-time validators Kubernetes runs on every CEL expression, over a decoded AST (pure).

Kubernetes (``k8s.io/apiserver/pkg/cel/environment/base.go``, since 1.29) adds cel-go's
``ValidateDurationLiterals``, ``ValidateTimestampLiterals``, ``ValidateRegexLiterals`` and
``ValidateHomogeneousAggregateLiterals``; its list library only declares ``min``/``max``/``sum``/
``isSorted`` for comparable (summable) element types, and its regex library compiles literal
patterns of ``find``/``findAll`` when the program is built. cel-cpp's checker, as cel-expr-python
exposes it, does none of this, so :func:`validate` does it on :mod:`webhook.policy.cel.ast` trees.

Deviation, on purpose: homogeneity is checked for list literals only and only between primitive
element types (``[1, 'a']``); Tollgate's ``applyConfiguration`` patches are plain maps whose values
naturally differ in type (``{"replicas": 3, "paused": false}``), which Kubernetes writes as typed
``Object{...}`` literals instead.
"""

from __future__ import annotations

from collections.abc import Callable

from webhook.policy.cel.ast import CheckedAst, Node
from webhook.policy.cel.library import lists, regex
from webhook.policy.cel.library._decl import LibraryError

_PRIMITIVE = frozenset({"bool", "int", "uint", "double", "string", "bytes", "duration", "timestamp"})

#: What a call of a Kubernetes library constructor is (``ip.go``, ``cidr.go``, ``quantity.go``, ``urls.go``,
#: ``semverlib.go``). Tollgate's values of these types are ``dyn`` maps to the checker, so passing one where
#: those libraries take a string (``isIP(cidr('10.0.0.0/8'))``) is found here, as cel-go's checker finds it.
_CONSTRUCTED = {"ip": "net.IP", "cidr": "net.CIDR", "quantity": "Quantity", "url": "URL", "semver": "Semver"}
#: Global functions of those libraries whose every overload takes a string first argument.
_TAKES_STRING = frozenset({"ip", "isIP", "ip.isCanonical", "cidr", "isCIDR", "quantity", "isQuantity", "url",
                           "isURL", "semver", "isSemver"})

#: ``(offset into the source, message)``.
Problem = tuple[int, str]


def _literal(node: Node | None) -> str | None:
    if node is not None and node.kind == "const" and node.const_kind == "string":
        return str(node.value)
    return None


def _regex_argument(node: Node) -> Node | None:
    if node.name == "matches":
        if node.target is not None and len(node.args) == 1:
            return node.args[0]
        if node.target is None and len(node.args) == 2:
            return node.args[1]
    if node.name in ("find", "findAll") and node.target is not None and node.args:
        return node.args[0]
    return None


def validate(ast: CheckedAst, literal_ok: Callable[[str, str], str | None]) -> list[Problem]:
    """Problems Kubernetes would report at compile time, in source order.

    Args:
        ast: a checked AST.
        literal_ok: ``literal_ok("duration" | "timestamp", text)`` → error text or None
            (evaluates the conversion in the real environment).

    Returns:
        ``[(offset, message)]``; empty when the expression is acceptable.
    """
    problems: list[Problem] = []

    def at(node: Node) -> int:
        return ast.offsets.get(node.id, 0)

    # cel-go exempts the argument list of string.format from the homogeneity check.
    exempt = {a.id for n in ast.root.walk() if n.kind == "call" and n.name == "format" for a in n.args}
    for node in ast.root.walk():
        if node.kind == "call":
            arg = _regex_argument(node)
            pattern = _literal(arg)
            if arg is not None and pattern is not None:
                try:
                    regex.compile_re2(pattern)
                except LibraryError as e:
                    problems.append((at(arg), f"invalid regex: {e}"))
            if node.name in ("duration", "timestamp") and node.target is None and len(node.args) == 1:
                text = _literal(node.args[0])
                if text is not None:
                    err = literal_ok(node.name, text)
                    if err is not None:
                        problems.append((at(node.args[0]), f"invalid {node.name} argument: {err}"))
            if node.name in _TAKES_STRING and node.target is None and node.args:
                constructed = _constructed(node.args[0])
                if constructed is not None:
                    problems.append((at(node), f"found no matching overload for '{node.name}' applied to "
                                               f"'({constructed})'"))
            if node.name in ("min", "max", "isSorted", "sum") and node.target is not None and not node.args:
                message = _list_element_problem(node, ast)
                if message:
                    problems.append((at(node), message))
        elif node.kind == "list" and node.id not in exempt:
            problem = _heterogeneous(node, ast)
            if problem:
                problems.append(problem)
    return sorted(problems)


def _constructed(node: Node) -> str | None:
    """The library type a direct constructor call makes (``cidr('...')``: ``net.CIDR``), or None."""
    if node.kind == "call" and node.target is None and node.name in _CONSTRUCTED and node.args:
        return _CONSTRUCTED[node.name]
    return None


def _list_element_problem(node: Node, ast: CheckedAst) -> str | None:
    assert node.target is not None
    rtype = ast.type_of(node.target)
    if not rtype.startswith("list(") or not rtype.endswith(")"):
        return None
    elem = rtype[5:-1]
    allowed = lists.SUMMABLE if node.name == "sum" else lists.COMPARABLE
    if elem == "dyn" or elem in allowed:
        return None
    return f"found no matching overload for '{node.name}' applied to '{rtype}'"


def _heterogeneous(node: Node, ast: CheckedAst) -> Problem | None:
    first: str | None = None
    for i, element in enumerate(node.args):
        t = ast.type_of(element)
        if i in node.optional_indices and t.startswith("optional_type(") and t.endswith(")"):
            t = t[len("optional_type("):-1]
        if t not in _PRIMITIVE:
            continue
        if first is None:
            first = t
        elif t != first:
            return ast.offsets.get(element.id, 0), f"expected type '{first}' but found '{t}'"
    return None
