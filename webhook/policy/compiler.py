"""Policy CR → :class:`CompiledPolicy` (pure; no I/O).

Every expression is compiled and type-checked once, when the policy's watch
event arrives, never per request. A problem becomes the Ready condition that
``webhook.kube.status`` writes to the CR: reason ``InvalidSpec`` for a
malformed spec, ``CompileError`` for CEL, with the spec path and the CEL error
position, e.g. ``spec.validations[0].expression: ERROR: <input>:1:12: undeclared
reference to 'objekt'``.

A broken policy is not dropped: as ValidatingAdmissionPolicy's failurePolicy
covers "CEL expression parse errors, type check errors ... and invalid or
mis-configured policy definitions", a policy whose match rules can still be
read is compiled into a :class:`CompiledPolicy` with ``error`` set, and every
request those rules select is answered per its failurePolicy. Only a policy
whose match rules themselves are unreadable (``matchable`` is None) can
select nothing; it is reported as unmatchable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.policy import projection
from webhook.policy.cel import cost, typed_literals
from webhook.policy.cel.env import MAX_EXPRESSION_LENGTH, ResourceCall, T, environment
from webhook.policy.cel.rewrites import inline_variables, referenced_variables, rewrite_for_runtime
from webhook.policy.cel.scope import IMAGE_DATA_FUNCTIONS, image_data_offline
from webhook.policy.model import (
    PolicySpec,
    PolicySpecError,
    Reference,
    parse_policy,
    parse_policy_match,
)
from webhook.policy.provenance import import_error
from webhook.policy.status import ready_condition
from webhook.policy.vocabulary import PatchType


class CompileError(ValueError):
    """A CEL expression failed to compile; ``path`` is its spec path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


@dataclass(frozen=True, slots=True)
class Program:
    """One compiled expression and where it came from.

    Attributes:
        path: spec path, e.g. ``spec.validations[0].expression`` (runtime errors name it).
        source: the expression as the author wrote it.
        program: the cel-expr-python ``Expression`` to evaluate.
    """

    path: str
    source: str
    program: Any
    #: The runtime text when it is self-contained (variables inlined, no params, no per-policy scope), so it
    #: can be fused with other policies' expressions into one program; else None.
    fusable_source: str | None = None
    #: Estimated evaluation work of the expression as written (:mod:`webhook.policy.cel.cost`, ~10 ns units,
    #: a polynomial in the size of what it reads); ``{}`` when unknown.
    work: cost.Work = field(default_factory=dict)
    #: What its value may be (for a variable: what the expressions reading it see); None when unknown.
    bound: cost.Bound | None = None
    #: The CEL text ``program`` was compiled from (variables inlined where possible, else through the per-policy
    #: scope), so a scoped fused program (:mod:`webhook.policy.plan`) evaluates exactly what this program does.
    runtime_source: str = ""


@dataclass(frozen=True, slots=True)
class CompiledValidation:
    """A validation's programs."""

    expression: Program
    message: str | None
    message_expression: Program | None
    reason: str
    code: int


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    """A Ready policy: parsed spec plus one runtime program per expression.

    Programs are shared, immutable and safe to evaluate concurrently.
    """

    spec: PolicySpec
    match_conditions: tuple[tuple[str, Program], ...]
    variables: dict[str, Any]
    validations: tuple[CompiledValidation, ...]
    audit_annotations: tuple[tuple[str, Program], ...]
    mutations: tuple[tuple[str, Program], ...]
    #: Why the policy is not Ready (spec path + CEL position); every request it selects is
    #: then answered per its failurePolicy. None for a Ready policy.
    error: str | None = None
    #: Whether it is evaluated on /validate (validations or auditAnnotations) and on /mutate.
    validating: bool = True
    mutating: bool = False
    #: What the programs /validate evaluates (matchConditions, validations, messageExpressions,
    #: auditAnnotations, and the variables they reach) can read of ``object``/``oldObject``
    #: (:func:`webhook.policy.projection.reads`; shared, not to be modified); None when unknown: everything.
    reads: dict[str, projection.Tree] | None = None
    #: The same for what /mutate evaluates (matchConditions, mutations, and the variables they reach);
    #: None when unknown or the policy has no mutations.
    mutation_reads: dict[str, projection.Tree] | None = None
    #: The same for each of ``mutations`` on its own (with the variables it reaches), in order: whether a
    #: mutation reads what an earlier one changed (:mod:`webhook.policy.engine.mutate`); None when unknown.
    mutation_program_reads: tuple[dict[str, projection.Tree], ...] | None = None
    #: Estimated work of evaluating everything /validate evaluates once, as a polynomial in the size of what
    #: it reads (:mod:`webhook.policy.cel.cost`, ~10 ns units); ``{}`` for a broken policy.
    work: cost.Work = field(default_factory=dict)
    #: The same for /mutate.
    mutation_work: cost.Work = field(default_factory=dict)
    #: Whether an expression reads ``authorizer`` (:attr:`PolicySpec.reads_authorizer`): its checks read the RBAC
    #: caches (:data:`~webhook.policy.model.RBAC_REFERENCES`), which must have synced before it is evaluated.
    reads_authorizer: bool = False

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return self.spec.name

    @property
    def key(self) -> str:
        """Store key (``namespace/name`` or ``name``)."""
        return self.spec.key


@dataclass(frozen=True, slots=True)
class CompileResult:
    """What compiling a CR produced.

    Attributes:
        policy: the Ready policy, or None when anything is wrong.
        condition: ``{"type": "Ready", "status": "True"|"False", "reason",
            "message", "observedGeneration"}``.
        matchable: what the index files: ``policy`` when Ready; for a broken
            policy whose match rules parse, a :class:`CompiledPolicy` with
            ``error`` set (answered per failurePolicy); None when not even the
            match rules can be read.
    """

    policy: CompiledPolicy | None
    condition: dict[str, Any]
    matchable: CompiledPolicy | None = None


def _clean_cel_error(err: Exception) -> str:
    text = str(err).strip()
    for prefix in ("INVALID_ARGUMENT: ",):
        text = text.removeprefix(prefix)
    if text.endswith("[INVALID_ARGUMENT]"):
        text = text[: -len("[INVALID_ARGUMENT]")].rstrip()
    # cel-cpp appends the source line and a caret line; keep the first line,
    # which carries the <input>:line:column position.
    first = text.splitlines()[0] if text else "compile error"
    return first.replace(" (in container '')", "")


def compile_expression(source: str, path: str, *, expect: tuple[Any, ...], known_variables: frozenset[str],
                       inlined: dict[str, str] | None = None, references: tuple[Reference, ...] = (),
                       variable_bounds: dict[str, cost.Bound] | None = None) -> Program:
    """Compile one expression and return its runtime program.

    Args:
        source: CEL text as written by the policy author.
        path: spec path for error messages (``spec.validations[0].expression``).
        expect: acceptable return types (``T.DYN`` is always accepted, since
            object fields are untyped as in VAP); empty accepts any type.
        known_variables: names of ``variables`` this expression may use.
        inlined: variable name → inlined definition (see :func:`webhook.policy.cel.rewrites.inline_variables`).
        references: ``spec.references``: what ``resource.Get``/``resource.List`` may read.
        variable_bounds: what the earlier ``variables`` may hold (:class:`webhook.policy.cel.cost.Bound`),
            for the work estimate of an expression reading them.

    Returns:
        The program: variables inlined when possible, else routed through the
        per-policy scope (see :func:`webhook.policy.cel.rewrites.rewrite_for_runtime`); ``params``
        always through the scope.

    Raises:
        CompileError: too long, syntax or type errors (with CEL's position),
            a wrong return type, an unknown ``variables.<name>``, or a
            ``resource.Get``/``resource.List`` call whose apiVersion and resource
            are not string literals naming one of ``references``.
    """
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise CompileError(path, f"expression is {len(source)} characters; the limit is {MAX_EXPRESSION_LENGTH}")
    try:
        checked = environment().compile(source)
    except RuntimeError as e:
        raise CompileError(path, _clean_cel_error(e)) from None
    rtype = checked.return_type()
    got = rtype.name().lower()
    wanted = [t.name().lower().split("<", 1)[0] for t in expect]
    # Compare the outer type only: list<map<string, string>> is a list.
    if expect and rtype != T.DYN and got.split("<", 1)[0] not in wanted:
        raise CompileError(path, f"must evaluate to {' or '.join(wanted)}, but evaluates to {got}")
    _check_resource_calls(checked.resource_calls, path, references)
    estimated = checked.estimated
    if variable_bounds and referenced_variables(source):
        estimated = environment().estimate(checked, variable_bounds)
        if estimated is not None and estimated.error:  # growth compounded through the variables it reads
            raise CompileError(path, estimated.error)
    work = estimated.work if estimated is not None else {}
    bound = estimated.value if estimated is not None else None
    unknown = referenced_variables(source) - known_variables
    if unknown:
        raise CompileError(path, f"undeclared variable(s): {', '.join('variables.' + n for n in sorted(unknown))}")
    text = inline_variables(source, inlined) if inlined is not None else None
    if text is not None:
        try:
            # Self-contained: no call back into the per-policy scope (cel.bind names like __tg_v_x are fine).
            fusable = text if "__tg_var(" not in text and "__tg_params(" not in text else None
            return Program(path, source, environment().compile(text, disable_check=True), fusable, work, bound, text)
        except RuntimeError:
            pass  # e.g. the parser's nesting limit: fall back to the lazy per-policy scope
    runtime = rewrite_for_runtime(source)
    try:
        return Program(path, source, environment().compile(runtime), None, work, bound, runtime)
    except RuntimeError as e:  # pragma: no cover - the rewrite keeps valid CEL valid
        raise CompileError(path, _clean_cel_error(e)) from None


def _check_resource_calls(calls: tuple[ResourceCall, ...], path: str, references: tuple[Reference, ...]) -> None:
    """Every resource-library call must name a declared reference with literals (its cache must be known).

    An ImageData call (``image.GetMetadata``) compiles only where offline image data is installed
    (``tollgate test`` on a Kyverno test whose Context gives ``spec.images``): Tollgate calls no registry.
    """
    for call in calls:
        if call.function in IMAGE_DATA_FUNCTIONS:
            if not image_data_offline():
                raise CompileError(path, f"ERROR: {call.where}: {call.function} is Kyverno's ImageData library "
                                         "(image registry lookups), which Tollgate does not call: only `tollgate "
                                         "test` answers it, from a Kyverno test Context's spec.images")
            continue
        if call.api_version is None or call.resource is None:
            raise CompileError(path, f"ERROR: {call.where}: the apiVersion and resource of {call.function} must be "
                                     "string literals naming an entry of spec.references")
        ref = next((r for r in references if r == Reference(call.api_version, call.resource)), None)
        if ref is None:
            declared = ", ".join(r.cache for r in references) or "none"
            raise CompileError(path, f"ERROR: {call.where}: {call.function} reads {call.api_version} "
                                     f"{call.resource}, which is not in spec.references (declared: {declared})")
        if call.function == "resource.ByIndex" and not any(i.name == call.index for i in ref.indexes):
            declared = ", ".join(i.name for i in ref.indexes) or "none"
            what = "a string literal" if call.index is None else f"{call.index!r}, which is not"
            raise CompileError(path, f"ERROR: {call.where}: the index of resource.ByIndex must be {what} an index "
                                     f"of {ref.cache} in spec.references (declared: {declared})")


def compile_spec(spec: PolicySpec) -> CompiledPolicy:
    """Compile every expression of a parsed spec.

    Raises:
        CompileError: the first expression that does not compile.
    """
    p = "spec"
    refs = spec.references
    for i, ref in enumerate(refs):
        for j, index in enumerate(ref.indexes):
            # Evaluated over each cached object by the informer's Indexer (webhook.policy.reference_indexes).
            compile_expression(index.expression, f"{p}.references[{i}].indexes[{j}].expression",
                               expect=(T.STRING, T.LIST, T.NULL), known_variables=frozenset())
    declared: list[str] = []
    variables: dict[str, Any] = {}
    variable_programs: list[Program] = []
    bounds: dict[str, cost.Bound] = {}
    inlined: dict[str, str] = {}
    for i, v in enumerate(spec.variables):
        compiled = compile_expression(v.expression, f"{p}.variables[{i}].expression", expect=(),
                                      known_variables=frozenset(declared), references=refs, variable_bounds=bounds)
        variables[v.name] = compiled.program
        variable_programs.append(compiled)
        if compiled.bound is not None:
            bounds[v.name] = compiled.bound
        text = inline_variables(v.expression, inlined)
        if text is not None:
            inlined[v.name] = text
        declared.append(v.name)
    known = frozenset(declared)
    conditions = tuple(
        (c.name, compile_expression(c.expression, f"{p}.matchConditions[{i}].expression", expect=(T.BOOL,),
                                    known_variables=frozenset(), references=refs))
        for i, c in enumerate(spec.match_conditions)
    )
    validations = []
    for i, val in enumerate(spec.validations):
        vp = f"{p}.validations[{i}]"
        validations.append(
            CompiledValidation(
                expression=compile_expression(val.expression, f"{vp}.expression", expect=(T.BOOL,),
                                              known_variables=known, inlined=inlined, references=refs,
                                              variable_bounds=bounds),
                message=val.message,
                message_expression=(
                    compile_expression(val.message_expression, f"{vp}.messageExpression", expect=(T.STRING,),
                                       known_variables=known, inlined=inlined, references=refs,
                                              variable_bounds=bounds)
                    if val.message_expression
                    else None
                ),
                reason=val.reason,
                code=val.reason.code,
            )
        )
    audits = tuple(
        (a.key, compile_expression(a.value_expression, f"{p}.auditAnnotations[{i}].valueExpression",
                                   expect=(T.STRING, T.NULL), known_variables=known, inlined=inlined,
                                   references=refs))
        for i, a in enumerate(spec.audit_annotations)
    )
    mutations = []
    for i, m in enumerate(spec.mutations):
        field = "jsonPatch" if m.patch_type is PatchType.JSON_PATCH else "applyConfiguration"
        expect = (T.LIST,) if m.patch_type is PatchType.JSON_PATCH else (T.MAP,)
        program = compile_expression(m.expression, f"{p}.mutations[{i}].{field}.expression", expect=expect,
                                     known_variables=known, inlined=inlined, references=refs,
                                              variable_bounds=bounds)
        root = typed_literals.rewrite(m.expression).root
        if m.patch_type is PatchType.APPLY_CONFIGURATION and root is not None and root.name != "Object":
            # As MutatingAdmissionPolicy's compiler: an ApplyConfiguration is the whole object.
            raise CompileError(program.path, f"must evaluate to Object but got {root.name}")
        mutations.append((m.patch_type, program))
    programs = [*(p for _, p in conditions), *(v.expression for v in validations),
                *(v.message_expression for v in validations if v.message_expression is not None),
                *(p for _, p in audits)]
    mutation_programs = [*(p for _, p in conditions), *(p for _, p in mutations)]
    work = _work(programs + variable_programs)
    mutation_work = _work(mutation_programs + variable_programs) if mutations else {}
    _check_static_work(work, programs + variable_programs, "validations")
    _check_static_work(mutation_work, mutation_programs + variable_programs, "mutations")
    return CompiledPolicy(spec, conditions, variables, tuple(validations), audits, tuple(mutations),
                          validating=bool(validations or audits), mutating=bool(mutations),
                          reads=_reads(programs, variables),
                          mutation_reads=_reads(mutation_programs, variables) if mutations else None,
                          mutation_program_reads=tuple(_reads([p], variables) for _, p in mutations) or None,
                          work=work, mutation_work=mutation_work, reads_authorizer=spec.reads_authorizer)


def _work(programs: list[Program]) -> cost.Work:
    """Estimated work of evaluating every one of ``programs`` once (variables are evaluated at most once)."""
    return cost.total(*(p.work for p in programs))


def _check_static_work(work: cost.Work, programs: list[Program], what: str) -> None:
    """Refuse a policy whose unavoidable work exceeds :data:`cost.MAX_STATIC_WORK`, naming its costliest expression.

    Raises:
        CompileError: at the spec path of the expression with the most static work.
    """
    static = work.get((0, 0, 0), 0)
    if static <= cost.MAX_STATIC_WORK or not programs:
        return
    worst = max(programs, key=lambda p: p.work.get((0, 0, 0), 0))
    raise CompileError(worst.path, f"estimated cost {worst.work.get((0, 0, 0), 0):,} (the policy's {what}: {static:,}) "
                                   f"exceeds the budget of {cost.MAX_STATIC_WORK:,} per policy whatever the input "
                                   "(literal ranges or repeated work over literals); reduce the literals or the "
                                   "repetitions")


def _reads(programs: list[Program], variables: dict[str, Any]) -> dict[str, projection.Tree]:
    """What ``programs`` (and the ``variables`` programs they reach) can read (see :attr:`CompiledPolicy.reads`)."""
    return projection.reads_of(tuple(p.program.program.serialize() for p in programs),
                               tuple((name, v.program.serialize()) for name, v in variables.items()))


def _broken(obj: dict[str, Any], message: str) -> CompiledPolicy | None:
    """The match part of a policy that is not Ready, so its failurePolicy can answer; None if unreadable."""
    try:
        spec = parse_policy_match(obj)
    except PolicySpecError:
        return None
    raw_spec = obj.get("spec")
    raw: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    mutating = bool(raw.get("mutations"))
    # A spec with neither readable (``spec: []`` imported) is answered on /validate: never selecting nothing.
    return CompiledPolicy(spec, (), {}, (), (), (), error=message,
                          validating=bool(raw.get("validations") or raw.get("auditAnnotations")) or not mutating,
                          mutating=mutating)


def compile_policy(obj: dict[str, Any]) -> CompileResult:
    """Parse and compile a policy CR; never raises for bad input.

    Args:
        obj: the ClusterAdmissionPolicy / AdmissionPolicy as a raw dict.

    Returns:
        ``CompileResult``: when anything is wrong, ``policy`` is None, the
        condition is ``Ready=False`` (reason ``InvalidSpec``, ``CompileError``,
        or ``ImportError`` for an imported policy that cannot be honoured, see
        :mod:`webhook.formats`) and ``matchable`` carries the error if the
        match rules are readable.
    """
    generation = (obj.get("metadata") or {}).get("generation")
    imported_problem = import_error(obj)
    if imported_problem is not None:
        return CompileResult(None, ready_condition(False, "ImportError", imported_problem, generation),
                             _broken(obj, imported_problem))
    try:
        spec = parse_policy(obj)
    except PolicySpecError as e:
        return CompileResult(None, ready_condition(False, "InvalidSpec", str(e), generation), _broken(obj, str(e)))
    try:
        policy = compile_spec(spec)
    except CompileError as e:
        return CompileResult(None, ready_condition(False, "CompileError", str(e), generation), _broken(obj, str(e)))
    summary = f"{len(policy.validations)} validation(s), {len(policy.mutations)} mutation(s) compiled"
    return CompileResult(policy, ready_condition(True, "Compiled", summary, generation), policy)


__all__ = ["CompileError", "CompileResult", "CompiledPolicy", "CompiledValidation", "Program",
           "compile_policy"]
