"""``tollgate test`` on Kyverno's CLI tests (``kyverno-test.yaml``), unchanged: rows, exit status, directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures import fixture_dir
from webhook.cli.main import main

LIBRARY = fixture_dir("kyverno-policies")
TEST_FILE = ".kyverno-test/kyverno-test.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["test", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_vendored_library_tests_all_hold(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, str(LIBRARY), "-o", "json")
    rows = json.loads(out)
    assert status == 0, err
    assert len({r["suite"] for r in rows}) == 9 and all(r["ok"] for r in rows)
    assert {r["expected"] for r in rows} == {"pass", "fail", "skip"}


def test_json_rows_carry_expected_and_ok_as_suite_rows_do(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, str(LIBRARY / "other-vpol/limit-hostpath-vols" / TEST_FILE), "-o", "json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert status == 0
    bad = rows["bad-pods-all"]
    assert (bad["policy"], bad["kind"], bad["result"], bad["expected"], bad["ok"]) == (
        "limit-hostpath-vols", "Pod", "fail", "fail", True)
    # The values file makes this resource's request an UPDATE.
    assert (bad["operation"], rows["good-pods-all"]["operation"]) == ("UPDATE", "CREATE")


def copy_test(tmp_path: Path, folder: str) -> Path:
    dest = tmp_path / Path(folder).name
    shutil.copytree(LIBRARY / folder, dest)
    return dest


def test_an_unmet_expectation_exits_1_and_names_the_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = copy_test(tmp_path, "other-vpol/limit-hostpath-vols")
    test_file = dest / TEST_FILE
    test_file.write_text(test_file.read_text().replace("result: pass", "result: fail"))
    status, _, err = run(capsys, str(test_file))
    assert status == 1
    assert "limit-hostpath-vols on Pod/default/good-pods-all (CREATE): expected fail, got pass" in err


def test_a_patched_resource_that_differs_is_a_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = copy_test(tmp_path, "best-practices-mpol/add-safe-to-evict")
    patched = dest / ".kyverno-test/myapp-pod03-patched.yaml"
    patched.write_text(patched.read_text().replace('"true"', '"false"'))
    status, _, err = run(capsys, str(dest))
    assert status == 1 and "differs from the mutated object" in err and "safe-to-evict" in err


def test_namespace_selector_labels_reach_namespace_object(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    dest = copy_test(tmp_path, "velero-mpol/backup-all-volumes")
    values = dest / ".kyverno-test/values.yaml"
    values.write_text(values.read_text().replace('velero-backup-pvc: "true"', 'velero-backup-pvc: "false"'))
    status, _, _ = run(capsys, str(dest))
    assert status == 1


def test_a_row_naming_a_resource_the_test_lacks_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = copy_test(tmp_path, "other-vpol/limit-hostpath-vols")
    test_file = dest / TEST_FILE
    test_file.write_text(test_file.read_text().replace("- good-pods-all", "- no-such-pod"))
    status, _, err = run(capsys, str(test_file))
    assert status == 1 and "no Pod no-such-pod in the test's resources" in err


@pytest.mark.parametrize(("field", "line"), [
    ("jsonPayloads: [payload.json]", "jsonPayloads: JSON payloads are evaluated by Kyverno's JSON mode"),
    ("clusterResources: [crd.yaml]", "clusterResources: cluster resources (CRDs) are not read by Tollgate"),
    ("surprise: 1", "surprise: unknown field"),
])
def test_what_tollgate_cannot_run_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          field: str, line: str) -> None:
    dest = copy_test(tmp_path, "other-vpol/limit-hostpath-vols")
    test_file = dest / TEST_FILE
    test_file.write_text(test_file.read_text() + f"\n{field}\n")
    status, _, err = run(capsys, str(test_file))
    assert status == 2 and line in err and "Traceback" not in err
    assert f"{test_file}:" in err


def test_a_tree_mixing_test_suites_and_kyverno_tests_runs_both(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    copy_test(tmp_path, "other-vpol/limit-hostpath-vols")
    root = Path(__file__).resolve().parents[3] / "policies" / "examples"
    example = next(p.parent for p in sorted(root.glob("*/test.yaml")))
    shutil.copytree(example, tmp_path / example.name)
    status, out, err = run(capsys, str(tmp_path), "-o", "json")
    suites = {Path(r["suite"]).name for r in json.loads(out)}
    assert status == 0, err
    assert suites == {"kyverno-test.yaml", "test.yaml"}


def test_a_request_fills_the_object_namespace_as_the_api_server_does() -> None:
    from webhook.files.requests import build_request

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    request = build_request(pod, operation="UPDATE", user_info={}, old_object=pod)
    assert request["namespace"] == "default"
    assert request["object"]["metadata"]["namespace"] == request["oldObject"]["metadata"]["namespace"] == "default"
    assert "namespace" not in pod["metadata"]
    node = build_request({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}, operation="CREATE",
                         user_info={})
    assert "namespace" not in node["object"]["metadata"] and "namespace" not in node


def test_a_resource_given_twice_is_one_row_and_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = copy_test(tmp_path, "other-vpol/limit-hostpath-vols")
    test_file = dest / TEST_FILE
    test_file.write_text(test_file.read_text().replace("- badpod.yaml", "- badpod.yaml\n- goodpod.yaml"))
    status, out, err = run(capsys, str(test_file), "-o", "json")
    assert status == 0 and len(json.loads(out)) == 2
    assert "is given twice" in err and "the first is used, as Kyverno's CLI does" in err


def test_lint_checks_a_kyverno_test_for_what_tollgate_test_refuses(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    dest = copy_test(tmp_path, "other-vpol/limit-hostpath-vols")
    test_file = dest / TEST_FILE
    assert main(["lint", str(test_file)]) == 0
    test_file.write_text(test_file.read_text() + "targetResources: [t.yaml]\n")
    capsys.readouterr()
    assert main(["lint", str(test_file)]) == 1
    lines = len(test_file.read_text().splitlines())
    assert f"{test_file}:{lines}: document 1: targetResources: target resources are what mutateExisting mutates" in \
        capsys.readouterr().out


def test_image_metadata_comes_from_the_context_images(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """block-stale-images compares ``image.GetMetadata(image).config.created`` with a date: the Context's image
    data answers it; an image the Context lacks is an error row, as in Kyverno's CLI."""
    status, out, err = run(capsys, str(LIBRARY / "other-vpol/block-stale-images" / TEST_FILE), "-o", "json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert status == 0, err
    assert (rows["redis-bad"]["result"], rows["redis-good"]["result"]) == ("fail", "pass")
    assert "docker.io/redis:6.0.0-buster" in rows["redis-bad"]["message"]
    dest = copy_test(tmp_path, "other-vpol/block-stale-images")
    context = dest / ".kyverno-test/context.yaml"
    context.write_text(context.read_text().replace("docker.io/redis:latest", "docker.io/redis:other"))
    status, out, _ = run(capsys, str(dest / TEST_FILE), "-o", "json")
    good = {r["name"]: r for r in json.loads(out)}["redis-good"]
    assert status == 1 and good["result"] == "error"
    assert "image data for docker.io/redis:latest not found in the context" in good["message"]


def test_image_metadata_is_refused_outside_tollgate_test(capsys: pytest.CaptureFixture[str]) -> None:
    policy = LIBRARY / "other-vpol/block-stale-images/block-stale-images.yaml"
    status = main(["lint", str(policy)])
    out, err = capsys.readouterr()
    assert status == 1 and "image.GetMetadata is Kyverno's ImageData library" in out + err
