#!/usr/bin/env python3
r"""Generate ``webhook/policy/data/merge-schema.json`` from the Kubernetes OpenAPI v3 documents.

The structured merge of an ApplyConfiguration mutation (``webhook/policy/merge.py``) needs, for every
built-in kind, what the API server's structured-merge-diff schema says: which lists are ``atomic``,
``set`` or ``map`` (and by which keys, with the keys' defaults), which maps and structs are atomic, the
fields each struct declares and the type of each scalar. This script reads them from the OpenAPI v3
documents Kubernetes publishes (``api/openapi-spec/v3/*.json`` in kubernetes/kubernetes; the same files
``kubectl-validate`` ships per release) and converts them the way kube-openapi's ``schemaconv`` does:

* ``x-kubernetes-list-type`` ``atomic`` / ``set`` / ``map`` (+ ``x-kubernetes-list-map-keys``); without
  it, ``x-kubernetes-patch-strategy: merge`` makes an associative list keyed by
  ``x-kubernetes-patch-merge-key`` (a set without one); otherwise a list is atomic;
* ``x-kubernetes-map-type: atomic`` on a map, a struct or a reference to one;
* ``resource.Quantity`` is an untyped scalar, ``runtime.RawExtension`` an untyped atomic value;
  ``int-or-string`` and other string formats are untyped scalars; an object without properties and
  without ``additionalProperties`` is free-form ("deduced": maps merge, lists are atomic).

Usage::

    python3 tools/gen_merge_schema.py DIR --kubernetes 1.35 \
        --source "kubernetes/kubernetes api/openapi-spec/v3 (release-1.35)" > webhook/policy/data/merge-schema.json

``DIR`` is searched recursively for ``*.json`` OpenAPI v3 documents. The output is facts about the API
(field names, list types, keys, defaults), nothing else: descriptions are dropped.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
RAW_EXTENSION = "io.k8s.apimachinery.pkg.runtime.RawExtension"
_REF = "#/components/schemas/"
#: ``/api/v1/...`` or ``/apis/GROUP/VERSION/...``.
_PATH = re.compile(r"^/(?:api/(?P<cv>v[^/]+)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))/(?P<rest>.+)$")


def ref_name(schema: dict[str, Any]) -> str | None:
    """The referenced schema's name: a ``$ref``, or a ``$ref`` inside a one-element ``allOf``."""
    ref = schema.get("$ref")
    if ref is None and isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
        ref = schema["allOf"][0].get("$ref")
    return ref.removeprefix(_REF) if isinstance(ref, str) else None


class Converter:
    """OpenAPI schema → compact merge schema (see ``webhook/policy/merge.py`` for the format)."""

    def __init__(self, schemas: dict[str, dict[str, Any]]) -> None:
        self.schemas = schemas
        self.types: dict[str, Any] = {}

    def named(self, name: str) -> str:
        """Convert schema ``name`` (once) and return the reference to it."""
        if name in self.types:
            return name
        if name == QUANTITY:
            return "@untyped"
        if name == RAW_EXTENSION:
            return "@atomic"
        self.types[name] = None  # a placeholder breaks recursion (JSONSchemaProps)
        self.types[name] = self.atom(self.schemas[name])
        return name

    def ref(self, schema: dict[str, Any]) -> Any:
        """A reference to a field's or element's type: a name, an inline atom or a scalar marker."""
        name = ref_name(schema)
        if name is not None:
            target = self.named(name)
            map_type = schema.get("x-kubernetes-map-type")
            if map_type in ("atomic", "granular"):
                return {"r": target, "a": 1 if map_type == "atomic" else 0}
            return target
        return self.atom(schema)

    def atom(self, schema: dict[str, Any]) -> Any:
        """The type of an inline schema: a struct or map, a list, or a scalar marker."""
        kind = schema.get("type", "")
        if kind == "object" or (kind == "" and ("properties" in schema or "additionalProperties" in schema)):
            return self.struct(schema)
        if kind == "array":
            return self.sequence(schema)
        if kind == "":
            return "@deduced"
        if kind in ("integer", "number"):
            return "@numeric"
        if kind == "boolean":
            return "@boolean"
        if kind == "string" and schema.get("format", "") in ("", "byte"):
            return "@string"
        return "@untyped"

    def struct(self, schema: dict[str, Any]) -> Any:
        """An object schema: declared fields (with key defaults), undeclared keys' type, atomicity."""
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if not props and extra in (None, True, {}):
            node: dict[str, Any] = {"e": "@deduced"}
        else:
            node = {}
            if props:
                node["f"] = {k: self.ref(v) for k, v in sorted(props.items())}
                defaults = {k: v["default"] for k, v in props.items()
                            if isinstance(v, dict) and "default" in v and not isinstance(v["default"], dict | list)}
                if defaults:
                    node["d"] = dict(sorted(defaults.items()))
            if isinstance(extra, dict) and extra:
                node["e"] = self.ref(extra)
            elif extra is True:
                node["e"] = "@deduced"
            if schema.get("x-kubernetes-preserve-unknown-fields") is True and "e" not in node:
                node["e"] = "@deduced"
        if schema.get("x-kubernetes-map-type") == "atomic":
            node["a"] = 1
        return node

    def sequence(self, schema: dict[str, Any]) -> Any:
        """An array schema: element type, list type and keys, as schemaconv derives them."""
        items = schema.get("items")
        element = self.ref(items) if isinstance(items, dict) else "@atomic"
        list_type = schema.get("x-kubernetes-list-type")
        keys: list[str] = []
        if list_type in ("atomic", "set", "map"):
            if list_type == "map":
                keys = list(schema.get("x-kubernetes-list-map-keys") or [])
        elif schema.get("x-kubernetes-patch-strategy") in ("merge", "merge,retainKeys"):
            key = schema.get("x-kubernetes-patch-merge-key")
            list_type, keys = ("map", [key]) if isinstance(key, str) else ("set", [])
        else:
            list_type = "atomic"
        node: dict[str, Any] = {"l": element, "t": list_type}
        if keys:
            node["k"] = keys
        return node


def keep_defaults_of_keys(types: dict[str, Any]) -> None:
    """Drop every field default but those of list-map keys (the merge uses only those)."""
    keys: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            keys.update(node.get("k", ()))
            for value in node.values():
                visit(value)

    visit(types)

    def prune(node: Any) -> None:
        if isinstance(node, dict):
            if "d" in node:
                node["d"] = {k: v for k, v in node["d"].items() if k in keys}
                if not node["d"]:
                    del node["d"]
            for key, value in node.items():
                if key != "d":
                    prune(value)

    prune(types)


def resources_of(path: str, item: dict[str, Any]) -> tuple[str, str] | None:
    """``(group/version/resource[/subresource], schema name)`` of a path whose PUT or POST takes an object."""
    m = _PATH.match(path)
    if m is None:
        return None
    group_version = m.group("cv") or f"{m.group('g')}/{m.group('v')}"
    parts = m.group("rest").split("/")
    if parts[:1] == ["namespaces"] and len(parts) >= 3 and parts[1] == "{namespace}":
        parts = parts[2:]
    if not parts or parts[0].startswith("{") or parts[0] == "watch":
        return None
    resource = parts[0]
    sub = parts[2] if len(parts) == 3 and parts[1] == "{name}" else None
    if len(parts) not in (1, 2, 3) or (len(parts) == 2 and parts[1] != "{name}"):
        return None
    for method in ("put", "post"):
        op = item.get(method)
        if not isinstance(op, dict):
            continue
        body = ((op.get("requestBody") or {}).get("content") or {})
        for media in body.values():
            name = ref_name(media.get("schema") or {})
            if name is not None:
                key = f"{group_version}/{resource}" + (f"/{sub}" if sub else "")
                return key, name
    return None


def main(argv: list[str] | None = None) -> int:
    """Write the merge schema of the documents under ``directory`` to stdout; 2 when there are none."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("directory", type=Path, help="directory of Kubernetes OpenAPI v3 JSON documents")
    parser.add_argument("--kubernetes", required=True, help="the Kubernetes version they describe, e.g. 1.35")
    parser.add_argument("--source", required=True, help="where they came from (recorded in the output)")
    args = parser.parse_args(argv)
    schemas: dict[str, dict[str, Any]] = {}
    resources: dict[str, str] = {}
    files = sorted(args.directory.rglob("*.json"))
    for file in files:
        doc = json.loads(file.read_text())
        schemas.update((doc.get("components") or {}).get("schemas") or {})
        for path, item in (doc.get("paths") or {}).items():
            found = resources_of(path, item)
            if found is not None:
                resources[found[0]] = found[1]
    if not schemas:
        print(f"{args.directory}: no OpenAPI v3 documents found", file=sys.stderr)
        return 2
    converter = Converter(schemas)
    kinds: dict[str, str] = {}
    for name, schema in sorted(schemas.items()):
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if name not in set(resources.values()):
                continue  # not writable through a resource: lists, options, status-only types
            group = gvk.get("group", "")
            kinds[f"{group}/{gvk['version']}/{gvk['kind']}" if group else f"{gvk['version']}/{gvk['kind']}"] = name
    for name in sorted(set(resources.values())):
        converter.named(name)
    keep_defaults_of_keys(converter.types)
    out = {
        "about": "Merge schema of the built-in kinds for ApplyConfiguration mutations (webhook/policy/merge.py), "
                 "generated by tools/gen_merge_schema.py from the Kubernetes OpenAPI v3 documents; facts about "
                 "the Kubernetes API (Apache-2.0).",
        "kubernetes": args.kubernetes,
        "source": args.source,
        "kinds": dict(sorted(kinds.items())),
        "resources": dict(sorted(resources.items())),
        "types": dict(sorted(converter.types.items())),
    }
    json.dump(out, sys.stdout, separators=(",", ":"), sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
