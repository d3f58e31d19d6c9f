"""Background audit, pure part: synthesized requests, per-validation results, auditability, reports."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy
from webhook.audit.evaluate import (
    SEVERITY_ANNOTATION,
    AuditResult,
    ReportMeta,
    ResourceRef,
    audit_request,
    build_report,
    evaluate_object,
    not_auditable,
    not_auditable_result,
    report_meta,
)
from webhook.policy import InMemoryLookups, compile_policy
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.model import PolicySpecError, parse_policy

NO_PRIV = {"expression": "object.spec.containers.all(c, !(c.?securityContext.?privileged.orValue(false)))",
           "message": "privileged containers are not allowed"}
REGISTRY = {"expression": "object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))",
            "messageExpression": "'bad image: ' + object.spec.containers[0].image"}


def compiled(obj: dict[str, Any]) -> CompiledPolicy:
    result = compile_policy(obj)
    assert result.policy is not None, result.condition
    return result.policy


def evaluate(p: CompiledPolicy, obj: dict[str, Any], **kw: Any) -> tuple[AuditResult, ...]:
    return evaluate_object(p, obj, group="", version="v1", resource="pods", kind="Pod",
                           lookups=InMemoryLookups(), **kw)


def test_background_defaults_to_false_and_must_be_boolean() -> None:
    assert parse_policy(policy()).background is False
    assert parse_policy(policy(background=True)).background is True
    with pytest.raises(PolicySpecError, match=r"spec.background: must be a boolean"):
        parse_policy(policy(background="yes"))


def test_synthesized_request_is_a_create_without_user_or_old_object() -> None:
    obj = {"metadata": {"name": "web", "namespace": "team-a", "uid": "u1"}, "spec": {}}
    req = audit_request(obj, group="apps", version="v1", resource="deployments", kind="Deployment")
    assert req["operation"] == "CREATE" and req["userInfo"] == {} and req["oldObject"] is None
    assert req["kind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert req["resource"] == {"group": "apps", "version": "v1", "resource": "deployments"}
    assert (req["namespace"], req["name"], req["uid"]) == ("team-a", "web", "audit-u1")
    assert req["object"] is obj
    cluster = audit_request({"metadata": {"name": "ns1"}}, group="", version="v1", resource="namespaces",
                            kind="Namespace")
    assert "namespace" not in cluster


def test_one_result_per_validation_with_the_engine_messages() -> None:
    p = compiled(policy(validations=[NO_PRIV, REGISTRY]))
    bad = pod("bad", privileged=True, images=("docker.io/nginx",))
    bad["metadata"]["uid"] = "u-bad"
    got = evaluate(p, bad, now=7)
    ref = ResourceRef("v1", "Pod", "bad", "default", "u-bad")
    assert got == (
        AuditResult("p", "validations[0]", "fail", "privileged containers are not allowed", ref, timestamp=7),
        AuditResult("p", "validations[1]", "fail", "bad image: docker.io/nginx", ref, timestamp=7),
    )
    good = evaluate(p, pod("good"))
    assert [(r.rule, r.result, r.message) for r in good] == [("validations[0]", "pass", ""),
                                                             ("validations[1]", "pass", "")]
    mixed = evaluate(p, pod("mixed", privileged=True))
    assert [r.result for r in mixed] == ["fail", "pass"]


def test_non_matching_objects_have_no_results_and_match_conditions_skip() -> None:
    p = compiled(policy(validations=[NO_PRIV], resources=("deployments",), groups=("apps",)))
    assert evaluate(p, pod()) == ()
    cond = compiled(policy(validations=[NO_PRIV], matchConditions=[
        {"name": "labelled", "expression": "has(object.metadata.labels) && 'audit' in object.metadata.labels"}]))
    assert [(r.result, r.message) for r in evaluate(cond, pod())] == [("skip", "matchCondition labelled is false")]
    ns_selected = compiled(policy(validations=[NO_PRIV], namespaceSelector={"matchLabels": {"team": "a"}}))
    assert evaluate(ns_selected, pod()) == ()


def test_runtime_errors_are_error_results() -> None:
    p = compiled(policy(validations=[{"expression": "object.spec.nodeName == 'x'"}]))
    (r,) = evaluate(p, pod())
    assert r.result == "error" and "nodeName" in r.message


@pytest.mark.parametrize(("expr", "reads"), [
    ("request.userInfo.username == 'x'", "request.userInfo"),
    ("oldObject == null || object.spec == oldObject.spec", "oldObject"),
    ("request['userInfo'].groups.size() > 0", "request.userInfo"),
])
def test_policies_reading_user_or_old_object_are_not_auditable(expr: str, reads: str) -> None:
    reason = not_auditable(parse_policy(policy(validations=[{"expression": expr}])))
    assert reason is not None and reads in reason


def test_auditability_looks_at_every_expression() -> None:
    assert not_auditable(parse_policy(policy(validations=[NO_PRIV, REGISTRY]))) is None
    via_condition = policy(validations=[NO_PRIV], matchConditions=[
        {"name": "u", "expression": "!request.userInfo.username.startsWith('system:')"}])
    assert not_auditable(parse_policy(via_condition)) is not None
    via_variable = policy(validations=[NO_PRIV], variables=[{"name": "o", "expression": "oldObject"}])
    assert not_auditable(parse_policy(via_variable)) is not None
    mutation_only = policy(mutations=[{"patchType": "ApplyConfiguration",
                                       "applyConfiguration": {"expression": "Object{}"}}])
    assert not_auditable(parse_policy(mutation_only)) == "the policy has no validations"


def test_severity_and_category_come_from_annotations() -> None:
    obj = policy()
    obj["metadata"]["annotations"] = {SEVERITY_ANNOTATION: "High", "policies.tollgate.dev/category": "Pod Security"}
    assert report_meta(obj) == ReportMeta("high", "Pod Security")
    obj["metadata"]["annotations"] = {SEVERITY_ANNOTATION: "urgent"}
    assert report_meta(obj) == ReportMeta(None, None)  # not a v1alpha2 severity


def test_report_is_sorted_counted_and_stable() -> None:
    p = compiled(policy(validations=[NO_PRIV]))
    meta = ReportMeta("high", "Pod Security")
    results = [r for name, priv in (("b", True), ("a", False), ("c", True))
               for r in evaluate(p, pod(name, privileged=priv), meta=meta, now=5)]
    report = build_report("default", results)
    assert report["apiVersion"] == "wgpolicyk8s.io/v1alpha2" and report["kind"] == "PolicyReport"
    assert report["metadata"] == {"name": "tollgate-polr-ns-default", "namespace": "default",
                                  "labels": {"app.kubernetes.io/managed-by": "tollgate"}}
    assert report["summary"] == {"pass": 1, "fail": 2, "warn": 0, "error": 0, "skip": 0}
    assert [r["resources"][0]["name"] for r in report["results"]] == ["a", "b", "c"]
    assert report["results"][1] == {
        "source": "tollgate", "policy": "p", "rule": "validations[0]", "result": "fail",
        "message": "privileged containers are not allowed", "severity": "high", "category": "Pod Security",
        "scored": True, "timestamp": {"seconds": 5, "nanos": 0},
        "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "b", "namespace": "default"}]}
    assert build_report("default", reversed(results)) == report
    cluster = build_report(None, [])
    assert cluster["kind"] == "ClusterPolicyReport" and "namespace" not in cluster["metadata"]
    assert cluster["summary"] == {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}


def test_not_auditable_result_names_the_policy() -> None:
    obj = policy("who", validations=[{"expression": "request.userInfo.username != ''"}])
    r = not_auditable_result(obj, "not auditable: x")
    assert (r.policy, r.result, r.resource.kind, r.resource.name) == ("who", "skip", "ClusterAdmissionPolicy", "who")


def test_offline_audit_prints_the_reports_it_would_write(tmp_path: Any, capsys: Any) -> None:
    import json

    import yaml

    from webhook.cli.main import main

    audited = policy("no-priv", validations=[NO_PRIV], background=True, autogen={"podControllers": True})
    audited["metadata"]["annotations"] = {SEVERITY_ANNOTATION: "medium"}
    not_background = policy("quiet", validations=[{"expression": "false"}])
    who = policy("who", validations=[{"expression": "request.userInfo.username != ''"}], background=True)
    (tmp_path / "policies.yaml").write_text(yaml.safe_dump_all([audited, not_background, who]))
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team-a"},
              "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x",
                                                             "securityContext": {"privileged": True}}]}}}}
    no_ns = pod("loose", privileged=True)
    del no_ns["metadata"]["namespace"]
    (tmp_path / "resources.yaml").write_text(yaml.safe_dump_all([pod("ok", "team-a"), deploy, no_ns]))
    assert main(["audit", "-p", str(tmp_path / "policies.yaml"), "-r", str(tmp_path / "resources.yaml"),
                 "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    reports = {(r["kind"], r["metadata"].get("namespace")): r for r in out["items"]}
    assert list(reports) == [("PolicyReport", "default"), ("PolicyReport", "team-a"), ("ClusterPolicyReport", None)]
    team_a = reports[("PolicyReport", "team-a")]
    assert team_a["summary"] == {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    assert [(r["resources"][0]["kind"], r["result"], r.get("message", ""), r["severity"]) for r in team_a["results"]] \
        == [("Deployment", "fail", "spec.template: privileged containers are not allowed", "medium"),
            ("Pod", "pass", "", "medium")]
    assert [r["resources"][0]["name"] for r in reports[("PolicyReport", "default")]["results"]] == ["loose"]
    (note,) = reports[("ClusterPolicyReport", None)]["results"]
    assert (note["policy"], note["result"]) == ("who", "skip")
    # YAML output holds the same reports; --all adds the non-background policy.
    assert main(["audit", "-p", str(tmp_path), "-r", str(tmp_path / "resources.yaml"), "--all"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {r["policy"] for d in docs for r in d["results"]} == {"no-priv", "quiet", "who"}


def test_offline_audit_reads_references_from_the_audited_resources(tmp_path: Any, capsys: Any) -> None:
    # The resources are the cluster: two Ingresses claiming one host both fail unique-ingress-host.
    import json
    from pathlib import Path

    import yaml

    from webhook.cli.main import main

    example = Path(__file__).resolve().parents[3] / "policies" / "examples" / "unique-ingress-host"
    existing = list(yaml.safe_load_all((example / "existing.yaml").read_text()))
    copy_of_shop = {**existing[0], "metadata": {"name": "shop-copy", "namespace": "marketing"}}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([*existing, copy_of_shop]))
    assert main(["audit", "--all", "-p", str(example / "policy.yaml"), "-r", str(tmp_path / "cluster.yaml"),
                 "-o", "json"]) == 0
    results = {(r["resources"][0]["namespace"], r["resources"][0]["name"]): (r["result"], r.get("message"))
               for report in json.loads(capsys.readouterr().out)["items"] for r in report["results"]}
    taken = ("fail", "host shop.example.com is already used by another Ingress")
    assert results == {("shop", "shop"): taken, ("marketing", "shop-copy"): taken,
                       ("platform", "api"): ("pass", None)}


def test_offline_audit_rejects_unusable_input(tmp_path: Any, capsys: Any) -> None:
    from webhook.cli.main import main

    (tmp_path / "empty.yaml").write_text("kind: ConfigMap\n")
    assert main(["audit", "-p", str(tmp_path / "empty.yaml"), "-r", str(tmp_path / "empty.yaml")]) == 2
    assert "no ClusterAdmissionPolicy or AdmissionPolicy" in capsys.readouterr().err


def test_oversized_report_keeps_failures_first_and_says_what_it_left_out() -> None:
    p = compiled(policy(validations=[NO_PRIV]))
    results = [r for i in range(40) for r in evaluate(p, pod(f"p{i:02d}", privileged=i % 10 == 0))]
    full = build_report("default", results, max_bytes=None)
    one_row = len(json.dumps(full["results"][0], separators=(",", ":"))) + 1
    capped = build_report("default", results, max_bytes=6 * one_row)
    assert capped["summary"] == full["summary"] == {"pass": 36, "fail": 4, "warn": 0, "error": 0, "skip": 0}
    kept = [(r["result"], r["resources"][0]["name"]) for r in capped["results"]]
    assert [k for k in kept if k[0] == "fail"] == [("fail", "p00"), ("fail", "p10"), ("fail", "p20"), ("fail", "p30")]
    assert len(kept) in (5, 6) and kept == sorted(kept, key=lambda k: k[1])  # still in report order
    assert capped["metadata"]["annotations"] == {"tollgate.dev/omitted-results": str(40 - len(kept))}
    assert "annotations" not in full["metadata"]
