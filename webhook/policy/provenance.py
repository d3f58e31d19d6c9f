"""Where an imported policy came from, and what keeps it from being honoured, as its policy object carries them.

An imported policy is served as a ``ClusterAdmissionPolicy`` object the importer builds
(:mod:`webhook.formats.catalog`). What it was made from and any import problem travel in
that object's annotations, so every process that compiles it (the server, its evaluation
workers, ``tollgate test``/``lint``/``audit``) reaches the same result from the object alone:
:func:`webhook.policy.compile_policy` answers a policy carrying :data:`IMPORT_ERROR_ANNOTATION`
as not Ready (reason ``ImportError``), and the requests it selects get its ``failurePolicy``.

Names: ``<Kind>/<policy>/<binding>`` for a Kubernetes policy and its binding (one Tollgate policy
per binding, as the API server evaluates a policy once per binding), ``<Kind>/<policy>`` for a
Kyverno policy. The kind's capital letters keep the name apart from every Tollgate key: a
ClusterAdmissionPolicy's name holds no ``/``, and an AdmissionPolicy's key is
``<namespace>/<name>`` with a lowercase DNS label as namespace. Names are injective: a ``/`` or
``%`` inside a part (the API server refuses both in a name, but a file under ``serve --local`` is not
the API server) is percent-escaped (``%2F``, ``%25``), so policy ``a`` with binding ``b/c``
(``Kind/a/b%2Fc``) and policy ``a/b`` with binding ``c`` (``Kind/a%2Fb/c``) are two policies, and every
name the API server accepts reads as written.
"""

from __future__ import annotations

from typing import Any

__all__ = ["IMPORTED_FROM_ANNOTATION", "IMPORT_ERROR_ANNOTATION", "import_error", "imported_from", "imported_name"]

#: The source objects, ``Kind name`` each, joined by ``, `` (policy first, then its binding).
IMPORTED_FROM_ANNOTATION = "tollgate.dev/imported-from"
#: Why the policy cannot be honoured (one line per problem, ``Kind name: path: message``); absent when it can.
IMPORT_ERROR_ANNOTATION = "tollgate.dev/import-error"


def imported_name(kind: str, policy: str, binding: str | None = None) -> str:
    """The name (and key) of an imported policy: ``Kind/policy/binding`` or ``Kind/policy``.

    Each part has its ``%`` and ``/`` percent-escaped (``%25``, ``%2F``, as RFC 3986 escapes a path
    segment), so distinct (kind, policy, binding) never share a name; a DNS-subdomain name (all the
    API server accepts, ``apimachinery/pkg/api/validation/path`` refuses ``/`` and ``%``) is unchanged.
    """
    parts = (kind, policy) if binding is None else (kind, policy, binding)
    return "/".join(_escape(p) for p in parts)


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def _annotations(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def import_error(obj: Any) -> str | None:
    """The import problem a policy object carries (:data:`IMPORT_ERROR_ANNOTATION`), or None."""
    value = _annotations(obj).get(IMPORT_ERROR_ANNOTATION)
    return value if isinstance(value, str) and value else None


def imported_from(obj: Any) -> str | None:
    """The source objects of an imported policy object (:data:`IMPORTED_FROM_ANNOTATION`), or None."""
    value = _annotations(obj).get(IMPORTED_FROM_ANNOTATION)
    return value if isinstance(value, str) and value else None
