"""The Kubernetes CEL library's own test cases, run in Tollgate's CEL environment: how many agree.

    python bench/k8s_cel_library.py CHECKOUT [--json out.json] [-v]

CHECKOUT is a checkout of k8s.io/apiserver (``fetch github:kubernetes/apiserver``, or a ``git worktree``
of it; the staging copy in kubernetes/kubernetes, ``staging/src/k8s.io/apiserver``, works too). Every
``pkg/cel/library/*_test.go`` (the compatibility test excepted: it lists names, not cases) is read as
text: each case of a table (a ``{ ... }`` block at one indentation holding ``expr:``) gives the
expression and what the test expects of it:

* ``expectCompileErrs`` / ``expectedCompileErr``: a compile error (agree: Tollgate's compile fails; the
  wording differs between cel-go and cel-cpp, so it is not compared);
* ``expectRuntimeErr`` / ``expectedRuntimeErr``: an error when evaluated (agree: an error value);
* ``expectResult`` / ``expectValue``: a value; booleans (``trueVal``, ``types.True``, ``types.Bool(..)``),
  ``types.Int(n)``, ``types.Double(x)`` and ``types.String("..")`` are compared, others (IP, CIDR,
  Semver) only have to evaluate without an error; ``types.OptionalNone`` / ``types.OptionalOf(..)``
  are compared by ``hasValue()``;
* nothing (the cost tests, whose ``testCost`` fails on a compile or evaluation error): compiles and
  evaluates without an error.

``authorizer`` is bound as the cost test binds it (``testCost``: an authorizer that allows everything, for
no user). Expressions built with ``fmt.Sprintf`` (``%s``) are skipped. The tests build their own environments
(``cel.NewEnv(library.IP(), ...)``) without ``HomogeneousAggregateLiterals``, which Kubernetes' policy
environment (``pkg/cel/environment/base.go``) and Tollgate's enable: an expression refused only for a
mixed list or map literal is compiled again without the checker, as the test's environment would accept
it, and counted apart (``mixed_literal``). Prints one line per file and the total; ``-v`` lists every
case that does not agree.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webhook.policy.cel.authz import authorizer_value  # noqa: E402
from webhook.policy.cel.env import T, environment  # noqa: E402
from webhook.policy.cel.scope import VariableScope, reset_scope, set_current_scope  # noqa: E402
from webhook.policy.rbac import Attributes, Decision  # noqa: E402

_CASE = re.compile(r"\n(\t+)\{\n(.*?)\n\1\},?(?=\n)", re.DOTALL)
_GO_STRING = r"(`[^`]*`|\"(?:\\.|[^\"\\])*\")"
_EXPR = re.compile(r"\bexpr:\s*" + _GO_STRING)
_COMPILE = re.compile(r"\bexpect(?:ed)?CompileErrs?:\s*\[\]string\{")
_RUNTIME = re.compile(r"\bexpect(?:ed)?RuntimeErr:\s*" + _GO_STRING)
_VALUE = re.compile(r"\bexpect(?:Result|Value):\s*([^\n]+?),?\s*$", re.MULTILINE)
_MIXED = "expected type '"


def _go_string(literal: str) -> str:
    if literal.startswith("`"):
        return literal[1:-1]
    return str(json.loads(literal))


def _expected_value(text: str) -> tuple[bool, Any]:
    """``(compared, value)`` of a Go expectation (``trueVal``, ``types.Int(3)``, ...)."""
    text = text.strip()
    if text in ("trueVal", "types.True", "types.Bool(true)"):
        return True, True
    if text in ("falseVal", "types.False", "types.Bool(false)"):
        return True, False
    for pattern, convert in ((r"types\.Int\((-?\d+)\)", int), (r"types\.Double\(([-0-9.eE+]+)\)", float),
                             (r"types\.String\((\"(?:\\.|[^\"\\])*\")\)", json.loads)):
        m = re.fullmatch(pattern, text)
        if m:
            return True, convert(m.group(1))
    return False, None


@dataclass
class Case:
    """One upstream case and how Tollgate decided it."""

    file: str
    expr: str
    expect: str  # compile | runtime | value | ok
    value: Any = None
    compared: bool = False
    got: str = ""
    agree: bool = False
    mixed_literal: bool = False
    evaluated: str = ""


def cases(checkout: Path) -> list[Case]:
    """Every case of the library's test tables (see the module docstring)."""
    library = checkout / "pkg" / "cel" / "library"
    if not library.is_dir():
        library = checkout / "staging" / "src" / "k8s.io" / "apiserver" / "pkg" / "cel" / "library"
    if not library.is_dir():
        raise SystemExit(f"k8s_cel_library: {checkout}: no pkg/cel/library in it")
    out = []
    for path in sorted(library.glob("*_test.go")):
        if path.name == "library_compatibility_test.go":
            continue
        for m in _CASE.finditer(path.read_text()):
            block = m.group(2)
            found = _EXPR.search(block)
            if found is None:
                continue
            expr = _go_string(found.group(1))
            if "%" in expr and re.search(r"%[sdv]", expr):
                continue
            case = Case(path.name, expr, "ok")
            runtime = _RUNTIME.search(block)
            value = _VALUE.search(block)
            if _COMPILE.search(block):
                case.expect = "compile"
            elif runtime and _go_string(runtime.group(1)):
                case.expect = "runtime"
            elif value:
                case.expect = "value"
                case.compared, case.value = _expected_value(value.group(1))
                if value.group(1).startswith("types.Optional"):
                    # An optional is compared by whether it has a value.
                    case.evaluated = f"({expr}).hasValue()"
                    case.compared, case.value = True, not value.group(1).startswith("types.OptionalNone")
            out.append(case)
        out += generated(path)
    return out


def _is_optional(text: str) -> bool:
    """Whether ``text`` evaluates to an optional (cel-expr-python reports an optional's type as an error's)."""
    env = environment()
    try:
        result = env.compile(f"({text}).hasValue()").eval(env.Activation({}))
    except RuntimeError:
        return False
    return bool(result.type() == T.BOOL)


_CONSTANT = re.compile(r"^\s*(\w+Literal)\s*=\s*(" + _GO_STRING + r"(?:\s*\+\s*" + _GO_STRING + r")*)", re.MULTILINE)
_FUNCTION = re.compile(r"^func (Test\w+)\(t \*testing\.T\) \{\n(.*?)^\}", re.MULTILINE | re.DOTALL)
_STRINGS = re.compile(r"\[\]string\{([^}]*)\}")
_COMPARABLE = re.compile(r"comparableLiteral:\s*(\w+),(?:\s*param:\s*" + _GO_STRING + ")?")


def generated(path: Path) -> list[Case]:
    """The cost tests built with ``fmt.Sprintf``: ``<list literal> + fmt.Sprintf(op, param)`` per
    ``comparableCost`` (TestListsCost, TestIncludesCost), and ``<base> + op`` (``testCost(t, "<base>"+op``)."""
    text = path.read_text()
    constants = {m.group(1): "".join(_go_string(x) for x in re.findall(_GO_STRING, m.group(2)))
                 for m in _CONSTANT.finditer(text)}
    out = []
    for func in _FUNCTION.finditer(text):
        body = func.group(2)
        if "comparableCost{" in body:
            for block in re.split(r"\bopts:", body)[1:]:
                listed = _STRINGS.search(block)
                ops = [_go_string(x) for x in re.findall(_GO_STRING, listed.group(1))] if listed else []
                for literal, param in _COMPARABLE.findall(block):
                    argument = _go_string(param) if param else ""
                    out += [Case(path.name, constants[literal] + op.replace("%s", argument), "ok")
                            for op in ops if literal in constants]
            continue
        base = re.search(r"testCost\(t, " + _GO_STRING + r"\s*\+\s*op,", body)
        if base:
            for ops in re.finditer(r"\bops:\s*\[\]string\{([^}]*)\}", body):
                out += [Case(path.name, _go_string(base.group(1)) + _go_string(op), "ok")
                        for op in re.findall(_GO_STRING, ops.group(1))]
    return out


class _AllowAll:
    """cost_test.go's ``alwaysAllowAuthorizer``."""

    def authorize(self, _attributes: Attributes) -> tuple[Decision, str, str | None]:
        return Decision.ALLOW, "", None


_ALLOW_ALL = _AllowAll()


def decide(case: Case) -> None:
    """Run ``case`` in Tollgate's environment and set ``got`` / ``agree``."""
    env = environment()
    text = case.evaluated or case.expr
    try:
        program = env.compile(text)
    except RuntimeError as e:
        if _MIXED in str(e) and case.expect != "compile":
            case.mixed_literal = True
            try:
                program = env.compile(text, disable_check=True)
            except RuntimeError as e2:
                case.got, case.agree = f"compile error: {e2}", False
                return
        else:
            case.got, case.agree = f"compile error: {e}", case.expect == "compile"
            return
    try:
        # As the cost test (cost_test.go ``testCost``) binds it: an authorizer that allows everything, no user.
        token = set_current_scope(VariableScope({}, None, None, authorizer=_ALLOW_ALL))
        try:
            result = program.eval(env.Activation({"authorizer": authorizer_value({})}))
        finally:
            reset_scope(token)
    except RuntimeError as e:
        case.got, case.agree = f"evaluation failed: {e}", case.expect == "runtime"
        return
    if result.type() == T.ERROR and not _is_optional(text):
        try:
            message = str(result.value())
        except (RuntimeError, TypeError):
            message = "(no message)"
        case.got, case.agree = f"error: {message}", case.expect == "runtime"
        return
    try:
        plain = result.plain_value()
    except (RuntimeError, ValueError, TypeError):
        plain = repr(result)
    case.got = f"value: {plain!r}"
    if case.expect == "value" and case.compared:
        same = plain == case.value and type(plain) is type(case.value)
        case.agree = same or (isinstance(case.value, float) and isinstance(plain, float)
                              and abs(plain - case.value) < 1e-9)
    else:
        case.agree = case.expect in ("value", "ok")


def main(argv: list[str] | None = None) -> int:
    """Run the upstream cases; print per-file agreement; exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a k8s.io/apiserver (or kubernetes/kubernetes) checkout")
    parser.add_argument("--json", type=Path, help="write every case and its outcome here")
    parser.add_argument("-v", "--verbose", action="store_true", help="list the cases that do not agree")
    args = parser.parse_args(argv)
    found = cases(args.checkout)
    for case in found:
        decide(case)
    by_file: dict[str, list[Case]] = {}
    for case in found:
        by_file.setdefault(case.file, []).append(case)
    for name, group in sorted(by_file.items()):
        agree = sum(c.agree for c in group)
        print(f"{name:28} {agree:4}/{len(group):<4} agree")
    agree = sum(c.agree for c in found)
    mixed = sum(c.mixed_literal for c in found)
    print(f"{'total':28} {agree:4}/{len(found):<4} agree ({100 * agree / max(1, len(found)):.1f}%); "
          f"{mixed} compiled without the checker (mixed literals the test's env accepts)")
    if args.verbose:
        for case in found:
            if not case.agree:
                print(f"  {case.file}: {case.expr}\n      expected {case.expect} {case.value!r}; got {case.got}")
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in found], indent=1, default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
