"""Evaluate compiled policies against one AdmissionRequest (pure; no I/O).

Semantics follow ``docs/design/policy-api.md``, and where it is silent
ValidatingAdmissionPolicy / MutatingAdmissionPolicy:

* match: resource rules (via the index, then exactly here), excludes,
  namespaced-policy isolation, ``namespaceSelector`` on the cached Namespace,
  ``objectSelector`` on ``object`` or ``oldObject``, then ``matchConditions``;
* ``onUnsynced`` answers for a policy whose caches have not synced;
* ``paramRef`` from the ConfigMap cache with ``parameterNotFoundAction``;
* validations with ``validationActions`` Deny / Warn / Audit; a runtime
  error (an error value, or the engine's iteration-budget ``RuntimeError``)
  is handled per ``failurePolicy``;
* ``autogen.podControllers``: for a workload, ``object`` is a Pod built from
  its template and messages are prefixed with the template path;
* mutations in policy-name order on a deep copy, one JSONPatch diff at the end.

One cel-expr-python Activation is built per request and object view and
shared by every policy; ``variables`` and ``params`` are per policy through
:class:`celenv.VariableScope`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import orjson

from webhook.policy import lookups as caches
from webhook.policy.celenv import ENV, T, VariableScope, reset_scope, set_current_scope
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.lookups import Lookups
from webhook.policy.matching import request_coordinates, rule_matches, template_path

PASS, FAIL, SKIP, ERROR = "pass", "fail", "skip", "error"


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """One policy's verdict on one request (for the response, metrics, logs and ``tollgate test``).

    ``result`` is ``pass`` | ``fail`` | ``skip`` | ``error``; ``message`` explains
    a fail, error or skip.
    """

    policy: str
    result: str
    message: str = ""
    actions: frozenset[str] = frozenset()


@dataclass(slots=True)
class ValidationOutcome:
    """The validating endpoint's decision.

    Attributes:
        allowed: False when any Deny-action validation failed (or errored under
            ``failurePolicy: Fail``), or ``onUnsynced: Deny`` applied.
        code: HTTP status for a denial (from the first failing validation's reason).
        reason: ``metav1.StatusReason`` for a denial (``Forbidden``, ``Invalid``, ...).
        message: every denying message, policies in name order, joined by ``"; "``.
        warnings: ``response.warnings`` entries.
        audit_annotations: ``response.auditAnnotations``.
        results: one :class:`PolicyResult` per candidate policy.
    """

    allowed: bool = True
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    results: list[PolicyResult] = field(default_factory=list)


@dataclass(slots=True)
class MutationOutcome:
    """The mutating endpoint's decision.

    Attributes:
        allowed: False only when a mutation failed under ``failurePolicy: Fail``.
        patch: RFC 6902 operations turning the request's object into the
            mutated one (``[]`` when nothing changed).
        message: why it was denied.
        warnings: ``response.warnings`` entries.
        results: one :class:`PolicyResult` per candidate policy.
    """

    allowed: bool = True
    patch: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    code: int = 200
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    results: list[PolicyResult] = field(default_factory=list)


class _EvalError(Exception):
    """A CEL runtime error (error value, iteration budget, Python function failure)."""


def _value(program: Any, activation: Any) -> Any:
    try:
        v = program.eval(activation)
    except RuntimeError as e:  # e.g. the 10,000-iteration budget of cel-expr-python
        raise _EvalError(str(e)) from None
    if v.type() == T.ERROR:
        raise _EvalError(str(v.value()))
    return v.plain_value()


def synthesize_pod(workload: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """A Pod from a workload's pod template (template metadata + spec, workload namespace)."""
    node: Any = workload
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    if not isinstance(node, dict):
        return None
    meta = dict(node.get("metadata") or {})
    ns = (workload.get("metadata") or {}).get("namespace")
    if ns and "namespace" not in meta:
        meta["namespace"] = ns
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": node.get("spec") or {}}


class _Request:
    """Per-request state shared by all policies: coordinates and lazily built activations."""

    def __init__(self, request: dict[str, Any], lookups: Lookups) -> None:
        self.request = request
        self.lookups = lookups
        (self.group, self.version, self.resource, self.sub_resource,
         self.operation, self.namespaced) = request_coordinates(request)
        self.namespace = request.get("namespace") or ""
        self.template = template_path(self.group, self.resource, self.sub_resource)
        self._activations: dict[str, Any] = {}
        self._synced: dict[str, bool] = {}
        self._namespace_obj: Any = ...

    def is_synced(self, cache: str) -> bool:
        """Whether ``cache`` has synced, asked once per request so every policy sees one answer."""
        synced = self._synced.get(cache)
        if synced is None:
            synced = self._synced[cache] = self.lookups.is_synced(cache)
        return synced

    @property
    def namespace_object(self) -> dict[str, Any] | None:
        if self._namespace_obj is ...:
            self._namespace_obj = self.lookups.get_namespace(self.namespace) if self.namespace else None
        return self._namespace_obj

    def _new_activation(self, obj: Any, old: Any) -> Any:
        return ENV.Activation({
            "object": obj,
            "oldObject": old,
            "request": self.request,
            "namespaceObject": self.namespace_object,
            "params": None,
            "variables": None,
        })

    def activation(self) -> Any:
        """The shared activation over the request's own object and oldObject."""
        act = self._activations.get("raw")
        if act is None:
            act = self._activations["raw"] = self._new_activation(self.request.get("object"), self.request.get("oldObject"))
        return act

    def pod_activation(self) -> Any:
        """The shared activation over Pods synthesized from a workload's template (autogen)."""
        act = self._activations.get("pod")
        if act is None:
            assert self.template is not None
            obj, old = (
                synthesize_pod(o, self.template) if isinstance(o, dict) else None
                for o in (self.request.get("object"), self.request.get("oldObject"))
            )
            act = self._activations["pod"] = self._new_activation(obj, old)
        return act

    def activation_for(self, obj: Any) -> Any:
        """A fresh activation over an intermediate object (mutation chains)."""
        return self._new_activation(obj, self.request.get("oldObject"))


def _namespace_labels_ok(policy: CompiledPolicy, req: _Request) -> bool:
    sel = policy.spec.namespace_selector
    if sel.empty:
        return True
    if not req.namespaced:
        # VAP: a Namespace request is matched on its own labels; other
        # cluster-scoped objects are never excluded by namespaceSelector.
        if req.resource == "namespaces" and not req.sub_resource:
            obj = req.request.get("object") or req.request.get("oldObject")
            return sel.matches_object(obj)
        return True
    # A Namespace not (yet) in the cache is matched as one without labels.
    ns = req.namespace_object
    return sel.matches(((ns or {}).get("metadata") or {}).get("labels"))


def _object_selector_ok(policy: CompiledPolicy, req: _Request) -> bool:
    sel = policy.spec.object_selector
    if sel.empty:
        return True
    return sel.matches_object(req.request.get("object")) or sel.matches_object(req.request.get("oldObject"))


def _rules_match(policy: CompiledPolicy, req: _Request, resource: str, group: str, version: str) -> bool:
    kw = dict(group=group, version=version, resource=resource, sub_resource=req.sub_resource,
              operation=req.operation, namespaced=req.namespaced)
    if not any(rule_matches(r, **kw) for r in policy.spec.resource_rules):  # type: ignore[arg-type]
        return False
    return not any(rule_matches(r, **kw) for r in policy.spec.exclude_resource_rules)  # type: ignore[arg-type]


def _selects(policy: CompiledPolicy, req: _Request) -> str | None:
    """Which object view the policy sees: ``"raw"``, ``"pod"`` (autogen), or None (no match)."""
    spec = policy.spec
    if spec.namespace is not None and req.namespace != spec.namespace:
        return None  # namespaced-policy isolation: own namespace only
    if _rules_match(policy, req, req.resource, req.group, req.version):
        view = "raw"
    elif spec.pod_controllers and req.template is not None and _rules_match(policy, req, "pods", "", "v1"):
        view = "pod"
    else:
        return None
    if not _namespace_labels_ok(policy, req) or not _object_selector_ok(policy, req):
        return None
    return view


def _unsynced_cache(policy: CompiledPolicy, req: _Request) -> str | None:
    needed = [caches.POLICIES]
    if not policy.spec.namespace_selector.empty:
        needed.append(caches.NAMESPACES)
    if policy.spec.param_ref is not None:
        needed.append(caches.CONFIGMAPS)
    for cache in needed:
        if not req.is_synced(cache):
            return cache
    return None


_NOT_FOUND = object()


def _params(policy: CompiledPolicy, req: _Request) -> Any:
    ref = policy.spec.param_ref
    if ref is None:
        return None
    if ref.name is not None:
        ns = ref.namespace or req.namespace or "default"
        cm = req.lookups.get_configmap(ns, ref.name)
        return _NOT_FOUND if cm is None else cm
    assert ref.selector is not None
    found = req.lookups.list_configmaps(ref.namespace, ref.selector)
    return found if found else _NOT_FOUND


class _PolicyRun:
    """One policy's evaluation context within a request."""

    def __init__(self, policy: CompiledPolicy, req: _Request, view: str) -> None:
        self.policy = policy
        self.req = req
        self.view = view
        self.prefix = ""
        if view == "pod":
            assert req.template is not None
            self.prefix = ".".join(req.template) + ": "

    def activation(self) -> Any:
        return self.req.activation() if self.view == "raw" else self.req.pod_activation()


def _scope_for(run: _PolicyRun, params: Any, activation: Any) -> VariableScope:
    return VariableScope(run.policy.variables, activation, params)


def _prepare(policy: CompiledPolicy, req: _Request) -> tuple[_PolicyRun, Any, Any] | PolicyResult | None:
    """Match, sync check, matchConditions and params. Returns a run, a final result, or None (no match)."""
    view = _selects(policy, req)
    if view is None:
        return None
    run = _PolicyRun(policy, req, view)
    cache = _unsynced_cache(policy, req)
    if cache is not None:
        action = policy.spec.on_unsynced
        msg = f"cache {cache} has not synced (onUnsynced: {action})"
        if action == "Deny":
            return PolicyResult(policy.name, FAIL, msg, frozenset({"Deny"}))
        return PolicyResult(policy.name, SKIP, msg, frozenset({"Warn"}) if action == "Warn" else frozenset())
    params = _params(policy, req)
    if params is _NOT_FOUND:
        assert policy.spec.param_ref is not None
        msg = f"params not found for paramRef {policy.spec.param_ref.name or 'selector'}"
        if policy.spec.param_ref.parameter_not_found_action == "Deny":
            return PolicyResult(policy.name, FAIL, msg, frozenset({"Deny"}))
        return PolicyResult(policy.name, SKIP, msg)
    activation = run.activation()
    scope = _scope_for(run, params, activation)
    token = set_current_scope(scope)
    try:
        for name, program in policy.match_conditions:
            if _value(program, activation) is not True:
                return PolicyResult(policy.name, SKIP, f"matchCondition {name} is false")
    except _EvalError as e:
        return _errored(policy, f"matchCondition error: {e}")
    finally:
        reset_scope(token)
    return run, params, activation


def _errored(policy: CompiledPolicy, text: str) -> PolicyResult:
    if policy.spec.failure_policy == "Fail":
        return PolicyResult(policy.name, ERROR, text, frozenset({"Deny"}))
    return PolicyResult(policy.name, ERROR, text, frozenset({"Warn", "Ignored"}))


def _validate_one(policy: CompiledPolicy, req: _Request, out: ValidationOutcome) -> PolicyResult | None:
    prepared = _prepare(policy, req)
    if prepared is None or isinstance(prepared, PolicyResult):
        return prepared
    run, params, activation = prepared
    failures: list[tuple[str, int, str]] = []
    token = set_current_scope(_scope_for(run, params, activation))
    try:
        for index, validation in enumerate(policy.validations):
            if _value(validation.program, activation) is True:
                continue
            message = validation.message or ""
            if validation.message_program is not None:
                try:
                    computed = _value(validation.message_program, activation)
                    if isinstance(computed, str) and computed.strip():
                        message = computed
                except _EvalError:
                    pass  # VAP falls back to message when messageExpression fails
            if not message:
                message = "failed expression: " + policy.spec.validations[index].expression
            failures.append((run.prefix + message, validation.code, validation.reason))
        for key, program in policy.audit_annotations:
            value = _value(program, activation)
            if value is not None:
                out.audit_annotations[f"{policy.name}/{key}"] = str(value)
    except _EvalError as e:
        return _errored(policy, f"{run.prefix}expression error: {e}")
    finally:
        reset_scope(token)
    if not failures:
        return PolicyResult(policy.name, PASS)
    message = "; ".join(f[0] for f in failures)
    if out.code == 200 and "Deny" in policy.spec.validation_actions:
        # The first denying validation (policies in name order) sets the HTTP code, as VAP does.
        out.code, out.reason = failures[0][1], failures[0][2]
    return PolicyResult(policy.name, FAIL, message, policy.spec.validation_actions)


def evaluate_validating(request: dict[str, Any], policies: Sequence[CompiledPolicy], lookups: Lookups) -> ValidationOutcome:
    """Decide an AdmissionRequest on the validating endpoint.

    Args:
        request: the ``AdmissionRequest`` as on the wire (camelCase: ``uid``,
            ``kind``, ``resource``, ``subResource``, ``namespace``,
            ``operation``, ``userInfo``, ``object``, ``oldObject``, ``dryRun``, ...).
            Never mutated.
        policies: candidate policies (from :meth:`PolicyIndex.candidates`),
            evaluated in the given order (name order).
        lookups: the caches.

    Returns:
        The decision; a denial's message joins every denying policy's message
        as ``"<policy>: <message>"``.
    """
    req = _Request(request, lookups)
    out = ValidationOutcome()
    denials: list[str] = []
    for policy in policies:
        if not policy.validations and not policy.audit_annotations:
            continue
        result = _validate_one(policy, req, out)
        if result is None:
            continue
        out.results.append(result)
        if result.result not in (FAIL, ERROR):
            if "Warn" in result.actions:
                out.warnings.append(f"{policy.name}: {result.message}")
            continue
        if "Deny" in result.actions:
            denials.append(f"{policy.name}: {result.message}")
            if out.code == 200:
                out.code, out.reason = 403, "Forbidden"
        if "Warn" in result.actions:
            out.warnings.append(f"{policy.name}: {result.message}")
        if "Audit" in result.actions:
            out.audit_annotations[f"tollgate.dev/{policy.name}"] = json.dumps(
                {"result": result.result, "message": result.message}, sort_keys=True
            )
    if denials:
        out.allowed = False
        out.message = "; ".join(denials)
    else:
        out.code, out.reason = 200, ""
    return out


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def _record_failure(out: MutationOutcome, policy: CompiledPolicy, result: PolicyResult, *, code: int,
                    reason: str) -> bool:
    """Record a non-pass result on the mutating path; True when it denies the request."""
    out.results.append(result)
    if "Deny" in result.actions:
        out.allowed = False
        out.message = f"{policy.name}: {result.message}"
        out.code, out.reason = code, reason
        return True
    if "Warn" in result.actions:
        out.warnings.append(f"{policy.name}: {result.message}")
    return False


def evaluate_mutating(request: dict[str, Any], policies: Sequence[CompiledPolicy], lookups: Lookups) -> MutationOutcome:
    """Apply every matching policy's mutations, in the given (name) order.

    Each policy sees the object as the previous ones left it. Returns one
    JSONPatch: ``jsonpatch.make_patch(original, final)``. A mutation that
    errors, or whose patch does not apply, is handled per ``failurePolicy``.
    """
    out = MutationOutcome()
    original = request.get("object")
    if not isinstance(original, dict):
        return out
    current = original
    req = _Request(request, lookups)
    for policy in policies:
        if not policy.mutations:
            continue
        prepared = _prepare(policy, req)
        if prepared is None:
            continue
        if isinstance(prepared, PolicyResult):
            if _record_failure(out, policy, prepared, code=403, reason="Forbidden"):
                return out
            continue
        run, params, _ = prepared
        if run.view != "raw":
            continue  # mutations apply to the request's own object, not a synthesized Pod
        mutated = current
        try:
            for patch_type, program in policy.mutations:
                # Each mutation sees the object as the previous one left it.
                activation = req.activation() if mutated is original else req.activation_for(mutated)
                token = set_current_scope(_scope_for(run, params, activation))
                try:
                    value = _value(program, activation)
                finally:
                    reset_scope(token)
                if patch_type == "JSONPatch":
                    # Patch a private copy in place: an orjson round trip copies a Pod ~10x faster
                    # than the deepcopy jsonpatch would make with in_place=False.
                    mutated = jsonpatch.apply_patch(orjson.loads(orjson.dumps(mutated)), value, in_place=True)
                else:
                    mutated = merge_patch(mutated, value)
        except (_EvalError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError) as e:
            if _record_failure(out, policy, _errored(policy, f"mutation error: {e}"), code=500,
                               reason="InternalError"):
                return out
            continue
        changed = mutated != current
        current = mutated
        out.results.append(PolicyResult(policy.name, PASS, "mutated" if changed else "no change"))
    if current is not original:
        out.patch = jsonpatch.make_patch(original, current).patch
    return out
