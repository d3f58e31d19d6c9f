"""The CEL environment policies compile in: Kubernetes 1.36's, on cel-expr-python (pure; no I/O).

One :class:`PolicyEnv` (see ``docs/design/cel.md`` and "CEL environment" in
``docs/writing-policies.md``) with the variables of ValidatingAdmissionPolicy — ``object``,
``oldObject``, ``request``, ``params``, ``namespaceObject``, ``variables`` — built in three layers:

* cel-cpp's own extensions, enabled natively through the environment's YAML config
  (:data:`CONFIG_YAML`): ext lists (``lists.range``, ``sort``, ``sortBy``, ``distinct``, ``flatten``,
  ``reverse``, ``slice``, ``first``, ``last``), ext sets, ext strings, two-variable comprehensions,
  optional types, ``cel.bind``, math and encoders;
* the Kubernetes libraries cel-cpp lacks, in Python (:mod:`webhook.policy.cel.library`);
* source rewrites and compile-time validators for what neither can express
  (:func:`rewrite_source`, :mod:`webhook.policy.cel.validators`): ``has()`` with cel-go's semantics,
  optionals returned by the format library, a bound on ``lists.range``, and Kubernetes'
  literal/homogeneity validators.

Evaluation of ``variables.<name>`` and ``params`` goes through two hidden functions so that ONE
Activation per request (and object view) is shared by every policy: :func:`rewrite_for_runtime`
maps ``variables.x`` to ``__tg_var("x")`` and ``params`` to ``__tg_params()``, and the engine installs
the current policy's lazy variable cache with :func:`set_current_scope`. :func:`inline_variables`
instead binds each referenced variable once with ``cel.bind`` so cel-cpp evaluates it natively.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cel_expr_python import cel

from webhook.policy.cel import ast as celast
from webhook.policy.cel import cost as celcost
from webhook.policy.cel import library, validators
from webhook.policy.cel import optimize as celopt
from webhook.policy.cel.library import comprehensions
from webhook.policy.cel.library._decl import LibraryError, T, function, overloads

__all__ = [
    "ENV",
    "MAX_EXPRESSION_LENGTH",
    "MAX_RANGE",
    "RESOURCE_FUNCTIONS",
    "BudgetExceeded",
    "CompiledExpression",
    "EvaluationError",
    "LibraryError",
    "PolicyEnv",
    "ReferenceReader",
    "T",
    "VariableScope",
    "compile_expression",
    "evaluate",
    "inline_variables",
    "referenced_variables",
    "reset_scope",
    "rewrite_for_runtime",
    "rewrite_source",
    "set_current_scope",
]

#: Names bound in every evaluation, as VAP binds them.
VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables")

#: Longest expression accepted at compile time, in characters. Kubernetes relies on a cost
#: budget; cel-expr-python has none, so length (and :mod:`webhook.policy.cel.cost`) bound it.
MAX_EXPRESSION_LENGTH = 5000

#: Compiled expressions :meth:`PolicyEnv.compile` keeps for reuse (a few MB; each holds a cel-cpp program).
COMPILE_CACHE_SIZE = 4096

#: Largest ``n`` accepted by ``lists.range(n)`` (cel-cpp allocates the whole list: 3·10⁷ takes 1 GB).
MAX_RANGE = 100_000

#: cel-cpp extensions enabled natively (names and versions as cel-cpp's ``env/env_yaml.cc`` reads them).
CONFIG_YAML = """
extensions:
  - name: bindings
  - name: encoders
  - name: lists
    version: latest
  - name: math
  - name: optional
  - name: sets
  - name: strings
  - name: two-var-comprehensions
"""

#: The same without two-variable comprehensions: the runtime twin that supplies ``cel.@mapInsert``.
_TWIN_YAML = CONFIG_YAML.replace("  - name: two-var-comprehensions\n", "")


class ReferenceReader(Protocol):
    """What ``resource.Get`` / ``resource.List`` read for the current policy (the engine implements it).

    Both raise :class:`LibraryError` (a CEL error value) for a reference the policy did not declare
    or may not read; objects are returned as plain JSON data.
    """

    def get(self, api_version: str, resource: str, namespace: str, name: str) -> Any:
        """The cached object, or None."""
        ...

    def list(self, api_version: str, resource: str, namespace: str, labels: Any) -> Any:
        """``{"items": [...]}``: cached objects in ``namespace`` (``""``: every namespace) with ``labels``."""
        ...

    def by_index(self, api_version: str, resource: str, index: str, value: str) -> Any:
        """``{"items": [...]}``: cached objects whose declared index ``index`` yields ``value``."""
        ...


class VariableScope:
    """Lazily evaluated ``variables`` and ``params`` of one policy in one request, and its references."""

    __slots__ = ("activation", "cache", "params", "programs", "references")

    def __init__(self, programs: dict[str, Any], activation: Any, params: Any,
                 references: ReferenceReader | None = None) -> None:
        self.programs = programs
        self.activation = activation
        self.params = params
        self.references = references
        self.cache: dict[str, Any] = {}

    def variable(self, name: str) -> Any:
        """Evaluate ``variables.<name>`` once; raise on a CEL error value."""
        try:
            return self.cache[name]
        except KeyError:
            pass
        program = self.programs.get(name)
        if program is None:
            raise KeyError(f"no such variable: {name}")
        value = program.eval(self.activation)
        if value.type() == T.ERROR:
            raise RuntimeError(f"variables.{name}: {value.value()}")
        result = value.plain_value()
        self.cache[name] = result
        return result


_scope: contextvars.ContextVar[VariableScope | None] = contextvars.ContextVar("tollgate_cel_scope", default=None)


def set_current_scope(scope: VariableScope | None) -> contextvars.Token[VariableScope | None]:
    """Install the scope ``__tg_var``/``__tg_params`` read; returns a reset token."""
    return _scope.set(scope)


def reset_scope(token: contextvars.Token[VariableScope | None]) -> None:
    """Undo :func:`set_current_scope`."""
    _scope.reset(token)


def _tg_var(name: str) -> Any:
    scope = _scope.get()
    if scope is None:
        raise RuntimeError("variables evaluated outside a policy scope")
    return scope.variable(name)


def _tg_params() -> Any:
    scope = _scope.get()
    return None if scope is None else scope.params


def _reader(function_name: str) -> ReferenceReader:
    scope = _scope.get()
    if scope is None or scope.references is None:
        raise LibraryError(f"{function_name}: the policy declares no spec.references")
    return scope.references


def _resource_get(api_version: str, resource: str, namespace: str, name: str) -> Any:
    return _reader("resource.Get").get(api_version, resource, namespace, name)


def _resource_list(api_version: str, resource: str, namespace: str, labels: Any = None) -> Any:
    return _reader("resource.List").list(api_version, resource, namespace, labels)


def _resource_by_index(api_version: str, resource: str, index: str, value: str) -> Any:
    return _reader("resource.ByIndex").by_index(api_version, resource, index, value)


#: The read-only half of Kyverno's CEL resource library, over the caches ``spec.references`` declares,
#: plus ``resource.ByIndex`` (client-go's ``Indexer.ByIndex`` over a declared index).
RESOURCE_FUNCTIONS = frozenset({"resource.Get", "resource.List", "resource.ByIndex"})


def _range_bound(n: int) -> int:
    if n > MAX_RANGE:
        raise LibraryError(f"lists.range({n}) exceeds the limit of {MAX_RANGE}")
    return n


def _internal_declarations() -> list[Any]:
    return [
        function("__tg_var", "tg_var", T.DYN, [T.STRING], _tg_var),
        function("__tg_params", "tg_params", T.DYN, [], _tg_params),
        function("__tg_range_bound", "tg_range_bound", T.INT, [T.INT], _range_bound),
        function("resource.Get", "tg_resource_get", T.DYN, [T.STRING] * 4, _resource_get),
        function("resource.ByIndex", "tg_resource_by_index", T.DYN, [T.STRING] * 4, _resource_by_index),
        overloads("resource.List",
                  cel.Overload("tg_resource_list", T.DYN, [T.STRING] * 3, is_member=False, impl=_resource_list),
                  cel.Overload("tg_resource_list_labels", T.DYN, [T.STRING, T.STRING, T.STRING, T.DYN],
                               is_member=False, impl=_resource_list)),
    ]


# -- source rewrites ----------------------------------------------------------------------------

_STRING = re.compile(
    r"""[rR]?[bB]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*")"""
)


def _string_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _STRING.finditer(text)]


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
    return (f"cel.bind(__tg_has, {operand}, type(__tg_has) == map || type(__tg_has) == list "
            f"? has(__tg_has.{fieldname}) : false)")


def rewrite_source(text: str) -> str:
    """Rewrite what cel-cpp cannot express as Kubernetes means it; leaves string literals alone.

    * ``has(x.f)`` is false when ``x`` is null, a string, a number or a bool (cel-go's
      ``refQualify``: a presence test on a value that is not a map, list or message is false, not
      an error; cel-cpp errors); on a list it still errors, as in cel-go;
      ``has(variables.v)`` is true (Kubernetes' ``variables`` object has every declared variable).
    * ``format.named(s)`` → ``__tg_format_named(s).first()`` and ``F.validate(s)`` →
      ``F.__tg_validate(s).first()``: Python cannot return optionals (see
      :mod:`webhook.policy.cel.library.format`).
    * ``lists.range(n)`` → ``lists.range(__tg_range_bound(n))`` (at most :data:`MAX_RANGE`).

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
    return text


# -- the environment ---------------------------------------------------------------------------

class EvaluationError(RuntimeError):
    """A CEL evaluation failed: an error value, or a runtime limit (see :class:`BudgetExceeded`)."""


class BudgetExceeded(EvaluationError):
    """cel-cpp's comprehension iteration budget (10,000 iterations per evaluation) ran out."""


@dataclass(frozen=True, slots=True)
class CompiledExpression:
    """A compiled, validated expression.

    Attributes:
        program: the cel-expr-python ``Expression`` to evaluate (``program.eval(activation)``).
        source: the expression as written.
        estimated: static worst-case estimate (:class:`webhook.policy.cel.cost.Estimate`), or None
            when the expression was compiled without type checking.
        checked_type: the checker's return type (``cel.Type``; ``DYN`` when unchecked). Kept
            because a rewritten program (:mod:`webhook.policy.cel.optimize`) is re-planned untyped.
        resource_calls: every ``resource.Get``/``resource.List`` call (empty when unchecked).
    """

    program: Any
    source: str
    estimated: celcost.Estimate | None
    checked_type: Any
    resource_calls: tuple[ResourceCall, ...] = ()

    def eval(self, activation: Any) -> Any:
        """``program.eval(activation)``: a cel-expr-python ``Value`` (may be an error value)."""
        return self.program.eval(activation)

    def return_type(self) -> Any:
        """The checked return type (``cel.Type``), as cel-expr-python's ``Expression.return_type``."""
        return self.checked_type


@dataclass(frozen=True, slots=True)
class ResourceCall:
    """A ``resource.Get``/``resource.List`` call found in an expression's parse tree.

    Attributes:
        function: ``resource.Get``, ``resource.List`` or ``resource.ByIndex``.
        api_version: the first argument when it is a string literal, else None.
        resource: the second argument when it is a string literal, else None.
        where: ``<input>:line:column`` of the call in the author's text.
        index: ``resource.ByIndex``'s third argument when it is a string literal, else None.
    """

    function: str
    api_version: str | None
    resource: str | None
    where: str
    index: str | None = None


def resource_calls(ast: celast.CheckedAst, text: str) -> tuple[ResourceCall, ...]:
    """The resource-library calls of a checked expression, in source order."""
    found = []
    for node in ast.root.walk():
        if node.kind != "call" or node.target is not None or node.name not in RESOURCE_FUNCTIONS:
            continue
        literal = [a.value if a.kind == "const" and isinstance(a.value, str) else None for a in node.args[:3]]
        offset = max(0, ast.offsets.get(node.id, 0) - len(node.name))  # the offset is the '(' after the name
        where = _error_at(text, offset, "").removeprefix("ERROR: ").rstrip(": ")
        index = literal[2] if node.name == "resource.ByIndex" and len(literal) > 2 else None
        found.append((offset, ResourceCall(node.name, literal[0], literal[1], where, index)))
    return tuple(call for _, call in sorted(found, key=lambda f: f[0]))


def _error_at(text: str, offset: int, message: str) -> str:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"ERROR: <input>:{line}:{col}: {message}"


class PolicyEnv:
    """The compile-and-activate surface compiler.py and engine.py use (``compile``, ``Activation``).

    Thread-compatible: compiling mutates nothing shared once built; programs are immutable.
    """

    def __init__(self) -> None:
        #: (text, disable_check) → compiled expression, most recently used last (see :meth:`compile`).
        self._compiled: OrderedDict[tuple[str, bool], CompiledExpression] = OrderedDict()
        variables = dict.fromkeys(VARIABLES, T.DYN)
        python_library = [*library.declarations(), *_internal_declarations()]
        self.env = cel.NewEnv(config=cel.NewEnvConfigFromYaml(CONFIG_YAML), variables=variables,
                              extensions=[cel.CelExtension("tollgate_kubernetes", python_library)])
        self.twin = cel.NewEnv(config=cel.NewEnvConfigFromYaml(_TWIN_YAML), variables=variables,
                               extensions=[cel.CelExtension("tollgate_kubernetes", python_library),
                                           cel.CelExtension("tollgate_comprehensions",
                                                            comprehensions.declarations())])

    def Activation(self, data: dict[str, Any]) -> Any:
        """A cel-expr-python Activation over ``data`` (shared by every program of this env)."""
        return self.env.Activation(data)

    def compile(self, text: str, disable_check: bool = False) -> CompiledExpression:
        """Compile ``text`` (see :meth:`compile_checked`); the result has ``eval`` and ``return_type``.

        Compiled expressions are immutable, so the last :data:`COMPILE_CACHE_SIZE` are kept and reused:
        editing one expression of a policy recompiles only that one (a policy recompiles whole on its
        watch event, ~15 ms for a Pod Security policy, mostly Python work on the parse tree).

        Raises:
            RuntimeError: a compile error, worded as cel-cpp words them
                (``ERROR: <input>:line:col: message``).
        """
        key = (text, disable_check)
        found = self._compiled.get(key)
        if found is not None:
            self._compiled.move_to_end(key)
            return found
        compiled = self.compile_checked(text, disable_check=disable_check)
        self._compiled[key] = compiled
        if len(self._compiled) > COMPILE_CACHE_SIZE:
            self._compiled.popitem(last=False)
        return compiled

    def compile_checked(self, text: str, disable_check: bool = False) -> CompiledExpression:
        """Rewrite (:func:`rewrite_source`), compile, validate and estimate ``text``.

        Args:
            text: CEL source.
            disable_check: skip type checking and validators (for already checked sources).

        Returns:
            The compiled expression; its program runs in the twin environment when it uses
            ``transformMap``/``transformMapEntry`` (see :mod:`webhook.policy.cel.library.comprehensions`).

        Raises:
            RuntimeError: syntax or type errors, a validator's finding (invalid literal regex,
                duration or timestamp, heterogeneous list literal, list function on
                non-comparable elements), or an estimated size above the limits of
                :mod:`webhook.policy.cel.cost`.
        """
        source = rewrite_source(text)
        try:
            program = self.env.compile(source, disable_check=disable_check)
        except RuntimeError:
            if source != text:
                self.env.compile(text, disable_check=disable_check)  # prefer the author's positions
            raise
        estimated = None
        checked_type = program.return_type()
        serialized = program.serialize()
        ast = celast.decode(serialized)
        if not disable_check:
            # Report positions in the author's text when the unrewritten source type-checks too.
            checked_ast, positions_in = ast, source
            if source != text:
                with contextlib.suppress(RuntimeError):
                    checked_ast, positions_in = celast.decode(self.env.compile(text).serialize()), text
            problems = validators.validate(checked_ast, self._literal_ok)
            if problems:
                offset, message = problems[0]
                raise RuntimeError(_error_at(positions_in, offset, message))
            estimated = celcost.estimate(ast)
            if estimated.error:
                raise RuntimeError(_error_at(source, 0, estimated.error))
            calls = resource_calls(checked_ast, positions_in)
        else:
            calls = ()
        runtime_env = self.twin if "transformMap" in source else self.env
        chunked = celopt.chunk_list_comprehensions(serialized, ast.types) if celopt.has_chunkable(ast) else None
        if chunked is not None:
            program = runtime_env.deserialize(chunked)
        elif runtime_env is self.twin:
            program = self.twin.deserialize(serialized)
        return CompiledExpression(program, text, estimated, checked_type, calls)

    def _literal_ok(self, call: str, literal: str) -> str | None:
        """Evaluate ``call(literal)`` (duration/timestamp); the error text or None."""
        v = self.env.compile(f"{call}({literal!r})").eval(self.env.Activation({}))
        return str(v.value()) if v.type() == T.ERROR else None


#: The shared environment. Compiling is thread-compatible; envs are immutable once built.
ENV = PolicyEnv()


def compile_expression(text: str) -> CompiledExpression:
    """Compile ``text`` in :data:`ENV` with validators and a static cost estimate.

    Raises:
        RuntimeError: see :meth:`PolicyEnv.compile_checked`.
    """
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise RuntimeError(f"expression is {len(text)} characters; the limit is {MAX_EXPRESSION_LENGTH}")
    return ENV.compile(text)


def evaluate(program: Any, activation: Any) -> Any:
    """Evaluate a program and return its plain Python value.

    Raises:
        BudgetExceeded: cel-cpp's 10,000-iteration comprehension budget ran out.
        EvaluationError: the result is a CEL error value (message as CEL words it).
    """
    try:
        v = program.eval(activation)
    except RuntimeError as e:
        if "budget" in str(e).lower():
            raise BudgetExceeded(str(e)) from None
        raise EvaluationError(str(e)) from None
    if v.type() == T.ERROR:
        raise EvaluationError(str(v.value()))
    return v.plain_value()


# -- variables and params routing ---------------------------------------------------------------

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
        The same expression with ``has(variables.x)`` → ``true``, ``variables.<name>`` →
        ``__tg_var("<name>")`` and ``params`` → ``__tg_params()`` outside string literals.
    """
    expression = _rewrite_calls(expression, _HAS, _has_variables_only) if "has" in expression else expression

    def sub(m: re.Match[str]) -> str:
        if m.group("str") is not None:
            return m.group("str")
        if m.group("var") is not None:
            return f'__tg_var("{m.group("name")}")'
        return "__tg_params()"

    return _TOKENS.sub(sub, expression)


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
