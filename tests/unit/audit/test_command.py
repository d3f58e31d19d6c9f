"""``tollgate audit`` on files: the reports, what it says on stderr about what it did not audit, its exit status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.policy.helpers import pod, policy
from webhook.audit.evaluate import SEVERITY_ANNOTATION
from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
NO_PRIV = {"expression": "object.spec.containers.all(c, !(c.?securityContext.?privileged.orValue(false)))",
           "message": "privileged containers are not allowed"}


def write(path: Path, docs: list[dict[str, Any]]) -> str:
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def audit(capsys: Any, *argv: str) -> tuple[int, Any, list[str]]:
    """Exit status, stdout (parsed: the ``-o json`` List's items, else YAML documents), stderr lines."""
    status = main(["audit", *argv])
    out, err = capsys.readouterr()
    items = json.loads(out)["items"] if "json" in argv else [d for d in yaml.safe_load_all(out) if d]
    return status, items, err.splitlines()


def test_prints_the_reports_it_would_write_and_says_what_it_skipped(tmp_path: Path, capsys: Any) -> None:
    audited = policy("no-priv", validations=[NO_PRIV], background=True, autogen={"podControllers": True})
    audited["metadata"]["annotations"] = {SEVERITY_ANNOTATION: "medium"}
    not_background = policy("quiet", validations=[{"expression": "false"}])
    who = policy("who", validations=[{"expression": "request.userInfo.username != ''"}], background=True)
    policies = write(tmp_path / "policies.yaml", [audited, not_background, who])
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team-a"},
              "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x",
                                                             "securityContext": {"privileged": True}}]}}}}
    no_ns = pod("loose", privileged=True)
    del no_ns["metadata"]["namespace"]
    resources = write(tmp_path / "resources.yaml", [pod("ok", "team-a"), deploy, no_ns])
    status, items, err = audit(capsys, "-p", policies, "-r", resources, "-o", "json")
    assert status == 1  # a fail result, as kyverno apply and tollgate test
    reports = {(r["kind"], r["metadata"].get("namespace")): r for r in items}
    assert list(reports) == [("PolicyReport", "default"), ("PolicyReport", "team-a"), ("ClusterPolicyReport", None)]
    team_a = reports[("PolicyReport", "team-a")]
    assert team_a["summary"] == {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    assert [(r["resources"][0]["kind"], r["result"], r.get("message", ""), r["severity"]) for r in team_a["results"]] \
        == [("Deployment", "fail", "spec.template: privileged containers are not allowed", "medium"),
            ("Pod", "pass", "", "medium")]
    assert [r["resources"][0]["name"] for r in reports[("PolicyReport", "default")]["results"]] == ["loose"]
    (note,) = reports[("ClusterPolicyReport", None)]["results"]
    assert (note["policy"], note["result"]) == ("who", "skip")
    assert err == [
        "tollgate audit: policy who is not auditable: it reads request.userInfo (spec.validations[0].expression), "
        "which a stored object does not have",
        "tollgate audit: 1 of 3 policies not audited: spec.background is not true (--all audits them): quiet",
        "tollgate audit: audited 1 policy on 3 objects: pass 1, fail 2, warn 0, error 0, skip 1",
    ]
    # YAML output holds the same reports; --all adds the non-background policy.
    status, docs, _ = audit(capsys, "-p", str(tmp_path / "policies.yaml"), "-r", resources, "--all")
    assert status == 1
    assert {r["policy"] for d in docs for r in d["results"]} == {"no-priv", "quiet", "who"}


def test_exit_status_is_0_when_everything_audited_passed(tmp_path: Path, capsys: Any) -> None:
    policies = write(tmp_path / "p.yaml", [policy("no-priv", validations=[NO_PRIV], background=True)])
    status, items, err = audit(capsys, "-p", policies, "-r", write(tmp_path / "r.yaml", [pod("a"), pod("b")]))
    assert status == 0
    assert [r["summary"]["pass"] for r in items] == [2]
    assert err == ["tollgate audit: audited 1 policy on 2 objects: pass 2, fail 0, warn 0, error 0, skip 0"]


def test_no_background_policy_is_said_and_never_exits_0(tmp_path: Path, capsys: Any) -> None:
    policies = write(tmp_path / "p.yaml", [policy(f"p{i}", validations=[NO_PRIV]) for i in range(7)])
    status, items, err = audit(capsys, "-p", policies, "-r", write(tmp_path / "r.yaml", [pod()]))
    assert (status, items) == (2, [])
    assert err == ["tollgate audit: nothing audited: no policy has spec.background: true (7 read: p0, p1, p2, p3, p4 "
                   "and 2 more; --all audits them anyway)"]


def test_no_auditable_policy_is_said_with_each_reason(tmp_path: Path, capsys: Any) -> None:
    who = policy("who", validations=[{"expression": "request.userInfo.username != ''"}], background=True)
    old = policy("old", validations=[{"expression": "oldObject == null"}], background=True)
    status, items, err = audit(capsys, "-p", write(tmp_path / "p.yaml", [who, old]),
                               "-r", write(tmp_path / "r.yaml", [pod()]))
    assert status == 2
    assert [r["policy"] for r in items[0]["results"]] == ["old", "who"]  # the server's skip rows about them
    assert err[-1] == "tollgate audit: nothing audited: none of the 2 policies can be audited (2 not auditable)"
    assert "tollgate audit: policy old is not auditable: it reads oldObject" in err[1]


def test_a_broken_policy_is_named_and_the_others_still_audited(tmp_path: Path, capsys: Any) -> None:
    broken = policy("broken", validations=[{"expression": "objekt.x"}], background=True)
    good = policy("good", validations=[NO_PRIV], background=True)
    policies = write(tmp_path / "p.yaml", [broken, good])
    status, items, err = audit(capsys, "-p", policies, "-r", write(tmp_path / "r.yaml", [pod()]))
    assert status == 2
    assert [r["policy"] for r in items[0]["results"]] == ["good"]
    assert err[0].startswith(f"tollgate audit: {policies}:1: document 1: policy broken is not Ready: "
                             "spec.validations[0].expression: ERROR: <input>:1:7: undeclared reference to 'objekt.x'")


def test_resources_no_policy_selects_are_input_left_unaudited(tmp_path: Path, capsys: Any) -> None:
    policies = write(tmp_path / "p.yaml", [policy("no-priv", validations=[NO_PRIV], background=True)])
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"}}
    status, items, err = audit(capsys, "-p", policies, "-r", write(tmp_path / "r.yaml", [service]))
    assert (status, items) == (2, [])
    assert err[0] == "tollgate audit: nothing audited: none of the 1 resources is selected by the audited policies " \
                     "(no-priv)"


def test_scope_comes_from_the_one_kind_table_and_excluded_resources_are_not_audited(tmp_path: Path,
                                                                                       capsys: Any) -> None:
    everything = policy("named", resources=("*",), groups=("*",), background=True,
                        validations=[{"expression": "object.metadata.name != ''"}])
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1", "namespace": "stray"}}
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "default"}}
    status, items, _ = audit(capsys, "-p", write(tmp_path / "p.yaml", [everything]),
                             "-r", write(tmp_path / "r.yaml", [pv, event]), "-o", "json")
    assert status == 0
    (cluster,) = items  # the PersistentVolume, cluster-scoped; the Event is never audited (as by the server)
    assert cluster["kind"] == "ClusterPolicyReport"
    assert [r["resources"][0] for r in cluster["results"]] == [{"apiVersion": "v1", "kind": "PersistentVolume",
                                                                 "name": "pv1"}]


def test_namespaces_among_the_resources_stand_in_for_the_namespace_cache(tmp_path: Path, capsys: Any) -> None:
    selected = policy("team-a-only", validations=[NO_PRIV], background=True,
                      namespaceSelector={"matchLabels": {"team": "a"}})
    team_a = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-a", "labels": {"team": "a"}}}
    status, items, _ = audit(capsys, "-p", write(tmp_path / "p.yaml", [selected]), "-r",
                             write(tmp_path / "r.yaml", [team_a, pod("in-a", "ns-a"), pod("elsewhere", "ns-b")]))
    assert status == 0
    assert [(r["metadata"]["namespace"], [x["resources"][0]["name"] for x in r["results"]]) for r in items] == \
        [("ns-a", ["in-a"])]


def test_params_configmaps_are_selected_as_on_the_server(tmp_path: Path, capsys: Any) -> None:
    example = ROOT / "policies" / "examples" / "allowed-registries"
    unlabelled = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "default"},
                  "data": {"x": "y"}}
    configmaps = write(tmp_path / "cm.yaml", [*yaml.safe_load_all((example / "configmap.yaml").read_text()),
                                              unlabelled])
    status, items, err = audit(capsys, "--all", "-p", str(example / "policy.yaml"), "-r",
                               str(example / "resources.yaml"), "-c", configmaps)
    assert status == 1 and items
    assert any("ConfigMap default/other is ignored" in line and "warning" in line for line in err)


def test_params_configmaps_among_the_resources_stand_in_for_the_params_cache(tmp_path: Path, capsys: Any) -> None:
    example = ROOT / "policies" / "examples" / "allowed-registries"
    resources = write(tmp_path / "r.yaml", [*yaml.safe_load_all((example / "configmap.yaml").read_text()),
                                            *yaml.safe_load_all((example / "resources.yaml").read_text())])
    with_c = audit(capsys, "--all", "-o", "json", "-p", str(example / "policy.yaml"), "-r",
                   str(example / "resources.yaml"), "-c", str(example / "configmap.yaml"))
    among = audit(capsys, "--all", "-o", "json", "-p", str(example / "policy.yaml"), "-r", resources)

    def pods(items: list[Any]) -> dict[str, str]:
        return {x["resources"][0]["name"]: x["result"] for r in items for x in r["results"]
                if x["resources"][0]["kind"] == "Pod"}

    assert pods(among[1]) == pods(with_c[1]) and "pass" in pods(among[1]).values()  # found: not "no params"
    assert not any("params" in line and "not found" in line for line in among[2])


def test_offline_audit_reads_references_from_the_audited_resources(tmp_path: Path, capsys: Any) -> None:
    # The resources are the cluster: two Ingresses claiming one host both fail unique-ingress-host.
    example = ROOT / "policies" / "examples" / "unique-ingress-host"
    existing = list(yaml.safe_load_all((example / "existing.yaml").read_text()))
    copy_of_shop = {**existing[0], "metadata": {"name": "shop-copy", "namespace": "marketing"}}
    cluster = write(tmp_path / "cluster.yaml", [*existing, copy_of_shop])
    status, items, _ = audit(capsys, "--all", "-p", str(example / "policy.yaml"), "-r", cluster, "-o", "json")
    assert status == 1
    results = {(r["resources"][0]["namespace"], r["resources"][0]["name"]): (r["result"], r.get("message"))
               for report in items for r in report["results"]}
    taken = ("fail", "host shop.example.com is already used by another Ingress")
    assert results == {("shop", "shop"): taken, ("marketing", "shop-copy"): taken,
                       ("platform", "api"): ("pass", None)}


@pytest.mark.parametrize(("argv", "message"), [
    (["-p", "P", "-r", "R", "--kubeconfig", "K"], "not allowed with argument"),
    (["-p", "P"], "one of the arguments -r/--resource --kubeconfig is required"),
    (["-p", "P", "-r", "R", "--context", "c"], "--context needs --kubeconfig"),
    (["-p", "P", "--kubeconfig", "K", "-c", "C"], "with --kubeconfig they are read from the cluster"),
    (["-p", "P", "--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig /nonexistent/kubeconfig: no such file"),
    (["-p", "P", "-r", "R", "--params-selector", "a in (b"], "--params-selector"),
])
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], message: str, capsys: Any) -> None:
    assert main(["audit", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_unusable_input_exits_2(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "empty.yaml").write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["audit", "-p", str(tmp_path / "empty.yaml"), "-r", str(tmp_path / "empty.yaml")]) == 2
    assert "no ClusterAdmissionPolicy or AdmissionPolicy found" in capsys.readouterr().err
    twice = write(tmp_path / "twice.yaml", [policy("p", background=True), policy("p", background=True)])
    assert main(["audit", "-p", twice, "-r", twice]) == 2
    assert "defined twice" in capsys.readouterr().err
    only_policies = write(tmp_path / "only.yaml", [policy("p", background=True)])
    assert main(["audit", "-p", only_policies, "-r", only_policies]) == 2
    assert f"no resources found in {only_policies}" in capsys.readouterr().err


def test_kubeconfig_without_a_path_and_none_found_is_one_line(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    policies = write(tmp_path / "p.yaml", [policy("no-priv", validations=[NO_PRIV], background=True)])
    assert main(["audit", "-p", policies, "--kubeconfig"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"tollgate audit: no Kubernetes configuration: not in a cluster and no kubeconfig ({tmp_path / 'none'} not "
        "found); give --kubeconfig PATH"]


def test_what_kubectl_get_prints_is_audited_item_by_item(tmp_path: Path, capsys: Any) -> None:
    # `kubectl get pods -A -o yaml > pods.yaml` (or `-o json`): a List whose items are the resources.
    policies = write(tmp_path / "p.yaml", [policy("no-priv", validations=[NO_PRIV], background=True)])
    listed = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
              "items": [pod("a"), pod("b", privileged=True)]}
    (tmp_path / "pods.json").write_text(json.dumps(listed))
    for resources in (write(tmp_path / "pods.yaml", [listed]), str(tmp_path / "pods.json")):
        status, items, _err = audit(capsys, "-p", policies, "-r", resources)
        assert status == 1
        [report] = items
        assert report["summary"]["pass"] == 1 and report["summary"]["fail"] == 1
        assert sorted(r["resources"][0]["name"] for r in report["results"]) == ["a", "b"]
