"""Kubernetes objects the cluster suites create, read from the shipped policies where they depend on them.

Shared by the kind suite (tests/e2e) and the real-API-server suite (tests/realapi), with their polling
(:func:`eventually`): Pods that meet the
restricted Pod Security Standard and the examples, their privileged and Deployment variants, ConfigMaps,
Ingresses, and the shipped policies' own messages and params, so the suites follow the policies' wording
instead of restating it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def configmap(
    name: str, namespace: str, *, data: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A ConfigMap object."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}




def shipped(kind: str, name: str) -> dict[str, Any]:
    """The object ``kind``/``name`` from policies/; skip the test when it is not shipped."""
    for path in sorted(ROOT.joinpath("policies").rglob("*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == kind and doc.get("metadata", {}).get("name") == name:
                return doc
    pytest.skip(f"{kind} {name} is not in policies/")


def messages(policy: dict[str, Any]) -> list[str]:
    """What each validation's message starts with.

    Its ``message``, or the leading string literal of its ``messageExpression``
    (e.g. ``'privileged containers are not allowed: '``).
    """
    out = []
    for validation in policy["spec"].get("validations", []):
        if validation.get("message"):
            out.append(validation["message"])
        elif literal := re.match(r"\s*'([^']+)'", validation.get("messageExpression", "")):
            out.append(literal.group(1))
    return out


def allowed_registry() -> str:
    """A registry prefix the allowed-registries example accepts (first entry of its params)."""
    policy = shipped("ClusterAdmissionPolicy", "allowed-registries")
    ref = policy["spec"].get("paramRef") or {}
    params = shipped("ConfigMap", ref.get("name", "allowed-registries"))
    value = next(iter((params.get("data") or {}).values()), "")
    first = value.replace("\n", ",").split(",")[0].strip()
    assert first, f"no registry in {params['data']}"
    return first


def image_in(registry: str, repository: str) -> str:
    """``repository`` (e.g. ``pause:3.10``) under a registry prefix with or without a trailing slash."""
    return f"{registry.rstrip('/')}/{repository}"


def compliant_pod(namespace: str, name: str, *, image: str | None = None) -> dict[str, Any]:
    """A Pod meeting the restricted Pod Security Standard and the examples (team label, pinned tag)."""
    if image is None:
        image = image_in(allowed_registry(), "pause:3.10")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"team": "e2e", "app": "e2e"}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "app",
                    "image": image,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True,
                        "readOnlyRootFilesystem": True,
                    },
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "50m", "memory": "32Mi"},
                    },
                }
            ],
        },
    }


def privileged(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with its container privileged (and allowed to escalate, as privileged implies)."""
    pod = json.loads(json.dumps(pod))
    pod["spec"]["containers"][0]["securityContext"].update({"privileged": True, "allowPrivilegeEscalation": True})
    return pod


def deployment_of(pod: dict[str, Any]) -> dict[str, Any]:
    """A Deployment whose pod template is ``pod``."""
    meta = pod["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": meta["labels"]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": meta["labels"]["app"]}},
            "template": {"metadata": {"labels": meta["labels"]}, "spec": pod["spec"]},
        },
    }


def ingress(name: str, namespace: str, host: str) -> dict[str, Any]:
    """An Ingress routing ``host`` to a Service named like it."""
    backend = {"service": {"name": name, "port": {"number": 80}}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name, "namespace": namespace},
            "spec": {"rules": [{"host": host, "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend}]}}]}}


def eventually(check: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.2) -> T:
    """Retry ``check`` until it stops raising AssertionError; re-raise its last one after ``timeout`` seconds.

    Policies, webhook configurations and statuses reach a cluster by watch, not instantly.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(interval)
