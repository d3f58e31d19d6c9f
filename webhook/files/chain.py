"""The admission chain as kube-apiserver runs it, offline: mutating policies, then validating ones.

A request (:mod:`webhook.files.requests`) goes through the chain as
kube-apiserver runs it: every matching mutating policy first (namespaced
AdmissionPolicies, then ClusterAdmissionPolicies, each group in name order, each
on the result of the previous), then every validating policy on the mutated
object. The engine is the server's (:mod:`webhook.policy`); only the caches are
replaced by objects read from files (:mod:`webhook.files.inputs`).
:func:`evaluate_pair` evaluates one policy on its own, outside the chain.

Results per (policy, resource): ``pass``, ``fail`` (a violated validation),
``warn`` (a violated validation of a policy whose ``validationActions`` has
``Warn`` and not ``Deny``: the request would be admitted with a warning),
``skip`` (no match, or a false matchCondition) and ``error`` (the policy could
not be evaluated: a CEL runtime or mutation error, missing params under
``parameterNotFoundAction: Deny``, a policy that does not compile; the server
answers it per its failurePolicy).

``namespaceObject`` of a request whose namespace no Namespace file names is
synthesized with the name only, no labels (as Kyverno's CLI does).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from webhook.files.inputs import LoadedPolicy
from webhook.policy import CompiledPolicy, InMemoryLookups, Result, evaluate_mutating, evaluate_validating
from webhook.policy.exceptions import ExceptionSet
from webhook.policy.explain import PolicyTrace, explain_mutating, explain_validating
from webhook.policy.model import Reference


@dataclass(slots=True)
class PolicyOutcome:
    """One policy's outcome on one request through the chain: ``result`` (see module doc) and ``message``."""

    result: str
    message: str


@dataclass(slots=True)
class Evaluation:
    """A request through the chain: each policy's outcome and the object as the mutating policies left it."""

    outcomes: dict[str, PolicyOutcome]
    patched: dict[str, Any] | None
    #: With ``explain``: each policy's traces (its mutating step, then its validating one).
    explanations: dict[str, list[PolicyTrace]] = field(default_factory=dict)


class AdmissionChain:
    """Runs requests through the admission chain (mutating, then validating policies) over in-memory caches.

    Args:
        policies: compiled policies (any order; the chain orders them).
        namespaces: Namespace objects standing in for the Namespace cache.
        configmaps: ConfigMaps standing in for the params cache (already selected).
        objects: reference → its objects, standing in for the caches of ``spec.references``
            (see :func:`webhook.files.inputs.reference_objects`).
        explain: also explain each policy's step (:mod:`webhook.policy.explain`), on the request it saw.
        exceptions: the PolicyExceptions read with the policies (:func:`webhook.files.inputs.load_exceptions`),
            applied to validations as the server applies them: an exempted policy's outcome is ``skip``
            naming the exception.
        now: the time exceptions' ``expiresAt`` is compared with (aware UTC); default: the system clock.
    """

    def __init__(self, policies: Sequence[LoadedPolicy], *, namespaces: Iterable[dict[str, Any]] = (),
                 configmaps: Iterable[dict[str, Any]] = (),
                 objects: Mapping[Reference, list[dict[str, Any]]] | None = None, explain: bool = False,
                 exceptions: ExceptionSet | None = None,
                 now: Callable[[], datetime.datetime] | None = None) -> None:
        self.exceptions = exceptions
        self.now = now
        # The order of the mutating chain: namespaced policies first, the platform's last (policy-api.md).
        self.policies = sorted(policies, key=lambda p: (not p.namespaced, p.name))
        self.namespaces = list(namespaces)
        self.configmaps = list(configmaps)
        self.objects = dict(objects or {})
        self.explain = explain

    def _lookups(self, request: dict[str, Any]) -> InMemoryLookups:
        namespaces = self.namespaces
        ns = request.get("namespace")
        if ns and not any((n.get("metadata") or {}).get("name") == ns for n in namespaces):
            namespaces = [*namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}]
        return InMemoryLookups(namespaces=namespaces, configmaps=self.configmaps, objects=self.objects)

    def evaluate(self, request: dict[str, Any]) -> Evaluation:
        """Mutations in chain order, then validations on the mutated object; an outcome for every policy."""
        lookups = self._lookups(request)
        found_by_policy: dict[str, list[PolicyOutcome]] = {p.key: [] for p in self.policies}
        explained: dict[str, list[PolicyTrace]] = {p.key: [] for p in self.policies} if self.explain else {}
        current = request.get("object")
        # The API server's order: tenants' AdmissionPolicies, then ClusterAdmissionPolicies, each in name order.
        chain = sorted(self.policies, key=lambda p: (not p.namespaced, p.compiled.spec.name,
                                                    p.compiled.spec.namespace or ""))
        for policy in chain:
            if not policy.compiled.mutating or not isinstance(current, dict):
                continue
            step = evaluate_mutating({**request, "object": current}, [policy.compiled], lookups)
            if self.explain:
                explained[policy.key] += explain_mutating({**request, "object": current}, [policy.compiled],
                                                           lookups).policies
            found = found_by_policy[policy.key]
            for r in step.results:
                if str(r.result) == "pass" and step.patch:
                    found.append(PolicyOutcome("pass", "patch: " + json.dumps(step.patch, sort_keys=True)))
                else:
                    found.append(PolicyOutcome(str(r.result), r.message))
            if step.patch:
                current = jsonpatch.apply_patch(current, step.patch)
        validated = request if current is request.get("object") else {**request, "object": current}
        for policy in self.policies:
            if not policy.compiled.validating:
                continue
            outcome = evaluate_validating(validated, [policy.compiled], lookups, exceptions=self.exceptions or None,
                                          now=self.now)
            if self.explain:
                explained[policy.key] += explain_validating(validated, [policy.compiled], lookups).policies
            for r in outcome.results:
                result = str(r.result)
                if result == "fail":
                    actions = getattr(r, "actions", None) or policy.actions
                    if "Deny" not in actions and "Warn" in actions:
                        result = "warn"
                found_by_policy[policy.key].append(PolicyOutcome(result, r.message))
        out = {}
        for name, found in found_by_policy.items():
            if not found:
                out[name] = PolicyOutcome("skip", "policy does not match the resource")
                continue
            worst = Result.worst(v.result for v in found)
            out[name] = PolicyOutcome(str(worst), "; ".join(v.message for v in found if v.message))
        return Evaluation(out, current if isinstance(current, dict) else None, explained)


def evaluate_pair(policy: CompiledPolicy, request: dict[str, Any], lookups: InMemoryLookups) -> tuple[str, str]:
    """``(result, message)`` of one policy on one request on its own (no chain): validations, then mutations.

    The result is the worst (:meth:`Result.worst`) of the policy's results; a
    passing mutation's message is its patch.
    """
    results = []
    if policy.validations or policy.audit_annotations:
        results.extend(evaluate_validating(request, [policy], lookups).results)
    if policy.mutations:
        mut = evaluate_mutating(request, [policy], lookups)
        for r in mut.results:
            if r.result == Result.PASS and mut.patch:
                results.append(type(r)(r.policy, Result.PASS, "patch: " + json.dumps(mut.patch, sort_keys=True)))
            else:
                results.append(r)
    if not results:
        return "skip", "policy does not match the resource"
    worst = Result.worst(r.result for r in results)
    return str(worst), "; ".join(r.message for r in results if r.message)
