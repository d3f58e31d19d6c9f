"""The mutating endpoint: each selected policy's mutations in chain order, one JSONPatch at the end.

AdmissionPolicies (tenants) first, then ClusterAdmissionPolicies, each group
in name order, each mutation seeing the previous one's result (as
MutatingAdmissionPolicy chains them); the result must stay a JSON object with
the same identity (a tenant may not touch ``ownerReferences`` either); the
response is one JSONPatch, the diff between the request's object and the final one.

As MutatingAdmissionPolicy's patchers (``plugin/policy/mutating/patch``): a JSONPatch whose ``test``
operation fails leaves the object as it was (no error); an ApplyConfiguration is merged with the
API server's structured merge (:mod:`webhook.policy.merge`: list-map keys, sets, atomics).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Sequence
from time import perf_counter
from typing import Any

import jsonpatch
import orjson

from webhook.policy.cel.scope import reset_scope, set_current_scope
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.engine.context import RequestContext
from webhook.policy.engine.outcome import EvaluationError, MutationOutcome, error_result, label, record
from webhook.policy.engine.patch import json_patch
from webhook.policy.engine.prepare import Run, prepare
from webhook.policy.engine.validate import check_budget, plan_of
from webhook.policy.engine.values import json_value, value
from webhook.policy.lookups import Lookups
from webhook.policy.matching import View
from webhook.policy.merge import SCALAR_TYPES, MergeError, apply_configuration
from webhook.policy.plan import Plan
from webhook.policy.projection import ALL, EACH, KEYS, Tree
from webhook.policy.vocabulary import Endpoint, PatchType, PolicyKind, PolicyResult, Result

__all__ = ["IDENTITY_FIELDS", "TENANT_PROTECTED_FIELDS", "evaluate_mutating", "mutation_order"]

#: Fields of ``metadata`` a mutation may never change (the object's identity).
IDENTITY_FIELDS = ("name", "namespace", "uid")
#: Fields of ``metadata`` an AdmissionPolicy's mutation may not change either.
TENANT_PROTECTED_FIELDS = (*IDENTITY_FIELDS, "ownerReferences")


def _identity(obj: dict[str, Any], fields: tuple[str, ...]) -> tuple[Any, ...]:
    raw = obj.get("metadata")
    meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return (obj.get("apiVersion"), obj.get("kind"), *(meta.get(f) for f in fields))


def _kind(request: dict[str, Any]) -> tuple[str, str, str] | None:
    """The AdmissionRequest's ``kind`` as ``(group, version, kind)``, or None when it is not one."""
    raw = request.get("kind")
    if not isinstance(raw, dict) or not isinstance(raw.get("kind"), str) or not isinstance(raw.get("version"), str):
        return None
    group = raw.get("group")
    return (group if isinstance(group, str) else "", raw["version"], raw["kind"])


def _mutate(run: Run, current: dict[str, Any], original: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    """Apply one policy's mutations in order; raises :class:`EvaluationError` on any failure.

    Each mutation sees the object as the previous ones left it. The activation over the object a mutation
    was evaluated on serves the next one too when none of the paths changed since (:func:`_touched_paths`)
    is one the next program can read (``CompiledPolicy.mutation_program_reads``, :func:`_touches`): its
    value is then the same on either object, as the projection's soundness makes it on a pruned copy
    (:mod:`webhook.policy.projection`), without a new activation and conversion of the object.
    """
    mutated: Any = current
    kind = _kind(ctx.request)
    reads = run.policy.mutation_program_reads
    activation: Any = None
    # What changed since the object `activation` shows (None: not known).
    changed: list[list[str]] | None = []
    for i, (patch_type, program) in enumerate(run.policy.mutations):
        if mutated is original:
            activation, changed = ctx.activation(View.OBJECT), []
        elif (activation is None or changed is None or reads is None
              or any(_touches(reads[i].get("object", ALL), path) for path in changed)):
            activation, changed = ctx.activation_for(mutated), []
        token = set_current_scope(run.scope(activation))
        try:
            result = json_value(value(program, activation), program.path)
        finally:
            reset_scope(token)
        try:
            if patch_type is PatchType.JSON_PATCH:
                mutated = apply_json_patch(mutated, result)
            elif not isinstance(result, dict):
                raise EvaluationError(f"{program.path}: an ApplyConfiguration must evaluate to Object (a map)")
            else:
                mutated = apply_configuration(mutated, result, kind, patch_text=_json_text(result))
            if changed is not None and i + 1 < len(run.policy.mutations):  # only a later mutation asks
                paths = _touched_paths(patch_type, result)
                changed = None if paths is None else changed + paths
        except jsonpatch.JsonPatchTestFailed:
            continue  # as the API server: a failed test operation means the patch is not applied
        except MergeError as e:
            raise EvaluationError(f"{program.path}: error applying patch: {e}") from None
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError,
                IndexError, ValueError) as e:
            # jsonpatch's messages end with a repr of the whole document: keep the first clause only.
            raise EvaluationError(f"{program.path}: the patch does not apply: {str(e).split(' in {', 1)[0]}") from None
        if not isinstance(mutated, dict):
            raise EvaluationError(f"{program.path}: the mutated object must be a JSON object")
    fields = TENANT_PROTECTED_FIELDS if run.policy.spec.kind is PolicyKind.NAMESPACED else IDENTITY_FIELDS
    if _identity(mutated, fields) != _identity(current, fields):
        names = ", ".join(["apiVersion", "kind", *(f"metadata.{f}" for f in fields)])
        raise EvaluationError(f"spec.mutations: a mutation may not change {names}")
    return dict(mutated)


def _json_text(data: Any) -> bytes | None:
    """The JSON text of :func:`~webhook.policy.engine.values.json_value`'s result, or None when it has none.

    json_value gives plain JSON data (it refuses NaN and the infinities, builds new dicts and lists, and CEL's
    values are no tuples, enums or other types orjson writes as JSON): a subclass of str, int, float, dict or
    list is refused here too (``OPT_PASSTHROUGH_SUBCLASS``), and so are integers past 64 bits and non-string
    keys, so two results with the same text are the same data (``apply_configuration``'s ``patch_text``).
    """
    try:
        return orjson.dumps(data, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    except TypeError:
        return None


def _pointer_segments(pointer: Any) -> tuple[str, ...] | None:
    """A JSON pointer's unescaped segments (``()`` for the root), or None when it is not one.

    A policy's patches name the same few paths request after request (the bench's two labels' pointers,
    escaped, were parsed four times per request): pointers up to :data:`_CACHED_POINTER_CHARS` long are parsed
    once (a bounded cache of the pure parse, at most ~256 KB of pointers); a longer one, which may be built
    from the object's own content, is parsed each time and never kept.
    """
    if type(pointer) is not str:
        return None
    return _cached_segments(pointer) if len(pointer) <= _CACHED_POINTER_CHARS else _parse_segments(pointer)


def _parse_segments(pointer: str) -> tuple[str, ...] | None:
    if pointer and not pointer.startswith("/"):
        return None
    if "~" not in pointer:
        return tuple(pointer.split("/")[1:])
    if _BAD_ESCAPE.search(pointer):
        return None
    return tuple(p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:])


#: The longest pointer :func:`_pointer_segments` keeps parsed, characters; and how many it keeps.
_CACHED_POINTER_CHARS = 256
_cached_segments = functools.lru_cache(maxsize=1024)(_parse_segments)


def _touched_paths(patch_type: str, result: Any) -> list[list[str]] | None:
    """The paths of the object a mutation that applied may have changed (a superset), or None when unknown.

    A JSONPatch: each operation's ``path`` and ``from`` but a ``test``'s; one naming a list element (its last
    segment ``-`` or digits) stands for the whole list, whose length or order may change. An
    ApplyConfiguration: each member it sets that is not a non-empty map (a scalar, a null, a list: merged
    whole or by key, maybe grown), by its path; the merge changes nothing outside them.
    """
    paths: list[list[str]] = []
    if patch_type is PatchType.JSON_PATCH:
        for operation in result if isinstance(result, list) else ():
            if not isinstance(operation, dict):
                return None
            if operation.get("op") == "test":
                continue
            for field in ("path", "from"):
                if field not in operation:
                    continue
                segments = _pointer_segments(operation[field])
                if segments is None:
                    return None
                if segments and (segments[-1] == "-" or segments[-1].isdigit()):
                    segments = segments[:-1]
                paths.append(list(segments))
        return paths

    def walk(value: Any, prefix: list[str]) -> None:
        if isinstance(value, dict) and (value or not prefix):
            for key, child in value.items():
                walk(child, [*prefix, str(key)])
        else:
            paths.append(prefix)

    walk(result, [])
    return paths


def _touches(tree: Tree, path: list[str]) -> bool:
    """Whether a program that reads ``tree`` of ``object`` (:mod:`webhook.policy.projection`) sees ``path``.

    False only when no read reaches it: every segment of the way is absent from the tree (a field, ``*``
    and ``#`` all match), or the tree is empty at the root (the object is not read). A path at or above a
    read, within a value read whole, or below a value read for its presence and type (``{}`` below the root)
    touches.
    """
    nodes = [tree]
    for depth, segment in enumerate(path):
        below: list[Tree] = []
        for node in nodes:
            if node is ALL or (not node and depth > 0):
                return True
            assert isinstance(node, dict)
            below.extend(node[key] for key in (segment, EACH, KEYS) if key in node)
        if not below:
            return False
        nodes = below
    return True


def _private_path(doc: Any, pointer: str) -> Any:
    """``doc`` with every container on the way to ``pointer``'s parent copied (shallow): the rest is shared.

    An unresolvable step stops the copying there; the operation then fails in jsonpatch as it would have.
    """
    root: Any = dict(doc) if type(doc) is dict else list(doc) if type(doc) is list else doc
    node = root
    for token in jsonpatch.JsonPointer(pointer).parts[:-1]:
        if type(node) is dict and token in node:
            key: Any = token
        elif type(node) is list and token.isdigit() and int(token) < len(node):
            key = int(token)
        else:
            break
        child = node[key]
        if type(child) is dict:
            child = node[key] = dict(child)
        elif type(child) is list:
            child = node[key] = list(child)
        else:
            break
        node = child
    return root


#: The operations :func:`_apply_simple` applies itself (``test``, ``move`` and ``copy`` go to jsonpatch).
_SIMPLE_OPS = frozenset({"add", "replace", "remove"})
#: A canonical list index (``0``, ``12``); another that jsonpointer reads too (``01``) goes to jsonpatch.
_INDEX = re.compile(r"0|[1-9][0-9]*")
_BAD_ESCAPE = re.compile(r"~[^01]|~$")
#: :func:`_apply_simple`'s answer when it leaves the operation to jsonpatch.
_NOT_SIMPLE: Any = object()


def _apply_simple(doc: Any, operation: dict[str, Any]) -> Any:
    """A successful ``add``, ``replace`` or ``remove`` applied as jsonpatch would, or :data:`_NOT_SIMPLE`.

    Only the operations that surely succeed, on plain maps and lists: a ``path`` that resolves (jsonpointer's
    escapes and list indexes), a ``value`` when the operation needs one, no ``from`` (which
    :func:`apply_json_patch` would resolve too). Anything else, every error included, is left to the caller's
    jsonpatch path, so its outcomes and messages stay jsonpatch's. ``doc`` is not changed: the containers on
    the way to the path are copied (shallow), as :func:`_private_path` does, and the rest is shared.
    """
    op, path = operation.get("op"), operation.get("path")
    if (type(op) is not str or op not in _SIMPLE_OPS or type(path) is not str or not path.startswith("/")
            or "from" in operation or (op != "remove" and "value" not in operation)):
        return _NOT_SIMPLE
    parts = _pointer_segments(path)
    if parts is None:
        return _NOT_SIMPLE
    root: Any = dict(doc) if type(doc) is dict else list(doc) if type(doc) is list else _NOT_SIMPLE
    node = root
    for part in parts[:-1]:
        if node is _NOT_SIMPLE:
            return _NOT_SIMPLE
        key: Any = part
        if type(node) is list:
            if not _INDEX.fullmatch(part) or int(part) >= len(node):
                return _NOT_SIMPLE
            key = int(part)
        elif part not in node:
            return _NOT_SIMPLE
        child = node[key]
        child = dict(child) if type(child) is dict else list(child) if type(child) is list else _NOT_SIMPLE
        if child is not _NOT_SIMPLE:
            node[key] = child  # node is this call's copy
        node = child
    if node is _NOT_SIMPLE:
        return _NOT_SIMPLE
    last, value = parts[-1], operation.get("value")
    if type(value) not in SCALAR_TYPES:  # immutable: an operation's scalar value is not copied
        value = copy.deepcopy(value)  # as jsonpatch: the document does not share the patch's values
    if type(node) is dict:
        if op == "add":
            node[last] = value
        elif last not in node:
            return _NOT_SIMPLE
        elif op == "replace":
            node[last] = value
        else:
            del node[last]
        return root
    if last == "-" and op == "add":
        node.append(value)
        return root
    if not _INDEX.fullmatch(last) or int(last) > len(node) or (op != "add" and int(last) == len(node)):
        return _NOT_SIMPLE
    if op == "add":
        node.insert(int(last), value)
    elif op == "replace":
        node[int(last)] = value
    else:
        del node[int(last)]
    return root


def apply_json_patch(doc: dict[str, Any], operations: Any) -> Any:
    """RFC 6902 ``operations`` applied to ``doc`` without changing it, sharing every subtree they do not touch.

    Each operation is applied in place (``jsonpatch``) to a document whose containers on the way to the
    operation's ``path`` (and ``from``) were copied first, so ``doc`` is never changed and the result keeps
    the untouched subtrees as the same objects: :func:`~webhook.policy.engine.patch.json_patch` then skips
    them, where a whole copy of the object (the orjson round trip used before) made it compare every node
    (/mutate at 0.10-0.15x the bare server, issue 34). An ``add``, ``replace`` or ``remove`` that surely
    succeeds is applied by :func:`_apply_simple` with the same result, without jsonpatch's per-call patch
    object, its validation and the pointer parsed three times (one label added: 11 -> 2 us).

    Raises:
        the ``jsonpatch`` exceptions of an operation that does not apply (``JsonPatchTestFailed`` for a failed
        ``test``), ``TypeError`` for operations that are not a list of objects.
    """
    if not isinstance(operations, list):
        raise TypeError("a JSONPatch must be a list of operations")
    current: Any = doc
    for operation in operations:
        if not isinstance(operation, dict):
            raise TypeError("a JSONPatch operation must be an object")
        simple = _apply_simple(current, operation)
        if simple is not _NOT_SIMPLE:
            current = simple
            continue
        for field in ("path", "from"):
            pointer = operation.get(field)
            if isinstance(pointer, str) and operation.get("op") != "test":
                current = _private_path(current, pointer)
        current = jsonpatch.apply_patch(current, [operation], in_place=True)
    return current


def mutation_order(entries: Sequence[tuple[CompiledPolicy, View]]) -> list[tuple[CompiledPolicy, View]]:
    """Tenants' AdmissionPolicies first, then ClusterAdmissionPolicies (each in the given order).

    Cluster policies run last so they have the last word on the object.
    """
    return sorted(entries, key=lambda e: e[0].spec.kind is not PolicyKind.NAMESPACED)


def evaluate_mutating(request: dict[str, Any], policies: Sequence[CompiledPolicy] | Plan, lookups: Lookups, *,
                      deadline: float | None = None, work_budget: int | None = None,
                      body_bytes: int = 0) -> MutationOutcome:
    """Apply every selected policy's mutations, tenants first (see :func:`mutation_order`).

    Each policy sees the object as the previous ones left it. Returns one
    JSONPatch from ``original`` to the final object (:func:`~webhook.policy.engine.patch.json_patch`). A mutation that
    errors, does not apply, or changes the object's identity is handled per
    ``failurePolicy``; an Ignore-d policy's changes are dropped. With ``work_budget``, a request whose
    estimated work exceeds it raises :class:`~webhook.policy.budget.OverBudget` before anything is
    evaluated (see :func:`webhook.policy.engine.validate.evaluate_validating`).
    """
    out = MutationOutcome()
    original = request.get("object")
    if not isinstance(original, dict) or original.get("kind") == "EphemeralContainers":
        # Nothing to patch, or the pre-1.22 EphemeralContainers object (policies judge it as a Pod; its
        # patches would not apply to it): mutations do not apply.
        return out
    current = original
    ctx = RequestContext(request, lookups, deadline=deadline)
    plan = plan_of(policies, ctx)
    # Each program sees the object pruned to what /mutate's programs can read; the patches they return
    # apply to the whole object.
    ctx.project(plan.mutation_projections)
    check_budget(plan, ctx, Endpoint.MUTATE, work_budget, body_bytes)
    # Only the mutating policies are ordered (a plan holds every policy the request selects, mostly validating).
    for policy, view in mutation_order([entry for entry in plan.entries if entry[0].mutating]):
        started = perf_counter()
        prepared = prepare(policy, view, ctx)
        if prepared is None:
            continue
        if isinstance(prepared, Run) and prepared.view is not View.OBJECT:
            continue  # mutations apply to the request's own object, not a synthesized Pod
        if isinstance(prepared, Run):
            try:
                mutated = _mutate(prepared, current, original, ctx)
            except EvaluationError as e:
                result = error_result(policy, str(e))
            else:
                result = PolicyResult(label(policy), Result.PASS, "mutated" if mutated != current else "no change")
                current = mutated
        else:
            result = prepared
        out.durations[result.policy] = out.durations.get(result.policy, 0.0) + perf_counter() - started
        out.results.append(result)
        record(result, out.warnings, None)
        if result.denies:
            out.allowed = False
            out.message = f"{result.policy}: {result.message}"
            out.code, out.reason = result.code, result.reason
            return out
    if current is not original:
        out.patch = json_patch(original, current)
    return out
