"""``tollgate test`` through ``webhook.cli.main.main``: suites, directories, stdin, outputs, the admission chain."""

from __future__ import annotations

import io
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "policies" / "examples"

POLICIES = """\
apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata: {name: label-team}
spec:
  match:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CREATE, UPDATE]}]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >-
        {'metadata': {'labels': {'team': namespaceObject.?metadata.?labels.?team.orValue('none')}}}
---
apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata: {name: require-team}
spec:
  match:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CREATE, UPDATE]}]
  matchConditions:
  - {name: not-admin, expression: "request.userInfo.username != 'admin'"}
  validations:
  - expression: "object.metadata.labels.team != 'none'"
    message: "namespace has no team"
---
apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata: {name: owner-is-immutable}
spec:
  validationActions: [Warn]
  match:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [UPDATE]}]
  validations:
  - expression: "object.metadata.labels.owner == oldObject.metadata.labels.owner"
    messageExpression: "'owner changed from ' + oldObject.metadata.labels.owner"
"""

RESOURCES = """\
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {owner: bob}}
spec: {containers: [{name: app, image: app:1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: stray, namespace: nowhere, labels: {owner: bob}}
spec: {containers: [{name: app, image: app:1}]}
"""

OLD = """\
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {owner: alice}}
spec: {containers: [{name: app, image: app:1}]}
"""

NAMESPACES = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {team: payments}}\n"

PATCHED = """\
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {owner: bob, team: payments}}
spec: {containers: [{name: app, image: app:1}]}
"""

SUITE = """\
apiVersion: tollgate.dev/v1alpha1
kind: TestSuite
metadata: {name: chain}
policies: [policies.yaml]
resources: [resources.yaml]
oldResources: [old.yaml]
namespaces: [namespaces.yaml]
results:
- {policy: require-team, resource: {kind: Pod, namespace: shop, name: web}, result: pass}
- {policy: label-team, resource: {kind: Pod, namespace: shop, name: web}, result: pass,
   patchedResource: patched.yaml}
- {policy: require-team, resource: {kind: Pod, namespace: nowhere, name: stray}, result: fail,
   messageContains: "namespace has no team"}
- {policy: require-team, resource: {kind: Pod, namespace: nowhere, name: stray}, result: skip,
   userInfo: {username: admin}}
- {policy: owner-is-immutable, resource: {kind: Pod, namespace: shop, name: web}, result: warn,
   operation: UPDATE, messageContains: "owner changed from alice"}
- {policy: owner-is-immutable, resource: {kind: Pod, namespace: shop, name: web}, result: skip}
"""


def write_suite(tmp_path: Path, suite: str = SUITE, **overrides: str) -> Path:
    files = {"policies.yaml": POLICIES, "resources.yaml": RESOURCES, "old.yaml": OLD, "namespaces.yaml": NAMESPACES,
             "patched.yaml": PATCHED, "test.yaml": suite, **overrides}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path / "test.yaml"


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, object]], str]:
    code = main(["test", *args, "-o", "json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_chain_update_userinfo_patched_resource_and_synthesized_namespace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, rows, err = run_json(capsys, str(write_suite(tmp_path)))
    assert code == 0, err
    assert [(r["policy"], r["name"], r["operation"], r["result"]) for r in rows] == [
        ("require-team", "web", "CREATE", "pass"),  # passes only because label-team ran first
        ("label-team", "web", "CREATE", "pass"),
        ("require-team", "stray", "CREATE", "fail"),  # namespace nowhere: synthesized, no labels
        ("require-team", "stray", "CREATE", "skip"),  # userInfo admin: matchCondition false
        ("owner-is-immutable", "web", "UPDATE", "warn"),  # Warn-only policy: warn, not fail
        ("owner-is-immutable", "web", "CREATE", "skip"),
    ]
    assert all(r["ok"] for r in rows)


def test_patched_resource_mismatch_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path, **{"patched.yaml": PATCHED.replace("team: payments", "team: search")})
    code, rows, _ = run_json(capsys, str(suite))
    assert code == 1
    bad = [r for r in rows if not r["ok"]]
    assert len(bad) == 1
    assert bad[0]["mismatch"] == ('patchedResource patched.yaml differs from the mutated object: '
                                  '/metadata/labels/team: expected "search", got "payments"')


def test_update_without_an_old_object_is_unusable_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path, **{"old.yaml": ""})
    assert main(["test", str(suite)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "test.yaml:16: document 1: operation UPDATE needs the old Pod shop/web" in err


@pytest.fixture
def examples_with_one_mismatch(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    suite = tmp_path / "examples" / "team-a-require-limits" / "test.yaml"
    suite.write_text(suite.read_text().replace("name: unlimited}, result: fail", "name: unlimited}, result: pass"))
    return tmp_path / "examples"


def test_directory_with_one_planted_mismatch_exits_1_and_shows_it_in_json(
        examples_with_one_mismatch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, rows, err = run_json(capsys, str(examples_with_one_mismatch))
    assert code == 1
    assert len({r["suite"] for r in rows}) == len(list(EXAMPLES.glob("*/test.yaml")))
    bad = [r for r in rows if not r["ok"]]
    assert [(r["policy"], r["name"], r["expected"], r["result"]) for r in bad] == [
        ("require-limits", "unlimited", "pass", "fail")]
    assert bad[0]["mismatch"] == "expected pass, got fail: team-a requires cpu and memory limits: app"
    expectations = sum(len(yaml.safe_load(p.read_text())["results"]) for p in EXAMPLES.glob("*/test.yaml"))
    assert len(rows) == expectations and f"1 of {expectations} expectation(s) failed" in err


def test_directory_with_one_planted_mismatch_in_junit(examples_with_one_mismatch: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(examples_with_one_mismatch), "--output", "junit"]) == 1
    root = ET.fromstring(capsys.readouterr().out)
    expectations = sum(len(yaml.safe_load(p.read_text())["results"]) for p in EXAMPLES.glob("*/test.yaml"))
    assert root.get("tests") == str(expectations) and root.get("failures") == "1"
    failures = root.findall("./testsuite/testcase/failure")
    assert len(failures) == 1
    case = root.find("./testsuite/testcase[failure]")
    assert case is not None and case.get("classname") == "require-limits"
    assert case.get("name") == "Pod team-a/unlimited CREATE"
    assert failures[0].get("message") == "expected pass, got fail: team-a requires cpu and memory limits: app"


def test_yaml_output_and_fail_only(examples_with_one_mismatch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(examples_with_one_mismatch), "-o", "yaml", "--fail-only"]) == 1
    rows = yaml.safe_load(capsys.readouterr().out)
    assert [(r["name"], r["ok"], r["mismatch"].split(":")[0]) for r in rows] == [
        ("unlimited", False, "expected pass, got fail")]


def test_table_marks_the_mismatch(examples_with_one_mismatch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(examples_with_one_mismatch / "team-a-require-limits")]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[0].split() == ["POLICY", "KIND", "NAMESPACE", "NAME", "RESULT", "EXPECTED", "MESSAGE"]
    assert "MISMATCH: expected pass, got fail" in out
    assert "MISMATCH " in err and "require-limits on Pod/team-a/unlimited (CREATE)" in err


def test_suite_from_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(EXAMPLES / "allowed-registries")
    monkeypatch.setattr("sys.stdin", io.StringIO((EXAMPLES / "allowed-registries" / "test.yaml").read_text()))
    code, rows, _ = run_json(capsys, "-")
    assert code == 0
    assert [r["suite"] for r in rows] == ["-"] * 3


def test_resources_from_stdin_adhoc_exit_1_on_fail(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((EXAMPLES / "disallow-latest-tag" / "resources.yaml").read_text()))
    code, rows, _ = run_json(capsys, "-p", str(EXAMPLES / "disallow-latest-tag" / "policy.yaml"), "-r", "-")
    assert code == 0  # warn rows do not fail an ad-hoc run
    assert [r["result"] for r in rows] == ["pass", "warn", "warn"]
    monkeypatch.setattr("sys.stdin", io.StringIO((EXAMPLES / "team-a-require-limits" / "resources.yaml").read_text()))
    code, rows, err = run_json(capsys, "-p", str(EXAMPLES / "team-a-require-limits" / "policy.yaml"), "-r", "-",
                               "--fail-only")
    assert code == 1
    assert [r["name"] for r in rows] == ["unlimited"]
    assert "1 of 3 row(s) fail or error" in err


def test_configmap_without_the_params_label_is_ignored_with_a_warning(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    example = EXAMPLES / "allowed-registries"
    unlabelled = tmp_path / "configmap.yaml"
    unlabelled.write_text((example / "configmap.yaml").read_text().replace('tollgate.dev/params: "true"', "x: y"))
    code, rows, err = run_json(capsys, "-p", str(example / "policy.yaml"), "-r", str(example / "resources.yaml"),
                               "--configmap", str(unlabelled))
    assert code == 1
    # No params: every row is denied per parameterNotFoundAction Deny (fail or error, as the engine reports it).
    assert all(r["result"] in ("fail", "error") and "allowed-registries" in r["message"] for r in rows), rows
    assert (f"tollgate test: warning: {unlabelled}:1: document 1: ConfigMap tollgate-system/allowed-registries is "
            "ignored: its labels do not match the params selector tollgate.dev/params=true") in err
    code, rows, _ = run_json(capsys, "-p", str(example / "policy.yaml"), "-r", str(example / "resources.yaml"),
                             "--configmap", str(unlabelled), "--params-selector", "x=y")
    assert [r["result"] for r in rows] == ["pass", "fail", "fail"]


@pytest.mark.parametrize(("results", "message"), [
    ("- {policy: nope, resource: {kind: Pod, namespace: shop, name: web}, result: pass}",
     ("results[0].policy: no policy nope in the suite's policies (have: label-team, owner-is-immutable, "
      "require-team)")),
    ("- {policy: label-team, resource: {kind: Pod, namespace: default, name: owned}, result: pass}",
     "results[0].resource: no Pod default/owned in the suite's resources"),
    ("- {policy: label-team, resource: {kind: Pod, name: web}, result: passed}",
     "results[0].result: unsupported value passed: must be one of pass, fail, warn, skip, error"),
    ("- {policy: label-team, resource: {kind: Pod, name: web}, result: pass, messageContain: x}",
     "results[0].messageContain: unknown field (did you mean messageContains?)"),
])
def test_suite_errors_are_one_line_without_python_reprs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        results: str, message: str) -> None:
    head = SUITE.split("results:")[0]
    assert main(["test", str(write_suite(tmp_path, head + "results:\n" + results + "\n"))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert f"{tmp_path / 'test.yaml'}:9: document 1: " in err
    assert "('" not in err and "Traceback" not in err


@pytest.mark.parametrize(("args", "message"), [
    (["{dir}"], "{dir}: no TestSuite found (kind: TestSuite)"),
    (["{dir}/none"], "{dir}/none: no such file or directory"),
    (["-p", "x.yaml"], "give TestSuite files or directories, or --policy and --resource"),
    (["{suite}", "-p", "x.yaml"], "not both"),
    (["-p", "-", "-r", "-"], "standard input (-) can be read only once"),
    (["{suite}", "-o", "xml"], "argument -o/--output: invalid choice: 'xml'"),
    (["{res}"], "resources.yaml:2: document 1: kind: expected TestSuite, got Pod"),
])
def test_usage_errors_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                           message: str) -> None:
    suite = write_suite(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "pod.yaml").write_text(RESOURCES)
    names = {"dir": tmp_path / "d", "suite": suite, "res": tmp_path / "resources.yaml"}
    assert main(["test", *(a.format(**names) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert message.format(**names) in err


def test_a_missing_file_names_the_suite_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path, SUITE.replace("namespaces: [namespaces.yaml]", "namespaces: [gone.yaml]"))
    assert main(["test", str(suite)]) == 2
    err = capsys.readouterr().err
    gone = tmp_path / "gone.yaml"
    assert err == f"tollgate test: {suite}:7: document 1: namespaces[0]: {gone}: no such file or directory\n"


def test_one_broken_suite_hides_no_other_suites_results(
        examples_with_one_mismatch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = examples_with_one_mismatch / "allowed-registries" / "broken-test.yaml"
    broken.write_text("apiVersion: tollgate.dev/v1alpha1\nkind: TestSuite\npolicies: [policy.yaml]\n"
                      "resources: [missing.yaml]\nresults:\n- {policy: allowed-registries, resource: {kind: Pod, "
                      "name: good}, result: pass}\n")
    unparsable = examples_with_one_mismatch / "zz-test.yaml"
    unparsable.write_text("kind: TestSuite\npolicies: [\n")
    code, rows, err = run_json(capsys, str(examples_with_one_mismatch), str(examples_with_one_mismatch / "gone"))
    assert code == 2  # unusable input wins over the mismatch, after every usable suite ran
    assert len({r["suite"] for r in rows}) == len(list(EXAMPLES.glob("*/test.yaml")))
    assert [r["name"] for r in rows if not r["ok"]] == ["unlimited"]  # the others' findings are still reported
    ours = [line for line in err.splitlines() if line.startswith("tollgate test: ")]
    assert ours == [
        f"tollgate test: {unparsable}:3:1: invalid YAML: did not find expected node content",
        f"tollgate test: {examples_with_one_mismatch / 'gone'}: no such file or directory",
        f"tollgate test: {broken}:4: document 1: resources[0]: {broken.parent / 'missing.yaml'}: no such file or "
        "directory",
        "tollgate test: 3 unusable suite(s) or path(s); the others' results are above",
    ]


def test_kubectl_list_output_as_resources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `kubectl get pods -o json`: a v1 List; `-r <(kubectl ...)` hands over a pipe.
    pods = [d for d in yaml.safe_load_all((EXAMPLES / "disallow-latest-tag" / "resources.yaml").read_text()) if d]
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}, indent=4))
    policy = str(EXAMPLES / "disallow-latest-tag" / "policy.yaml")
    assert main(["test", "-p", policy, "-r", str(tmp_path / "pods.json"), "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    resources = str(EXAMPLES / "disallow-latest-tag" / "resources.yaml")
    assert main(["test", "-p", policy, "-r", resources, "-o", "json"]) == 0
    assert listed == json.loads(capsys.readouterr().out) and len(listed) == len(pods)


def test_sub_resource_reaches_matching_and_the_reports(capsys: pytest.CaptureFixture[str]) -> None:
    """``subResource`` is the request's (a policy on ``pods/ephemeralcontainers`` but not ``pods/status``)."""
    suite = ROOT / "policies" / "pod-security" / "test.yaml"
    assert main(["test", str(suite), "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_request = {(r["name"], r["operation"], r.get("subResource")): r["result"]
                  for r in rows if r["policy"] == "disallow-privileged-containers"}
    assert by_request == {("debugged-privileged", "UPDATE", "ephemeralcontainers"): "fail",
                          ("debugged-compliant", "UPDATE", "ephemeralcontainers"): "pass",
                          ("debugged-privileged", "CREATE", None): "fail",
                          ("debugged-privileged", "UPDATE", "status"): "skip"}
    assert main(["test", str(suite), "-o", "junit"]) == 0
    names = {c.get("name") for c in ET.fromstring(capsys.readouterr().out).iter("testcase")}
    assert "Pod default/debugged-privileged UPDATE status" in names


def _tenant_policy(namespace: str, message: str) -> dict[str, object]:
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": "AdmissionPolicy",
            "metadata": {"name": "restrict-loadbalancer", "namespace": namespace},
            "spec": {"match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["services"],
                                                   "operations": ["CREATE"]}]},
                     "validations": [{"expression": "object.spec.type != 'LoadBalancer'", "message": message}]}}


def _service(namespace: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb", "namespace": namespace},
            "spec": {"type": "LoadBalancer"}}


def test_two_tenants_policies_of_one_name_are_two_rows_each_deciding_its_namespace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump_all([_tenant_policy("team-b", "b says no"),
                                                         _tenant_policy("team-c", "c says no")]))
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(_service("team-c")))
    assert main(["test", "-p", str(tmp_path / "p.yaml"), "-r", str(tmp_path / "r.yaml"), "-o", "json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [(r["policy"], r["result"]) for r in rows] == [("team-b/restrict-loadbalancer", "skip"),
                                                          ("team-c/restrict-loadbalancer", "fail")]
    assert "c says no" in rows[1]["message"]


def test_a_testsuite_names_a_tenant_policy_by_namespace_and_name(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump_all([_tenant_policy("team-b", "b says no"),
                                                         _tenant_policy("team-c", "c says no")]))
    (tmp_path / "r.yaml").write_text(yaml.safe_dump_all([_service("team-b"), _service("team-c")]))
    suite = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "TestSuite", "metadata": {"name": "lb"},
             "policies": ["p.yaml"], "resources": ["r.yaml"],
             "results": [{"policy": "team-c/restrict-loadbalancer", "resource": {"kind": "Service", "namespace":
                                                                                "team-c", "name": "lb"},
                          "result": "fail"},
                         {"policy": "team-c/restrict-loadbalancer", "resource": {"kind": "Service", "namespace":
                                                                                "team-b", "name": "lb"},
                          "result": "skip"}]}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    assert main(["test", str(tmp_path / "suite.yaml")]) == 0
    capsys.readouterr()
    suite["results"] = [{**suite["results"][0], "policy": "restrict-loadbalancer"}]  # two policies have that name
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    assert main(["test", str(tmp_path / "suite.yaml")]) == 2
    assert "restrict-loadbalancer names 2 policies (team-b/restrict-loadbalancer, team-c/restrict-loadbalancer)" \
        in capsys.readouterr().err


def test_a_kind_no_policy_reader_knows_in_a_policies_file_is_named(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    legacy = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "legacy"}, "spec": {}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump_all([_tenant_policy("team-c", "c says no"), legacy]))
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(_service("team-c")))
    assert main(["test", "-p", str(tmp_path / "p.yaml"), "-r", str(tmp_path / "r.yaml")]) == 1
    err = capsys.readouterr().err
    assert f"tollgate test: warning: {tmp_path}/p.yaml:" in err
    assert "ClusterPolicy legacy is not a kind tollgate reads as a policy: ignored" in err
