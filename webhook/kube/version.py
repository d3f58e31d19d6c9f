"""The API server's version, and what Tollgate cannot do on one older than it supports.

Tollgate supports Kubernetes 1.30 or newer (docs/deploying.md). On an older API server it still
serves, but without pieces the API server itself provides, silently unless it says so:

* webhook ``matchConditions`` (1.27 alpha, 1.28 beta, GA 1.30) are dropped when the webhook
  configurations are written, so the API server sends Tollgate its own ServiceAccount's requests,
  kubelets', Leases, Events and reviews that the generated exclusions would have left out;
* the ``kubernetes.io/metadata.name`` Namespace label (1.21) is unset, so the generated
  ``namespaceSelector`` that leaves out ``kube-system`` and Tollgate's namespace excludes nothing;
* ``pods/ephemeralcontainers`` carries an ``EphemeralContainers`` object before 1.22, not the Pod.

:func:`server_version` reads ``GET /version`` once at start; :func:`unsupported` says, in one line,
what is missing, so the serving process logs it at error level (and the operator sees it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubernetes_asyncio.client import ApiClient

from webhook.kube.api import call_json

__all__ = ["MINIMUM", "ServerVersion", "server_version", "unsupported"]

#: The oldest API server Tollgate supports (docs/deploying.md).
MINIMUM = (1, 30)

#: What an older server lacks: (the version that brought it, what is lost without it).
_FEATURES = (
    ((1, 21), "the kubernetes.io/metadata.name Namespace label is unset, so the webhook namespaceSelector "
              "excludes no namespace (kube-system and Tollgate's own included)"),
    ((1, 22), "pods/ephemeralcontainers carries an EphemeralContainers object, not the Pod"),
    ((1, 28), "webhook matchConditions are dropped, so Tollgate's own, kubelets', Leases', Events' and review "
              "requests are sent to it"),
)


@dataclass(frozen=True, slots=True)
class ServerVersion:
    """``GET /version``: ``gitVersion`` (``v1.20.2``) and its major and minor numbers."""

    git_version: str
    major: int
    minor: int

    @classmethod
    def parse(cls, info: dict[str, object]) -> ServerVersion:
        """From the ``/version`` document; minors such as ``"20+"`` (some distributions) keep their number.

        Raises:
            ValueError: no major or minor number.
        """
        git = str(info.get("gitVersion") or "")
        major = re.match(r"\d+", str(info.get("major") or ""))
        minor = re.match(r"\d+", str(info.get("minor") or ""))
        if major is None or minor is None:
            found = re.match(r"v?(\d+)\.(\d+)", git)
            if found is None:
                raise ValueError(f"no version number in {info!r}")
            return cls(git, int(found.group(1)), int(found.group(2)))
        return cls(git or f"v{major.group()}.{minor.group()}", int(major.group()), int(minor.group()))


async def server_version(api_client: ApiClient, *, timeout: float = 10.0) -> ServerVersion:
    """The API server's version.

    Raises:
        ApiException, aiohttp.ClientError: the request failed.
        ValueError: the answer names no version.
    """
    return ServerVersion.parse(await call_json(api_client, "GET", "/version", timeout=timeout))


def unsupported(version: ServerVersion) -> str | None:
    """One line saying what is lost on ``version`` when it is older than :data:`MINIMUM`; None otherwise."""
    if (version.major, version.minor) >= MINIMUM:
        return None
    lost = [what for since, what in _FEATURES if (version.major, version.minor) < since]
    suffix = ": " + "; ".join(lost) if lost else ""
    return (f"the API server is version {version.git_version}, older than {MINIMUM[0]}.{MINIMUM[1]}, the oldest "
            f"Tollgate supports{suffix}")
