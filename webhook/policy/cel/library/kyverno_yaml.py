"""Kyverno's yaml library: ``yaml.parse(<string>)``, bounded (pure; no I/O).

Follows ``github.com/kyverno/sdk`` ``extensions/cel/libs/yaml`` (``impl.go``, ``types.go``), which parses
with ``sigs.k8s.io/yaml`` ``Unmarshal`` into ``any``: YAML is converted to JSON and decoded, so mapping
keys become strings, every number is a double, timestamps stay strings, ``""`` is ``null``; only the first
document is read. Kyverno declares ``yaml`` as a variable of an opaque type with a member ``parse``; here
``yaml.parse`` is one qualified function, written the same way.

Bounds Kyverno does not have (the text comes from the request): at most :data:`MAX_CHARS` characters,
nesting at most :data:`MAX_DEPTH`, at most :data:`MAX_ALIASES` aliases and :data:`MAX_NODES` nodes once
aliases are expanded (a "billion laughs" document is an error, not a billion nodes); a recursive alias is
an error. YAML's ``.nan``/``.inf`` have no JSON form and are errors, as in ``sigs.k8s.io/yaml``.

Cost: linear in the length of the text; the result is at most :data:`MAX_NODES` nodes.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from webhook.policy.cel.cost import PYTHON_PARSED_YAML
from webhook.policy.cel.library._decl import LibraryError, T, function

MAX_CHARS = 1 << 20
MAX_DEPTH = 100
MAX_ALIASES = 100
MAX_NODES = 100_000


class _Loader(yaml.SafeLoader):
    """SafeLoader whose keys are strings and timestamps stay strings (``sigs.k8s.io/yaml`` goes through JSON)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Keys as JSON writes them (``1`` and ``true`` stay two keys, ``"1"`` and ``"true"``)."""
        self.flatten_mapping(node)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            mapping[_key(self.construct_object(key_node, deep=True))] = self.construct_object(value_node, deep=deep)
        return mapping


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_yaml_str)  # type: ignore[type-var]
_Loader.add_constructor("tag:yaml.org,2002:binary", _Loader.construct_yaml_str)  # type: ignore[type-var]


def _count(node: yaml.Node, depth: int, budget: list[int], path: set[int]) -> None:
    """Walk ``node`` as expanded (aliases followed), within the depth and node budgets."""
    if depth >= MAX_DEPTH:
        raise LibraryError(f"yaml: nested deeper than {MAX_DEPTH}")
    budget[0] -= 1
    if budget[0] < 0:
        raise LibraryError(f"yaml: more than {MAX_NODES} nodes once aliases are expanded")
    if id(node) in path:
        raise LibraryError("yaml: a recursive alias")
    if isinstance(node, yaml.SequenceNode):
        children: list[yaml.Node] = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        return
    path.add(id(node))
    for child in children:
        _count(child, depth + 1, budget, path)
    path.discard(id(node))


def _json_like(value: Any) -> Any:
    if isinstance(value, dict):
        return {_key(k): _json_like(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_like(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        if math.isnan(value) or math.isinf(value):
            raise LibraryError("yaml: .nan and .inf have no JSON value")
        return float(value)
    return str(value)


def _key(k: Any) -> str:
    if isinstance(k, bool):
        return "true" if k else "false"
    if k is None:
        return "null"
    if isinstance(k, float) and k.is_integer():
        return str(int(k))
    return str(k)


def parse(text: str) -> Any:
    """``yaml.parse(<string>) -> dyn``: the first document as JSON would decode it.

    Raises:
        LibraryError: a YAML error, or a bound of the module docstring exceeded.
    """
    if len(text) > MAX_CHARS:
        raise LibraryError(f"yaml: the text is {len(text)} characters; the limit is {MAX_CHARS}")
    loader = _Loader(text)
    try:
        node = loader.get_node() if loader.check_node() else None
        if node is None:
            return None
        aliases = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.DocumentEndEvent):
                break  # only the first document is read
            aliases += isinstance(event, yaml.AliasEvent)
        if aliases > MAX_ALIASES:
            raise LibraryError(f"yaml: more than {MAX_ALIASES} aliases")
        _count(node, 0, [MAX_NODES], set())
        return _json_like(loader.construct_document(node))
    except yaml.YAMLError as e:
        raise LibraryError(f"yaml: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise LibraryError(f"yaml: nested deeper than {MAX_DEPTH}") from None
    finally:
        loader.dispose()


def declarations() -> list[Any]:
    """The yaml library's function."""
    return [function("yaml.parse", "tg_kyverno_yaml_parse", T.DYN, [T.STRING], parse,
                     rule=PYTHON_PARSED_YAML)]
