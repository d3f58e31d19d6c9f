"""``tollgate webhook-config``: refuses input it would ignore, and values the API server would refuse."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from webhook.cli.main import main
from webhook.tls import generate as certs

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "policies" / "examples"

POLICY = """\
apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata: {{name: {name}}}
spec:
  match: {{resourceRules: [{{apiGroups: [""], apiVersions: [v1], resources: [{resource}], operations: [{op}]}}]}}
  validations: [{{expression: "{expression}"}}]
"""


def policy(name: str, *, resource: str = "pods", op: str = "CREATE", expression: str = "true") -> str:
    return POLICY.format(name=name, resource=resource, op=op, expression=expression)


def routed_resources(out: str) -> set[str]:
    docs = list(yaml.safe_load_all(out))
    return {r for doc in docs for hook in doc["webhooks"] for rule in hook["rules"] for r in rule["resources"]}


def test_every_invalid_policy_is_named_and_nothing_is_printed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.yaml").write_text(
        policy("a", op="CREAT") + "---\n" + policy("b").replace("  match:", "  matchh:") + "---\n" + policy("ok"))
    assert main(["webhook-config", "--policies", str(tmp_path / "bad.yaml")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    where = tmp_path / "bad.yaml"
    assert err.splitlines() == [
        f"tollgate webhook-config: {where}:5: document 1: spec.match.resourceRules[0].operations[0]: unsupported "
        "value CREAT: must be one of CREATE, UPDATE, DELETE, CONNECT, *",
        f"tollgate webhook-config: {where}:11: document 2: spec.match: required field is missing",
        f"tollgate webhook-config: {where}:12: document 2: spec.matchh: unknown field (did you mean match?)",
        "tollgate webhook-config: 3 problem(s): no configuration printed",
    ]


def test_directories_skip_other_kinds_and_a_named_file_must_hold_a_policy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(policy("p", resource="configmaps") + "---\napiVersion: v1\nkind: Pod\n"
                                     "metadata: {name: x}\n")
    (tmp_path / "suite.yaml").write_text("apiVersion: tollgate.dev/v1alpha1\nkind: TestSuite\n")
    assert main(["webhook-config", "--policies", str(tmp_path)]) == 0
    assert routed_resources(capsys.readouterr().out) == {"configmaps"}
    assert main(["webhook-config", "--policies", str(tmp_path / "suite.yaml")]) == 2
    assert f"{tmp_path / 'suite.yaml'}: no ClusterAdmissionPolicy or AdmissionPolicy" in capsys.readouterr().err


def test_a_list_in_json_and_a_cel_error_is_routed_with_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = [yaml.safe_load(policy("s", resource="secrets", expression="objekt.x"))]
    (tmp_path / "list.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["webhook-config", "--policies", str(tmp_path / "list.json")]) == 0
    out, err = capsys.readouterr()
    assert routed_resources(out) == {"secrets"}  # answered per its failurePolicy, so routed
    assert err.startswith(f"tollgate webhook-config: warning: {tmp_path / 'list.json'}:1: document 1 items[0]: "
                          "ClusterAdmissionPolicy s is not Ready (spec.validations[0].expression: ERROR:")


def test_a_key_given_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(policy("p") + "  validationActions: [Deny]\n  validationActions: [Warn]\n")
    assert main(["webhook-config", "--policies", str(tmp_path / "p.yaml")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"tollgate webhook-config: {tmp_path / 'p.yaml'}:8:3: invalid YAML: duplicate key "
                                 "'validationActions' (first on line 7)\n")


def test_ca_bundle_from_pem_or_base64_and_anything_else_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = certs.write_certs(tmp_path, dns_names=["tollgate"], days=1)
    (tmp_path / "ca.b64").write_text(base64.b64encode(paths.ca.read_bytes()).decode())
    bundles = []
    for source in (paths.ca, tmp_path / "ca.b64"):
        assert main(["webhook-config", "--policies", str(EXAMPLES), "--ca-bundle", str(source)]) == 0
        out, err = capsys.readouterr()
        assert "no caBundle" not in err  # given: no note
        docs = list(yaml.safe_load_all(out))
        bundles.append({hook["clientConfig"]["caBundle"] for doc in docs for hook in doc["webhooks"]})
    assert bundles[0] == bundles[1] and len(bundles[0]) == 1
    assert base64.b64decode(bundles[0].pop()).strip() == paths.ca.read_bytes().strip()
    (tmp_path / "word.b64").write_text(base64.b64encode(b"hello").decode())
    for bad in (ROOT / "README.md", tmp_path / "word.b64", paths.key):
        assert main(["webhook-config", "--policies", str(EXAMPLES), "--ca-bundle", str(bad)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == (f"tollgate webhook-config: --ca-bundle {bad}: not a PEM CA certificate "
                                     "(ca.crt from `tollgate certs`) nor its base64\n")


@pytest.mark.parametrize("value", ["0", "31", "-1", "five"])
def test_timeout_seconds_outside_what_the_api_server_accepts(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhook-config", "--policies", str(EXAMPLES), "--timeout-seconds", value]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "argument --timeout-seconds: invalid value" in err


@pytest.mark.parametrize("value", ["1", "30"])
def test_timeout_seconds_bounds_are_accepted(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhook-config", "--policies", str(EXAMPLES), "--timeout-seconds", value]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {hook["timeoutSeconds"] for doc in docs for hook in doc["webhooks"]} == {int(value)}


def test_without_ca_bundle_a_note_says_what_the_api_server_will_trust(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhook-config", "--policies", str(EXAMPLES)]) == 0
    out, err = capsys.readouterr()
    assert not any("caBundle" in hook["clientConfig"] for doc in yaml.safe_load_all(out) for hook in doc["webhooks"])
    [note] = [line for line in err.splitlines() if "caBundle" in line]
    assert note.startswith("tollgate webhook-config: note: no caBundle (no --ca-bundle)") and "--ca-bundle" in note
