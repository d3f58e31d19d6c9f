"""Lint warnings about an ApplyConfiguration's lists (webhook/policy/merge_check.py, tollgate lint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.policy.helpers import policy
from webhook.cli.main import main
from webhook.policy.merge_check import mutation_warnings, patch_shape
from webhook.policy.model import parse_policy


def apply_configuration(expression: str, **kwargs: object) -> dict[str, object]:
    return policy(mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}],
                  **kwargs)


def test_patch_shape_reads_literals_ternaries_and_map_results() -> None:
    assert patch_shape("Object{spec: Object.spec{replicas: 1, containers: object.spec.containers.map(c, "
                       "Object.spec.containers{name: c.name, args: ['x']})}}") == {
        "spec": {"replicas": 0, "containers": [{"name": ..., "args": [0]}]}}
    assert patch_shape("true ? {'a': {'b': [1]}} : {'a': {'c': [2]}}") == {"a": {"b": [0], "c": [0]}}
    assert patch_shape("object.spec") is ...
    assert patch_shape("{'metadata': {'labels': object.metadata.labels}}") == {"metadata": {"labels": ...}}


def test_a_custom_resource_list_is_a_warning_about_the_fallback() -> None:
    spec = parse_policy(apply_configuration("Object{spec: Object.spec{parts: [Object.spec.parts{name: 'a'}], "
                                            "color: 'red'}}", groups=("example.com",), resources=("widgets",)))
    assert mutation_warnings(spec) == [("spec.mutations[0].applyConfiguration.expression",
                                        "widgets.example.com: the merge strategy of .spec.parts is unknown (no "
                                        "schema: a custom resource, a wildcard or a kind Tollgate does not know); a "
                                        "list there replaces the object's whole")]


def test_a_runtime_value_under_a_wildcard_rule_is_a_warning() -> None:
    spec = parse_policy(apply_configuration("{'spec': object.spec}", groups=("*",), resources=("*",)))
    (only,) = mutation_warnings(spec)
    assert only[1].startswith("* (any group): the merge strategy of .spec is unknown")


def test_built_in_list_maps_are_not_warned_about_but_atomics_are() -> None:
    by_name = parse_policy(apply_configuration(
        "Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{name: c.name, "
        "imagePullPolicy: 'Always'})}}"))
    assert mutation_warnings(by_name) == []
    atomic = parse_policy(apply_configuration("{'spec': {'nodeSelector': {'disk': 'ssd'}}}"))
    assert [m for _, m in mutation_warnings(atomic)] == [
        "pods: .spec.nodeSelector is atomic: the API server refuses an ApplyConfiguration that sets it (may not "
        "mutate atomic arrays, maps or structs), and so does Tollgate"]


def test_lint_prints_the_warning_and_still_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    (tmp_path / "p.yaml").write_text(yaml.safe_dump(apply_configuration(
        "{'spec': {'parts': ['a']}}", groups=("example.com",), resources=("widgets",))))
    assert main(["lint", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{tmp_path / 'p.yaml'}:")
    assert "warning: spec.mutations[0].applyConfiguration.expression: widgets.example.com: the merge strategy" in out
    assert err.strip() == "1 document(s) checked, no problems, 1 warning(s)"
