"""Kyverno's CLI test files (``cli.kyverno.io/v1alpha1``), read as written (pure; no I/O).

``kyverno test`` reads a ``Test`` (``kyverno-test.yaml``) that names policy and resource files, a
``variables`` values file (``Values``: request fields, Namespace labels, Namespaces), a ``userinfo``
file (``UserInfo``) and a ``context`` file (``Context``: objects ``resource.Get``/``List`` read), and
lists ``results``: per policy and kind, the resources (``name`` or ``namespace/name``) and the result
expected (``pass | fail | warn | skip | error``), with the ``patchedResources`` file a mutation must
leave. The shapes are kyverno/kyverno ``cmd/cli/kubectl-kyverno/apis/v1alpha1`` (``test.go``,
``test_result.go``, ``values_spec.go``, ``context.go``, ``user_info.go``); how a result row picks its
resources is ``commands/test/output.go`` (``printTestResult``: a bare name matches every resource of
that name, ``namespace/name`` that namespace too), and the request a value's ``request.operation``
makes is ``processor/operation.go`` (UPDATE: the resource is ``object`` and ``oldObject``; DELETE:
``oldObject`` only).

This module parses those documents into :class:`KyvernoTest`, :class:`Values`, a userInfo and the
context's objects; :mod:`webhook.files.testsuite` reads the files and runs them. What Tollgate cannot
run (payload tests, target resources of ``mutateExisting``, generated resources, image data Kyverno
fetches from registries, values other than ``request.operation``) is a :class:`TestFormatError`
naming the field: never ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CLI_API_VERSION", "RESULTS", "Expectation", "KyvernoTest", "TestFormatError", "Values", "context_images",
           "context_objects", "is_kyverno_test", "parse_test", "parse_user_info", "parse_values", "tidy"]

#: The API version of Kyverno's CLI files.
CLI_API_VERSION = "cli.kyverno.io/v1alpha1"
#: The results a row may expect (openreports' ``Result``).
RESULTS = ("pass", "fail", "warn", "skip", "error")
#: Test fields Tollgate reads.
_READ = ("apiVersion", "kind", "metadata", "name", "policies", "resources", "variables", "values", "userinfo",
         "context", "results", "exceptions")
#: Test fields Tollgate refuses, and why (one line each).
_REFUSED = {
    "jsonPayload": "JSON payloads are evaluated by Kyverno's JSON mode, which Tollgate does not have",
    "jsonPayloads": "JSON payloads are evaluated by Kyverno's JSON mode, which Tollgate does not have",
    "httpPayloads": "HTTP authorization payloads are Kyverno's authz policies, which Tollgate does not have",
    "envoyPayloads": "Envoy authorization payloads are Kyverno's authz policies, which Tollgate does not have",
    "targetResources": "target resources are what mutateExisting mutates, which Tollgate never does",
    "paramResources": "Kyverno policies have no params in Tollgate (use a TestSuite's configMaps)",
    "clusterResources": "cluster resources (CRDs) are not read by Tollgate",
    "apiCallResponses": "API call responses stand in for Kyverno's http library, which Tollgate refuses",
    "globalContextEntries": "global context entries stand in for Kyverno's globalContext, which Tollgate refuses",
}
_RESULT_FIELDS = ("policy", "rule", "kind", "resources", "result", "operation", "patchedResources",
                  "isValidatingPolicy", "isMutatingPolicy", "isMUtatingPolicy", "isValidatingAdmissionPolicy",
                  "isMutatingAdmissionPolicy")
_RESULT_REFUSED = {
    "isDeletingPolicy": "DeletingPolicy is out of Tollgate's scope",
    "isImageValidatingPolicy": "ImageValidatingPolicy is out of Tollgate's scope",
    "isGeneratingPolicy": "GeneratingPolicy is out of Tollgate's scope",
    "generatedResource": "generated resources come from GeneratingPolicies, which Tollgate does not run",
    "generatedResources": "generated resources come from GeneratingPolicies, which Tollgate does not run",
    "cloneSourceResource": "clone sources are GeneratingPolicies', which Tollgate does not run",
    "resourceSpecs": "resourceSpecs is not read by Tollgate: name the resources in resources",
    "failOnMissingResources": "failOnMissingResources is not read by Tollgate (a missing resource always fails)",
}
#: The values Tollgate honours (Kyverno's CEL policies read the request, not Kyverno's variables).
_VALUE_KEYS = ("request.operation",)
_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")

Path = tuple[str | int, ...]


class TestFormatError(ValueError):
    """A Kyverno CLI document Tollgate cannot run: ``path`` (its YAML path) and one line saying why."""

    __test__ = False  # not a pytest class

    def __init__(self, path: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.path: Path = tuple(path)
        self.message = message


def is_kyverno_test(obj: Any) -> bool:
    """Whether ``obj`` is a Kyverno CLI ``Test`` (``cli.kyverno.io/v1alpha1``)."""
    return isinstance(obj, dict) and obj.get("apiVersion") == CLI_API_VERSION and obj.get("kind") == "Test"


@dataclass(frozen=True, slots=True)
class Expectation:
    """One ``results`` entry: a policy's expected result on each resource it names.

    Attributes:
        index: its position in ``results``.
        policy: the policy's name (``namespace/name`` for a namespaced policy, as Kyverno writes it).
        kind: the resources' kind.
        resources: ``name`` or ``namespace/name`` each.
        result: the result expected (:data:`RESULTS`).
        operation: the request's operation (``operation``; None: the values' or CREATE).
        patched_resources: the file (relative to the test) holding the object the mutations must leave.
    """

    index: int
    policy: str
    kind: str
    resources: tuple[str, ...]
    result: str
    operation: str | None = None
    patched_resources: str | None = None

    @property
    def policy_name(self) -> str:
        """The policy's name without its namespace."""
        return self.policy.rpartition("/")[2]

    @property
    def policy_namespace(self) -> str | None:
        """The namespace ``policy`` names (``namespace/name``), or None."""
        namespace, slash, _ = self.policy.rpartition("/")
        return namespace if slash else None


@dataclass(frozen=True, slots=True)
class KyvernoTest:
    """A parsed ``Test``: its files (relative to the test file) and expectations.

    Attributes:
        name: ``metadata.name`` (or the legacy top-level ``name``).
        policies: policy files or directories.
        resources: resource files or directories.
        variables: the values file, or None.
        values: the inline values (``values``), or None.
        userinfo: the UserInfo file, or None.
        context: the Context file, or None.
        results: the expectations, in file order.
        exceptions: Kyverno CEL PolicyException files (``policies.kyverno.io``, read by
            :mod:`webhook.formats.kyverno.exceptions`); ``()`` for none.
    """

    name: str
    policies: tuple[str, ...]
    resources: tuple[str, ...]
    variables: str | None
    values: Values | None
    userinfo: str | None
    context: str | None
    results: tuple[Expectation, ...]
    exceptions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Values:
    """A values file (``Values``/``Value``, ``ValuesSpec``): what the requests and Namespaces look like.

    Attributes:
        operation: the global ``request.operation`` (None: CREATE).
        resource_operations: ``(policy, resource name)`` → its ``request.operation``.
        namespaces: Namespace objects (``namespaces``, and one per ``namespaceSelector`` entry with its labels).
    """

    operation: str | None = None
    resource_operations: dict[tuple[str, str], str] = field(default_factory=dict)
    namespaces: tuple[dict[str, Any], ...] = ()

    def operation_for(self, policy: str, resource: str) -> str | None:
        """The ``request.operation`` the values give the policy's request for the resource, or None."""
        return self.resource_operations.get((policy, resource), self.operation)


def _strings(obj: dict[str, Any], key: str, path: Path, *, required: bool = False) -> tuple[str, ...]:
    raw = obj.get(key)
    if raw is None:
        if required:
            raise TestFormatError((*path, key), "required field is missing")
        return ()
    if not isinstance(raw, list) or not all(isinstance(s, str) and s for s in raw):
        raise TestFormatError((*path, key), "must be a list of non-empty strings")
    return tuple(raw)


def _string(obj: dict[str, Any], key: str, path: Path) -> str | None:
    raw = obj.get(key)
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise TestFormatError((*path, key), "must be a string")
    return raw


def _expectation(i: int, raw: Any) -> Expectation:
    path: Path = ("results", i)
    if not isinstance(raw, dict):
        raise TestFormatError(path, "must be an object")
    for key in raw:
        if key in _RESULT_REFUSED and raw[key] not in (None, False, "", []):
            raise TestFormatError((*path, key), _RESULT_REFUSED[key])
        if key not in _RESULT_FIELDS and key not in _RESULT_REFUSED:
            raise TestFormatError((*path, key), "unknown field")
    policy, kind = _string(raw, "policy", path), _string(raw, "kind", path)
    if policy is None:
        raise TestFormatError((*path, "policy"), "required field is missing")
    if kind is None:
        raise TestFormatError((*path, "kind"), "required field is missing")
    resources = _strings(raw, "resources", path, required=True)
    result = raw.get("result")
    if result not in RESULTS:
        raise TestFormatError((*path, "result"), f"must be one of {', '.join(RESULTS)}, got {result!r}")
    operation = _string(raw, "operation", path)
    if operation is not None and operation not in _OPERATIONS[:3]:
        raise TestFormatError((*path, "operation"), f"must be CREATE, UPDATE or DELETE, got {operation!r}")
    return Expectation(i, policy, kind, resources, str(result), operation, _string(raw, "patchedResources", path))


def parse_test(obj: dict[str, Any]) -> KyvernoTest:
    """A ``Test`` document as :class:`KyvernoTest`.

    Raises:
        TestFormatError: a field Tollgate refuses (payloads, target resources, ...), an unknown
            field, or a malformed one.
    """
    for key in obj:
        if key in _REFUSED:
            raise TestFormatError((key,), _REFUSED[key])
        if key not in _READ:
            raise TestFormatError((key,), "unknown field")
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    raw_results = obj.get("results")
    if not isinstance(raw_results, list) or not raw_results:
        raise TestFormatError(("results",), "required: a non-empty list")
    values = obj.get("values")
    if values is not None and not isinstance(values, dict):
        raise TestFormatError(("values",), "must be an object")
    return KyvernoTest(
        name=name if isinstance(name, str) else str(obj.get("name") or ""),
        policies=_strings(obj, "policies", (), required=True),
        resources=_strings(obj, "resources", (), required=True),
        variables=_string(obj, "variables", ()),
        values=_values_spec(values, ("values",)) if values is not None else None,
        userinfo=_string(obj, "userinfo", ()),
        context=_string(obj, "context", ()),
        results=tuple(_expectation(i, r) for i, r in enumerate(raw_results)),
        exceptions=_strings(obj, "exceptions", ()),
    )


def _operation(values: Any, path: Path) -> str | None:
    if values is None:
        return None
    if not isinstance(values, dict):
        raise TestFormatError(path, "must be an object")
    for key in values:
        if key not in _VALUE_KEYS:
            raise TestFormatError((*path, key), f"not honoured: Tollgate reads only {', '.join(_VALUE_KEYS)} "
                                                "(Kyverno's CEL policies read the request itself)")
    operation = values.get("request.operation")
    if operation is None or operation == "":
        return None
    if operation not in _OPERATIONS:
        raise TestFormatError((*path, "request.operation"), f"must be one of {', '.join(_OPERATIONS)}, "
                                                            f"got {operation!r}")
    # CONNECT is accepted as Kyverno does, which does not simulate it for CEL policies (CREATE's shape).
    return "CREATE" if operation == "CONNECT" else str(operation)


def _values_spec(obj: dict[str, Any], path: Path) -> Values:
    known = ("apiVersion", "kind", "metadata", "globalValues", "policies", "namespaceSelector", "namespaces",
             "subresources")
    for key in obj:
        if key not in known:
            raise TestFormatError((*path, key), "unknown field")
    if obj.get("subresources"):
        raise TestFormatError((*path, "subresources"), "not read by Tollgate")
    operations: dict[tuple[str, str], str] = {}
    for i, policy in enumerate(obj.get("policies") or []):
        ppath = (*path, "policies", i)
        if not isinstance(policy, dict) or not isinstance(policy.get("name"), str):
            raise TestFormatError(ppath, "must be an object with a name")
        if policy.get("rules"):
            raise TestFormatError((*ppath, "rules"), "rule values are for Kyverno's ClusterPolicies, not read by "
                                                     "Tollgate")
        for j, resource in enumerate(policy.get("resources") or []):
            rpath = (*ppath, "resources", j)
            if not isinstance(resource, dict) or not isinstance(resource.get("name"), str):
                raise TestFormatError(rpath, "must be an object with a name")
            operation = _operation(resource.get("values"), (*rpath, "values"))
            if operation is not None:
                operations[(policy["name"], resource["name"])] = operation
    namespaces: dict[str, dict[str, Any]] = {}
    for i, ns in enumerate(obj.get("namespaces") or []):
        meta = ns.get("metadata") if isinstance(ns, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise TestFormatError((*path, "namespaces", i, "metadata", "name"), "required field is missing")
        # Kyverno's files write ``kind: namespace`` too; the object is a Namespace either way.
        namespaces[name] = {**ns, "apiVersion": "v1", "kind": "Namespace"}
    for i, selector in enumerate(obj.get("namespaceSelector") or []):
        spath = (*path, "namespaceSelector", i)
        if not isinstance(selector, dict) or not isinstance(selector.get("name"), str):
            raise TestFormatError(spath, "must be an object with a name")
        labels = selector.get("labels") or {}
        if not isinstance(labels, dict):
            raise TestFormatError((*spath, "labels"), "must be a map of strings")
        existing = namespaces.get(selector["name"], {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": selector["name"]}})
        meta = dict(existing.get("metadata") or {})
        meta["labels"] = {**(meta.get("labels") or {}), **{str(k): str(v) for k, v in labels.items()}}
        namespaces[selector["name"]] = {**existing, "metadata": meta}
    return Values(_operation(obj.get("globalValues"), (*path, "globalValues")), operations,
                  tuple(namespaces.values()))


def parse_values(obj: dict[str, Any]) -> Values:
    """A values file (``kind: Values`` or ``Value``) as :class:`Values`.

    ``namespaceSelector`` entries become Namespaces with those labels (Kyverno's CLI gives a
    request's ``namespaceObject`` these labels); ``request.operation`` (global, or per policy and
    resource) becomes the request's operation.

    Raises:
        TestFormatError: an unknown field, a value other than ``request.operation``, rule values.
    """
    if obj.get("apiVersion") not in (CLI_API_VERSION, None) or obj.get("kind") not in ("Values", "Value", None):
        raise TestFormatError(("kind",), f"expected {CLI_API_VERSION} Values, got {obj.get('apiVersion')} "
                                         f"{obj.get('kind')}")
    return _values_spec(obj, ())


def parse_user_info(obj: dict[str, Any]) -> dict[str, Any]:
    """A ``UserInfo`` file's ``request.userInfo`` (its ``userInfo``: username, uid, groups, extra).

    Kyverno's ``roles``/``clusterRoles`` (RBAC it resolves for its ClusterPolicies) are not part of an
    admission request and are refused when set.

    Raises:
        TestFormatError: not a UserInfo, roles given, or a malformed ``userInfo``.
    """
    if obj.get("kind") not in ("UserInfo", None):
        raise TestFormatError(("kind",), f"expected {CLI_API_VERSION} UserInfo, got {obj.get('kind')}")
    for key in ("roles", "clusterRoles"):
        if obj.get(key):
            raise TestFormatError((key,), "Kyverno's resolved RBAC roles are not part of an admission request, "
                                          "which is all Tollgate's policies read")
    info = obj.get("userInfo") or {}
    if not isinstance(info, dict):
        raise TestFormatError(("userInfo",), "must be an object")
    return dict(info)


def context_objects(obj: dict[str, Any]) -> list[tuple[Path, dict[str, Any]]]:
    """A ``Context`` file's objects (``spec.resources``: what ``resource.Get``/``List`` read), with their paths.

    Raises:
        TestFormatError: not a Context, or a malformed ``spec``.
    """
    spec = _context_spec(obj)
    out: list[tuple[Path, dict[str, Any]]] = []
    for i, item in enumerate(spec.get("resources") or []):
        if not isinstance(item, dict):
            raise TestFormatError(("spec", "resources", i), "must be an object")
        out.append((("spec", "resources", i), item))
    return out


def _context_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("kind") != "Context":
        raise TestFormatError(("kind",), f"expected {CLI_API_VERSION} Context, got {obj.get('kind')}")
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise TestFormatError(("spec",), "must be an object")
    return spec


#: ``ImageData`` fields always present in Kyverno's JSON (no ``omitempty``), and the optional ones.
_IMAGE_STRINGS = ("image", "resolvedImage", "registry", "repository")
_IMAGE_OPTIONAL_STRINGS = ("tag", "digest")  # omitempty: left out when ""
_IMAGE_DOCUMENTS = ("imageIndex", "manifest", "config")  # pointers, omitempty: left out when not given


def context_images(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A ``Context`` file's ``spec.images``: image reference → what ``image.GetMetadata`` answers for it.

    Kyverno's CLI (``cmd/cli/kubectl-kyverno/processor/utils.go``) marshals each ``ImageData``
    (``apis/v1alpha1/context.go``) to JSON and serves it by its ``image``: ``image``, ``resolvedImage``,
    ``registry`` and ``repository`` always (``""`` when not given), ``tag`` and ``digest`` when not empty,
    ``imageIndex``, ``manifest`` and ``config`` when given. A later entry for the same image replaces an earlier one.

    Raises:
        TestFormatError: not a Context, or an entry that is not an object with a string ``image``.
    """
    spec = _context_spec(obj)
    images = spec.get("images") or []
    if not isinstance(images, list):
        raise TestFormatError(("spec", "images"), "must be a list")
    out: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(images):
        if not isinstance(item, dict) or not isinstance(item.get("image"), str) or not item["image"]:
            raise TestFormatError(("spec", "images", i), "must be an object with a non-empty string image")
        data: dict[str, Any] = {}
        for key in _IMAGE_STRINGS:
            value = item.get(key, "")
            if not isinstance(value, str):
                raise TestFormatError(("spec", "images", i, key), "must be a string")
            data[key] = value
        for key in _IMAGE_OPTIONAL_STRINGS:
            if item.get(key):
                data[key] = str(item[key])
        for key in _IMAGE_DOCUMENTS:
            if item.get(key) is not None:
                data[key] = item[key]
        out[item["image"]] = data
    return out


def tidy(obj: Any) -> Any:
    """``obj`` without nulls, empty maps and empty lists, recursively (None when nothing is left).

    How ``kyverno test`` compares a patched resource with the expected one (kyverno/kyverno
    ``cmd/cli/kubectl-kyverno/resource/tidy.go``, then an empty merge patch between the two).
    """
    if isinstance(obj, dict):
        out = {k: t for k, v in obj.items() if (t := tidy(v)) is not None}
        return out or None
    if isinstance(obj, list):
        items = [t for v in obj if (t := tidy(v)) is not None]
        return items or None
    return obj
