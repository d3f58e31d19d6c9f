"""Strict schema validation of what Tollgate reads from files, as ``kubectl apply`` would check it.

One source of truth: the policy kinds are checked against the CRDs' own
``openAPIV3Schema`` (``webhook/schemas/policy-v1alpha1.yaml``, a copy of
``manifests/crds/*policies.yaml`` that a unit test keeps identical), ConfigMap
and Namespace against the Kubernetes v1 field set, TestSuite against its own
schema in the same dialect. Like kubectl's strict field validation
(``--validate=strict``, the default since 1.27) an unknown field is an error,
not silently pruned; ``x-kubernetes-validations`` rules are evaluated with CEL
(``self`` bound to the node) as kube-apiserver does. Pure: no I/O beyond
reading the package data once.
"""

from __future__ import annotations

import copy
import difflib
import functools
import importlib.resources
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from webhook.formats.kyverno.exceptions import is_kyverno_exception
from webhook.policy.exceptions import EXCEPTION_KINDS
from webhook.policy.vocabulary import API_VERSION, POLICY_KINDS, PolicyKind

#: The apiVersion of policies and TestSuites.
POLICY_API_VERSION = API_VERSION
#: kind → the one apiVersion it is served at.
API_VERSIONS: dict[str, str] = {
    **dict.fromkeys(POLICY_KINDS, POLICY_API_VERSION),
    **dict.fromkeys(EXCEPTION_KINDS, POLICY_API_VERSION),
    "TestSuite": POLICY_API_VERSION,
    "ConfigMap": "v1",
    "Namespace": "v1",
}
_SCHEMA_FILE: dict[str, str] = {**dict.fromkeys(POLICY_KINDS, "policy-v1alpha1.yaml"),
                                **dict.fromkeys(EXCEPTION_KINDS, "exception-v1alpha1.yaml"),
                                "TestSuite": "testsuite-v1alpha1.yaml"}

Path_ = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class SchemaProblem:
    """One violation: ``path`` into the document (``("spec", "validations", 0)``) and a one-line message."""

    path: Path_
    message: str


def _package_yaml(name: str) -> Any:
    return yaml.safe_load(importlib.resources.files("webhook.files").joinpath("schemas", name).read_text("utf-8"))


def exception_openapi_schema() -> dict[str, Any]:
    """The exception CRDs' ``openAPIV3Schema`` exactly as shipped in the package (a fresh copy)."""
    schema: dict[str, Any] = _package_yaml(_SCHEMA_FILE["PolicyException"])
    return schema


def policy_openapi_schema() -> dict[str, Any]:
    """The policy CRDs' ``openAPIV3Schema`` exactly as shipped in the package (a fresh copy)."""
    schema: dict[str, Any] = _package_yaml(_SCHEMA_FILE[PolicyKind.CLUSTER])
    return schema


@functools.cache
def _raw_schema(kind: str) -> dict[str, Any]:
    if kind in _SCHEMA_FILE:
        schema: dict[str, Any] = _package_yaml(_SCHEMA_FILE[kind])
    else:
        schema = _package_yaml("core-v1.yaml")[kind]
    schema = copy.deepcopy(schema)
    # The API server validates metadata as ObjectMeta whatever the CRD says (``metadata: {type: object}``).
    schema.setdefault("properties", {})["metadata"] = _package_yaml("core-v1.yaml")["ObjectMeta"]
    return schema


def _to_json_schema(node: Any) -> Any:
    """OpenAPI v3 structural schema → JSON Schema: strict objects, ``nullable``, Kubernetes extensions dropped."""
    if isinstance(node, list):
        return [_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items()
           if not k.startswith("x-kubernetes-") and k not in ("nullable", "default", "description", "format")}
    if node.get("nullable") and isinstance(node.get("type"), str):
        out["type"] = [node["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    if node.get("type") == "object" and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    return jsonschema.Draft7Validator(_to_json_schema(_raw_schema(kind)))


_TYPE_NAMES = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "a boolean", "null": "null"}


def _yaml_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _describe(error: jsonschema.ValidationError) -> list[SchemaProblem]:
    path: Path_ = tuple(error.absolute_path)
    v, expected, value = error.validator, error.validator_value, error.instance
    if v == "additionalProperties" and expected is False and isinstance(value, dict):
        known = sorted((error.schema.get("properties") or {}).keys())
        out = []
        for key in sorted(k for k in value if k not in known):
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            out.append(SchemaProblem((*path, key), f"unknown field{hint}"))
        return out
    if v == "required" and isinstance(value, dict):
        return [SchemaProblem((*path, f), "required field is missing") for f in expected if f not in value]
    if v == "type":
        want = " or ".join(_TYPE_NAMES.get(t, t) for t in ([expected] if isinstance(expected, str) else expected))
        return [SchemaProblem(path, f"must be {want}, got {_yaml_type(value)}")]
    if v == "enum":
        allowed = ", ".join(str(x) for x in expected if x is not None)
        return [SchemaProblem(path, f"unsupported value {value!s}: must be one of {allowed}")]
    if v == "minItems":
        return [SchemaProblem(path, "must not be empty" if expected == 1 else f"must have at least {expected} items")]
    if v == "maxItems":
        return [SchemaProblem(path, f"must have at most {expected} items, has {len(value)}")]
    if v == "minLength":
        text = "must not be empty" if expected == 1 else f"must be at least {expected} characters"
        return [SchemaProblem(path, text)]
    if v == "maxLength":
        return [SchemaProblem(path, f"must be at most {expected} characters, is {len(value)}")]
    if v == "pattern":
        return [SchemaProblem(path, f"{value} does not match {expected}")]
    return [SchemaProblem(path, error.message)]


@functools.cache
def _cel_program(rule: str) -> Any:
    from cel_expr_python import cel

    env = cel.NewEnv(variables={"self": cel.Type.DYN})
    return env, env.compile(rule)


def _rule_problems(schema: dict[str, Any], value: Any, path: Path_) -> list[SchemaProblem]:
    """``x-kubernetes-validations`` of ``schema`` and its children on ``value`` (kube-apiserver semantics)."""
    out = []
    for rule in schema.get("x-kubernetes-validations", ()):
        env, program = _cel_program(rule["rule"])
        result = program.eval(env.Activation({"self": value}))
        if result.plain_value() is not True:
            out.append(SchemaProblem(path, rule.get("message") or f"failed rule: {rule['rule']}"))
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                out += _rule_problems(sub, value[key], (*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += _rule_problems(schema["items"], item, (*path, i))
    return out


def validate(obj: Any) -> list[SchemaProblem]:
    """Every schema violation of one document, in document order.

    Args:
        obj: a parsed YAML document of kind ClusterAdmissionPolicy, AdmissionPolicy,
            TestSuite, ConfigMap or Namespace.

    Returns:
        ``[]`` when valid. A wrong or missing ``apiVersion`` is one problem and
        stops there (kubectl: ``no matches for kind ... in version ...``); else
        unknown fields (with a "did you mean" hint), wrong types, enum, length and
        pattern violations, then ``x-kubernetes-validations`` messages when the
        structure is sound.

    Raises:
        ValueError: ``obj``'s kind has no schema here (check :data:`API_VERSIONS` first).
    """
    if not isinstance(obj, dict):
        return [SchemaProblem((), f"must be a mapping, got {_yaml_type(obj)}")]
    kind = obj.get("kind")
    if kind not in API_VERSIONS:
        raise ValueError(f"no schema for kind {kind!r}")
    want = API_VERSIONS[kind]
    got = obj.get("apiVersion")
    if got is None:
        return [SchemaProblem(("apiVersion",), f"required field is missing (want {want})")]
    if got != want:
        return [SchemaProblem(("apiVersion",), f"{kind} is served as {want}, not {got}")]
    errors = list(_validator(kind).iter_errors(obj))
    # A wrong type explains every other violation at that path (enum, length, pattern): report it alone.
    wrong_type = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    problems = [p for e in errors if e.validator == "type" or tuple(e.absolute_path) not in wrong_type
                for p in _describe(e)]
    if not problems:
        problems = _rule_problems(_raw_schema(kind), obj, ())
    return sorted(problems, key=lambda p: [str(x) for x in p.path])


def has_schema(obj: Any) -> bool:
    """Whether :func:`validate` knows the document's kind."""
    return isinstance(obj, dict) and obj.get("kind") in API_VERSIONS and not is_kyverno_exception(obj)


def sync_from_crd(crd: Path, out: Path) -> None:
    """Rewrite the package copy ``out`` from a CRD file's ``openAPIV3Schema`` (keeping its header comment)."""
    doc = yaml.safe_load(crd.read_text())
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    header = "".join(line for line in out.read_text().splitlines(keepends=True) if line.startswith("#"))
    out.write_text(header + yaml.safe_dump(schema, sort_keys=False))


def _main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or argv[0] != "--sync":
        print("usage: python -m webhook.files.schema --sync manifests/crds/clusteradmissionpolicies.yaml",
              file=sys.stderr)
        return 2
    schemas = importlib.resources.files("webhook.files").joinpath("schemas")
    kind = yaml.safe_load(Path(argv[1]).read_text())["spec"]["names"]["kind"]
    target = Path(str(schemas.joinpath(_SCHEMA_FILE.get(kind, _SCHEMA_FILE[PolicyKind.NAMESPACED]))))
    sync_from_crd(Path(argv[1]), target)
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main(sys.argv[1:]))
