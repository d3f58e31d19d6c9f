"""The Pod Security library exported as ValidatingAdmissionPolicies denies exactly what it denies itself.

``policies/pod-security`` (baseline and restricted, ``autogen.podControllers``) is exported with
:func:`webhook.formats.kubernetes.export.export_policy`, the exported policies and bindings are read back
by ``tollgate test``'s loader (Tollgate imports ValidatingAdmissionPolicies as the API server runs them),
and both sets are run over the library's test inputs — every Pod, Deployment and CronJob of
``tests/fixtures/kyverno-pod-security-cel`` — as CREATE requests: each policy's result on each
resource must be the same, with the same message (Tollgate's ``spec.template: `` prefix included).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.fixtures import ROOT, fixture_dir
from webhook.files.testsuite import Row, run_adhoc
from webhook.formats.kubernetes.export import export_policy

LIBRARY = ROOT / "policies" / "pod-security"
RESOURCES = sorted(fixture_dir("kyverno-pod-security-cel").glob("*/*/.kyverno-test/resource.yaml"))


def _run(policies: list[Path]) -> list[Row]:
    rows, warnings = run_adhoc(policies=policies, resources=RESOURCES, configmaps=[], namespaces=[],
                               old_resources=[], operation="CREATE", user_info={"username": "alice"},
                               params_selector="")
    assert warnings == []
    return rows


def _decisions(rows: list[Row], policies: int) -> dict[tuple[int, str], tuple[str, str]]:
    """``(resource index, policy name) → (result, message)``; an imported policy's row is ``Kind/name/binding``."""
    return {(i // policies, row.policy.split("/")[1] if "/" in row.policy else row.policy): (row.result, row.message)
            for i, row in enumerate(rows)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = [d for path in sorted(LIBRARY.glob("*/*.yaml")) for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict) and d.get("kind") == "ClusterAdmissionPolicy"]
    results = [export_policy(d) for d in docs]
    assert [r.blockers for r in results] == [[] for _ in docs]
    out = tmp_path_factory.mktemp("export") / "pod-security.yaml"
    out.write_text(yaml.safe_dump_all([o for r in results for o in r.objects]))
    return out


def test_the_exported_library_decides_as_the_library(exported: Path) -> None:
    original = _run([LIBRARY / "baseline", LIBRARY / "restricted"])
    policies = len({row.policy for row in original})
    assert policies == 17
    back = _run([exported])
    assert all(row.policy.startswith("ValidatingAdmissionPolicy/") for row in back)
    kinds = Counter(row.kind for row in original[::policies])
    assert kinds == {"Pod": 310, "Deployment": 309, "CronJob": 309}
    want, got = _decisions(original, policies), _decisions(back, policies)
    assert Counter(result for result, _ in want.values())["fail"] > 1000  # the inputs deny, for every kind
    assert {row.kind for row in original if row.result == "fail"} == {"Pod", "Deployment", "CronJob"}
    differing = sorted(key for key in want if got.get(key) != want[key])
    assert differing == []
