"""The webhook configurations the loaded policies need (pure; no I/O).

:func:`webhook_configurations` turns the parsed policies into one
``ValidatingWebhookConfiguration`` and one ``MutatingWebhookConfiguration``
(``admissionregistration.k8s.io/v1``, as dicts), so that the API server sends
Tollgate only the requests some policy can act on, as Kyverno's webhook
controller and Gatekeeper's generated configuration do:

* **Narrowest rules.** The union of the policies' ``match.resourceRules``
  (rules that differ only in ``resources`` are merged), plus the pod
  controllers ``autogen.podControllers`` adds
  (:func:`webhook.policy.matching.autogen_rules`, the one expansion the
  index and the matcher use too). Validating rules keep
  the operations the policies name; mutating rules only ``CREATE`` and
  ``UPDATE`` (a patch means nothing on DELETE or CONNECT).
* **Who needs which endpoint.** A policy with ``validations`` or
  ``auditAnnotations`` is routed to ``/validate``, one with ``mutations`` to
  ``/mutate``. No such policy: ``webhooks: []``, and the API server calls
  nothing.
* **One entry per failurePolicy.** ``Fail`` policies' rules go to an entry
  with ``failurePolicy: Fail``, ``Ignore`` policies' to one with ``Ignore``,
  so a cluster with only Ignore policies never fails closed. The Ignore entry
  also carries a matchCondition that leaves out every request the Fail entry
  matches: the entries are disjoint, so no request is evaluated (or, worse,
  mutated) twice by the same configuration.
* **Exclusions** (namespaceSelector and matchConditions, as in
  manifests/webhooks.yaml before it was generated): the namespaces
  ``kube-system`` and the webhook's own, the webhook's own ServiceAccount,
  kubelets (group ``system:nodes``), Leases, Events and the
  ``authentication.k8s.io`` / ``authorization.k8s.io`` reviews.

A policy that is not Ready still answers per its failurePolicy
(docs/design/policy-api.md), so the input is every policy whose *spec* parsed
(:func:`parsed_specs`), not only those whose CEL compiled. Output is
deterministic: rules, lists and entries are sorted.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.matching import routed_rules
from webhook.policy.model import PolicySpec, PolicySpecError, parse_policy
from webhook.policy.vocabulary import REQUEST_OPERATIONS, Endpoint, FailurePolicy, Operation

__all__ = [
    "ADMISSION_API_VERSION",
    "MUTATE_PATH",
    "VALIDATE_PATH",
    "WebhookConfigurations",
    "WebhookTarget",
    "parse_webhook_url",
    "parsed_specs",
    "webhook_configurations",
]

ADMISSION_API_VERSION = "admissionregistration.k8s.io/v1"
VALIDATE_PATH = Endpoint.VALIDATE.path
MUTATE_PATH = Endpoint.MUTATE.path
#: Operations a mutation can act on.
_MUTATING_OPERATIONS = frozenset({Operation.CREATE, Operation.UPDATE})


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """Where the API server reaches Tollgate, and who Tollgate is.

    Attributes:
        name: ``metadata.name`` of both configurations.
        url: when not empty, the API server calls ``url`` + ``/validate`` or
            ``/mutate`` (``clientConfig.url``, for a webhook outside the
            cluster or on 127.0.0.1) instead of the Service; checked by
            :func:`parse_webhook_url`.
        service: the Service name, e.g. ``"tollgate"``.
        namespace: the Service's (and the webhook's own) namespace.
        service_account: the webhook's ServiceAccount name (its own writes
            are never sent to it).
        port: the Service port.
        ca_bundle: base64 PEM of the CA(s) that sign the serving certificate;
            ``""`` to leave ``caBundle`` out (cert-manager's CA injector or
            the self-managed mode fills it in).
        timeout_seconds: ``timeoutSeconds`` of every entry (1-30; the API
            server's default is 10).
        excluded_namespaces: namespaces never sent, besides ``namespace``.
        labels: ``metadata.labels`` of both configurations.
    """

    name: str = "tollgate"
    url: str = ""
    service: str = "tollgate"
    namespace: str = "tollgate-system"
    service_account: str = "tollgate"
    port: int = 443
    ca_bundle: str = ""
    timeout_seconds: int = 5
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    labels: Mapping[str, str] = field(default_factory=lambda: {
        "app.kubernetes.io/name": "tollgate", "app.kubernetes.io/managed-by": "tollgate"})


@dataclass(frozen=True, slots=True)
class WebhookConfigurations:
    """Both generated configurations, as JSON-ready dicts.

    Attributes:
        validating: the ``ValidatingWebhookConfiguration``.
        mutating: the ``MutatingWebhookConfiguration``.
    """

    validating: dict[str, Any]
    mutating: dict[str, Any]

    def documents(self) -> list[dict[str, Any]]:
        """``[validating, mutating]``, e.g. for a multi-document YAML stream."""
        return [self.validating, self.mutating]


def parsed_specs(objects: Iterable[Mapping[str, Any]]) -> list[PolicySpec]:
    """The specs of the policy objects that parse; the others are skipped.

    A policy whose spec does not parse has no rules to route by (its status
    says ``InvalidSpec``); one whose CEL does not compile is kept, because it
    still answers per its failurePolicy.

    Args:
        objects: ClusterAdmissionPolicy / AdmissionPolicy objects as decoded
            from JSON or YAML.

    Returns:
        Parsed specs, in input order.
    """
    specs = []
    for obj in objects:
        try:
            specs.append(parse_policy(dict(obj)))
        except PolicySpecError:
            continue
    return specs


# -- rules -------------------------------------------------------------------------------------------------------


def _operations(operations: frozenset[Operation], endpoint: Endpoint) -> tuple[str, ...]:
    ops = set(REQUEST_OPERATIONS) if Operation.ALL in operations else set(operations)
    if endpoint is Endpoint.MUTATE:
        ops &= _MUTATING_OPERATIONS
    elif ops == set(REQUEST_OPERATIONS):
        return (Operation.ALL.value,)
    return tuple(sorted(o.value for o in ops))


def _rules(specs: Iterable[PolicySpec], endpoint: Endpoint) -> list[dict[str, Any]]:
    """Union of the specs' rules: merged when only ``resources`` differ, sorted."""
    merged: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str], set[str]] = {}
    for spec in specs:
        for rule in routed_rules(spec):
            ops = _operations(rule.operations, endpoint)
            if not ops:
                continue
            key = (tuple(sorted(rule.api_groups)), tuple(sorted(rule.api_versions)), ops, str(rule.scope))
            merged.setdefault(key, set()).update(rule.resources)
    return [{"apiGroups": list(groups), "apiVersions": list(versions), "operations": list(ops),
             "resources": sorted(resources), "scope": scope}
            for (groups, versions, ops, scope), resources in sorted(merged.items())]


# -- matchConditions ---------------------------------------------------------------------------------------------


def _cel(value: str) -> str:
    """A CEL string literal (JSON's double-quoted escaping is valid CEL)."""
    return json.dumps(value)


def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_cel(v) for v in values) + "]"


def _resource_condition(pattern: str) -> str:
    """CEL for one ``resources`` entry: ``pods``, ``pods/status``, ``pods/*``, ``*``, ``*/status``, ``*/*``."""
    name, _, sub = pattern.partition("/")
    parts = []
    if name != "*":
        parts.append(f"request.resource.resource == {_cel(name)}")
    if not sub:
        parts.append("(!has(request.subResource) || request.subResource == '')")
    elif sub != "*":
        parts.append(f"(has(request.subResource) && request.subResource == {_cel(sub)})")
    return " && ".join(parts) if parts else "true"


def _rule_condition(rule: Mapping[str, Any]) -> str:
    """CEL that is true for the requests ``rule`` matches (by group, resource, subresource, operation).

    Versions and scope are left out, which can only widen it: a request the
    rule matches always satisfies it.
    """
    parts = []
    if "*" not in rule["apiGroups"]:
        parts.append(f"request.resource.group in {_cel_list(rule['apiGroups'])}")
    if "*" not in rule["operations"]:
        parts.append(f"request.operation in {_cel_list(rule['operations'])}")
    resources = [_resource_condition(r) for r in rule["resources"]]
    if "true" not in resources:
        parts.append("(" + " || ".join(f"({r})" for r in resources) + ")")
    return " && ".join(parts) if parts else "true"


def _exclusions(target: WebhookTarget) -> list[dict[str, str]]:
    username = f"system:serviceaccount:{target.namespace}:{target.service_account}"
    return [
        {"name": "exclude-leases",
         "expression": "!(request.resource.group == 'coordination.k8s.io' && request.resource.resource == 'leases')"},
        {"name": "exclude-tollgate-serviceaccount", "expression": f"request.userInfo.username != {_cel(username)}"},
        {"name": "exclude-kubelets", "expression": "!('system:nodes' in request.userInfo.groups)"},
        {"name": "exclude-events-and-reviews",
         "expression": "!(request.resource.resource == 'events' || "
                       "request.resource.group in ['authentication.k8s.io', 'authorization.k8s.io'])"},
    ]


def _not_covered_by(rules: list[dict[str, Any]]) -> dict[str, str]:
    covered = " || ".join(f"({_rule_condition(r)})" for r in rules)
    return {"name": "not-sent-to-the-fail-entry", "expression": f"!({covered})"}


# -- configurations ----------------------------------------------------------------------------------------------


def parse_webhook_url(text: str) -> str:
    """A base URL for ``clientConfig.url``, checked as the API server checks a webhook URL.

    The API server (admissionregistration validation, ``ValidateWebhookURL``)
    accepts only ``https`` URLs with a host and without user info, query or
    fragment. Tollgate appends ``/validate`` or ``/mutate`` to the path.

    Args:
        text: e.g. ``"https://127.0.0.1:8443"`` or ``"https://hooks.example.com/tollgate"``.

    Returns:
        ``text`` without a trailing ``/``.

    Raises:
        ValueError: a one-line reason the API server would refuse it.
    """
    parts = urllib.parse.urlsplit(text)
    if parts.scheme != "https":
        raise ValueError(f"webhook URL {text!r}: the scheme must be https")
    if not parts.hostname:
        raise ValueError(f"webhook URL {text!r}: no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"webhook URL {text!r}: user info is not allowed")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise ValueError(f"webhook URL {text!r}: a query or fragment is not allowed")
    try:
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise ValueError(f"webhook URL {text!r}: invalid port") from None
    return text.rstrip("/")


def _client_config(target: WebhookTarget, path: str) -> dict[str, Any]:
    if target.url:
        return {"url": target.url.rstrip("/") + path}
    return {"service": {"name": target.service, "namespace": target.namespace, "path": path, "port": target.port}}


def _entry(target: WebhookTarget, endpoint: Endpoint, failure_policy: FailurePolicy, rules: list[dict[str, Any]],
           fail_rules: list[dict[str, Any]]) -> dict[str, Any]:
    client_config = _client_config(target, endpoint.path)
    if target.ca_bundle:
        client_config["caBundle"] = target.ca_bundle
    conditions = _exclusions(target)
    if failure_policy is FailurePolicy.IGNORE and fail_rules:
        conditions.append(_not_covered_by(fail_rules))
    entry: dict[str, Any] = {
        # The Fail entry keeps the name the static manifests used (denial messages quote it).
        "name": f"{endpoint}.tollgate.dev" if failure_policy is FailurePolicy.FAIL
        else f"{endpoint}-ignore.tollgate.dev",
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
        "failurePolicy": str(failure_policy),
        "matchConditions": conditions,
        "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": sorted({target.namespace, *target.excluded_namespaces})}]},
        "objectSelector": {},
        "rules": rules,
        # Events are written for denials and warnings, never for a dryRun request (webhook.admission.events).
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": target.timeout_seconds,
    }
    if endpoint is Endpoint.MUTATE:
        # All mutating policies are applied in one call, in name order; no second pass needed.
        entry["reinvocationPolicy"] = "Never"
    return entry


def _configuration(kind: str, target: WebhookTarget, specs: list[PolicySpec], endpoint: Endpoint) -> dict[str, Any]:
    by_policy = {fp: _rules([s for s in specs if s.failure_policy is fp], endpoint) for fp in FailurePolicy}
    webhooks = [_entry(target, endpoint, fp, by_policy[fp], by_policy[FailurePolicy.FAIL])
                for fp in FailurePolicy if by_policy[fp]]
    return {"apiVersion": ADMISSION_API_VERSION, "kind": kind,
            "metadata": {"name": target.name, "labels": dict(sorted(target.labels.items()))},
            "webhooks": webhooks}


def webhook_configurations(specs: Iterable[PolicySpec], target: WebhookTarget | None = None) -> WebhookConfigurations:
    """The validating and mutating configurations for ``specs``.

    Args:
        specs: every policy whose spec parsed (see :func:`parsed_specs`;
            ``CompiledPolicy.spec`` for Ready ones).
        target: Service, namespace, ServiceAccount and caBundle; default
            ``tollgate`` in ``tollgate-system`` with no caBundle.

    Returns:
        Both configurations; each has ``webhooks: []`` when no policy needs
        its endpoint, else a ``Fail`` entry and/or an ``Ignore`` entry (in that
        order), each with sorted rules.
    """
    target = target or WebhookTarget()
    specs = list(specs)
    validating = [s for s in specs if s.validations or s.audit_annotations]
    mutating = [s for s in specs if s.mutations]
    return WebhookConfigurations(
        validating=_configuration("ValidatingWebhookConfiguration", target, validating, Endpoint.VALIDATE),
        mutating=_configuration("MutatingWebhookConfiguration", target, mutating, Endpoint.MUTATE),
    )
