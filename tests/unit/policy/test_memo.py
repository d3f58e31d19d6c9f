"""The decision memo: what may be memoized, what keys it, its budget, and that it never serves a stale verdict."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import InMemoryLookups, PolicyIndex, RequestCoordinates, evaluate_validating
from webhook.policy.cel.ast import decode_expr, expr_bytes
from webhook.policy.cel.env import environment
from webhook.policy.memo import (
    ENTRY_OVERHEAD,
    MIN_LOOKUPS,
    PROBE_EVERY,
    DecisionMemo,
    key_roots,
    memo_key,
    memo_spec,
    union_spec,
)

ENV = environment()


def _spec_of(text: str) -> Any:
    return memo_spec(ENV.compile(text, disable_check=True).program.serialize())


def _roots(text: str) -> dict[str, frozenset[str]] | None:
    return key_roots(decode_expr(expr_bytes(ENV.compile(text, disable_check=True).program.serialize())))


@pytest.mark.parametrize(("text", "roots"), [
    ("object.spec.containers.all(c, c.image != '')", {"request": set(), "namespaceObject": set()}),
    ("cel.bind(x, object.spec, x.hostNetwork == false)", {"request": set(), "namespaceObject": set()}),
    ("type(object.spec) == map && object.metadata.name == oldObject.metadata.name",
     {"request": set(), "namespaceObject": set()}),
    ("request.operation == 'CREATE' && request.userInfo.username != 'x'",
     {"request": {"operation", "userInfo"}, "namespaceObject": set()}),
    ("namespaceObject.metadata.labels.team == object.metadata.labels.team",
     {"request": set(), "namespaceObject": {"metadata"}}),
    # Gatekeeper's anyObject, in every converted template: has() on request stays a selection.
    ("(has(request.operation) && request.operation == 'DELETE' && object == null ? oldObject : object)"
     ".spec.containers.all(c, c.image != '')", {"request": {"operation"}, "namespaceObject": set()}),
])
def test_programs_reading_the_object_and_selected_request_fields_are_memoized(
        text: str, roots: dict[str, set[str]]) -> None:
    assert _roots(text) == {k: frozenset(v) for k, v in roots.items()}


@pytest.mark.parametrize("text", [
    "params.max > size(object.spec.containers)",  # params: another cache
    "variables.x",  # the per-policy scope
    "__tg_var('x') == 1",
    "__tg_params() == null",
    "resource.Get('v1', 'services', 'default', 'a') != null",  # references
    "request == null",  # a bare request: it holds the uid
    "cel.bind(r, request, r.operation == 'CREATE')",
    "namespaceObject != null",
    "object.spec.containers.all(request, request.image != '') && request.operation == 'CREATE'",  # shadowing
    "object.spec.containers.all(list, list.image != '')",  # a type name bound as a variable
    "time.now() < timestamp(object.metadata.annotations.expires)",  # Kyverno's time library reads the clock
])
def test_programs_reading_anything_else_are_not_memoized(text: str) -> None:
    assert _roots(text) is None
    assert _spec_of(text) is None


def test_a_program_reading_the_object_whole_is_not_memoized() -> None:
    # Its key would be the whole object: as costly as evaluating, and a hit only on exact replicas.
    assert _roots("string(object) != ''") is not None
    assert _spec_of("string(object) != ''") is None


def test_the_key_holds_exactly_what_the_program_reads() -> None:
    spec = _spec_of("object.spec.containers.all(c, c.image.startsWith('r/')) && request.operation == 'CREATE'")
    assert spec is not None
    a = pod("a", images=("r/app:1",), labels={"x": "1"})
    b = pod("b", namespace="other", images=("r/app:1",), labels={"x": "2"})
    req = {"operation": "CREATE", "uid": "1"}
    key = memo_key(spec, a, None, req, None)
    # Names, namespaces, labels and the uid are not read: the same key.
    assert key == memo_key(spec, b, None, {"operation": "CREATE", "uid": "2"}, None)
    # What is read makes a different key: an image, the operation, its absence.
    assert key != memo_key(spec, pod("a", images=("r/app:2",)), None, req, None)
    assert key != memo_key(spec, a, None, {"operation": "UPDATE"}, None)
    assert key != memo_key(spec, a, None, {}, None)


def test_the_key_tells_json_values_apart() -> None:
    spec = _spec_of("object.spec.x == 1")
    assert spec is not None
    keys = {memo_key(spec, {"spec": {"x": v}}, None, {}, None) for v in (1, 1.0, True, "1", None)}
    keys.add(memo_key(spec, {"spec": {}}, None, {}, None))  # absent is not null
    assert len(keys) == 6
    # An int CEL cannot hold is not JSON orjson encodes: no key, so no memo.
    assert memo_key(spec, {"spec": {"x": 2**70}}, None, {}, None) is None


def test_namespace_fields_are_keyed_whole_and_a_missing_namespace_is_null() -> None:
    spec = _spec_of("namespaceObject.metadata.labels.team == 'a'")
    assert spec is not None
    ns = {"metadata": {"name": "n", "labels": {"team": "a"}, "resourceVersion": "1"}, "spec": {"x": 1}}
    changed = {"metadata": {"name": "n", "labels": {"team": "a"}, "resourceVersion": "2"}, "spec": {"x": 1}}
    spec_only = {"metadata": ns["metadata"], "spec": {"x": 2}}
    assert memo_key(spec, {}, None, {}, ns) != memo_key(spec, {}, None, {}, changed)
    assert memo_key(spec, {}, None, {}, ns) == memo_key(spec, {}, None, {}, spec_only)  # spec is not read
    assert memo_key(spec, {}, None, {}, ns) != memo_key(spec, {}, None, {}, None)


def test_the_memo_evicts_least_recently_used_entries_past_its_byte_budget() -> None:
    entry = 8 + 10 + ENTRY_OVERHEAD  # the group's serial, the key, the overhead
    memo = DecisionMemo(max_bytes=3 * entry)
    for k in (b"a" * 10, b"b" * 10, b"c" * 10):
        memo.remember(1, k)
    assert len(memo) == 3 and memo.bytes == 3 * entry
    assert memo.passed(1, b"a" * 10)  # now the most recently used
    memo.remember(1, b"d" * 10)
    assert memo.evictions == 1 and len(memo) == 3
    assert not memo.passed(1, b"b" * 10)  # the least recently used went
    assert memo.passed(1, b"a" * 10) and memo.passed(1, b"d" * 10)
    assert not memo.passed(2, b"a" * 10)  # another group's entry
    assert (memo.hits, memo.misses) == (3, 2)
    memo.remember(1, b"x" * memo.max_bytes)  # larger than the whole budget: not stored
    assert len(memo) == 3
    memo.clear()
    assert len(memo) == 0 and memo.bytes == 0
    with pytest.raises(ValueError, match="max_bytes"):
        DecisionMemo(-1)


def test_a_group_that_keeps_missing_is_looked_up_only_to_probe() -> None:
    memo = DecisionMemo()
    for i in range(MIN_LOOKUPS):  # every key new: never a hit
        assert memo.worth_trying(7)
        assert not memo.passed(7, str(i).encode())
    tried = sum(memo.worth_trying(7) for _ in range(10 * PROBE_EVERY))
    assert tried == 10 and memo.skipped == 10 * PROBE_EVERY - 10
    # A group that hits often enough is always looked up.
    memo.remember(8, b"k")
    for _ in range(MIN_LOOKUPS):
        assert memo.worth_trying(8) and memo.passed(8, b"k")
    assert all(memo.worth_trying(8) for _ in range(100))
    # The workload changes: the probes now hit, and the counts halve, so the group is looked up again.
    memo.remember(7, b"same")
    for _ in range(10 * PROBE_EVERY * 4):
        if memo.worth_trying(7):
            assert memo.passed(7, b"same")
    assert all(memo.worth_trying(7) for _ in range(100))


def _decide(index: PolicyIndex, req: dict[str, Any], lookups: InMemoryLookups,
            memo: DecisionMemo) -> tuple[bool, str]:
    plan = index.plan(RequestCoordinates.of(req)).compile_all()
    out = evaluate_validating(req, plan, lookups, memo=memo)
    return out.allowed, out.message


def test_a_policy_edit_never_reuses_the_old_programs_passes() -> None:
    index, memo, lookups = PolicyIndex(), DecisionMemo(), InMemoryLookups()
    index.upsert(policy("images", validations=[{"expression": "object.spec.containers.all(c, c.image != 'bad')"}]))
    req = request(pod(images=("good",)))
    assert _decide(index, req, lookups, memo) == (True, "")
    assert _decide(index, req, lookups, memo) == (True, "") and memo.hits == 1
    edited = policy("images", validations=[{"expression": "object.spec.containers.all(c, c.image != 'good')",
                                            "message": "no good"}])
    edited["metadata"]["generation"] = 2
    index.upsert(edited)
    assert _decide(index, req, lookups, memo) == (False, "images: no good")


def test_a_namespace_change_is_seen_by_a_memoized_program() -> None:
    index, memo = PolicyIndex(), DecisionMemo()
    index.upsert(policy("team", validations=[
        {"expression": "namespaceObject.metadata.labels.team == 'a'", "message": "team a only"}]))
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"team": "a"}}}
    req = request(pod())
    assert _decide(index, req, InMemoryLookups(namespaces=[ns]), memo) == (True, "")
    assert _decide(index, req, InMemoryLookups(namespaces=[ns]), memo) == (True, "") and memo.hits == 1
    relabelled = {**ns, "metadata": {"name": "default", "labels": {"team": "b"}}}
    assert _decide(index, req, InMemoryLookups(namespaces=[relabelled]), memo) == (False, "team: team a only")


def test_only_passes_are_remembered() -> None:
    index, memo, lookups = PolicyIndex(), DecisionMemo(), InMemoryLookups()
    index.upsert(policy("images", validations=[{"expression": "object.spec.containers.all(c, c.image != 'bad')"}]))
    bad = request(pod(images=("bad",)))
    for _ in range(2):
        assert _decide(index, bad, lookups, memo)[0] is False
    assert len(memo) == 0 and memo.hits == 0 and memo.misses == 2


def test_a_union_entry_answers_the_groups_that_passed_on_its_key() -> None:
    memo = DecisionMemo()
    assert memo.passed_set(5, b"k") is None
    memo.remember_set(5, b"k", 0b101)
    assert memo.passed_set(5, b"k") == 0b101
    assert memo.passed_set(6, b"k") is None  # another union
    assert (memo.hits, memo.misses) == (1, 2)
    a, b = _spec_of("object.spec.x == 1"), _spec_of("object.spec.y == 2 && request.operation == 'CREATE'")
    assert a is not None and b is not None
    both = union_spec([a, b])
    assert both is not None and both.request_fields == ("operation",)
    assert memo_key(both, {"spec": {"x": 1, "y": 2, "z": 3}}, None, {"operation": "CREATE"}, None) == \
        memo_key(both, {"spec": {"x": 1, "y": 2, "z": 4}}, None, {"operation": "CREATE"}, None)
    assert memo_key(both, {"spec": {"x": 1, "y": 2}}, None, {}, None) != \
        memo_key(both, {"spec": {"x": 1, "y": 3}}, None, {}, None)


def test_a_union_hit_still_evaluates_the_groups_that_did_not_pass() -> None:
    # Two Deny policies too long to share a program: two groups of one view, looked up as one union.
    long_true = " && ".join(f"size(object.spec.containers) != {i + 100}" for i in range(40))
    index, memo, lookups = PolicyIndex(), DecisionMemo(), InMemoryLookups()
    index.upsert(policy("a-images", validations=[{"expression": "object.spec.containers.all(c, c.image != 'bad')",
                                                  "message": "bad image"}, {"expression": long_true}]))
    index.upsert(policy("b-names", validations=[{"expression": "object.spec.containers.all(c, c.name != 'c0')",
                                                 "message": "c0 is taken"}, {"expression": long_true}]))
    plan = index.plan(RequestCoordinates.of(request(pod()))).compile_all()
    assert len(plan.groups) == 2 and all(g.memo is not None for g in plan.groups)
    for name in ("p1", "p2", "p3"):  # b-names fails every time; a-images passes
        assert _decide(index, request(pod(name)), lookups, memo) == (False, "b-names: c0 is taken")
    assert memo.hits >= 2  # the union answered a-images for p2 and p3
    assert _decide(index, request(pod("p4", images=("bad",))), lookups, memo) == (
        False, "a-images: bad image; b-names: c0 is taken")
