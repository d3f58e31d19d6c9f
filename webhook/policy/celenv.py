"""The CEL environment policies compile in (pure; no I/O).

One cel-expr-python ``Env`` (see ``docs/design/cel.md``) with the
variables of ValidatingAdmissionPolicy — ``object``, ``oldObject``,
``request``, ``params``, ``namespaceObject``, ``variables`` — the strings,
optional, bindings and math extensions, and the parts of the Kubernetes CEL
library ("CEL in Kubernetes", kubernetes.io) that cel-expr-python lacks,
implemented as Python functions:

* lists: ``l.isSorted()``, ``l.sum()``, ``l.min()``, ``l.max()``,
  ``l.indexOf(x)``, ``l.lastIndexOf(x)``;
* regex: ``s.find(re)``, ``s.findAll(re)``, ``s.findAll(re, n)``;
* sets: ``sets.contains(a, b)``, ``sets.equivalent(a, b)``, ``sets.intersects(a, b)``;
* validity checks: ``isURL(s)``, ``isIP(s)``, ``isCIDR(s)``, ``isQuantity(s)``.

Evaluation of ``variables.<name>`` and ``params`` goes through two hidden
functions so that ONE Activation per request (and object view) is shared by
every policy: :func:`rewrite_for_runtime` maps ``variables.x`` to
``__tg_var("x")`` and ``params`` to ``__tg_params()``, and the engine installs
the current policy's lazy variable cache with :func:`set_current_scope`.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_math, ext_optional, ext_strings

from webhook.policy import k8slib as k8s

T = cel.Type

#: Names bound in every evaluation, as VAP binds them.
VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables")

#: Longest expression accepted at compile time, in characters. VAP relies on a
#: cost budget; cel-expr-python has none, so length is the static bound.
MAX_EXPRESSION_LENGTH = 5000

class VariableScope:
    """Lazily evaluated ``variables`` and ``params`` of one policy in one request."""

    __slots__ = ("activation", "cache", "params", "programs")

    def __init__(self, programs: dict[str, Any], activation: Any, params: Any) -> None:
        self.programs = programs
        self.activation = activation
        self.params = params
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


def _is_sorted(items: list[Any]) -> bool:
    return all(items[i] <= items[i + 1] for i in range(len(items) - 1))


def _need_items(items: list[Any], what: str) -> list[Any]:
    if not items:
        raise ValueError(f"{what}() called on an empty list")
    return items


def _find(s: str, pattern: str) -> str:
    m = re.search(pattern, s)
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str, limit: int = -1) -> list[str]:
    out = [m.group(0) for m in re.finditer(pattern, s)]
    return out if limit < 0 else out[:limit]



def _member(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
    return cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=True, impl=impl)])


def _global(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
    return cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=False, impl=impl)])


def _value_library() -> list[Any]:
    """quantity / url / ip / cidr (see :mod:`webhook.policy.k8slib`)."""
    d = T.DYN
    member = {
        "isInteger": k8s.q_is_integer, "asInteger": k8s.q_as_integer, "asApproximateFloat": k8s.q_as_float,
        "sign": k8s.q_sign, "getScheme": k8s.url_scheme, "getHost": k8s.url_host, "getHostname": k8s.url_hostname,
        "getPort": k8s.url_port, "getEscapedPath": k8s.url_path, "getQuery": k8s.url_query,
        "family": k8s.ip_family, "isUnspecified": k8s.ip_is_unspecified, "isLoopback": k8s.ip_is_loopback,
        "isLinkLocalMulticast": k8s.ip_is_link_local_multicast,
        "isLinkLocalUnicast": k8s.ip_is_link_local_unicast, "isGlobalUnicast": k8s.ip_is_global_unicast,
        "masked": k8s.cidr_masked, "prefixLength": k8s.cidr_prefix_length,
    }
    binary = {
        "add": k8s.q_add, "sub": k8s.q_sub, "compareTo": k8s.q_compare, "isLessThan": k8s.q_less,
        "isGreaterThan": k8s.q_greater, "containsIP": k8s.cidr_contains_ip, "containsCIDR": k8s.cidr_contains_cidr,
    }
    decls = [_member(name, f"tg_{name}", d, [d], fn) for name, fn in member.items()]
    decls += [_member(name, f"tg_{name}", d, [d, d], fn) for name, fn in binary.items()]
    decls += [
        _global("quantity", "tg_quantity", d, [T.STRING], k8s.quantity),
        _global("url", "tg_url", d, [T.STRING], k8s.url),
        _global("cidr", "tg_cidr", d, [T.STRING], k8s.cidr),
        cel.FunctionDecl("ip", [cel.Overload("tg_ip", d, [T.STRING], impl=k8s.ip),
                                cel.Overload("tg_cidr_ip", d, [d], is_member=True, impl=k8s.cidr_ip)]),
        _global("ip.isCanonical", "tg_ip_is_canonical", T.BOOL, [T.STRING], k8s.ip_is_canonical),
        _global("isQuantity", "tg_is_quantity", T.BOOL, [T.STRING], k8s.is_quantity),
        _global("isURL", "tg_is_url", T.BOOL, [T.STRING], k8s.is_url),
        _global("isIP", "tg_is_ip", T.BOOL, [T.STRING], k8s.is_ip),
        _global("isCIDR", "tg_is_cidr", T.BOOL, [T.STRING], k8s.is_cidr),
    ]
    return decls


def _kubernetes_library() -> Any:
    dyn_list = T.List(T.DYN)
    return cel.CelExtension(
        "tollgate_kubernetes",
        [
            _member("isSorted", "tg_list_is_sorted", T.BOOL, [dyn_list], _is_sorted),
            _member("sum", "tg_list_sum", T.DYN, [dyn_list], lambda l: sum(l) if l else 0),
            _member("min", "tg_list_min", T.DYN, [dyn_list], lambda l: min(_need_items(l, "min"))),
            _member("max", "tg_list_max", T.DYN, [dyn_list], lambda l: max(_need_items(l, "max"))),
            _member("indexOf", "tg_list_index_of", T.INT, [dyn_list, T.DYN],
                    lambda l, x: l.index(x) if x in l else -1),
            _member("lastIndexOf", "tg_list_last_index_of", T.INT, [dyn_list, T.DYN],
                    lambda l, x: len(l) - 1 - l[::-1].index(x) if x in l else -1),
            _member("find", "tg_string_find", T.STRING, [T.STRING, T.STRING], _find),
            cel.FunctionDecl("findAll", [
                cel.Overload("tg_string_find_all", T.List(T.STRING), [T.STRING, T.STRING], is_member=True,
                             impl=_find_all),
                cel.Overload("tg_string_find_all_n", T.List(T.STRING), [T.STRING, T.STRING, T.INT],
                             is_member=True, impl=_find_all),
            ]),
            _global("sets.contains", "tg_sets_contains", T.BOOL, [dyn_list, dyn_list],
                    lambda a, b: all(x in a for x in b)),
            _global("sets.equivalent", "tg_sets_equivalent", T.BOOL, [dyn_list, dyn_list],
                    lambda a, b: all(x in a for x in b) and all(x in b for x in a)),
            _global("sets.intersects", "tg_sets_intersects", T.BOOL, [dyn_list, dyn_list],
                    lambda a, b: any(x in a for x in b)),
            *_value_library(),
            _global("__tg_var", "tg_var", T.DYN, [T.STRING], _tg_var),
            _global("__tg_params", "tg_params", T.DYN, [], _tg_params),
        ],
    )


def new_env() -> Any:
    """Build the policy CEL environment (all variables DYN, as VAP declares them)."""
    return cel.NewEnv(
        variables={name: T.DYN for name in VARIABLES},
        extensions=[
            ext_strings.ExtStrings(),
            ext_optional.ExtOptional(),
            ext_bindings.ExtBindings(),
            ext_math.ExtMath(),
            _kubernetes_library(),
        ],
    )


#: The shared environment. Compiling is thread-compatible; envs are immutable once built.
ENV = new_env()

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
        The same expression with ``variables.<name>`` → ``__tg_var("<name>")``
        and ``params`` → ``__tg_params()`` outside string literals.
    """

    def sub(m: re.Match[str]) -> str:
        if m.group("str") is not None:
            return m.group("str")
        if m.group("var") is not None:
            return f'__tg_var("{m.group("name")}")'
        return "__tg_params()"

    return _TOKENS.sub(sub, expression)


#: Longest expression the inliner produces before falling back to the per-policy scope.
MAX_INLINED_LENGTH = 50_000


def inline_variables(expression: str, definitions: dict[str, str]) -> str | None:
    """Substitute each ``variables.<name>`` with its (already inlined) definition, in parentheses.

    CEL is side-effect free, so an inlined variable evaluates to the same value or error as the
    lazily computed one, and it is evaluated natively by cel-cpp instead of crossing into Python
    and back (which costs ~100 µs per policy for a list of containers).

    Args:
        expression: CEL source.
        definitions: variable name → inlined source of its definition.

    Returns:
        The inlined source with ``params`` routed to ``__tg_params()``, or None when a referenced
        variable has no definition or the result would exceed :data:`MAX_INLINED_LENGTH`.
    """
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
            return f"({definitions[name]})"
        return "__tg_params()"

    result = _TOKENS.sub(sub, expression)
    if missing or len(result) > MAX_INLINED_LENGTH:
        return None
    return result


def referenced_variables(expression: str) -> frozenset[str]:
    """Names ``n`` for which ``variables.n`` occurs outside string literals."""
    return frozenset(m.group("name") for m in _TOKENS.finditer(expression) if m.group("var") is not None)
