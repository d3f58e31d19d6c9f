"""Expanding manifests/ without kubectl, and with it: the helpers of the manifest tests.

:func:`build` expands a kustomization as kustomize does for what these files use:
``resources`` (files and kustomization directories), ``components`` (directories whose
``kustomization.yaml`` is ``kind: Component``: their resources join the accumulated ones, then
their patches apply to all of them), JSON 6902 ``patches`` with a ``target``; a Component listed
under ``resources`` (or a Kustomization under ``components``) and an id registered twice are
errors, as in kustomize.

:func:`deployments` names every supported deployment: one certificate source (the static
Secret of ``manifests/``, cert-manager or self-managed) with any subset of the other
components. :func:`kubectl_kustomize` renders one of them with the real kustomize.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "manifests"
COMPONENTS = MANIFESTS / "components"
KUSTOMIZATION = "kustomize.config.k8s.io/v1beta1"
COMPONENT = "kustomize.config.k8s.io/v1alpha1"
#: Where the serving certificate comes from: the static Secret of manifests/ (from manifests/tls/), or a component.
CERTIFICATE_SOURCES = ("static", "cert-manager", "self-managed")
#: Components that combine with each other and with every certificate source.
OPTIONAL = ("background-audit", "policy-reports", "references")


def _targets(doc: dict[str, Any], target: dict[str, Any]) -> bool:
    group, _, version = doc.get("apiVersion", "").rpartition("/")
    meta = doc.get("metadata") or {}
    return all(want == have for want, have in ((target.get("kind"), doc.get("kind")),
                                               (target.get("name"), meta.get("name")),
                                               (target.get("group"), group), (target.get("version"), version))
               if want is not None)


def _load(directory: Path) -> dict[str, Any]:
    path = directory / "kustomization.yaml"
    assert path.is_file(), f"{directory} has no kustomization.yaml"
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def _patch(directory: Path, kustomization: dict[str, Any], docs: list[dict[str, Any]]) -> None:
    for patch in kustomization.get("patches") or []:
        ops = yaml.safe_load(patch["patch"])
        hits = [i for i, d in enumerate(docs) if _targets(d, patch["target"])]
        assert hits, f"{directory}: patch target {patch['target']} matches nothing"
        for i in hits:
            docs[i] = jsonpatch.apply_patch(docs[i], ops)


def _resources(directory: Path, kustomization: dict[str, Any]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources") or []:
        path = (directory / entry).resolve()
        assert path.exists(), f"{directory}/kustomization.yaml: {entry} does not exist"
        if path.is_dir():
            assert _load(path).get("kind", "Kustomization") == "Kustomization", (
                f"{directory}: {entry} is a Component: list it under components, not resources")
            docs += build(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def build(directory: Path, *, components: tuple[Path, ...] = ()) -> list[dict[str, Any]]:
    """The documents ``kubectl kustomize directory`` emits (for the features used here).

    Args:
        directory: a kustomization directory.
        components: more Component directories, applied after the kustomization's own.
    """
    kustomization = _load(directory)
    assert kustomization.get("kind", "Kustomization") == "Kustomization", f"{directory} is not a Kustomization"
    docs = _resources(directory, kustomization)
    for path in [(directory / entry).resolve() for entry in kustomization.get("components") or []] + list(components):
        component = _load(path)
        assert (component.get("apiVersion"), component.get("kind")) == (COMPONENT, "Component"), (
            f"{path}: a component must be {COMPONENT} Component")
        docs += _resources(path, component)
        _patch(path, component, docs)
    _patch(directory, kustomization, docs)
    ids = [(d.get("kind"), (d.get("metadata") or {}).get("namespace"), d["metadata"]["name"]) for d in docs]
    duplicates = {i for i in ids if ids.count(i) > 1}
    assert not duplicates, f"{directory}: resources registered twice: {duplicates}"
    return docs


@dataclass(frozen=True)
class Deployment:
    """One supported way to deploy: a certificate source and optional components.

    Attributes:
        certificate: one of :data:`CERTIFICATE_SOURCES`.
        components: a subset of :data:`OPTIONAL`, sorted.
    """

    certificate: str
    components: tuple[str, ...]

    @property
    def id(self) -> str:
        return "+".join((self.certificate, *self.components))

    def component_dirs(self) -> tuple[Path, ...]:
        names = self.components if self.certificate == "static" else (self.certificate, *self.components)
        return tuple(COMPONENTS / n for n in names)

    def base(self) -> Path:
        """manifests/ (static Secret from manifests/tls/) or manifests/install/."""
        return MANIFESTS if self.certificate == "static" else MANIFESTS / "install"

    def build(self) -> list[dict[str, Any]]:
        """The structural expansion; the static Secret (a generator) is left out."""
        base = MANIFESTS / "install" if self.certificate == "static" else self.base()
        return build(base, components=self.component_dirs())


def deployments() -> list[Deployment]:
    """Every certificate source with every subset of the optional components."""
    return [Deployment(cert, subset) for cert in CERTIFICATE_SOURCES
            for n in range(len(OPTIONAL) + 1) for subset in itertools.combinations(OPTIONAL, n)]


def kubectl_kustomize(deployment: Deployment, tmp: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of a kustomization that composes ``deployment`` over a copy of manifests/.

    For the static source, ``tollgate certs`` writes the copy's tls/ first, as docs/deploying.md says.
    """
    copy = tmp / "manifests"
    shutil.copytree(MANIFESTS, copy, ignore=shutil.ignore_patterns("tls"))
    if deployment.certificate == "static":
        from webhook.tls import generate as certs

        certs.write_certs(copy / "tls", dns_names=certs.service_dns_names("tollgate", "tollgate-system"), days=1)
    user = tmp / "mine"
    user.mkdir()
    base = "../manifests" if deployment.certificate == "static" else "../manifests/install"
    (user / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": KUSTOMIZATION, "kind": "Kustomization", "resources": [base],
        "components": [f"../manifests/components/{d.name}" for d in deployment.component_dirs()]}))
    out = subprocess.run(["kubectl", "kustomize", str(user)], capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def kubectl_available() -> bool:
    """Whether ``kubectl`` with a kustomize that knows Components (v4+) is on PATH."""
    if shutil.which("kubectl") is None:
        return False
    out = subprocess.run(["kubectl", "version", "--client"], capture_output=True, text=True, timeout=30)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("Kustomize Version:")), "")
    major = line.removeprefix("Kustomize Version:").strip().lstrip("v").split(".")[0]
    return major.isdigit() and int(major) >= 4
