"""Whether a policy can be judged on a stored object, from its parse trees (never from its text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.policy.helpers import policy
from webhook.audit.auditable import REQUEST_KEYS, audit_reads, not_auditable, reads_namespace_object
from webhook.audit.evaluate import audit_request
from webhook.policy import compile_policy
from webhook.policy.compiler import CompiledPolicy

EXAMPLES = Path(__file__).resolve().parents[3] / "policies" / "examples"
GATEKEEPER_ANY_OBJECT = "has(request.operation) && request.operation == 'DELETE' && object == null ? oldObject : object"


def compiled(**spec: Any) -> CompiledPolicy:
    result = compile_policy(policy(**spec))
    assert result.policy is not None, result.condition
    return result.policy


def validation(expression: str) -> CompiledPolicy:
    return compiled(validations=[{"expression": expression}])


@pytest.mark.parametrize(("expression", "reads"), [
    # What is read, by name.
    ("request.userInfo.username == 'x'", {"request.userInfo"}),
    ("request['userInfo'].groups.size() > 0", {"request.userInfo"}),
    ("has(request.userInfo.username)", {"request.userInfo"}),  # has() is rewritten to cel.bind: still seen
    ("request.?userInfo.?username.orValue('') == ''", {"request.userInfo"}),
    ("cel.bind(r, request, r.userInfo.username == 'a')", {"request.userInfo"}),
    ("cel.bind(r, request, r.namespace == 'a')", {"request.namespace"}),
    ("request.dryRun", {"request.dryRun"}),
    ("request.options == null", {"request.options"}),
    ("request == request", {"request"}),
    ("[request].size() == 1", {"request"}),
    ("request.oldObject == null", {"oldObject"}),
    ("oldObject == null || object.spec == oldObject.spec", {"object", "oldObject"}),
    ("object.metadata.name == request.name", {"object", "request.name"}),
    ("namespaceObject.metadata.name == 'x'", {"namespaceObject"}),
    # A string literal reads nothing.
    ("'userInfo' in object.metadata.annotations && 'oldObject' != ''", {"object"}),
    # Branches the audit's CREATE never takes are not read; the condition's reads are.
    (f"({GATEKEEPER_ANY_OBJECT}).metadata.name != ''", {"object", "request.operation"}),
    ("request.operation == 'UPDATE' && object.spec != oldObject.spec", {"request.operation"}),
    ("request.operation != 'UPDATE' || object.spec == oldObject.spec", {"request.operation"}),
    ("request.operation == 'CREATE' ? object.x == 1 : request.userInfo.username == ''", {"request.operation",
                                                                                       "object"}),
    ("object == null ? oldObject.x == 1 : true", {"object"}),
    # A condition that is not certain keeps both branches.
    ("object.x == 1 ? oldObject.y == 1 : true", {"object", "oldObject"}),
    ("request.namespace == 'a' && request.userInfo.username == 'b'", {"request.namespace", "request.userInfo"}),
])
def test_reads_come_from_the_parse_tree(expression: str, reads: set[str]) -> None:
    assert set(audit_reads(validation(expression))) == reads


@pytest.mark.parametrize(("expression", "auditable"), [
    ("object.spec.containers.all(c, c.image != '')", True),
    ("request.namespace != 'kube-system' && object.metadata.name != ''", True),
    ("request.kind.kind == 'Pod'", True),
    ("request.userInfo.username == 'x'", False),
    ("request.dryRun", False),
    ("request.options == null", False),
    ("oldObject == null", False),
    ("request == request", False),
])
def test_what_a_stored_object_cannot_supply_makes_a_policy_not_auditable(expression: str, auditable: bool) -> None:
    assert (not_auditable(validation(expression)) is None) is auditable


def test_the_reason_names_what_is_read_and_where() -> None:
    p = compiled(validations=[{"expression": "object.x == 1"},
                              {"expression": "true", "messageExpression": "request.userInfo.username"}],
                 matchConditions=[{"name": "m", "expression": "oldObject == null"}])
    assert not_auditable(p) == ("it reads oldObject (spec.matchConditions[0].expression) and request.userInfo "
                                "(spec.validations[1].messageExpression), which a stored object does not have")


def test_variables_count_where_they_are_used_and_only_if_they_are() -> None:
    unused = compiled(validations=[{"expression": "object.x == 1"}],
                      variables=[{"name": "who", "expression": "request.userInfo.username"}])
    assert not_auditable(unused) is None  # variables are evaluated lazily: never evaluated, never read
    used = compiled(validations=[{"expression": "variables.who == 'x'"}],
                    variables=[{"name": "who", "expression": "request.userInfo.username"}])
    assert set(audit_reads(used)) == {"request.userInfo"}
    chained = compiled(validations=[{"expression": "variables.b"}],
                       variables=[{"name": "a", "expression": "oldObject.x"},
                                  {"name": "b", "expression": "variables.a == 1"}])
    assert set(audit_reads(chained)) == {"oldObject"}
    dead = compiled(validations=[{"expression": "request.operation == 'DELETE' ? variables.o.x == 1 : true"}],
                    variables=[{"name": "o", "expression": "oldObject"}])
    assert not_auditable(dead) is None


def test_audit_annotations_and_mutations_are_not_audited_so_not_read() -> None:
    p = compiled(validations=[{"expression": "object.x == 1"}],
                 auditAnnotations=[{"key": "who", "valueExpression": "request.userInfo.username"}])
    assert not_auditable(p) is None
    mutation_only = compiled(mutations=[{"patchType": "ApplyConfiguration",
                                         "applyConfiguration": {"expression": "{'metadata': {'labels': {'a': 'b'}}}"}}])
    assert not_auditable(mutation_only) == "it has no validations (only validations are audited)"


def test_namespace_object_reads() -> None:
    assert reads_namespace_object(validation("namespaceObject.metadata.labels.team == 'a'"))
    assert not reads_namespace_object(validation("object.metadata.namespace == 'namespaceObject'"))


def test_gatekeeper_examples_are_auditable_as_gatekeeper_audits_them() -> None:
    for name in ("gatekeeper-required-labels", "gatekeeper-gpu-shared-memory"):
        (doc,) = [d for d in yaml.safe_load_all((EXAMPLES / name / "policy.yaml").read_text())
                  if d and d.get("kind") == "ClusterAdmissionPolicy"]
        compiled_policy = compile_policy(doc).policy
        assert compiled_policy is not None
        assert "oldObject" not in audit_reads(compiled_policy) and not_auditable(compiled_policy) is None, name


def test_request_keys_are_the_audit_requests() -> None:
    # The analysis folds has(request.<key>) to true for these keys: they must all be in every audit request.
    request = audit_request({"metadata": {"name": "n"}}, group="", version="v1", resource="nodes", kind="Node")
    assert set(request) == REQUEST_KEYS
    assert request["operation"] == "CREATE"  # folded by the analysis
