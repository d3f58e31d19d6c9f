"""Decision parity of Tollgate's Pod Security policies with Kyverno's own test corpus.

For every policy folder of ``tests/fixtures/kyverno-pod-security-cel``, the
same-named Tollgate policy is run (with ``tollgate test``'s engine code) over
the folder's ``.kyverno-test/resource.yaml``; each resource's result must equal
the one ``.kyverno-test/kyverno-test.yaml`` expects — Pods and pod controllers
(through ``autogen.podControllers``) alike. A resource that Kyverno lists under
several rules of one policy fails if any of them fails. Read at test time; the
corpus is vendored with its LICENSE and source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures import ROOT, fixture_dir
from webhook.files.chain import evaluate_pair
from webhook.files.requests import build_request
from webhook.policy import InMemoryLookups, compile_policy

FIXTURES = fixture_dir("kyverno-pod-security-cel")
POLICIES = ROOT / "policies" / "pod-security"
#: Kyverno policies with several rules whose tests name only some rules for some resources: the
#: Tollgate validation (index in spec.validations) that corresponds to each rule.
RULE_VALIDATIONS = {("disallow-capabilities-strict", "require-drop-all"): 0,
                    ("disallow-capabilities-strict", "adding-capabilities-strict"): 1,
                    ("disallow-selinux", "selinux-type"): 0,
                    ("disallow-selinux", "selinux-user-role"): 1}


def cases() -> list[tuple[str, str, str, str, str, tuple[str, ...]]]:
    """(level, policy, kind, name, expected, rules) for every resource Kyverno's tests name.

    ``rules`` are the Kyverno rules the expectation covers when it covers only some of the
    policy's rules (empty when it covers all of them).
    """
    out = []
    for folder in sorted(p for p in FIXTURES.glob("*/*") if p.is_dir()):
        test = yaml.safe_load((folder / ".kyverno-test" / "kyverno-test.yaml").read_text())
        all_rules = {entry["rule"] for entry in test["results"]}
        expected: dict[tuple[str, str], str] = {}
        rules: dict[tuple[str, str], set[str]] = {}
        for entry in test["results"]:
            for name in entry["resources"]:
                key = (entry["kind"], name)
                rules.setdefault(key, set()).add(entry["rule"])
                if expected.get(key) != "fail":
                    expected[key] = entry["result"]
        out += [(folder.parent.name, folder.name, kind, name, want,
                 () if rules[(kind, name)] == all_rules else tuple(sorted(rules[(kind, name)])))
                for (kind, name), want in sorted(expected.items())]
    return out


CASES = cases()
_resources: dict[Path, dict[tuple[str, str], dict[str, Any]]] = {}


def resource(folder: Path, kind: str, name: str) -> dict[str, Any]:
    if folder not in _resources:
        docs = yaml.safe_load_all((folder / ".kyverno-test" / "resource.yaml").read_text())
        _resources[folder] = {(d["kind"], d["metadata"]["name"]): d for d in docs if d}
    return _resources[folder][(kind, name)]


def test_fixtures_are_present_and_every_folder_has_a_policy() -> None:
    folders = {(p.parent.name, p.name) for p in FIXTURES.glob("*/*") if p.is_dir()}
    assert len(folders) == 17
    assert len(CASES) == 925, "the vendored corpus names 925 resources"
    missing = [f"{level}/{name}" for level, name in sorted(folders)
               if not (POLICIES / level / f"{name}.yaml").is_file()]
    assert missing == []


@pytest.mark.parametrize(("level", "policy", "kind", "name", "expected", "rules"), CASES,
                         ids=[f"{c[1]}:{c[2]}/{c[3]}" for c in CASES])
def test_decision_matches_kyverno(level: str, policy: str, kind: str, name: str, expected: str,
                                  rules: tuple[str, ...]) -> None:
    doc = yaml.safe_load((POLICIES / level / f"{policy}.yaml").read_text())
    if rules:
        # Kyverno checks this resource against some rules only: keep our corresponding validations.
        doc["spec"]["validations"] = [doc["spec"]["validations"][RULE_VALIDATIONS[(policy, r)]] for r in rules]
    compiled = compile_policy(doc)
    assert compiled.policy is not None, compiled.condition
    obj = resource(FIXTURES / level / policy, kind, name)
    user = {"username": "tester", "groups": ["system:authenticated"]}
    request = build_request(obj, operation="CREATE", user_info=user)
    result, message = evaluate_pair(compiled.policy, request, InMemoryLookups())
    assert result == expected, message
    if result == "fail":
        assert message, "a denial must say why"
