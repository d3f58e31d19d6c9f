"""The one YAML/JSON loader of ``tollgate test``, ``lint``, ``audit``, ``webhook-config`` and ``serve --local``.

Every document keeps where it came from (file, 1-based document index, the
item of a List, and the node tree for line numbers), so an error can name
``file:line``, the document and the YAML path, the way ``kubectl apply -f``
names the document it rejects. It reads what kubectl reads and writes:

- multi-document YAML, and JSON (one or more concatenated objects, as
  ``kubectl get -o json`` prints them);
- Lists: a document whose ``kind`` ends in ``List`` with an ``items`` array
  (``kubectl get pods -o yaml`` prints ``kind: List``; the API ``PodList``)
  stands for its items, as kubectl's resource builder flattens them;
- strict decoding: a key given twice in one mapping is an error, as kubectl's
  strict field validation reports a duplicate field (YAML merge keys ``<<``
  may still be overridden);
- standard input (``-``) and any other file that is not a directory: a pipe
  from process substitution (``-r <(kubectl get pods -o yaml)``, a
  ``/dev/fd/N`` path), a FIFO, ``/dev/stdin``. Each is read once, as given.

Safe loading only (``yaml.SafeLoader``: no Python object tags). The module
holds no state: every call reads its files again.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: The file suffixes read from directories.
YAML_SUFFIXES = (".yaml", ".yml")
#: The name standing for standard input (``-``, as kubectl's ``-f -``).
STDIN = "-"

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """The safe loader, refusing a mapping that gives one key twice (kubectl's strict decoding)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[tuple[str, str], yaml.Node] = {}
        for key, _value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            first = seen.setdefault((key.tag, key.value), key)
            if first is not key:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key.value!r} (first on line {first.start_mark.line + 1})",
                    key.start_mark)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


class InputError(Exception):
    """Unusable input; ``str(error)`` is one line naming the file (and document, line, YAML path)."""


def format_path(path: Sequence[str | int]) -> str:
    """A YAML path as kubectl prints it: ``spec.validations[0].expression`` (``<root>`` for ``()``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<root>"


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def parse_path(text: str) -> tuple[str | int, ...]:
    """The inverse of :func:`format_path`: ``spec.validations[0].expression`` → ``("spec", "validations", 0, ...)``.

    Anything after the first space or colon (a message) is ignored.
    """
    head = re.split(r"[ :]", text, maxsplit=1)[0]
    return tuple(int(m.group(2)) if m.group(2) is not None else m.group(1) for m in _PATH_PART.finditer(head))


@dataclass(frozen=True, slots=True)
class Document:
    """One YAML document and where it came from.

    Attributes:
        source: the file as given (``-`` for standard input).
        index: 1-based position among the file's documents (empty documents count).
        obj: the parsed document (a mapping for every document :func:`load_file` returns);
            for an item of a List, the item.
        node: the YAML node tree of ``obj``, for line numbers (None for JSON the YAML
            parser cannot read, e.g. with surrogate-pair escapes).
        item: the 0-based position in the List's ``items`` (None: not from a List).
    """

    source: str
    index: int
    obj: Any
    node: yaml.Node | None = field(default=None, compare=False, repr=False)
    item: int | None = None

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """1-based line of the deepest node on ``path`` that exists (None without a node tree)."""
        node = self.node
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in path:
            child = None
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if isinstance(key, yaml.ScalarNode) and key.value == part:
                        child, line = value, key.start_mark.line + 1
                        break
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                child = node.value[part]
                line = child.start_mark.line + 1
            if child is None:
                break
            node = child
        return line

    def where(self, path: Sequence[str | int] = ()) -> str:
        """``file:line: document N`` (``document N items[I]`` in a List) for messages (line of ``path`` when known)."""
        line = self.line_of(path)
        item = f" items[{self.item}]" if self.item is not None else ""
        return f"{self.source}{f':{line}' if line else ''}: document {self.index}{item}"

    def problem(self, path: Sequence[str | int], message: str) -> str:
        """One-line message: ``file:line: document N: yaml.path: message``."""
        return f"{self.where(path)}: {format_path(path)}: {message}" if path else f"{self.where()}: {message}"

    @property
    def kind(self) -> str:
        """``kind`` of the document ('' when absent or not a string)."""
        kind = self.obj.get("kind") if isinstance(self.obj, dict) else None
        return kind if isinstance(kind, str) else ""

    @property
    def display_name(self) -> str:
        """``Kind namespace/name`` or ``Kind name`` (what kubectl prints for an object)."""
        meta = self.obj.get("metadata") if isinstance(self.obj, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        ns, name = meta.get("namespace"), meta.get("name")
        return f"{self.kind or 'object'} {f'{ns}/' if ns else ''}{name or '<unnamed>'}"


def parse_text(text: str, source: str) -> list[Document]:
    """Every non-empty document of a (multi-document) YAML or JSON text, Lists flattened into their items.

    Args:
        text: YAML text, or JSON (one or more concatenated values).
        source: the file name used in messages.

    Returns:
        The documents that are mappings, in order, with 1-based ``index``; each
        item of a List is one document (same ``index``, its ``item``).

    Raises:
        InputError: a YAML or JSON syntax error (``file:line:column``), a key given
            twice, a document that is not a mapping, or a List item that is not one.
    """
    try:
        return _parse_yaml(text, source)
    except InputError:
        if not _looks_like_json(text):
            raise
        return _parse_json(text, source)  # JSON the YAML parser refuses: tabs, surrogate-pair escapes


def _parse_yaml(text: str, source: str) -> list[Document]:
    loader = _StrictLoader(text)
    out: list[Document] = []
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            obj = loader.construct_document(node)
            if obj is not None:
                out += _documents(source, index, obj, node, node.start_mark.line + 1)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{source}{where}: invalid YAML: {problem}") from None
    finally:
        loader.dispose()
    return out


def _looks_like_json(text: str) -> bool:
    return text.lstrip("\ufeff \t\r\n")[:1] in ("{", "[")


def _parse_json(text: str, source: str) -> list[Document]:
    """Concatenated JSON values (a JSON stream, as kubectl decodes one), without line numbers inside them."""
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys)
    out: list[Document] = []
    position, index = 0, 0
    text = text.lstrip("\ufeff")
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position == len(text):
            return out
        index += 1
        line = text.count("\n", 0, position) + 1
        try:
            obj, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as e:
            raise InputError(f"{source}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
        except _DuplicateKey as e:
            raise InputError(f"{source}:{line}: document {index}: invalid JSON: {e}") from None
        if obj is not None:
            out += _documents(source, index, obj, None, line)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key!r}")
        out[key] = value
    return out


def is_list(obj: Any) -> bool:
    """Whether a decoded document is a List (``kind: List``, ``PodList``, ...) standing for its ``items``."""
    return (isinstance(obj, dict) and isinstance(obj.get("kind"), str) and obj["kind"].endswith("List")
            and isinstance(obj.get("items"), list))


def _documents(source: str, index: int, obj: Any, node: yaml.Node | None, line: int) -> list[Document]:
    """The document, or the items of a List, each checked to be a mapping."""
    if not isinstance(obj, dict):
        raise InputError(f"{source}:{line}: document {index}: must be a mapping, got {_yaml_type(obj)}")
    if not is_list(obj):
        return [Document(source, index, obj, node)]
    item_nodes = _child(node, "items")
    out = []
    for i, item in enumerate(obj["items"]):
        item_node = item_nodes.value[i] if isinstance(item_nodes, yaml.SequenceNode) else None
        doc = Document(source, index, item, item_node, item=i)
        if not isinstance(item, dict):
            item_line = f":{item_node.start_mark.line + 1}" if item_node is not None else f":{line}"
            raise InputError(f"{source}{item_line}: document {index} items[{i}]: must be a mapping, "
                             f"got {_yaml_type(item)}")
        out.append(doc)
    return out


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                child: yaml.Node = v
                return child
    return None


def _yaml_type(obj: Any) -> str:
    if isinstance(obj, list):
        return "a list"
    if isinstance(obj, str):
        return "a string"
    return f"a {type(obj).__name__}"


def load_file(path: Path | str) -> list[Document]:
    """Every mapping document of a YAML or JSON file, Lists flattened (``-`` reads standard input).

    Any path that is not a directory is read as a stream: a regular file, a pipe
    (``/dev/fd/63`` from ``<(...)``), a FIFO, ``/dev/stdin``.

    Raises:
        InputError: unreadable file, directory, syntax error (with line), a duplicate key
            or a non-mapping document.
    """
    source = str(path)
    if source == STDIN:
        return parse_text(read_stdin(), STDIN)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except IsADirectoryError:
        raise InputError(f"{source}: is a directory") from None
    except UnicodeDecodeError:
        raise InputError(f"{source}: not UTF-8 text") from None
    except OSError as e:
        raise InputError(f"{source}: cannot read: {e.strerror or e}") from None
    return parse_text(text, source)


def read_stdin() -> str:
    """All of standard input (a second call in the same process reads what is left: nothing).

    Raises:
        InputError: standard input cannot be read or is not UTF-8.
    """
    try:
        return sys.stdin.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"-: cannot read standard input: {e}") from None


def yaml_files(root: Path) -> list[Path]:
    """``root`` if it is not a directory, else every ``*.yaml``/``*.yml`` under it, recursively, sorted.

    ``root`` itself may be any file a stream can be read from (``-``, a pipe, a
    FIFO); under a directory only regular files are read. Hidden files and
    directories (``.git``, ``.venv``) are skipped.

    Raises:
        InputError: ``root`` does not exist.
    """
    if str(root) == STDIN or (root.exists() and not root.is_dir()):
        return [root]
    if not root.is_dir():
        raise InputError(f"{root}: no such file or directory")
    return sorted(p for p in root.rglob("*") if p.suffix in YAML_SUFFIXES and p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def load_paths(paths: Iterable[Path]) -> Iterator[Document]:
    """Every mapping document of every file (directories searched recursively), in order.

    Raises:
        InputError: as :func:`load_file` and :func:`yaml_files`.
    """
    for root in paths:
        for path in yaml_files(root):
            yield from load_file(path)
