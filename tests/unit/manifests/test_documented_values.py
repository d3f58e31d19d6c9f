"""What README.md, docs/deploying.md and policies/README.md say about the install matches the files.

Issue 25 found docs/deploying.md promising 512Mi where the Deployment had 768Mi, and
``kubectl kustomize policies/pod-security`` failing although the README says it applies both sets.
These tests read the numbers, paths and commands out of the documents and check them against the
manifests, the chart and the tree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.manifests.kustomize import COMPONENTS, MANIFESTS, ROOT, build

DOCS = [ROOT / "README.md", ROOT / "docs" / "deploying.md", ROOT / "policies" / "README.md"]
DEPLOYING = (ROOT / "docs" / "deploying.md").read_text()
CHART = MANIFESTS / "helm" / "tollgate"
#: Top-level directories of the tree a document may name.
TREE = ("manifests/", "policies/", "tests/", "docs/", "bench/", "webhook/", ".ci/")


def _container() -> dict[str, Any]:
    deployment = next(d for d in build(MANIFESTS / "install") if d["kind"] == "Deployment")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _mib(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "Gi" else 1)


def _one(pattern: str, text: str = DEPLOYING) -> re.Match[str]:
    found = list(re.finditer(pattern, text))
    assert len(found) == 1, f"{pattern!r}: {len(found)} matches"
    return found[0]


def test_documented_limits_and_requests_are_the_deployments() -> None:
    resources = _container()["resources"]
    cpu, memory = _one(r"The default limits \((\S+) CPU, (\w+)\)").groups()
    assert (cpu, memory) == (resources["limits"]["cpu"], resources["limits"]["memory"])
    assert _one(r"`requests\.memory` \((\w+)\)").group(1) == resources["requests"]["memory"]
    chart = yaml.safe_load((CHART / "values.yaml").read_text())["resources"]
    assert chart == resources
    limits = _one(r"requests (\S+) / (\w+), limits (\S+) CPU / (\w+)").groups()
    assert limits == (resources["requests"]["cpu"], resources["requests"]["memory"], resources["limits"]["cpu"],
                      resources["limits"]["memory"])


def test_documented_evaluation_workers_fit_in_the_memory_limit() -> None:
    args = _container()["args"]
    workers, cap = _one(r"`--eval-workers=(\d+)`, each capped at (\d+) MiB by `--eval-memory-limit=(\d+)`").group(
        1, 2)
    flag = _one(r"`--eval-memory-limit=(\d+)`").group(1)
    assert f"--eval-workers={workers}" in args and f"--eval-memory-limit={flag}" in args
    assert int(flag) == int(cap) * 1024 * 1024
    left = _one(r"which leaves the server about (\d+) MiB").group(1)
    assert int(left) <= _mib(_container()["resources"]["limits"]["memory"]) - int(workers) * int(cap)


def test_documented_replicas_are_the_deployments() -> None:
    deployment = next(d for d in build(MANIFESTS / "install") if d["kind"] == "Deployment")
    assert _one(r"\| `deployment\.yaml` \| (\d+) replicas").group(1) == str(deployment["spec"]["replicas"])
    readme = (ROOT / "README.md").read_text()
    assert _one(r"a (\d+)-replica Deployment", readme).group(1) == str(deployment["spec"]["replicas"])


def test_the_components_table_names_every_component() -> None:
    section = DEPLOYING[DEPLOYING.index("### Optional parts"):DEPLOYING.index("## Step by step")]
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", section, re.M))
    assert documented == {p.name for p in COMPONENTS.iterdir()}


def test_the_helm_values_table_names_every_value() -> None:
    section = DEPLOYING[DEPLOYING.index("## Helm"):DEPLOYING.index("## Webhook configurations are generated")]
    rows = re.findall(r"^\| (`[^|]+) \|", section, re.M)
    documented = {name.split(".")[0] for row in rows for name in re.findall(r"`([\w.]+)`", row)}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert documented == set(values)


def _named_paths(text: str) -> set[str]:
    tokens = re.findall(r"`([^`\s]+)`", text) + re.findall(r"\]\(([^)#\s]+)", text)
    tokens += [w for cmd in re.findall(r"`([^`]+)`", text) for w in cmd.split()]
    out = set()
    for raw in tokens:
        token = raw.rstrip(".,;:)")
        if token.startswith(TREE) and not re.search(r"[<>*{}$]|\.\.\.", token):
            out.add(token)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[d.name if d.parent == ROOT else f"{d.parent.name}/{d.name}" for d in DOCS])
def test_every_path_a_document_names_exists(doc: Path) -> None:
    base = doc.parent if doc.parent.name == "docs" else ROOT
    paths = _named_paths(doc.read_text())
    assert paths, "the document names no path (the pattern is broken)"
    # manifests/tls/ holds what `tollgate certs` writes (never committed): the directory must exist.
    named = {str(Path(p).parent) if p.startswith("manifests/tls/") else p for p in paths}
    missing = [p for p in sorted(named) if not (ROOT / p).exists() and not (base / p).exists()]
    assert missing == []


def _commands(pattern: str) -> set[str]:
    return {m for doc in DOCS for m in re.findall(pattern, doc.read_text())}


def test_every_documented_kustomization_builds() -> None:
    directories = (_commands(r"kubectl (?:apply|delete) -k (\S+?)/?[`\s]")
                   | _commands(r"kubectl kustomize (\S+?)/?[`\s]"))
    directories = {d for d in directories if d.startswith(("manifests", "policies"))}
    assert {"manifests", "policies/pod-security", "policies/pod-security/baseline",
            "manifests/overlays/cert-manager"} <= directories
    for directory in sorted(directories):
        if directory == "manifests":
            build(MANIFESTS / "install")  # plus the Secret generated from manifests/tls/ (not committed)
        else:
            assert build(ROOT / directory), directory


def test_every_documented_chart_path_is_the_chart() -> None:
    charts = _commands(r"helm (?:install|upgrade|template|lint) \S+ (\S+)")
    assert charts == {"manifests/helm/tollgate"}
    assert (ROOT / "manifests/helm/tollgate/Chart.yaml").is_file()
