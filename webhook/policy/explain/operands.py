"""The top-level operands of a CEL expression, as the author wrote them (pure; no I/O).

An explanation shows, for an expression that is false or errors, the values of its top-level operands:
for ``a && b && c`` (or ``||``) each of ``a``, ``b``, ``c``; for ``x == y`` (any operator or function
call) ``x`` and ``y``; for ``!x`` ``x``; for ``c ? a : b`` the condition and both branches; for
``range.all(x, p)`` the range and the elements for which ``p`` is false (evaluated as
``(range).filter(x, !(p))``); for ``range.exists_one(x, p)`` the elements for which ``p`` holds; for
``cel.bind(x, init, body)`` the value bound to ``x``. Literal operands are left out (their value is
their text).

Each operand is found in the expression's parse tree (:mod:`webhook.policy.cel.ast`, the author's
text parsed without type checking, so node offsets are positions in what the author wrote) and cut
out of the text: from the first character of its subtree to the end of its last token, with the
brackets its subtree opened closed again. The text is then compiled and evaluated as a program of its
own by the explainer (in the policy's activation and scope), so an operand that reads a
comprehension's variable is simply not evaluable on its own and is reported so.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from webhook.policy.cel import ast as celast
from webhook.policy.cel.env import environment

__all__ = ["MAX_OPERANDS", "Operand", "Role", "top_level_operands"]

#: Most operands listed per expression (a long ``&&`` chain shows its first ones and says how many more).
MAX_OPERANDS = 8


class Role:
    """What an operand is to its expression (its label in an explanation)."""

    OPERAND = "operand"
    CONDITION = "condition"
    THEN = "then"
    ELSE = "else"
    RANGE = "range"
    FAILING = "elements failing the predicate"
    MATCHING = "elements satisfying the predicate"
    BOUND = "bound"


@dataclass(frozen=True, slots=True)
class Operand:
    """One top-level operand.

    Attributes:
        text: the operand as the author wrote it (for ``FAILING``/``MATCHING``: the predicate).
        role: see :class:`Role`.
        source: the CEL text evaluated for its value: ``text`` itself, or a derived expression
            (``(range).filter(x, !(p))``).
    """

    text: str
    role: str
    source: str


_LOGICAL = frozenset({"_&&_", "_||_"})
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"(?:0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)[uU]?")
_STRING = re.compile(
    r"""[rR]?[bB]?[rR]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*")"""
)
_OPEN, _CLOSE = "([{", ")]}"


def _skip_strings(text: str, i: int) -> int:
    """The index after a string literal starting at ``i``, or ``i`` when none starts there."""
    if text[i] not in "'\"rRbB":
        return i
    m = _STRING.match(text, i)
    return m.end() if m else i


def _token_end(node: celast.Node, text: str, off: int) -> int | None:
    """The end of the token a node's offset points at; None when the offset is not where it should be."""
    if not 0 <= off < len(text):
        return None
    c = text[off]
    if node.kind == "ident":
        return off + len(node.name) if text.startswith(node.name, off) else None
    if node.kind == "const":
        if c in "'\"rRbB" and isinstance(node.value, str | bytes):
            end = _skip_strings(text, off)
            return end if end > off else None
        m = _IDENT.match(text, off) if node.const_kind in ("bool", "null") else _NUMBER.match(text, off)
        return m.end() if m and m.end() > off else None
    if node.kind == "select" or (node.kind == "call" and node.name == "_?._"):
        if node.test_only:
            return _matching(text, off) if c == "(" else None
        if c != ".":
            return None
        i = off + 1
        if i < len(text) and text[i] == "?":
            i += 1
        while i < len(text) and text[i].isspace():
            i += 1
        m = _IDENT.match(text, i)
        return m.end() if m else None
    return off + 1


def _token_start(node: celast.Node, text: str, off: int) -> int:
    """Where a node's own text starts: a call's name comes before the ``(`` its offset points at."""
    if 0 <= off < len(text) and (text[off] == "(" or (text[off] == "{" and node.kind == "struct" and node.name)):
        i = off
        while i > 0 and text[i - 1].isspace() and text[off] == "(":
            i -= 1
        while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_."):
            i -= 1
        return i
    return off


def _span(node: celast.Node, tree: celast.CheckedAst, text: str) -> tuple[int, int] | None:
    """``(start, end)`` of ``node``'s text, or None when its offsets do not locate it."""
    start, end = len(text), -1
    for n in node.walk():
        off = tree.offsets.get(n.id)
        if off is None:
            continue
        token_end = _token_end(n, text, off)
        if token_end is None:
            continue  # an offset the parser left unset (0) or a generated node
        start = min(start, _token_start(n, text, off))
        end = max(end, token_end)
    if end <= start:
        return None
    return _balance(text, start, end)


def _matching(text: str, open_at: int) -> int | None:
    """The index after the bracket that closes the one at ``open_at`` (strings skipped), or None."""
    depth, i = 0, open_at
    while i < len(text):
        j = _skip_strings(text, i)
        if j > i:
            i = j
            continue
        if text[i] in _OPEN:
            depth += 1
        elif text[i] in _CLOSE:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _balance(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen ``text[start:end]`` to whole brackets.

    Past the closers of the brackets it opens, and back over the openers of those it closes (a
    parenthesised receiver: ``(a || b).c``).
    """
    stack: list[str] = []
    unopened: list[str] = []
    i = start
    while i < end:
        j = _skip_strings(text, i)
        if j > i:
            i = j
            continue
        c = text[i]
        if c in _OPEN:
            stack.append(_CLOSE[_OPEN.index(c)])
        elif c in _CLOSE:
            if stack and stack[-1] == c:
                stack.pop()
            elif not stack:
                unopened.append(_OPEN[_CLOSE.index(c)])
        i += 1
    while stack and i < len(text):
        c = text[i]
        if c.isspace() or c == ",":
            i += 1
        elif c == stack[-1]:
            stack.pop()
            i += 1
        else:
            break
    while unopened and start > 0:
        c = text[start - 1]
        if c.isspace():
            start -= 1
        elif c == unopened[0]:
            unopened.pop(0)
            start -= 1
        else:
            break
    return start, i


def _split_arguments(inner: str) -> list[str]:
    """Top-level comma-separated parts of a call's argument text."""
    parts: list[str] = []
    depth, i, last = 0, 0, 0
    while i < len(inner):
        j = _skip_strings(inner, i)
        if j > i:
            i = j
            continue
        c = inner[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(inner[last:i].strip())
            last = i + 1
        i += 1
    parts.append(inner[last:].strip())
    return parts


def _macro(node: celast.Node, tree: celast.CheckedAst, text: str) -> tuple[str, list[str]] | None:
    """A comprehension's macro name (``all``, ``exists_one``, ``bind``...) and its argument texts."""
    off = tree.offsets.get(node.id)
    if off is None or not 0 <= off < len(text) or text[off] != "(":
        return None
    m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", text[:off])
    close = _matching(text, off)
    if m is None or close is None or text[close - 1] != ")":
        return None
    return m.group(1), _split_arguments(text[off + 1:close - 1])


def _leaves(node: celast.Node, op: str) -> list[celast.Node]:
    if node.kind == "call" and node.name == op and node.target is None and len(node.args) == 2:
        return _leaves(node.args[0], op) + _leaves(node.args[1], op)
    return [node]


def _literal(node: celast.Node) -> bool:
    """A constant, or a list or map of constants: its value is its text."""
    if node.kind == "const":
        return True
    if node.kind == "list":
        return all(_literal(a) for a in node.args)
    if node.kind == "struct" and not node.name:
        return all((k is None or _literal(k)) and _literal(v) for k, v in node.entries)
    return False


class _Finder:
    def __init__(self, tree: celast.CheckedAst, text: str) -> None:
        self.tree = tree
        self.text = text
        self.found: list[Operand] = []

    def text_of(self, node: celast.Node) -> str | None:
        span = _span(node, self.tree, self.text)
        return self.text[span[0]:span[1]].strip() if span else None

    def add(self, node: celast.Node, role: str) -> None:
        if _literal(node):
            return
        text = self.text_of(node)
        if text:
            self.found.append(Operand(text, role, text))
        if node.kind == "comprehension":
            self.comprehension(node, nested=True)

    def comprehension(self, node: celast.Node, *, nested: bool) -> None:
        macro = _macro(node, self.tree, self.text)
        if macro is None:
            return
        name, args = macro
        if name == "bind" and not nested and len(args) == 3:
            init = node.args[1]
            text = self.text_of(init)
            if text and not _literal(init):
                self.found.append(Operand(f"{args[0]} = {text}", Role.BOUND, text))
            return
        if name not in ("all", "exists_one", "existsOne") or len(args) != 2 or node.iter_var2:
            if not nested:
                self.add(node.args[0], Role.RANGE)
            return
        rng = self.text_of(node.args[0])
        if rng is None:
            return
        if not nested:
            self.found.append(Operand(rng, Role.RANGE, rng))
        var, predicate = args
        if name == "all":
            self.found.append(Operand(predicate, Role.FAILING, f"({rng}).filter({var}, !({predicate}))"))
        else:
            self.found.append(Operand(predicate, Role.MATCHING, f"({rng}).filter({var}, {predicate})"))

    def root(self, node: celast.Node) -> None:
        if node.kind == "comprehension":
            self.comprehension(node, nested=False)
            return
        if node.kind == "select" and node.target is not None:
            if node.target.kind != "ident":  # object, request, variables...: not worth showing whole
                self.add(node.target, Role.OPERAND)
            return
        if node.kind != "call":
            return
        if node.name in _LOGICAL and node.target is None:
            for leaf in _leaves(node, node.name):
                self.add(leaf, Role.OPERAND)
            return
        if node.name == "_?_:_" and len(node.args) == 3:
            for arg, role in zip(node.args, (Role.CONDITION, Role.THEN, Role.ELSE), strict=True):
                self.add(arg, role)
            return
        for arg in ([node.target] if node.target is not None else []) + node.args:
            self.add(arg, Role.OPERAND)


@functools.lru_cache(maxsize=4096)
def top_level_operands(text: str) -> tuple[Operand, ...]:
    """The top-level operands of ``text`` (see the module docstring), in source order.

    Args:
        text: a CEL expression as the author wrote it.

    Returns:
        The operands; ``()`` when the expression has none (an identifier, a literal) or does not parse.
        A derived operand (``FAILING``, ``MATCHING``) follows the range it is derived from.
    """
    try:
        parsed = environment().env.compile(text, disable_check=True)
        tree = celast.decode(parsed.serialize())
    except (RuntimeError, ValueError):
        return ()
    finder = _Finder(tree, text)
    finder.root(tree.root)
    seen: set[tuple[str, str]] = set()
    out = []
    for operand in finder.found:
        key = (operand.role, operand.source)
        if key not in seen and operand.source != text.strip():
            seen.add(key)
            out.append(operand)
    return tuple(out)
