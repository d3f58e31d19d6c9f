"""Print the objects under policies/ that belong in a cluster, as one multi-document YAML.

Used by tests/e2e/run.sh (``kubectl apply -f``). policies/ also holds inputs
for ``tollgate test`` (resources, TestSuites, stand-in Namespaces); only these
are kept:

* ``ClusterAdmissionPolicy`` and ``AdmissionPolicy`` objects;
* ``ConfigMap`` objects labelled ``tollgate.dev/params=true`` (policy params;
  the server's ConfigMap informer watches only those).

A ``Namespace`` is emitted first for every namespace these objects live in,
other than the ones Kubernetes or manifests/ already create.

Usage: ``python tests/e2e/collect_policies.py policies/ > policies.yaml``
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

POLICY_KINDS = frozenset({"ClusterAdmissionPolicy", "AdmissionPolicy"})
PARAMS_LABEL = ("tollgate.dev/params", "true")
EXISTING_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "tollgate-system"})


def wanted(doc: dict[str, Any]) -> bool:
    """Whether ``doc`` is a policy or a params ConfigMap."""
    if doc.get("kind") in POLICY_KINDS and str(doc.get("apiVersion", "")).startswith("tollgate.dev/"):
        return True
    if doc.get("kind") == "ConfigMap" and doc.get("apiVersion") == "v1":
        labels = (doc.get("metadata") or {}).get("labels") or {}
        return labels.get(PARAMS_LABEL[0]) == PARAMS_LABEL[1]
    return False


def collect(root: Path) -> list[dict[str, Any]]:
    """Namespaces, then params ConfigMaps, then policies, from every ``*.yaml``/``*.yml`` under ``root``."""
    found: list[dict[str, Any]] = []
    for path in sorted([*root.rglob("*.yaml"), *root.rglob("*.yml")]):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as exc:
            raise SystemExit(f"{path}: {exc}") from exc
        found.extend(d for d in docs if isinstance(d, dict) and wanted(d))
    namespaces = sorted({ns for d in found if (ns := (d.get("metadata") or {}).get("namespace"))} - EXISTING_NAMESPACES)
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in namespaces
    ]
    # Params before policies: a policy whose ConfigMap is not cached yet would
    # answer per parameterNotFoundAction until it is.
    out += [d for d in found if d["kind"] == "ConfigMap"]
    out += [d for d in found if d["kind"] != "ConfigMap"]
    return out


def main(argv: list[str]) -> int:
    """Entry point: ``argv[1]`` is the policies directory."""
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    docs = collect(Path(argv[1]))
    if not any(d["kind"] in POLICY_KINDS for d in docs):
        print(f"no policies found under {argv[1]}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
