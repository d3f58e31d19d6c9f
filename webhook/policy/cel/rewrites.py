"""Source rewrites: what cel-cpp cannot express written as Kubernetes means it, and variables routed per policy.

Two families, both outside string literals:

* :func:`rewrite_source`, before compiling: ``has()`` with cel-go's semantics,
  optionals returned by the format library, a bound on ``lists.range``;
* :func:`rewrite_for_runtime` and :func:`inline_variables`, for evaluation with
  one shared Activation: ``variables.x``/``params`` routed through the policy's
  scope (:mod:`webhook.policy.cel.scope`), or each variable bound once natively
  with ``cel.bind``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from webhook.policy.cel import typed_literals
from webhook.policy.cel.cost import PYTHON_SCALAR
from webhook.policy.cel.library._decl import LibraryError, T, function

__all__ = [
    "MAX_INLINED_LENGTH",
    "MAX_RANGE",
    "declarations",
    "inline_variables",
    "names_variable",
    "referenced_variables",
    "rewrite_for_runtime",
    "rewrite_or_value",
    "rewrite_source",
]

#: Largest ``n`` accepted by ``lists.range(n)`` (cel-cpp allocates the whole list: 3·10⁷ takes 1 GB).
MAX_RANGE = 100_000


def _range_bound(n: int) -> int:
    if n > MAX_RANGE:
        raise LibraryError(f"lists.range({n}) exceeds the limit of {MAX_RANGE}")
    return n


def declarations() -> list[Any]:
    """The runtime half of the rewrites: ``__tg_range_bound``."""
    return [function("__tg_range_bound", "tg_range_bound", T.INT, [T.INT], _range_bound,
                     rule=PYTHON_SCALAR)]


_STRING = re.compile(
    r"""[rR]?[bB]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*")"""
)


def _string_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _STRING.finditer(text)]


def names_variable(text: str, name: str) -> bool:
    """Whether CEL ``text`` names the identifier ``name`` outside string literals (``x.name`` is a field, not it).

    A comprehension variable of that name counts too.
    """
    return name in text and re.search(rf"(?<![\w.]){re.escape(name)}\b", _STRING.sub('""', text)) is not None


def _inside(spans: list[tuple[int, int]], pos: int) -> bool:
    return any(a <= pos < b for a, b in spans)


def _close_paren(text: str, open_at: int, spans: list[tuple[int, int]]) -> int:
    """Index of the ``)`` matching the ``(`` at ``open_at``, or -1."""
    depth = 0
    i = open_at
    span_at = dict(spans)
    while i < len(text):
        if i in span_at:
            i = span_at[i]
            continue
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i if c == ")" else -1
        i += 1
    return -1


def _last_top_level_dot(arg: str) -> int:
    spans = _string_spans(arg)
    span_at = dict(spans)
    depth, i, last = 0, 0, -1
    while i < len(arg):
        if i in span_at:
            i = span_at[i]
            continue
        c = arg[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "." and depth == 0 and not (i + 1 < len(arg) and arg[i + 1] == "?") and \
                not (i > 0 and arg[i - 1] == "?"):
            last = i
        i += 1
    return last


def _rewrite_calls(text: str, head: re.Pattern[str], edit: Callable[[str, str], str | None]) -> str:
    """Apply ``edit(head_text, argument_text) -> replacement | None`` to each call matching ``head``.

    Calls are rewritten last to first, so a call nested in another's arguments is rewritten before
    the enclosing one, and a replacement is never scanned again.
    """
    spans = _string_spans(text)
    starts = [m.start() for m in head.finditer(text) if not _inside(spans, m.start())]
    for start in reversed(starts):
        spans = _string_spans(text)
        m = head.match(text, start)
        if m is None:
            continue
        open_at = m.end() - 1
        close = _close_paren(text, open_at, spans)
        if close < 0:
            continue  # unbalanced: leave it to the parser's error
        replacement = edit(m.group(0), text[open_at + 1:close])
        if replacement is not None:
            text = text[:start] + replacement + text[close + 1:]
    return text


_HAS = re.compile(r"(?<![\w.])has\s*\(")
_FORMAT_NAMED = re.compile(r"(?<![\w.])format\s*\.\s*named\s*\(")
_VALIDATE = re.compile(r"\.\s*validate\s*\(")
_RANGE = re.compile(r"(?<![\w.])lists\s*\.\s*range\s*\(")
_TYPE = re.compile(r"(?<![\w.])type\s*\(")
_NET_TYPE = re.compile(r"(?<![\w.])net\s*\.\s*(IP|CIDR)(?![\w(])")


def _net_types(text: str) -> str:
    """``net.IP``/``net.CIDR`` as ``{"@type": name}``, and ``type(x)`` so for IP and CIDR values."""
    spans = _string_spans(text)
    found = [m for m in _NET_TYPE.finditer(text) if not _inside(spans, m.start())]
    if not found:
        return text
    for m in reversed(found):
        text = f'{text[:m.start()]}dyn({{"@type": "net.{m.group(1)}"}}){text[m.end():]}'
    return _rewrite_calls(text, _TYPE, lambda _h, a: (
        f'cel.bind(__tg_type, {a}, __tg_net_type(__tg_type) != "" '
        f'? dyn({{"@type": __tg_net_type(__tg_type)}}) : dyn(type(__tg_type)))'))


def _has(_head: str, arg: str) -> str | None:
    dot = _last_top_level_dot(arg)
    if dot <= 0:
        return None
    operand, fieldname = arg[:dot].strip(), arg[dot + 1:].strip()
    if not re.fullmatch(r"[A-Za-z_]\w*", fieldname):
        return None
    if operand == "variables":
        # Kubernetes declares `variables` as an object with one field per declared variable, so
        # has(variables.x) is true for every declared x (undeclared ones fail to compile).
        return "true"
    if operand == "request":
        # Always a map (the AdmissionRequest): cel-cpp's has() already answers as cel-go's, and a
        # `request` used only through selections keeps the program memoizable (webhook.policy.memo:
        # Gatekeeper's `has(request.operation)` in every converted template's anyObject).
        return None
    return (f"cel.bind(__tg_has, {operand}, type(__tg_has) == map || type(__tg_has) == list "
            f"? has(__tg_has.{fieldname}) : false)")


def rewrite_source(text: str) -> str:
    """Rewrite what cel-cpp cannot express as Kubernetes means it; leaves string literals alone.

    * ``has(x.f)`` is false when ``x`` is null, a string, a number or a bool (cel-go's
      ``refQualify``: a presence test on a value that is not a map, list or message is false, not
      an error; cel-cpp errors); on a list it still errors, as in cel-go;
      ``has(variables.v)`` is true (Kubernetes' ``variables`` object has every declared variable);
      ``has(request.f)`` is left as written (``request`` is always a map).
    * ``format.named(s)`` → ``__tg_format_named(s).first()`` and ``F.validate(s)`` →
      ``F.__tg_validate(s).first()``: Python cannot return optionals (see
      :mod:`webhook.policy.cel.library.format`).
    * ``lists.range(n)`` → ``lists.range(__tg_range_bound(n))`` (at most :data:`MAX_RANGE`).
    * In an expression naming ``net.IP`` or ``net.CIDR``: those become the names ``"net.IP"``/``"net.CIDR"``
      (as ``{"@type": name}``, a map with a reserved key as Tollgate's library values are) and ``type(x)``
      becomes that for an IP or CIDR value (else ``type(x)``), so
      ``type(ip(s)) == net.IP`` holds as with Kubernetes' opaque types (``library/ip.go``, ``cidr.go``),
      which cel-expr-python cannot declare (:func:`webhook.policy.cel.library.cidr.net_type`).

    Args:
        text: CEL source.

    Returns:
        The rewritten source (identical when none of these occur).
    """
    if "has" in text:
        text = _rewrite_calls(text, _HAS, _has)
    if "named" in text:
        text = _rewrite_calls(text, _FORMAT_NAMED, lambda _h, a: f"__tg_format_named({a}).first()")
    if "validate" in text:
        text = _rewrite_calls(text, _VALIDATE, lambda _h, a: f".__tg_validate({a}).first()")
    if "range" in text:
        text = _rewrite_calls(text, _RANGE, lambda _h, a: f"lists.range(__tg_range_bound({a}))")
    if "net" in text:
        text = _net_types(text)
    return text


_OR_VALUE = re.compile(r"\.\s*orValue\s*\(")
_IDENT_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_OPENS = {")": "(", "]": "[", "}": "{"}


def _open_before(text: str, close: int, ends: dict[int, int]) -> int:
    """Index of the bracket opening the one at ``close`` (scanning backwards, skipping strings), or -1."""
    depth, i = 0, close
    while i >= 0:
        if i + 1 in ends:  # the last character of a string literal
            i = ends[i + 1] - 1
            continue
        c = text[i]
        if c in _OPENS:
            depth += 1
        elif c in "([{":
            depth -= 1
            if depth == 0:
                return i
        i -= 1
    return -1


def _skip_space_back(text: str, i: int) -> int:
    while i >= 0 and text[i].isspace():
        i -= 1
    return i


def _receiver_start(text: str, dot: int, spans: list[tuple[int, int]]) -> int:
    """Where the receiver of the member call whose ``.`` is at ``dot`` starts (CEL's member chain), or -1.

    Walks back over identifiers, ``.``/``.?`` selections, calls, index expressions and message literals
    to one primary (an identifier, a parenthesised expression, a list or map literal, a string literal).
    """
    ends = {b: a for a, b in spans}
    i = _skip_space_back(text, dot - 1)
    while i >= 0:
        if i + 1 in ends:
            return ends[i + 1]  # a string literal
        c = text[i]
        if c in _OPENS:
            opened = _open_before(text, i, ends)
            if opened < 0:
                return -1
            j = _skip_space_back(text, opened - 1)
            named = j >= 0 and text[j] in _IDENT_CHARS
            if (c in ")}" and named) or (c == "]" and (named or (j >= 0 and text[j] in _OPENS) or j + 1 in ends)):
                i = j  # a call f(...)/x.f(...), a message literal Name{...}, an index x[...]
                continue
            return opened  # a parenthesised expression, a list or map literal
        if c not in _IDENT_CHARS:
            return -1
        while i >= 0 and text[i] in _IDENT_CHARS:
            i -= 1
        start = i + 1
        j = _skip_space_back(text, i)
        if j > 0 and text[j] == "?" and text[j - 1] == ".":
            j -= 1
        if j < 0 or text[j] != ".":
            return start
        i = _skip_space_back(text, j - 1)
        if i < 0 or not (text[i] in _IDENT_CHARS or text[i] in _OPENS or i + 1 in ends):
            return j  # a leading-dot (root-scoped) name
    return -1


_OPTIONAL_SELECT = re.compile(r"\.\s*\?\s*[A-Za-z_]\w*$")
_OPTIONAL_CALL = re.compile(r"^optional\s*\.\s*(?:of|none|ofNonZeroValue)\s*\(")


def _surely_optional(receiver: str, spans: list[tuple[int, int]], start: int) -> bool:
    """Whether the receiver is an optional whatever its operand: ``x.?f``, ``x[?k]``, ``optional.of(...)``."""
    if _OPTIONAL_SELECT.search(receiver):
        return True
    if receiver.endswith("]"):
        ends = {b - start: a - start for a, b in spans if a >= start}
        opened = _open_before(receiver, len(receiver) - 1, ends)
        return opened >= 0 and receiver[opened + 1:].lstrip().startswith("?")
    return bool(_OPTIONAL_CALL.match(receiver)) and _close_paren(receiver, receiver.index("("), []) == len(receiver) - 1


def rewrite_or_value(text: str, at: frozenset[int] | None = None) -> str:
    """``R.orValue(A)`` → ``cel.bind(__tg_ov, R, type(__tg_ov) == optional_type ? __tg_ov.orValue(A) : __tg_ov)``.

    cel-go (from the optional library's introduction, v0.12, to v0.27, which Kubernetes and Kyverno build
    on) returns the receiver of ``orValue`` when it is not an optional (``cel/library.go``
    ``evalOptionalOrValue``: ``if !ok { return optLHS }``), so ``container.resources.requests.orValue({})``
    is the requests map; cel-cpp answers "No matching overloads found : orValue". (cel-go 0.28, commit
    ``b62dcafe``, made it an error, after the releases the public policies are written for.)

    Args:
        text: CEL source.
        at: offsets of the ``(`` of the calls to rewrite (the checker's positions of ``orValue`` calls whose
            receiver is ``dyn``; a receiver typed optional needs nothing); None rewrites every call but those
            whose receiver is an optional by its syntax (``x.?f``, ``x[?k]``, ``optional.of(...)``), which
            unchecked programs (inlined variables) cannot know otherwise: the dispatch costs about a third of
            the evaluation time of an ``orValue``-heavy Pod Security program.

    Returns:
        The rewritten source; a call whose receiver cannot be delimited is left as it is.
    """
    if "orValue" not in text:
        return text
    spans = _string_spans(text)
    targets = [(m.start(), m.end() - 1) for m in _OR_VALUE.finditer(text)
               if not _inside(spans, m.start()) and (at is None or m.end() - 1 in at)]
    prefix = "cel.bind(__tg_ov, "
    while targets:  # last first: an earlier call may be in a later one's receiver, a later one in its argument
        dot, open_at = targets.pop()
        spans = _string_spans(text)
        start = _receiver_start(text, dot, spans)
        close = _close_paren(text, open_at, spans)
        if start < 0 or close < 0:
            continue
        receiver, argument = text[start:dot].rstrip(), text[open_at + 1:close]
        if at is None and _surely_optional(receiver, spans, start):
            continue
        text = (f"{text[:start]}{prefix}{receiver}, type(__tg_ov) == optional_type ? __tg_ov.orValue({argument}) "
                f": __tg_ov){text[close + 1:]}")
        targets = [(d + len(prefix), o + len(prefix)) if d >= start else (d, o) for d, o in targets]
    return text


# String literals (single, double, triple, raw) are skipped by the rewrite so
# that text such as 'params' inside a message is left alone.
_TOKENS = re.compile(
    r"""(?P<str>[rR]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*"))"""
    r"""|(?P<var>(?<![\w.])variables\s*\.\s*(?P<name>[A-Za-z_]\w*))"""
    r"""|(?P<params>(?<![\w.])params(?!\w))"""
)


def rewrite_for_runtime(expression: str) -> str:
    """Route ``variables.x`` and ``params`` through the per-policy scope.

    Args:
        expression: CEL source as the policy author wrote it (already compiled
            once unchanged, for type checking and error positions).

    Returns:
        The same expression with typed literals as map literals
        (:mod:`webhook.policy.cel.typed_literals`), ``has(variables.x)`` → ``true``,
        ``variables.<name>`` → ``__tg_var("<name>")`` and ``params`` → ``__tg_params()`` outside
        string literals.
    """
    expression = _map_literals(expression)
    expression = _rewrite_calls(expression, _HAS, _has_variables_only) if "has" in expression else expression

    def sub(m: re.Match[str]) -> str:
        if m.group("str") is not None:
            return m.group("str")
        if m.group("var") is not None:
            return f'__tg_var("{m.group("name")}")'
        return "__tg_params()"

    return _TOKENS.sub(sub, expression)


def _map_literals(expression: str) -> str:
    """Typed literals as map literals first, so a field named ``params`` or ``variables`` stays a key."""
    try:
        return typed_literals.rewrite(expression).text
    except typed_literals.TypedLiteralError:
        return expression  # compiling the author's text reports it


def _has_variables_only(head: str, arg: str) -> str | None:
    return "true" if re.fullmatch(r"\s*variables\s*\.\s*[A-Za-z_]\w*\s*", arg) else None


#: Longest expression the inliner produces before falling back to the per-policy scope.
MAX_INLINED_LENGTH = 50_000


def inline_variables(expression: str, definitions: dict[str, str]) -> str | None:
    """Bind each referenced ``variables.<name>`` once, natively, with ``cel.bind``.

    ``variables.x`` becomes the bound name ``__tg_v_x`` and the expression is wrapped in
    ``cel.bind(__tg_v_x, (<definition>), ...)`` for each referenced variable, so a variable used
    inside a comprehension is evaluated once per expression, not once per iteration (plain
    textual substitution re-evaluated it per element: quadratic on large lists). ``cel.bind`` is
    lazy in cel-cpp, so an unused erroring variable stays harmless, as Kubernetes' lazy variables.

    Args:
        expression: CEL source.
        definitions: variable name → self-contained (already inlined) source of its definition.

    Returns:
        The inlined source with ``params`` routed to ``__tg_params()``, or None when a referenced
        variable has no definition or the result would exceed :data:`MAX_INLINED_LENGTH`.
    """
    used: list[str] = []
    missing = False

    def sub(m: re.Match[str]) -> str:
        nonlocal missing
        if m.group("str") is not None:
            return m.group("str")
        if m.group("var") is not None:
            name = m.group("name")
            if name not in definitions:
                missing = True
                return m.group(0)
            if name not in used:
                used.append(name)
            return f"__tg_v_{name}"
        return "__tg_params()"

    expression = _map_literals(expression)
    if "has" in expression:
        expression = _rewrite_calls(expression, _HAS, _has_variables_only)
    result = _TOKENS.sub(sub, expression)
    for name in reversed(used):
        result = f"cel.bind(__tg_v_{name}, ({definitions[name]}), {result})"
    if missing or len(result) > MAX_INLINED_LENGTH:
        return None
    return result


def referenced_variables(expression: str) -> frozenset[str]:
    """Names ``n`` for which ``variables.n`` occurs outside string literals."""
    return frozenset(m.group("name") for m in _TOKENS.finditer(expression) if m.group("var") is not None)
