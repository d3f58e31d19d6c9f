"""Audit-annotation keys the API server keeps (``<webhook>/<key>`` must be a qualified name), never tenant-spoofable."""

from __future__ import annotations

import json
import re

import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import InMemoryLookups, compile_policy, evaluate_validating
from webhook.policy.engine.annotations import MAX_KEY_LENGTH, annotation_key, fit_key
from webhook.policy.model import parse_policy

# k8s.io/apimachinery validation.IsQualifiedName: an optional DNS-subdomain prefix, one "/", a name part.
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _kept(key: str, webhook: str = "validate.tollgate.dev") -> bool:
    """Whether the API server keeps ``key`` from that webhook (the stored key is ``<webhook>/<key>``)."""
    full = f"{webhook}/{key}"
    return bool(_QUALIFIED.match(full)) and len(full.split("/", 1)[1]) <= MAX_KEY_LENGTH


def _annotations(*objs: dict[str, object]) -> dict[str, str]:
    compiled = [compile_policy(o).policy for o in objs]
    assert all(c is not None for c in compiled)
    out = evaluate_validating(request(pod(namespace="team-a"), namespace="team-a"), compiled,  # type: ignore[arg-type]
                              InMemoryLookups())
    return out.audit_annotations


LONG = "a" * 60


@pytest.mark.parametrize(("kind", "namespace", "name", "key"), [
    ("ClusterAdmissionPolicy", None, "allowed-registries", "registries"),
    ("AdmissionPolicy", "team-a", "tenant-pol", "k"),
    ("ClusterAdmissionPolicy", None, "a.b.c", "Mixed_Case.key"),
    ("ClusterAdmissionPolicy", None, "x" * 200, "k"),
    ("AdmissionPolicy", "n" * 63, LONG, "k" * 63),
])
def test_every_key_is_kept_by_the_api_server(kind: str, namespace: str | None, name: str, key: str) -> None:
    spec = parse_policy(policy(name, kind=kind, namespace=namespace,
                               auditAnnotations=[{"key": key, "valueExpression": "'v'"}]))
    assert _kept(annotation_key(spec, key))


def test_audit_results_and_annotations_are_kept_and_readable() -> None:
    audit = policy("kyverno-disallow-default-namespace", validationActions=["Audit"],
                   validations=[{"expression": "false", "message": "no"}],
                   auditAnnotations=[{"key": "registries", "valueExpression": "'a,b'"}])
    got = _annotations(audit)
    assert set(got) == {"validation_failure", "kyverno-disallow-default-namespace.registries"}
    assert all(_kept(k) for k in got)
    assert json.loads(got["validation_failure"]) == [{"policy": "kyverno-disallow-default-namespace",
                                                     "result": "fail", "message": "no",
                                                     "validationActions": ["Audit"]}]


def test_a_tenant_cannot_take_a_cluster_policys_key() -> None:
    # A cluster policy "team-a.x" with key "k" and a tenant policy "x" in team-a with key "k" read alike as
    # text; the tenant's key marks its namespace with "_", which neither names nor namespaces may contain.
    cluster = policy("team-a.x", auditAnnotations=[{"key": "k", "valueExpression": "'cluster'"}])
    tenant = policy("x", kind="AdmissionPolicy", namespace="team-a",
                    auditAnnotations=[{"key": "k", "valueExpression": "'tenant'"}])
    got = _annotations(cluster, tenant)
    assert got == {"team-a.x.k": "cluster", "team-a_x.k": "tenant"}


def test_long_keys_are_cut_with_a_digest_and_stay_distinct() -> None:
    a, b = fit_key("p" * 80 + ".one"), fit_key("p" * 80 + ".two")
    assert a != b and len(a) <= MAX_KEY_LENGTH and len(b) <= MAX_KEY_LENGTH and _kept(a) and _kept(b)
    assert fit_key("short.key") == "short.key"


@pytest.mark.parametrize("key", ["a/b", "-k", "k-", "", "k" * 64, "spaces are bad"])
def test_keys_kubernetes_refuses_are_refused(key: str) -> None:
    result = compile_policy(policy("p", auditAnnotations=[{"key": key, "valueExpression": "'v'"}]))
    assert result.policy is None and "spec.auditAnnotations[0]" in result.condition["message"]


def test_duplicate_keys_are_refused() -> None:
    result = compile_policy(policy("p", auditAnnotations=[{"key": "k", "valueExpression": "'a'"},
                                                          {"key": "k", "valueExpression": "'b'"}]))
    assert result.policy is None and "duplicate key" in result.condition["message"]
