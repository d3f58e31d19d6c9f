"""CHANGELOG.md names the installed version: ``tollgate --version``, pyproject.toml and the Helm chart agree."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from webhook.cli.main import package_version

ROOT = Path(__file__).resolve().parents[3]


def releases() -> list[tuple[str, str]]:
    """``(version, date)`` of each release heading, newest first (Keep a Changelog's ``## [X.Y.Z] - DATE``)."""
    return re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", (ROOT / "CHANGELOG.md").read_text(), re.M)


def test_the_newest_release_is_the_installed_version() -> None:
    newest, _date = releases()[0]
    assert package_version() == newest
    chart = yaml.safe_load((ROOT / "manifests" / "helm" / "tollgate" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == newest
    kustomization = yaml.safe_load((ROOT / "manifests" / "install" / "kustomization.yaml").read_text())
    assert [i["newTag"] for i in kustomization["images"] if i["name"] == "tollgate"] == [newest]


def test_releases_are_in_order_with_an_unreleased_section_on_top() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.index("## [Unreleased]") < text.index("## [" + releases()[0][0] + "]")
    versions = [tuple(map(int, v.split("."))) for v, _ in releases()]
    dates = [d for _, d in releases()]
    assert versions == sorted(versions, reverse=True) and dates == sorted(dates, reverse=True)
    sections = set(re.findall(r"^### (\w+)$", text, re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
