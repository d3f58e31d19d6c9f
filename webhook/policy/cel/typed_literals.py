"""MutatingAdmissionPolicy's typed literals, ``JSONPatch{...}`` and ``Object.<path>{...}``, as map literals (pure).

Kubernetes declares, for a MutatingAdmissionPolicy's expressions, the object type ``JSONPatch`` (fields
``op``, ``path``, ``from``, ``value``) and the family of dynamic object types ``Object``,
``Object.spec``, ``Object.spec.containers``, ... whose type name spells the field path from the root
(``k8s.io/apiserver/pkg/cel/mutation``). cel-expr-python cannot declare object types from Python, and
protobuf descriptors (``descriptor_pool``) cannot describe ``Object``'s open set of fields, so each
typed literal is rewritten into the map literal it evaluates to, before compiling::

    Object{spec: Object.spec{replicas: 3}}     →  dyn({"spec": dyn({"replicas": 3})})
    JSONPatch{op: "add", path: p, value: v}     →  dyn({"op": "add", "path": p, "value": v})
    Object.metadata{?labels: optional.of(m)}   →  dyn({?"labels": optional.of(m)})

Each map literal is typed ``dyn``, as each typed literal has one object type in Kubernetes whatever fields
it sets: ``c ? Object{spec: ...} : Object{}`` and ``c ? JSONPatch{...} : null`` type-check as in cel-go,
where both branches are ``Object`` (or ``JSONPatch``) and ``null`` is assignable to an object type
(``checker/types.go`` ``isLegacyNullable``: struct kinds are nullable). A map literal's type would be its
keys' and values' (``map(string, string)`` against ``null_type``: no matching overload for ``_?_:_``).

The rewrite keeps a map from every character of its output back to the author's text, so a compile
error in the rewritten text is reported at the author's line and column
(:meth:`Rewritten.remap_error`); what Kubernetes checks of the literals' names is checked here, on
the author's text, with its position:

* a field of ``JSONPatch`` other than ``op``, ``path``, ``from``, ``value`` is undefined, as Kubernetes'
  checker says;
* a typed literal written directly as a field's value (or as an element of a list literal there)
  must be named for that field's path (``Object.spec{selector: Object.spec.selector{...}}``):
  Kubernetes checks this when the expression runs (``CheckTypeNamesMatchFieldPathNames``), with the
  same message; a literal reached through a variable or a function is not checked;
* a field set twice is an error (a map literal with a repeated key is one at runtime).

Whether an ``applyConfiguration`` expression returns ``Object`` (not ``Object.spec``, not
``JSONPatch``) is the compiler's check, from :attr:`Rewritten.root`. Typed literals are accepted in
every expression of a policy, where Kubernetes declares them only in a MutatingAdmissionPolicy's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["JSONPATCH_FIELDS", "MAX_DEPTH", "Rewritten", "TypedLiteral", "TypedLiteralError", "rewrite"]

#: The fields of Kubernetes' ``JSONPatch`` object type.
JSONPATCH_FIELDS = ("op", "path", "from", "value")
#: Deepest nesting of typed literals accepted (cel-cpp's parser refuses far less deep expressions anyway).
MAX_DEPTH = 100
_HEADS = ("Object", "JSONPatch")

_TOKEN = re.compile(
    r"""(?P<space>\s+|//[^\n]*)"""
    r"""|(?P<str>[rR]?[bB]?[rR]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^\\'\n])*'"""
    r"""|"(?:\\.|[^\\"\n])*"))"""
    r"""|(?P<num>0[xX][0-9a-fA-F]+[uU]?|\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[uU]?)"""
    r"""|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"""
    r"""|(?P<quoted>`[^`\n]*`)"""
    r"""|(?P<punct>.)""",
    re.DOTALL,
)


class TypedLiteralError(ValueError):
    """A typed literal Kubernetes would refuse; ``offset`` is where, in the author's text."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.message = message


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    start: int
    end: int
    text: str


@dataclass(frozen=True, slots=True)
class TypedLiteral:
    """One ``Name{...}`` literal of the author's text.

    Attributes:
        name: the type name as written, dots joined without spaces (``Object.spec.containers``).
        start: offset of the name in the author's text.
        end: offset just past its closing ``}``.
        fields: the field names it sets, in order.
        brace: offset of its ``{`` in the author's text (where the map literal it becomes starts).
    """

    name: str
    start: int
    end: int
    fields: tuple[str, ...] = ()
    brace: int = 0


@dataclass(frozen=True, slots=True)
class Rewritten:
    """The rewrite of one expression.

    Attributes:
        text: the expression with every typed literal as a map literal (the author's text when it
            has none).
        literals: every typed literal, in source order.
        root: the literal that is the whole expression (parentheses aside), or None.
    """

    text: str
    literals: tuple[TypedLiteral, ...] = ()
    root: TypedLiteral | None = None
    #: For each character of ``text``, its offset in the author's text (empty when nothing changed).
    origins: tuple[int, ...] = field(default=(), repr=False)

    def source_offset(self, offset: int) -> int:
        """The offset in the author's text of ``text[offset]`` (past the end maps past the end)."""
        if not self.origins:
            return offset
        if offset >= len(self.origins):
            return (self.origins[-1] + 1 + offset - len(self.origins)) if self.origins else offset
        return self.origins[max(0, offset)]

    def remap_error(self, message: str, author_text: str) -> str:
        """``message`` (cel-cpp's wording) with every ``<input>:line:column`` moved to the author's text.

        The source-and-caret lines cel-cpp appends quote the rewritten text, so they are dropped when
        anything moved; every ``ERROR: ...`` line is kept.
        """
        if not self.origins:
            return message

        def move(m: re.Match[str]) -> str:
            line, column = int(m.group(1)), int(m.group(2))
            offset = _offset_of(self.text, line, column)
            new_line, new_column = _line_column(author_text, self.source_offset(offset))
            return f"<input>:{new_line}:{new_column}:"

        kept = [ln for ln in message.splitlines() if not ln.startswith(" |")]
        return re.sub(r"<input>:(\d+):(\d+):", move, "\n".join(kept))


def _offset_of(text: str, line: int, column: int) -> int:
    start = 0
    for _ in range(line - 1):
        nl = text.find("\n", start)
        if nl < 0:
            break
        start = nl + 1
    return start + column - 1


def _line_column(text: str, offset: int) -> tuple[int, int]:
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _tokens(text: str) -> list[_Token]:
    return [_Token(m.lastgroup or "punct", m.start(), m.end(), m.group(0))
            for m in _TOKEN.finditer(text) if m.lastgroup != "space"]


_CLOSE = {"(": ")", "[": "]", "{": "}"}


class _Parser:
    """Finds typed literals in a token list and records the edits that make them map literals."""

    def __init__(self, text: str, tokens: list[_Token]) -> None:
        self.text = text
        self.tokens = tokens
        #: ``(start, end, replacement)`` in the author's text, in any order.
        self.edits: list[tuple[int, int, str]] = []
        self.literals: list[TypedLiteral] = []
        #: index of a literal's first token → the literal (for the nesting check).
        self.at: dict[int, TypedLiteral] = {}
        #: index of an opening bracket → the index just past its closing one (one pass, so scans stay linear).
        self.after: dict[int, int] = {}
        stack: list[int] = []
        for i, tok in enumerate(tokens):
            if tok.kind != "punct":
                continue
            if tok.text in _CLOSE:
                stack.append(i)
            elif tok.text in (")", "]", "}") and stack:
                self.after[stack.pop()] = i + 1
        self.depth = 0

    def head(self, i: int) -> tuple[str, int] | None:
        """``(name, index of '{')`` when a typed literal starts at token ``i``."""
        toks = self.tokens
        if toks[i].kind != "ident" or toks[i].text not in _HEADS:
            return None
        if i > 0 and toks[i - 1].text == ".":
            return None  # a field selection such as x.Object
        parts = [toks[i].text]
        j = i + 1
        while j + 1 < len(toks) and toks[j].text == "." and toks[j + 1].kind == "ident":
            parts.append(toks[j + 1].text)
            j += 2
        if j < len(toks) and toks[j].text == "{":
            return ".".join(parts), j
        return None

    def skip_group(self, i: int) -> int:
        """Index just past the bracket group opening at token ``i`` (``len(tokens)`` when unbalanced)."""
        return self.after.get(i, len(self.tokens))

    def scan(self, lo: int, hi: int) -> None:
        """Rewrite every typed literal among tokens ``[lo, hi)``."""
        i = lo
        while i < hi:
            found = self.head(i)
            if found is None:
                i += 1
                continue
            i = self.literal(i, found[0], found[1], hi)

    def literal(self, i: int, name: str, brace: int, hi: int) -> int:
        """Rewrite the literal at token ``i`` (its ``{`` at ``brace``); the index past its ``}``."""
        toks = self.tokens
        close = self.skip_group(brace) - 1
        if close >= hi or toks[close].text != "}":
            return brace + 1  # unbalanced: the parser reports it
        start = toks[i].start
        if self.depth >= MAX_DEPTH:
            raise TypedLiteralError(start, f"typed literals nested more than {MAX_DEPTH} deep")
        self.depth += 1
        # ``dyn(`` … ``)``: a typed literal has one object type, whatever fields it sets (see the module docstring).
        self.edits.append((start, toks[brace].start, "dyn("))
        self.edits.append((toks[close].end, toks[close].end, ")"))
        names: list[str] = []
        children: list[tuple[str, int, int]] = []  # (field, first value token, end value token)
        j = brace + 1
        while j < close:
            optional = toks[j].text == "?"
            k = j + 1 if optional else j
            tok = toks[k] if k < close else toks[close]
            if tok.kind not in ("ident", "quoted") or k + 1 >= close or toks[k + 1].text != ":":
                raise TypedLiteralError(tok.start, f"a field of {name} is written 'name: value', found "
                                                   f"{tok.text!r}")
            field_name = tok.text.strip("`") if tok.kind == "quoted" else tok.text
            if field_name in names:
                raise TypedLiteralError(tok.start, f"field '{field_name}' is set twice in {name}")
            if name == "JSONPatch" and field_name not in JSONPATCH_FIELDS:
                raise TypedLiteralError(tok.start, f"undefined field '{field_name}'")
            names.append(field_name)
            self.edits.append((tok.start, tok.end, _quote(field_name)))
            v = k + 2
            end = v
            while end < close and toks[end].text != ",":
                end = self.skip_group(end) if toks[end].text in _CLOSE else end + 1
            if v == end:
                raise TypedLiteralError(toks[end].start, f"field '{field_name}' of {name} has no value")
            children.append((field_name, v, end))
            self.scan(v, end)
            j = end + 1
        self.depth -= 1
        literal = TypedLiteral(name, start, toks[close].end, tuple(names), toks[brace].start)
        self.literals.append(literal)
        self.at[i] = literal
        for field_name, v, end in children:
            self.check_nested(name, field_name, v, end)
        return close + 1

    def check_nested(self, parent: str, field_name: str, lo: int, hi: int) -> None:
        """A literal written directly as the value of ``parent.field_name`` must be named for that path."""
        if not parent.startswith("Object"):
            return  # JSONPatch's value may be any literal
        expected = f"{parent}.{field_name}"
        for i in self.direct_literals(lo, hi):
            got = self.at[i]
            if got.name != expected:
                raise TypedLiteralError(got.start, f'type mismatch: unexpected type name "{got.name}", expected '
                                                   f'"{expected}", which matches field name path from root Object '
                                                   "type")

    def unparenthesized(self, lo: int, hi: int) -> tuple[int, int]:
        """``[lo, hi)`` without the parentheses around all of it."""
        while hi - lo >= 2 and self.tokens[lo].text == "(" and self.skip_group(lo) == hi:
            lo, hi = lo + 1, hi - 1
        return lo, hi

    def whole_literal(self, lo: int, hi: int) -> int | None:
        """The token index of the literal that is all of ``[lo, hi)`` (parentheses aside), or None."""
        lo, hi = self.unparenthesized(lo, hi)
        found = self.head(lo) if lo < hi and lo in self.at else None
        return lo if found is not None and self.skip_group(found[1]) == hi else None

    def direct_literals(self, lo: int, hi: int) -> list[int]:
        """Token indexes of the literals that are the whole of ``[lo, hi)`` or the elements of a list there.

        Lists nested in lists are not descended into (a literal there is named for the list's field too,
        but Kubernetes' lists of lists are not objects' fields).
        """
        toks = self.tokens
        whole = self.whole_literal(lo, hi)
        if whole is not None:
            return [whole]
        lo, hi = self.unparenthesized(lo, hi)
        found: list[int] = []
        if hi - lo >= 2 and toks[lo].text == "[" and self.skip_group(lo) == hi:
            j = lo + 1
            while j < hi - 1:
                end = j
                while end < hi - 1 and toks[end].text != ",":
                    end = self.skip_group(end) if toks[end].text in _CLOSE else end + 1
                element = self.whole_literal(j, end)
                if element is not None:
                    found.append(element)
                j = end + 1
        return found


def _quote(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rewrite(text: str) -> Rewritten:
    """Rewrite ``text``'s typed literals into map literals (see the module docstring).

    Args:
        text: a CEL expression as its author wrote it.

    Returns:
        The rewrite; ``text`` unchanged (and no origins) when it has no typed literal.

    Raises:
        TypedLiteralError: a literal Kubernetes would refuse (an undefined ``JSONPatch`` field, a
            nested literal named for another path, a field set twice, a malformed field), with its
            offset in ``text``.
    """
    if "Object" not in text and "JSONPatch" not in text:
        return Rewritten(text)
    tokens = _tokens(text)
    parser = _Parser(text, tokens)
    parser.scan(0, len(tokens))
    if not parser.literals:
        return Rewritten(text)
    out: list[str] = []
    origins: list[int] = []
    pos = 0
    for start, end, replacement in sorted(parser.edits):
        out.append(text[pos:start])
        origins.extend(range(pos, start))
        out.append(replacement)
        origins.extend([start] * len(replacement))
        pos = end
    out.append(text[pos:])
    origins.extend(range(pos, len(text)))
    literals = tuple(sorted(parser.literals, key=lambda lit: lit.start))
    return Rewritten("".join(out), literals, _root(parser, tokens), tuple(origins))


def _root(parser: _Parser, tokens: list[_Token]) -> TypedLiteral | None:
    found = parser.whole_literal(0, len(tokens))
    return parser.at[found] if found is not None else None
