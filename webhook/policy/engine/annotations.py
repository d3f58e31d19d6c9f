"""Audit-annotation keys the API server keeps: one qualified-name part per annotation, tenant-safe.

The API server stores a webhook's ``auditAnnotations`` under ``<webhook name>/<key>`` and drops a key
that does not make that a valid qualified name (``annotation key has invalid format``), so ``key`` must
be a single name part: at most 63 characters of ``[A-Za-z0-9]``, ``-``, ``_`` and ``.``, starting and
ending with an alphanumeric, and no ``/``. Tollgate's keys are (what the API server records, e.g.
``validate.tollgate.dev/allowed-registries.registries``):

* a policy's own ``auditAnnotations``: ``<policy>.<key>`` for a ClusterAdmissionPolicy,
  ``<namespace>_<policy>.<key>`` for an AdmissionPolicy. Policy names and namespaces never contain
  ``_`` and namespaces never contain ``.``, so a tenant's key can never equal a cluster policy's
  (before the first ``_``, a cluster key has a ``.``, a tenant's none);
* ``Audit`` results: one ``validation_failure`` key whose value is a JSON list of
  ``{"policy", "result", "message", "validationActions"}``, as the API server writes
  ``validation.policy.admission.k8s.io/validation_failure`` for a ValidatingAdmissionPolicy.

A key longer than 63 characters is cut and suffixed with 12 characters of the SHA-256 of the full
key, so distinct keys stay distinct.
"""

from __future__ import annotations

import base64
import hashlib
import re

from webhook.policy.model import PolicySpec
from webhook.policy.vocabulary import PolicyKind

__all__ = ["MAX_KEY_LENGTH", "VALIDATION_FAILURE_KEY", "annotation_key", "fit_key"]

#: Longest name part of a qualified name (k8s.io/apimachinery ``validation.IsQualifiedName``).
MAX_KEY_LENGTH = 63
#: The key of the JSON list of ``Audit`` results (VAP's ``validation_failure``).
VALIDATION_FAILURE_KEY = "validation_failure"

_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DIGEST = 12


def fit_key(key: str) -> str:
    """``key`` as a valid qualified-name part: unchanged when it is one, else cut and suffixed with a digest.

    Characters outside ``[-A-Za-z0-9_.]`` become ``-``; the digest is over the original ``key``.
    """
    if len(key) <= MAX_KEY_LENGTH and _NAME_PART.match(key):
        return key
    digest = base64.b32encode(hashlib.sha256(key.encode()).digest()).decode().lower()[:_DIGEST]
    head = re.sub(r"[^-A-Za-z0-9_.]", "-", key)[:MAX_KEY_LENGTH - _DIGEST - 1].strip("-_.")
    return f"{head}-{digest}" if head else digest


def annotation_key(spec: PolicySpec, key: str) -> str:
    """The ``auditAnnotations`` key for the policy's own annotation ``key`` (see the module docstring)."""
    owner = f"{spec.namespace}_{spec.name}" if spec.kind is PolicyKind.NAMESPACED else spec.name
    return fit_key(f"{owner}.{key}")
