"""``tollgate lint`` and ``test`` read the imported kinds: every message at the author's file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
VAP_EXAMPLE = ROOT / "policies" / "examples" / "vap-required-labels"
KYVERNO_EXAMPLE = ROOT / "policies" / "examples" / "kyverno-restrict-image-registries"

POLICY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: need-team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: "true"
  - expression: objekt.metadata
"""
BINDINGS = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: a}
spec: {policyName: need-team, validationActions: [Deny]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: b}
spec:
  policyName: need-team
  validationActions: [Deny, Warn]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: c}
spec: {policyName: gone, validationActions: [Audit]}
"""


def test_lint_names_each_problem_at_its_source_line_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "bindings.yaml").write_text(BINDINGS)
    assert main(["lint", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        # The policy's CEL error, once for its two bindings, at the line of the expression.
        f"{tmp_path}/policy.yaml:10: document 1: ValidatingAdmissionPolicy need-team: spec.validations[1].expression: "
        "ERROR: <input>:1:7: undeclared reference to 'objekt.metadata'",
        f"{tmp_path}/bindings.yaml:11: document 2: ValidatingAdmissionPolicyBinding b: spec.validationActions: "
        "Deny and Warn may not be used together",
        f"{tmp_path}/bindings.yaml:16: document 3: ValidatingAdmissionPolicyBinding c: spec.policyName: "
        "no ValidatingAdmissionPolicy gone (a binding without its policy enforces nothing)",
    ]
    assert err == "3 problem(s)\n"


KYVERNO_IMAGE_DATA = """\
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: check-image-user}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: "object.spec.containers.all(c, image.GetMetadata(c.image).config.user != objekt)"
"""


def test_lint_says_a_missing_library_once_and_still_the_expressions_other_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # image.GetMetadata is reported as the library Tollgate lacks; the compiler's "undeclared reference" to
    # its names would only repeat that; the typo beside it is the author's own error and stays.
    (tmp_path / "policy.yaml").write_text(KYVERNO_IMAGE_DATA)
    assert main(["lint", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    where = f"{tmp_path}/policy.yaml:9: document 1: ValidatingPolicy check-image-user: spec.validations[0].expression: "
    assert out.splitlines() == [
        where + "image.GetMetadata is Kyverno's ImageData library (image registry lookups), which Tollgate does not "
                "implement",
        where + "ERROR: <input>:1:73: undeclared reference to 'objekt'",
    ]
    assert err == "2 problem(s)\n"


def test_lint_refuses_a_name_given_twice_and_a_nameless_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(POLICY + "---\n" + POLICY.replace("metadata: {name: need-team}", "metadata: {}"))
    (tmp_path / "b.yaml").write_text(POLICY.replace("objekt", "object"))
    assert main(["lint", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path}/a.yaml:14: document 2: metadata.name: ValidatingAdmissionPolicy: required field is missing" \
        in out
    assert f"{tmp_path}/b.yaml:1: document 1: ValidatingAdmissionPolicy need-team: defined twice (first in " \
           f"{tmp_path}/a.yaml:1: document 1)" in out


def test_lint_checks_the_examples_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(VAP_EXAMPLE), str(KYVERNO_EXAMPLE)]) == 0
    assert capsys.readouterr().err.endswith("no problems\n")


def test_test_refuses_a_binding_without_its_policy_in_one_line(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "binding.yaml").write_text(BINDINGS.split("---\n")[2])
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    assert main(["test", "-p", str(tmp_path / "binding.yaml"), "-r", str(pod)]) == 2
    err = capsys.readouterr().err
    assert err == (f"tollgate test: {tmp_path}/binding.yaml:4: document 1: ValidatingAdmissionPolicyBinding c: "
                   "spec.policyName: no ValidatingAdmissionPolicy gone (a binding without its policy enforces "
                   "nothing)\n")


def test_test_evaluates_what_cannot_be_honoured_per_its_failure_policy(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    docs = list(yaml.safe_load_all((VAP_EXAMPLE / "admission-policy.yaml").read_text()))
    docs[0]["spec"]["paramKind"] = {"apiVersion": "v1", "kind": "Secret"}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump_all(docs[:2]))
    assert main(["test", "-p", str(tmp_path / "policy.yaml"), "-r", str(VAP_EXAMPLE / "resources.yaml"),
                 "--namespace-file", str(VAP_EXAMPLE / "namespaces.yaml"), "-o", "json"]) == 1
    out, err = capsys.readouterr()
    rows = json.loads(out)
    shop = [r for r in rows if r["namespace"] == "shop" and r["kind"] == "Deployment"]
    assert {r["result"] for r in shop} == {"error"}
    assert all("policy is not ready: ValidatingAdmissionPolicy required-labels: spec.paramKind: v1 Secret"
               in r["message"] for r in shop)
    assert f"warning: {tmp_path}/policy.yaml:" in err and ": spec.paramKind: v1 Secret" in err


def test_test_prints_the_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: x}\nspec:\n"
                      "  webhookConfiguration: {timeoutSeconds: 5}\n  matchConstraints:\n    resourceRules:\n"
                      "    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n"
                      "  validations: [{expression: 'true'}]\n")
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    assert main(["test", "-p", str(policy), "-r", str(pod)]) == 0
    assert (f"tollgate test: {policy}:5: document 1: ValidatingPolicy x: note: spec.webhookConfiguration."
            "timeoutSeconds: not per policy" in capsys.readouterr().err)


def test_lint_warns_of_notes_and_list_merges_without_failing(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "map.yaml").write_text("""\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: m}
spec:
  reinvocationPolicy: IfNeeded
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{spec: Object.spec{tolerations: [Object.spec.tolerations{key: 'a'}]}}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: mb}
spec: {policyName: m}
---
""" + POLICY)
    assert main(["lint", str(tmp_path)]) == 1  # the ValidatingAdmissionPolicy's CEL error; warnings never fail
    out = capsys.readouterr().out.splitlines()
    assert f"{tmp_path}/map.yaml:5: document 1: MutatingAdmissionPolicy m: note: spec.reinvocationPolicy: " \
           "IfNeeded: Tollgate invokes the mutations once per request (a later mutation never reinvokes them)" in out
    assert f"{tmp_path}/map.yaml:18: document 3: ValidatingAdmissionPolicy need-team: note: no binding names it, " \
           "so it selects nothing (as on the API server)" in out
    assert any(line.startswith(f"{tmp_path}/map.yaml:11: document 1: MutatingAdmissionPolicy m (binding mb): warning: "
                               "spec.mutations[0].applyConfiguration.expression: pods: .spec.tolerations is atomic")
               for line in out)
    # A policy no binding names is still checked: its CEL error, at its line.
    assert f"{tmp_path}/map.yaml:27: document 3: ValidatingAdmissionPolicy need-team: " \
           "spec.validations[1].expression: ERROR: <input>:1:7: undeclared reference to 'objekt.metadata'" in out


KYVERNO_OUT_OF_SCOPE = """\
apiVersion: policies.kyverno.io/v1alpha1
kind: {kind}
metadata: {{name: out-of-scope}}
spec: {{}}
"""


@pytest.mark.parametrize("kind", ["GeneratingPolicy", "DeletingPolicy", "ImageValidatingPolicy",
                                  "NamespacedGeneratingPolicy"])
def test_lint_refuses_kyvernos_kinds_out_of_scope_naming_them(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              kind: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(KYVERNO_OUT_OF_SCOPE.format(kind=kind))
    assert main(["lint", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:2: document 1: kind: {kind} out-of-scope: refused: a {kind} " in out


def test_test_warns_of_a_refused_kind_beside_the_policies_it_runs(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text((KYVERNO_EXAMPLE / "validating-policy.yaml").read_text() + "---\n" +
                        KYVERNO_OUT_OF_SCOPE.format(kind="DeletingPolicy"))
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: a}]}\n")
    main(["test", "-p", str(policies), "-r", str(pod)])
    assert "warning: " in (err := capsys.readouterr().err) and "DeletingPolicy out-of-scope: refused" in err


def test_lint_refuses_mutate_existing_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    policy = {"apiVersion": "policies.kyverno.io/v1alpha1", "kind": "MutatingPolicy", "metadata": {"name": "m"},
              "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                               "operations": ["CREATE"], "resources": ["pods"]}]},
                       "evaluation": {"admission": {"enabled": True}, "mutateExisting": {"enabled": True}},
                       "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                           "expression": "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}}]}}
    path.write_text(yaml.safe_dump(policy))
    assert main(["lint", str(path)]) == 1
    assert "MutatingPolicy m: spec.evaluation.mutateExisting.enabled: Tollgate never mutates stored objects" in \
        capsys.readouterr().out


def test_lint_and_test_read_a_namespaced_validating_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "NamespacedValidatingPolicy",
              "metadata": {"name": "no-evil", "namespace": "team-a"},
              "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                               "operations": ["CREATE"], "resources": ["pods"]}]},
                       "validations": [{"expression": "object.spec.containers.all(c, !c.image.startsWith('evil'))",
                                        "message": "no evil images"}]}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(source))
    assert main(["lint", str(path)]) == 0, capsys.readouterr()
    pods = tmp_path / "pods.yaml"
    pods.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: team-a}\n"
                    "spec: {containers: [{name: c, image: evil.example/x}]}\n---\n"
                    "apiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: team-b}\n"
                    "spec: {containers: [{name: c, image: evil.example/x}]}\n")
    capsys.readouterr()
    main(["test", "-p", str(path), "-r", str(pods), "-o", "json"])
    rows = {r["namespace"]: r["result"] for r in json.loads(capsys.readouterr().out)}
    assert rows == {"team-a": "fail", "team-b": "skip"}
