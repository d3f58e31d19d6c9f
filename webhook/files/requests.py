"""The AdmissionRequest the API server would send for an object read from a file.

``tollgate test`` (and the benchmarks and parity tests that reuse it) turns each
resource into the request kube-apiserver builds for it (:func:`build_request`):
``kind``/``resource`` from the static kind table
(:func:`webhook.policy.resources.resource_for_kind`), ``object`` and ``oldObject``
per operation, ``subResource`` when asked for. A resource is named by
:func:`resource_key`, ``(kind, namespace, name)``, with the namespace ``kubectl
apply`` would give it; the old object of an UPDATE is found by that key.
"""

from __future__ import annotations

import uuid
from typing import Any

from webhook.files.yamlio import Document, InputError
from webhook.policy.resources import resource_for_kind
from webhook.policy.vocabulary import REQUEST_OPERATIONS

OPERATIONS = tuple(REQUEST_OPERATIONS)
#: ``request.userInfo`` of a test that names none.
DEFAULT_USER: dict[str, Any] = {"username": "tollgate-test", "groups": ["system:authenticated"]}


def resource_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    """``(kind, namespace, name)``: namespace ``default`` if a namespaced object has none, ``""`` if cluster-scoped."""
    kind = str(obj.get("kind", ""))
    meta = obj.get("metadata") or {}
    namespaced = resource_for_kind(kind, str(obj.get("apiVersion", ""))).namespaced
    namespace = str(meta.get("namespace") or "default") if namespaced else ""
    return kind, namespace, str(meta.get("name", ""))


def describe_key(key: tuple[str, str, str]) -> str:
    """``Pod default/web`` or ``Namespace shop``."""
    kind, namespace, name = key
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``obj`` with ``metadata.namespace`` set to the request's when it has none.

    The API server fills it before admission (k8s.io/apiserver ``pkg/registry/rest/create.go``
    ``BeforeCreate``: ``objectMeta.SetNamespace`` from the request's namespace), and Kyverno's CLI does too.
    """
    meta = obj.get("metadata")
    if not namespace or not isinstance(meta, dict) or meta.get("namespace"):
        return obj
    return {**obj, "metadata": {**meta, "namespace": namespace}}


def build_request(obj: dict[str, Any], *, operation: str, user_info: dict[str, Any],
                  old_object: dict[str, Any] | None = None, sub_resource: str = "") -> dict[str, Any]:
    """An AdmissionRequest for ``obj`` as the API server would send it.

    Args:
        obj: the resource.
        operation: ``CREATE`` | ``UPDATE`` | ``DELETE`` | ``CONNECT``.
        user_info: ``request.userInfo`` (``username``, ``uid``, ``groups``, ``extra``).
        old_object: ``oldObject`` for UPDATE. On DELETE ``object`` is null and
            ``oldObject`` is ``obj`` (or ``old_object`` when given), as on a cluster.
        sub_resource: ``subResource`` and ``requestSubResource`` (``ephemeralcontainers``,
            ``status``); ``obj`` is still the whole object, as the API server sends for
            ``pods/ephemeralcontainers`` since Kubernetes 1.22.

    A namespaced ``obj`` without ``metadata.namespace`` is sent with the request's (``default``), as
    the API server fills it.
    """
    api_version = str(obj.get("apiVersion", "v1"))
    group, _, version = api_version.rpartition("/")
    kind, namespace, name = resource_key(obj)
    obj = _in_namespace(obj, namespace)
    old_object = _in_namespace(old_object, namespace) if old_object is not None else None
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource_for_kind(kind, api_version).plural}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": name,
        "operation": operation,
        "userInfo": user_info,
        "object": None if operation == "DELETE" else obj,
        "oldObject": (old_object or obj) if operation == "DELETE" else old_object,
        "dryRun": False,
        "options": None,
    }
    if namespace:
        request["namespace"] = namespace
    if sub_resource:
        request["subResource"] = request["requestSubResource"] = sub_resource
    return request


def old_object_for(key: tuple[str, str, str], olds: dict[tuple[str, str, str], Document], operation: str,
                   where: str) -> dict[str, Any] | None:
    """The ``oldObject`` of the request for the resource ``key``: its document among ``olds``, if any.

    Args:
        key: the resource's :func:`resource_key`.
        olds: the old resources by :func:`resource_key`.
        operation: the request's operation.
        where: where the request comes from (file, line, document), for the error.

    Raises:
        InputError: ``operation`` is UPDATE and ``olds`` has no ``key``: the API server always sends
            the old object of an UPDATE.
    """
    old = olds.get(key)
    if operation == "UPDATE" and old is None:
        raise InputError(f"{where}: operation UPDATE needs the old {describe_key(key)}: add it to the old "
                         "resources (TestSuite oldResources, or --old-resource)")
    return old.obj if old is not None else None
