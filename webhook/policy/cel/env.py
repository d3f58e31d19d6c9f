"""The CEL environment policies compile in: Kubernetes 1.36's, on cel-expr-python (pure; no I/O).

One :class:`PolicyEnv` (see ``docs/design/cel.md`` and "CEL environment" in
``docs/writing-policies.md``) with the variables of ValidatingAdmissionPolicy — ``object``,
``oldObject``, ``request``, ``params``, ``namespaceObject``, ``variables`` — built in three layers:

* cel-cpp's own extensions, enabled natively through the environment's YAML config
  (:data:`CONFIG_YAML`): ext lists (``lists.range``, ``sort``, ``sortBy``, ``distinct``, ``flatten``,
  ``reverse``, ``slice``, ``first``, ``last``), ext sets, ext strings, two-variable comprehensions,
  optional types, ``cel.bind``, math and encoders, and regex (``regex.replace``/``extract``/``extractAll``,
  which Kyverno's environment has: ``kyverno/kyverno`` ``pkg/cel/compiler/env.go`` ``ext.Regex``);
* the Kubernetes libraries cel-cpp lacks and Kyverno's that need no network, in Python
  (:mod:`webhook.policy.cel.library`);
* source rewrites and compile-time validators for what neither can express
  (:mod:`webhook.policy.cel.rewrites`, :mod:`webhook.policy.cel.validators`): ``has()`` with cel-go's
  semantics, optionals returned by the format library, a bound on ``lists.range``, ``orValue`` on a value
  that is not optional (cel-go returns it), and Kubernetes' literal/homogeneity validators.

``variables``, ``params`` and the resource library reach the policy being evaluated through
:mod:`webhook.policy.cel.scope`. The environment is built on first use (:func:`environment`), not
at import.
"""

from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from webhook.policy.cel import ast as celast
from webhook.policy.cel import authz, library, rewrites, scope, typed_literals, validators
from webhook.policy.cel import cost as celcost
from webhook.policy.cel import optimize as celopt
from webhook.policy.cel.library import comprehensions
from webhook.policy.cel.library._decl import LibraryError, T
from webhook.policy.cel.rewrites import rewrite_or_value, rewrite_source
from webhook.policy.cel.scope import IMAGE_DATA_FUNCTIONS, RESOURCE_FUNCTIONS

#: Calls the compiler checks (:class:`ResourceCall`): what a policy may read must be declared or available.
CHECKED_CALLS = RESOURCE_FUNCTIONS | IMAGE_DATA_FUNCTIONS

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "VARIABLES",
    "BudgetExceeded",
    "CompiledExpression",
    "EvaluationError",
    "LibraryError",
    "PolicyEnv",
    "ResourceCall",
    "T",
    "compile_expression",
    "environment",
    "evaluate",
    "resource_calls",
]

#: Names bound in every evaluation, as VAP binds them.
#: ``authorizer`` is Kubernetes' authorizer library (:mod:`webhook.policy.cel.authz`).
VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer")

#: Longest expression accepted at compile time, in characters. Kubernetes relies on a cost
#: budget; cel-expr-python has none, so length (and :mod:`webhook.policy.cel.cost`) bound it.
MAX_EXPRESSION_LENGTH = 5000

#: Compiled expressions :meth:`PolicyEnv.compile` keeps for reuse (a few MB; each holds a cel-cpp program).
COMPILE_CACHE_SIZE = 4096

#: cel-cpp extensions enabled natively (names and versions as cel-cpp's ``env/env_yaml.cc`` reads them).
CONFIG_YAML = """
extensions:
  - name: bindings
  - name: encoders
  - name: lists
    version: latest
  - name: math
  - name: optional
  - name: regex
  - name: sets
  - name: strings
  - name: two-var-comprehensions
"""

#: The same without two-variable comprehensions: the runtime twin that supplies ``cel.@mapInsert``.
_TWIN_YAML = CONFIG_YAML.replace("  - name: two-var-comprehensions\n", "")


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
    #: The checked program as ``Expression.serialize()`` gave it (before runtime rewrites), for analyses
    #: that need its parse tree again; ``b""`` when compiled without type checking.
    checked: bytes = b""

    def eval(self, activation: Any) -> Any:
        """``program.eval(activation)``: a cel-expr-python ``Value`` (may be an error value)."""
        return self.program.eval(activation)

    def return_type(self) -> Any:
        """The checked return type (``cel.Type``), as cel-expr-python's ``Expression.return_type``."""
        return self.checked_type


@dataclass(frozen=True, slots=True)
class ResourceCall:
    """A ``resource.Get``/``resource.List`` (or ``image.GetMetadata``) call found in an expression's parse tree.

    Attributes:
        function: ``resource.Get``, ``resource.List``, ``resource.ByIndex``, ``image.GetMetadata`` or
            ``image.getMetadata``.
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


def resource_calls(ast: celast.CheckedAst, text: str,
                   literals: typed_literals.Rewritten | None = None) -> tuple[ResourceCall, ...]:
    """The resource-library calls of a checked expression, in source order.

    Args:
        ast: the checked AST.
        text: the text ``ast`` was compiled from, or, with ``literals``, the author's text that
            ``literals.text`` (what ``ast`` was compiled from) rewrites.
        literals: the typed-literal rewrite ``ast``'s offsets refer to, if any.
    """
    found = []
    for node in ast.root.walk():
        if node.kind != "call" or node.target is not None or node.name not in CHECKED_CALLS:
            continue
        literal = [a.value if a.kind == "const" and isinstance(a.value, str) else None for a in node.args[:3]]
        literal += [None] * (3 - len(literal))
        offset = max(0, ast.offsets.get(node.id, 0) - len(node.name))  # the offset is the '(' after the name
        if literals is not None:
            offset = literals.source_offset(offset)
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
        declared = [*library.declarations(), *scope.declarations(), *rewrites.declarations(), *authz.declarations()]
        python_library = [d.decl for d in declared]
        #: Each function's cost and result-size rule: cel-cpp's native ones and each Python declaration's
        #: (:func:`webhook.policy.cel.cost.rule_table`).
        self.rules = celcost.rule_table({d.name: d.rule for d in declared})
        #: Names of the functions implemented in Python (``string`` also names cel-cpp's native conversions).
        self.python_functions = frozenset(d.name for d in declared) - {"string"}
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
        """Rewrite (typed literals, then :func:`rewrite_source`), compile, validate and estimate ``text``.

        Args:
            text: CEL source.
            disable_check: skip type checking and validators (for already checked sources).

        Returns:
            The compiled expression; its program runs in the twin environment when it uses
            ``transformMap``/``transformMapEntry`` (see :mod:`webhook.policy.cel.library.comprehensions`).

        Raises:
            RuntimeError: syntax or type errors, a typed literal Kubernetes refuses
                (:mod:`webhook.policy.cel.typed_literals`), a validator's finding (invalid literal regex,
                duration or timestamp, heterogeneous list literal, list function on
                non-comparable elements), or an estimated size above the limits of
                :mod:`webhook.policy.cel.cost`.
        """
        try:
            literals = typed_literals.rewrite(text)
        except typed_literals.TypedLiteralError as e:
            raise RuntimeError(_error_at(text, e.offset, e.message)) from None
        # ``base``: the author's text with typed literals as map literals; positions in it map back to
        # the author's text (``literals.source_offset``).
        base = literals.text
        source = rewrite_source(base)
        if disable_check:
            source = rewrite_or_value(source)  # no types: every orValue dispatches at run time
        try:
            program = self.env.compile(source, disable_check=disable_check)
        except RuntimeError as e:
            if source != base:
                try:
                    self.env.compile(base, disable_check=disable_check)  # prefer the author's positions
                except RuntimeError as base_error:
                    raise RuntimeError(literals.remap_error(str(base_error), text)) from None
            raise RuntimeError(literals.remap_error(str(e), text)) from None
        estimated = None
        checked_type = program.return_type()
        serialized = program.serialize()
        ast = celast.decode(serialized)
        if not disable_check and "orValue" in source:
            # cel-go's orValue on a value that is not optional returns it (rewrites.rewrite_or_value); only
            # receivers the checker could not type as optional need the run-time dispatch.
            untyped = frozenset(ast.offsets.get(n.id, -1) for n in ast.root.walk()
                                if n.kind == "call" and n.name == "orValue" and n.target is not None
                                and not ast.type_of(n.target).startswith("optional_type"))
            rewritten = rewrite_or_value(source, untyped) if untyped else source
            if rewritten != source:
                source = rewritten
                program = self.env.compile(source)
                serialized = program.serialize()
                ast = celast.decode(serialized)
        if not disable_check:
            # Report positions in the author's text when the unrewritten source type-checks too.
            checked_ast, in_base = ast, source == base
            if source != base:
                with contextlib.suppress(RuntimeError):
                    checked_ast, in_base = celast.decode(self.env.compile(base).serialize()), True
            problems = validators.validate(checked_ast, self._literal_ok)
            if problems:
                offset, message = problems[0]
                if in_base:
                    raise RuntimeError(_error_at(text, literals.source_offset(offset), message))
                raise RuntimeError(_error_at(source, offset, message))
            estimated = celcost.estimate(ast, self.rules)
            if estimated.error:
                raise RuntimeError(_error_at(source, 0, estimated.error))
            calls = resource_calls(checked_ast, text, literals) if in_base else resource_calls(checked_ast, source)
        else:
            calls = ()
        runtime_env = self.twin if "transformMap" in source else self.env
        chunked = celopt.chunk_list_comprehensions(serialized, ast.types) if celopt.has_chunkable(ast) else None
        if chunked is not None:
            program = runtime_env.deserialize(chunked)
        elif runtime_env is self.twin:
            program = self.twin.deserialize(serialized)
        return CompiledExpression(program, text, estimated, checked_type, calls,
                                  serialized if not disable_check else b"")

    def estimate(self, compiled: CompiledExpression,
                 variables: Mapping[str, celcost.Bound]) -> celcost.Estimate | None:
        """``compiled``'s estimate with the bounds of the ``variables`` it reads (None when unchecked)."""
        if not compiled.checked:
            return compiled.estimated
        return celcost.estimate(celast.decode(compiled.checked), self.rules, variables)

    def _literal_ok(self, call: str, literal: str) -> str | None:
        """Evaluate ``call(literal)`` (duration/timestamp); the error text or None."""
        v = self.env.compile(f"{call}({literal!r})").eval(self.env.Activation({}))
        return str(v.value()) if v.type() == T.ERROR else None


@functools.cache
def environment() -> PolicyEnv:
    """The shared environment, built on first use (building it compiles cel-cpp's extensions: tens of ms).

    Compiling is thread-compatible; envs are immutable once built.
    """
    return PolicyEnv()


def compile_expression(text: str) -> CompiledExpression:
    """Compile ``text`` in :data:`ENV` with validators and a static cost estimate.

    Raises:
        RuntimeError: see :meth:`PolicyEnv.compile_checked`.
    """
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise RuntimeError(f"expression is {len(text)} characters; the limit is {MAX_EXPRESSION_LENGTH}")
    return environment().compile(text)


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
