"""Projection: what parse trees can read (targeted cases), and evaluation on the pruned object equals evaluation
on the whole one — for hand-picked type mismatches and, as a property, for every program of every shipped and
vendored policy over the fixture requests and generated (and deliberately mistyped) objects."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures import fixture_dir
from tests.unit.policy.helpers import policy
from tests.unit.policy.test_plan import LOOKUPS, POLICIES, _container, _corpus, _index
from webhook.policy import RequestCoordinates
from webhook.policy.cel import ast as celast
from webhook.policy.cel.env import T, environment
from webhook.policy.cel.rewrites import inline_variables, rewrite_for_runtime
from webhook.policy.cel.scope import VariableScope, reset_scope, set_current_scope
from webhook.policy.compiler import CompiledPolicy, compile_policy
from webhook.policy.engine import RequestContext, synthesize_pod
from webhook.policy.engine.prepare import params_of
from webhook.policy.matching import View
from webhook.policy.projection import ALL, EACH, KEYS, reads, reads_of, union
from webhook.policy.pruning import Projection, project

ENV = environment()


# -- what an expression reads ----------------------------------------------------------------------


def _tree(source: str, variables: dict[str, str] | None = None) -> dict[str, Any]:
    """``reads`` of ``source`` compiled as the engine compiles fused and runtime programs."""
    program = ENV.compile(source, disable_check=True)
    serialized = {name: ENV.compile(text, disable_check=True).program.serialize()
                  for name, text in (variables or {}).items()}
    return reads(celast.decode(program.program.serialize()).root, variables=serialized)


def _obj(source: str) -> Any:
    return _tree(source)["object"]


@pytest.mark.parametrize(("source", "tree"), [
    # selection chains; a comparison with a literal needs the value's presence and type only
    ("object.spec.hostNetwork == true", {"spec": {"hostNetwork": {}}}),
    ("object.metadata.name.startsWith('a')", {"metadata": {"name": ALL}}),
    ("object.spec.x == object.spec.y", {"spec": {"x": ALL, "y": ALL}}),
    # has(): presence only (cel-go semantics: a rewrite with type() checks, which needs the type only)
    ("has(object.spec.securityContext)", {"spec": {"securityContext": {}}}),
    ("!has(object.spec.securityContext.runAsUser)", {"spec": {"securityContext": {"runAsUser": {}}}}),
    # indexes: a string literal is a field; anything else any element or value
    ("object.metadata.labels['app'] == 'x'", {"metadata": {"labels": {"app": {}}}}),
    ("object.spec.containers[0].image == 'x'", {"spec": {"containers": {EACH: {"image": {}}}}}),
    ("object.metadata.labels[object.metadata.name] == 'x'",
     {"metadata": {"name": ALL, "labels": {EACH: {}}}}),
    # optionals
    ("object.spec.?securityContext.?runAsNonRoot.orValue(false) == true",
     {"spec": {"securityContext": {"runAsNonRoot": {}}}}),
    ("object.metadata.?labels[?'team'].hasValue()", {"metadata": {"labels": {"team": {}}}}),
    ("object.spec.?volumes.orValue([]).size() == 0", {"spec": {"volumes": {KEYS: {}}}}),
    # comprehensions: every element (or key) of what is iterated is kept; the variable reads elements
    ("object.spec.containers.all(c, c.image.startsWith('r/'))",
     {"spec": {"containers": {KEYS: {"image": ALL}}}}),
    ("object.spec.containers.exists_one(c, c.name == 'a')", {"spec": {"containers": {KEYS: {"name": {}}}}}),
    ("object.spec.containers.filter(c, has(c.ports)).size() > 0",
     {"spec": {"containers": {KEYS: {"ports": {}}}}}),
    ("object.spec.containers.map(c, c.name).join(',') != ''",
     {"spec": {"containers": {KEYS: {"name": ALL}}}}),
    ("object.spec.containers.filter(c, c.x).map(c, c.name).join(',') != ''",
     {"spec": {"containers": {KEYS: {"x": ALL, "name": ALL}}}}),
    # a map iterated: every key (KEYS); a key used whole needs no value
    ("object.metadata.labels.all(k, k.startsWith('a'))", {"metadata": {"labels": {KEYS: ALL}}}),
    ("object.metadata.labels.exists(k, object.metadata.labels[k] == 'x')",
     {"metadata": {"labels": {KEYS: ALL, EACH: {}}}}),
    # two-variable comprehensions: the second variable reads values, every key kept
    ("object.metadata.labels.all(k, v, v == 'x')", {"metadata": {"labels": {EACH: {}}}}),
    ("object.spec.containers.all(i, c, i < 2 || c.image == 'x')", {"spec": {"containers": {EACH: {"image": {}}}}}),
    # cel.bind aliases its value; list concatenation keeps elements
    ("cel.bind(cs, object.spec.containers + object.spec.?initContainers.orValue([]), cs.all(c, c.name != ''))",
     {"spec": {"containers": {KEYS: {"name": {}}}, "initContainers": {KEYS: {"name": {}}}}}),
    ("cel.bind(object, 1, object == 1)", {}),  # the bound name shadows the root
    # literals hold what they are built from
    ("[object.spec.a, object.spec.b].all(x, x.f == 1)", {"spec": {"a": {"f": {}}, "b": {"f": {}}}}),
    ("{'k': object.spec.a}.k.f == 1", {"spec": {"a": {"f": {}}}}),
    ("{'k': object.spec.a}['j'] == 1", {"spec": {"a": {}}}),
    ("[object.spec].flatten().all(x, x.f == 1)", {"spec": {KEYS: {"f": {}}, "f": {}}}),
    # an index ranging over known strings selects those keys only
    ("['hostNetwork', 'hostPID'].exists(f, object.spec[?f].orValue(false) == true)",
     {"spec": {"hostNetwork": {}, "hostPID": {}}}),
    ("['a', 'b'].exists(f, object.spec[f + 'x'] == 1)", {"spec": {EACH: {}}}),  # 'ax' is not 'a'
    ("object.metadata.labels[object.kind == 'Pod' ? 'a' : request.operation] == '1'",
     {"kind": {}, "metadata": {"labels": {EACH: {}}}}),
    # fields literally named like the segments are read as every value
    ("object.metadata.labels['#'].a == 1", {"metadata": {"labels": {EACH: {"a": {}}}}}),
    ("{'#': object.spec}['#'].a == 1", {"spec": {"a": {}}}),
    # size(): every element or key, contents not needed
    ("size(object.metadata.labels) > 2", {"metadata": {"labels": {KEYS: {}}}}),
    ("object.metadata.labels.size() > 2", {"metadata": {"labels": {KEYS: {}}}}),
    # used whole: functions, ==, in, the result
    ("'app' in object.metadata.labels", {"metadata": {"labels": ALL}}),
    ("string(object.spec) != ''", {"spec": ALL}),
    ("object.spec.containers", {"spec": {"containers": ALL}}),
    ("object == oldObject", ALL),
    ("type(object) == map", {}),
    ("__tg_params().data.x == object.kind", {"kind": ALL}),
    ("request.operation == 'CREATE'", {}),
])
def test_reads(source: str, tree: Any) -> None:
    assert _obj(source) == tree


def test_old_object_is_analysed_apart() -> None:
    assert _tree("object.kind == oldObject.kind") == {"object": {"kind": ALL}, "oldObject": {"kind": ALL}}
    assert _tree("oldObject == null || oldObject.spec.x == 1") == {"object": {}, "oldObject": {"spec": {"x": {}}}}


def test_routed_variables_are_analysed_where_they_are_used() -> None:
    variables = {"cs": "object.spec.containers", "names": "__tg_var('cs').map(c, c.name)"}
    assert _tree("__tg_var('names').join(',') != ''", variables)["object"] == {
        "spec": {"containers": {KEYS: {"name": ALL}}}}
    assert _tree("__tg_var('names').size() > 0", variables)["object"] == {
        "spec": {"containers": {KEYS: {"name": {}}}}}
    # an unknown variable (or variables not routed by name) keeps everything
    assert _tree("__tg_var('nope') == 1", variables) == {"object": ALL, "oldObject": ALL}
    assert _tree("__tg_var(request.name) == 1", variables) == {"object": ALL, "oldObject": ALL}


def test_an_accumulator_without_a_fixpoint_keeps_everything() -> None:
    # CEL's macros cannot write one; a hand-built comprehension whose step selects from its accumulator can
    # (object, object.x, object.x.x, ...).
    def ident(name: str) -> celast.Node:
        return celast.Node(kind="ident", name=name)

    growing = celast.Node(kind="comprehension", name="i", accu_var="a", args=[
        celast.Node(kind="list", args=[celast.Node(kind="const", value=1)]), ident("object"),
        celast.Node(kind="const", value=True), celast.Node(kind="select", name="x", target=ident("a")), ident("a")])
    assert reads(growing) == {"object": ALL, "oldObject": ALL}
    # A kind the analysis does not know keeps everything too.
    assert reads(celast.Node(kind="")) == {"object": ALL, "oldObject": ALL}


def test_a_policy_reads_what_its_validating_programs_read() -> None:
    doc = policy("p", variables=[{"name": "cs", "expression": "object.spec.containers"}],
                 matchConditions=[{"name": "m", "expression": "object.metadata.namespace != 'kube-system'"}],
                 validations=[{"expression": "variables.cs.all(c, c.?image.orValue('') != '')",
                               "messageExpression": "'bad: ' + variables.cs.map(c, c.name).join(', ')"}],
                 auditAnnotations=[{"key": "k", "valueExpression": "string(object.spec.hostNetwork)"}],
                 mutations=[{"patchType": "ApplyConfiguration",  # /mutate's programs: mutation_reads
                             "applyConfiguration": {"expression": "{'metadata': {'labels': object.spec}}"}}])
    compiled = compile_policy(doc).policy
    assert compiled is not None
    assert compiled.reads == {"object": {
        "metadata": {"namespace": {}},
        "spec": {"containers": {KEYS: {"image": {}, "name": ALL}}, "hostNetwork": ALL}}, "oldObject": {}}
    assert compiled.mutation_reads == {"object": {"metadata": {"namespace": {}}, "spec": ALL}, "oldObject": {}}


def test_a_recompiled_policy_reuses_its_reads() -> None:
    doc = next(p for p in POLICIES if p["metadata"]["name"] == "disallow-capabilities")
    first, second = compile_policy(doc).policy, compile_policy(copy.deepcopy(doc)).policy
    assert first is not None and second is not None
    assert first.reads is second.reads  # cached by the programs' expressions (their serialized positions vary)
    assert reads_of((b"not a serialized expression",)) == {"object": ALL, "oldObject": ALL}
    assert reads_of((b"\x0a\xff",)) == {"object": ALL, "oldObject": ALL}  # truncated


def _policy_docs() -> list[dict[str, Any]]:
    corpus = fixture_dir("kyverno-pod-security-cel")
    docs = [d for path in sorted(corpus.rglob("*.yaml")) for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict) and d.get("kind") in ("ClusterAdmissionPolicy", "AdmissionPolicy")]
    return [*POLICIES, *docs]


def test_a_policys_reads_are_the_union_of_its_programs_reads() -> None:
    # reads_of analyses each program on its own (cached per program, so an edit re-analyses one expression) and
    # joins the results: the same trees as one analysis over every program.
    policies = [compile_policy(d).policy for d in _policy_docs()]
    checked = 0
    for compiled in policies:
        if compiled is None:
            continue
        programs = [*(p for _, p in compiled.match_conditions), *(v.expression for v in compiled.validations),
                    *(v.message_expression for v in compiled.validations if v.message_expression is not None),
                    *(p for _, p in compiled.audit_annotations)]
        if len(programs) < 2:
            continue
        variables = {name: v.program.serialize() for name, v in compiled.variables.items()}
        joint = reads(*(celast.decode(p.program.program.serialize()).root for p in programs), variables=variables)
        assert compiled.reads == joint, compiled.name
        checked += 1
    assert checked > 20


def test_union() -> None:
    assert union({"a": {"b": {}}}, {"a": {"c": ALL}, "d": {}}) == {"a": {"b": {}, "c": ALL}, "d": {}}
    assert union({"a": {}}, ALL) is ALL


# -- pruning ---------------------------------------------------------------------------------------

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}},
       "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "X"}], "ports": [{"containerPort": 1}]},
                               {"name": "d", "image": "j"}],
                "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "s"}}]}}]}}


@pytest.mark.parametrize(("tree", "pruned"), [
    (ALL, POD),
    ({}, {}),
    ({"metadata": {"name": {}}}, {"metadata": {"name": "p"}}),
    ({"metadata": {"labels": {}}}, {"metadata": {"labels": {}}}),  # presence and type only
    ({"metadata": {"labels": {KEYS: {}}}}, {"metadata": {"labels": {"a": "1", "b": "2"}}}),
    ({"spec": {"containers": {}}}, {"spec": {"containers": [{}, {}]}}),  # a list keeps its length
    ({"spec": {"containers": {EACH: {"image": ALL, "ports": {}}}}},
     {"spec": {"containers": [{"image": "i", "ports": [{}]}, {"image": "j"}]}}),
    ({"spec": {"volumes": {KEYS: {KEYS: {}}}}}, {"spec": {"volumes": [{"name": "v", "projected": {}}]}}),
    ({"spec": {EACH: {}, "volumes": {EACH: {"name": ALL}}}},
     {"spec": {"containers": [{}, {}], "volumes": [{"name": "v"}]}}),
    ({"spec": {"volumes": {EACH: {EACH: ALL}}}}, {"spec": {"volumes": POD["spec"]["volumes"]}}),
    ({"nope": ALL, "kind": {"x": {}}}, {"kind": "Pod"}),  # missing stays missing; a scalar stays itself
])
def test_project(tree: Any, pruned: Any) -> None:
    before = copy.deepcopy(POD)
    assert project(POD, tree) == pruned
    assert before == POD  # never modified


def test_projection_keeps_whole_what_it_does_not_prune() -> None:
    assert Projection.of({"object": ALL, "oldObject": ALL}) is None
    projection = Projection.of({"object": {"kind": ALL}, "oldObject": ALL})
    assert projection is not None
    old = {"kind": "Pod", "x": 1}
    obj, kept = projection.apply(POD, old)
    assert obj == {"kind": "Pod"} and kept is old


# -- evaluation on the pruned object equals evaluation on the whole object ---------------------------


def _activation(obj: Any, old: Any) -> Any:
    return ENV.Activation({"object": obj, "oldObject": old, "request": {"operation": "CREATE"},
                           "namespaceObject": None, "params": None, "variables": None})


def _result(program: Any, act: Any, scope: tuple[dict[str, Any], Any] | None = None) -> tuple[str, Any]:
    """What evaluating ``program`` gives: its type and plain value, the error text, or the raised error."""
    token = set_current_scope(VariableScope(scope[0], act, scope[1]) if scope is not None else None)
    try:
        value = program.eval(act)
    except RuntimeError as e:  # the iteration budget
        return "raised", str(e)
    finally:
        reset_scope(token)
    if value.type() == T.ERROR:
        return "error", str(value.value())
    return str(value.type()), value.plain_value()


def _pruned(trees: dict[str, Any], obj: Any, old: Any) -> tuple[Any, Any]:
    projection = Projection.of(trees)
    return projection.apply(obj, old) if projection is not None else (obj, old)


def _same(program: Any, trees: dict[str, Any], obj: Any, old: Any = None,
          scope: tuple[dict[str, Any], Any] | None = None) -> None:
    assert _result(program, _activation(*_pruned(trees, obj, old)), scope) == \
        _result(program, _activation(obj, old), scope)


MISTYPED = [
    None, 1, "s", [], {}, [1, "x", None], {"a": 1},
    {"metadata": None, "spec": "x"},
    {"metadata": {"labels": ["a", "b"], "name": 1}, "spec": {"containers": {"c": {"image": "i"}}}},
    {"metadata": {"labels": {"a": {"b": 1}}}, "spec": {"containers": [None, 1, "x", [], {"image": 1}]}},
    {"spec": {"containers": [{"securityContext": None}, {"securityContext": []}, {"securityContext": "x"},
                             {"securityContext": {"runAsNonRoot": "yes", "capabilities": {"add": "ALL"}}}],
              "hostNetwork": "true", "volumes": {"a": {"hostPath": 1}}}},
    POD,
    {"metadata": {"labels": {"#": {"a": 1}, "*": {"a": 2}, "b": "2"}}},
    {"kind": "Job", "metadata": {"name": "b", "labels": {"a": "1", "b": "2"}},
     "spec": {"containers": [{"name": f"c{i}", "image": "i" if i % 7 else {"x": i}} for i in range(70)],
              "volumes": [{"name": "v"}, {"name": "w", "hostPath": {"path": "/"}}]}},  # chunked comprehensions
]


@pytest.mark.parametrize("source", [
    "object.spec.hostNetwork == true",
    "has(object.spec.securityContext) && object.spec.securityContext != null",
    "object.metadata.?labels[?'team'].orValue('') == 'x'",
    "object.metadata.labels.all(k, k != 'b')",
    "object.metadata.labels.all(k, v, v != '2')",
    "object.metadata.labels.all(k, v, k != 'b')",
    "object.metadata.labels[object.kind == 'Pod' ? 'a' : object.metadata.name] == '1'",
    "object.metadata.labels.exists(k, object.metadata.labels[k] == 'x')",
    "size(object.metadata.labels) == 2",
    "object.spec.containers.all(c, c.?securityContext.?runAsNonRoot.orValue(false) == true)",
    "object.spec.containers.filter(c, has(c.securityContext)).size() > 0",
    "object.spec.containers.map(c, type(c)) == [map, map]",
    "object.spec.containers[1].image",
    "cel.bind(c, object.spec.containers, c.exists(x, x.?image.orValue('') == 'j'))",
    "object.spec.containers.flatten().size()",
    "object.spec.containers.slice(0, 1).all(c, c.name == 'c')",
    "['hostNetwork', 'hostPID'].exists(f, object.spec[?f].orValue(false) == true)",
    "object.spec.volumes.all(v, v.exists(k, k == 'hostPath'))",
    "object.spec.volumes.all(v, !has(v.hostPath))",
    "type(object.spec) == map ? object.spec.containers.size() : 0",
    "object.metadata",
    "object == oldObject",
    "[object.spec.containers, object.spec.volumes].flatten().size() > 1",
    "[object.spec.containers, object.spec.volumes].flatten().all(x, x.?name.orValue('') != 'v')",
    "object.spec.containers.map(c, c.image).filter(i, type(i) == map).size()",
    "object.metadata.labels.all(k, false)",
    "{'name': 'd', 'image': 'j'} in object.spec.containers",
    "object.spec == oldObject.spec",
    "object.spec.containers.all(c, oldObject.spec.containers.exists(o, o == c))",
    "object.metadata.labels['#'].a == 1",
    "object.metadata.labels['*'].a == 2",
    "{'#': object.metadata.labels}['#'].all(k, k != '*')",
])
@pytest.mark.parametrize("obj", range(len(MISTYPED)))
def test_type_mismatches_evaluate_as_on_the_whole_object(source: str, obj: int) -> None:
    program = ENV.compile(source, disable_check=True)
    tree = _tree(source)
    _same(program, tree, MISTYPED[obj], copy.deepcopy(MISTYPED[obj]))
    _same(program, tree, MISTYPED[obj], MISTYPED[-1 - obj])


# -- every program of every shipped and vendored policy ---------------------------------------------


@dataclass(frozen=True)
class _Case:
    name: str
    program: Any
    trees: dict[str, Any]
    variables: dict[str, Any]  # the programs __tg_var evaluates
    policy: CompiledPolicy | None  # for params
    projection: Projection | None
    key: str  # cases with equal trees share a pruned activation


def _case(name: str, program: Any, variables: dict[str, Any], policy: CompiledPolicy | None) -> _Case:
    serialized = {n: v.program.serialize() for n, v in variables.items()}
    trees = reads(celast.decode(program.program.serialize()).root, variables=serialized)
    return _Case(name, program, trees, variables, policy, Projection.of(trees), repr(trees))


def _kyverno_cel_blocks() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(fixture_dir("kyverno-pod-security-cel").glob("*/*/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for rule in (doc or {}).get("spec", {}).get("rules", []):
                cel_block = (rule.get("validate") or {}).get("cel")
                if cel_block:
                    yield f"{path.parent.name}/{rule['name']}", cel_block


@functools.cache
def _cases() -> tuple[_Case, ...]:
    """Every program the engine evaluates, each with its own reads: every expression of the shipped policies
    (mutations and variables included), and the vendored Kyverno CEL rules both inlined and routed."""
    out: list[_Case] = []
    for doc in POLICIES:
        policy = compile_policy(doc).policy
        assert policy is not None, doc["metadata"]["name"]
        programs = [*(p for _, p in policy.match_conditions), *(v.expression for v in policy.validations),
                    *(v.message_expression for v in policy.validations if v.message_expression is not None),
                    *(p for _, p in policy.audit_annotations), *(p for _, p in policy.mutations)]
        out += [_case(f"{policy.name} {p.path}", p.program, policy.variables, policy) for p in programs]
        out += [_case(f"{policy.name} variables.{n}", v, policy.variables, policy) for n, v in policy.variables.items()]
    for name, block in _kyverno_cel_blocks():
        texts = {v["name"]: v["expression"] for v in block.get("variables", [])}
        routed = {n: ENV.compile(rewrite_for_runtime(text), disable_check=True) for n, text in texts.items()}
        inlined: dict[str, str] = {}
        for n, text in texts.items():
            inlined[n] = inline_variables(text, inlined) or text
        for i, e in enumerate(block["expressions"]):
            source = e["expression"]
            out.append(_case(f"kyverno {name}[{i}] routed", ENV.compile(rewrite_for_runtime(source),
                                                                          disable_check=True), routed, None))
            text = inline_variables(source, inlined)
            assert text is not None
            out.append(_case(f"kyverno {name}[{i}] inlined", ENV.compile(text, disable_check=True), {}, None))
    return tuple(out)


def _views(req: dict[str, Any]) -> list[tuple[Any, Any]]:
    """``(object, oldObject)`` of every view of the request: the object, and the Pod of a workload's template."""
    views = [(req.get("object"), req.get("oldObject"))]
    template = RequestCoordinates.of(req).template
    if template is not None:
        obj, old = (synthesize_pod(o, template) if isinstance(o, dict) else None
                    for o in (req.get("object"), req.get("oldObject")))
        views.append((obj, old))
    return views


def _check_every_program(req: dict[str, Any]) -> int:
    """Evaluate every case on every view of ``req``, whole and pruned by the case's own reads; the number compared."""
    checked = 0
    ctx = RequestContext(req, LOOKUPS)
    for obj, old in _views(req):
        whole = _activation(obj, old)
        pruned: dict[str, Any] = {}  # one activation per distinct tree: cel-expr-python converts each once
        for case in _cases():
            if case.key not in pruned:
                pruned[case.key] = _activation(*(case.projection.apply(obj, old) if case.projection else (obj, old)))
            params = params_of(case.policy, ctx) if case.policy is not None else None
            scope = (case.variables, params if isinstance(params, dict) else None)
            assert _result(case.program, pruned[case.key], scope) == _result(case.program, whole, scope), case.name
            checked += 1
    return checked


def test_every_program_reads_within_its_projection_on_every_fixture_request() -> None:
    cases = _cases()
    assert len(cases) > 150 and any("routed" in c.name for c in cases)
    # The analysis prunes most programs, so the comparison compares something.
    assert sum(c.projection is not None for c in cases) > 0.9 * len(cases)
    seen: set[bytes] = set()
    checked = 0
    for req in _corpus():
        key = orjson.dumps([req.get("object"), req.get("kind"), req.get("namespace")], option=orjson.OPT_SORT_KEYS)
        if key not in seen:  # the corpus repeats some objects
            seen.add(key)
            checked += _check_every_program(req)
    assert checked > 100_000


_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "ALL", "x", "name"]),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["name", "image", "securityContext", "hostPath", "add", "drop", "type"]),
                         inner, max_size=3), max_leaves=6)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    out = copy.copy(value)
    out[path[0]] = _replace(value[path[0]], path[1:], new)
    return out


@st.composite
def _mistyped_pods(draw: st.DrawFn) -> dict[str, Any]:
    """A Pod (or workload) with a few values replaced by arbitrary JSON: wrong types where policies expect others."""
    containers = draw(st.lists(_container, min_size=1, max_size=3))
    spec: dict[str, Any] = {"containers": containers, "hostNetwork": draw(st.booleans())}
    if draw(st.booleans()):
        spec["volumes"] = [{"name": "v", draw(st.sampled_from(["hostPath", "emptyDir", "nfs"])): {"path": "/"}}]
    if draw(st.booleans()):
        spec["securityContext"] = {"runAsNonRoot": draw(st.booleans()), "sysctls": [{"name": "kernel.x"}]}
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "gen", "namespace": "default", "labels": {"team": "payments"}},
                           "spec": spec}
    for _ in range(draw(st.integers(0, 3))):
        paths = [p for p in _paths(obj) if p[:2] != ("kind",) and p[:1] != ("apiVersion",) and len(p) > 1]
        obj = _replace(obj, draw(st.sampled_from(paths)), draw(_json))
    if draw(st.booleans()):
        obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gen", "namespace": "default"},
               "spec": {"template": {"metadata": obj.get("metadata"), "spec": obj.get("spec")}}}
    return obj


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_mistyped_pods(), old=st.none() | _mistyped_pods())
def test_every_program_reads_within_its_projection_on_generated_objects(obj: dict[str, Any],
                                                                        old: dict[str, Any] | None) -> None:
    group, resource = ("apps", "deployments") if obj["kind"] == "Deployment" else ("", "pods")
    req = {"uid": "gen", "kind": {"group": group, "version": "v1", "kind": obj["kind"]},
           "resource": {"group": group, "version": "v1", "resource": resource}, "namespace": "default",
           "operation": "UPDATE" if old else "CREATE", "userInfo": {"username": "u"}, "object": obj,
           "oldObject": old if old is None or old["kind"] == obj["kind"] else None}
    assert _check_every_program(req) > 0


def test_fused_programs_read_within_their_plan_projection() -> None:
    # A plan's projection is the union of its policies' reads; each fused program (built from the same sources)
    # must read within it on every fixture request.
    index = _index([])
    for req in _corpus()[::7]:
        plan = index.plan(RequestCoordinates.of(req)).compile_all()
        assert plan.projections is not None
        for group in plan.groups:
            projection = plan.projections.get(group.view)
            trees = {"object": ALL, "oldObject": ALL} if projection is None else {
                "object": projection.object, "oldObject": projection.old_object}
            obj, old = _views(req)[1 if group.view is View.POD_TEMPLATE else 0]
            _same(group.program, trees, obj, old)


def test_params_reads_follows_params_as_object_reads_follow_object() -> None:
    from webhook.policy.compiler import compile_policy
    from webhook.policy.projection import params_reads

    compiled = compile_policy({
        "apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy", "metadata": {"name": "p"},
        "spec": {"paramRef": {"name": "cm", "namespace": "default"},
                 "match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                              "operations": ["CREATE"]}]},
                 "variables": [{"name": "allowed", "expression": "params.data.allowed.split(',')"}],
                 "validations": [{"expression": "object.metadata.name in variables.allowed && "
                                                "has(params.data.strict) && params.spec.items.all(i, i.x > 0)"}]}})
    p = compiled.matchable
    assert p is not None and p.error is None, compiled.condition
    variables = tuple((name, v.program.serialize()) for name, v in p.variables.items())
    programs = (p.validations[0].expression.program.program.serialize(),)
    assert params_reads(programs, variables) == {"data": {"allowed": ALL, "strict": {}},
                                                 "spec": {"items": {"#": {"x": ALL}}}}
    assert params_reads((), ()) == {}
    assert reads_of(programs, variables)["object"] == {"metadata": {"name": ALL}}  # params are not object
