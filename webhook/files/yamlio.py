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

Bounded: every document is composed within :class:`Limits` (alias expansion,
nesting depth, size), so a few hundred bytes of nested aliases (a "billion
laughs") or 100,000 nested brackets are refused in one line naming the file
and line instead of freezing the caller or exhausting memory; a file's
documents are composed one at a time (:func:`iter_file`), so a long stream of
documents costs one document's node tree at a time.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

#: The file suffixes read from directories.
YAML_SUFFIXES = (".yaml", ".yml")
#: The name standing for standard input (``-``, as kubectl's ``-f -``).
STDIN = "-"


@dataclass(frozen=True, slots=True)
class Limits:
    """What one document may cost, checked while it is composed (before any object is built).

    Attributes:
        max_depth: nested mappings and sequences, aliases expanded (the root mapping is 1). Tollgate walks
            objects recursively (schema, CEL values, patches) within Python's 1,000 frames; a Kubernetes
            object is rarely 30 deep.
        max_document_chars: characters of one document (a ``kubectl get -o yaml`` List is one document).

    Aliases are bounded as go-yaml's decoder bounds them (gopkg.in/yaml.v2 and v3 ``decode.go``, which
    kubectl and the API server decode YAML with; CVE-2019-11254): once more than 100 nodes came from
    aliases in a document of more than 1,000 nodes, their share may be at most 99% up to 400,000 nodes,
    falling linearly to 10% at 4,000,000 (``allowedAliasRatio``), so a billion laughs stops at about
    400,000 nodes ("document contains excessive aliasing").
    """

    max_depth: int = 100
    max_document_chars: int = 64 * 1024 * 1024


#: The bounds every loader of this module applies.
LIMITS = Limits()

_ALIAS_RATIO_LOW, _ALIAS_RATIO_HIGH = 400_000, 4_000_000


def _allowed_alias_ratio(nodes: int) -> float:
    """go-yaml's ``allowedAliasRatio``: 0.99 up to 400k decoded nodes, 0.10 from 4M, linear between."""
    if nodes <= _ALIAS_RATIO_LOW:
        return 0.99
    if nodes >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (nodes - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


class _Refused(yaml.MarkedYAMLError):
    """A document beyond :class:`Limits` (reported as such, never retried as JSON)."""


if TYPE_CHECKING:
    class _ComposerBase(yaml.composer.Composer):
        """What the composer finds in the loader it is mixed into: the parser's events and the resolver."""

        def check_event(self, *choices: type[yaml.Event]) -> bool: ...
        def peek_event(self) -> Any: ...
        def get_event(self) -> Any: ...
        def resolve(self, kind: type[yaml.Node], value: str | None, implicit: Any) -> str: ...
        def descend_resolver(self, current_node: yaml.Node | None, current_index: Any) -> None: ...
        def ascend_resolver(self) -> None: ...
else:
    _ComposerBase = yaml.composer.Composer


class _BoundedComposer(_ComposerBase):
    """PyYAML's composer (``yaml/composer.py``) counting what each document would expand to.

    Every node records its expanded size and height; an alias adds its anchor's. A document is refused when
    it nests deeper than ``max_depth`` (aliases expanded), grows past ``max_document_chars``, refers to an
    anchor from inside it (a recursive structure, go-yaml's "anchor ... value contains itself"), or
    expands aliases beyond go-yaml's ratio ("document contains excessive aliasing").
    """

    def compose_document(self) -> yaml.Node | None:
        start = self.get_event()  # DOCUMENT-START
        self.limits = LIMITS
        self._doc_start = start.start_mark.index
        self._depth = 0
        self._nodes = self._alias_nodes = 0
        self._stats: dict[str, tuple[int, int]] = {}  # anchor -> (expanded nodes, height) once composed
        self._result = (0, 0)
        node: yaml.Node | None = self.compose_node(None, None)
        self.get_event()  # DOCUMENT-END
        self.anchors = {}
        self._stats = {}
        return node

    def _refuse(self, problem: str, mark: yaml.Mark) -> _Refused:
        return _Refused(None, None, problem, mark)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.get_event()
            anchor = event.anchor
            if anchor not in self.anchors:
                raise yaml.composer.ComposerError(None, None, f"found undefined alias {anchor!r}", event.start_mark)
            stats = self._stats.get(anchor)
            if stats is None:
                raise self._refuse(f"alias *{anchor} refers to a node that contains it (a recursive structure)",
                                   event.start_mark)
            size, height = stats
            self._nodes += size
            self._alias_nodes += size
            if (self._alias_nodes > 100 and self._nodes > 1000
                    and self._alias_nodes > _allowed_alias_ratio(self._nodes) * self._nodes):
                raise self._refuse(f"aliases expand to {self._alias_nodes:,} of the document's {self._nodes:,} "
                                   f"nodes (excessive aliasing, as kubectl refuses it)", event.start_mark)
            if self._depth + height > self.limits.max_depth:
                raise self._refuse(f"alias *{anchor} nests deeper than {self.limits.max_depth} levels",
                                   event.start_mark)
            self._result = stats
            node: yaml.Node = self.anchors[anchor]
            return node
        event = self.peek_event()
        anchor = event.anchor
        if anchor is not None and anchor in self.anchors:
            raise yaml.composer.ComposerError(f"found duplicate anchor {anchor!r}; first occurrence",
                                              self.anchors[anchor].start_mark, "second occurrence",
                                              event.start_mark)
        self.descend_resolver(parent, index)
        if self.check_event(yaml.ScalarEvent):
            node = self.compose_scalar_node(anchor)
            self._nodes += 1
            self._result = (1, 0)
        else:
            self._depth += 1
            if self._depth > self.limits.max_depth:
                raise self._refuse(f"nests deeper than {self.limits.max_depth} levels", event.start_mark)
            node = self._compose_collection(anchor)
            self._depth -= 1
        self.ascend_resolver()
        if node.end_mark.index - self._doc_start > self.limits.max_document_chars:
            raise self._refuse(f"document is larger than {self.limits.max_document_chars:,} characters",
                               node.end_mark)
        if anchor is not None:
            self._stats[anchor] = self._result
        return node

    def _compose_collection(self, anchor: str | None) -> yaml.Node:
        """A sequence or mapping (as PyYAML composes them), leaving its expanded (size, height) in ``_result``."""
        start = self.get_event()
        mapping = isinstance(start, yaml.MappingStartEvent)
        node_type = yaml.MappingNode if mapping else yaml.SequenceNode
        end_type = yaml.MappingEndEvent if mapping else yaml.SequenceEndEvent
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(node_type, None, start.implicit)
        node = node_type(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        self._nodes += 1
        size, height = 1, 0
        index = 0
        while not self.check_event(end_type):
            if mapping:
                key = self.compose_node(node, None)
                key_size, key_height = self._result
                value = self.compose_node(node, key)
                size += key_size + self._result[0]
                height = max(height, key_height, self._result[1])
                node.value.append((key, value))
            else:
                node.value.append(self.compose_node(node, index))
                size += self._result[0]
                height = max(height, self._result[1])
                index += 1
        node.end_mark = self.get_event().end_mark
        self._result = (size, height + 1)
        return node


_Parser: type[Any]
try:
    from yaml._yaml import CParser as _Parser  # libyaml's scanner and parser, in C
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    class _Parser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):  # type: ignore[no-redef]
        """PyYAML's pure-Python scanner and parser."""

        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)


class _Loader(_BoundedComposer, _Parser, yaml.constructor.SafeConstructor,  # type: ignore[misc]
              yaml.resolver.Resolver):
    """The parser (libyaml's when PyYAML has it, as ``CSafeLoader``), the bounded composer, the safe constructor."""

    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        _BoundedComposer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)


class _StrictLoader(_Loader):
    """The bounded safe loader, refusing a mapping that gives one key twice (kubectl's strict decoding)."""

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

    def shallow(self, depth: int = 1) -> Document:
        """This document keeping only the top ``depth`` levels of its node tree (the lines of its top fields).

        A resource under test or audit is only ever named by ``file:line`` of its top fields; keeping its
        whole node tree would cost about four times its objects (a 6.5 MB file of 20,000 Pods: 427 MB
        resident with node trees, 104 MB without).
        """
        return Document(self.source, self.index, self.obj, _prune(self.node, depth), self.item)

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
        InputError: a YAML or JSON syntax error (``file:line:column``; a tab in indentation is named),
            a key given twice, a document that is not a mapping, a List item that is not one, or a
            document beyond :data:`LIMITS` (aliases, depth, size).
    """
    return list(iter_text(text, source))


def iter_text(text: str, source: str) -> Iterator[Document]:
    """:func:`parse_text` one document at a time: only the document being read has its node tree built.

    A text that looks like JSON (starts with ``{`` or ``[``) is read whole, as it may need the JSON
    reader instead (tabs, surrogate-pair escapes, concatenated values YAML refuses).

    Raises:
        InputError: as :func:`parse_text`, when the document at fault is reached.
    """
    if not _looks_like_json(text):
        yield from _parse_yaml(text, source)
        return
    try:
        documents = list(_parse_yaml(text, source))
    except _Unusable:
        raise
    except InputError:
        documents = _parse_json(text, source)  # JSON the YAML parser refuses: tabs, surrogate-pair escapes
    yield from documents


class _Unusable(InputError):
    """A document beyond the limits: refused as it is, never read again as JSON."""


def _parse_yaml(text: str, source: str) -> Iterator[Document]:
    loader = _StrictLoader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            obj = loader.construct_document(node)
            if obj is not None:
                yield from _documents(source, index, obj, node, node.start_mark.line + 1)
    except yaml.YAMLError as e:
        raise _input_error(e, text, source, index + 1) from None
    finally:
        loader.dispose()


def _input_error(e: yaml.YAMLError, text: str, source: str, index: int) -> InputError:
    """One line for a YAML error: ``file:line:column: ...`` (a bound refused, or invalid YAML; a tab named)."""
    if isinstance(e, _Refused):
        at = f":{e.problem_mark.line + 1}:{e.problem_mark.column + 1}" if e.problem_mark is not None else ""
        return _Unusable(f"{source}{at}: document {index}: {e.problem}")
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is not None and _tab_at(text, mark.line, mark.column):
        problem = "a tab character (YAML allows only spaces for indentation)"
    return InputError(f"{source}{where}: invalid YAML: {problem}")


def load_single(text: str, source: str) -> Any:
    """The one YAML document of ``text`` (None when empty), within :data:`LIMITS`, as PyYAML's ``safe_load``.

    For files other tools read too (a kubeconfig: client-go decodes it leniently), so a key given twice
    is not refused here, as it is by :func:`parse_text`.

    Raises:
        InputError: invalid YAML (a tab in indentation named), more than one document, or a document
            beyond the limits; one line naming ``source`` and the line.
    """
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise _input_error(e, text, source, 1) from None
    finally:
        loader.dispose()


def _tab_at(text: str, line: int, column: int) -> bool:
    """Whether the 0-based ``line`` of ``text`` has a tab in its indentation up to ``column``.

    libyaml says "found character that cannot start any token" or "found a tab character that violates
    indentation" for it.
    """
    start = 0
    for _ in range(line):
        start = text.find("\n", start) + 1
        if start == 0:
            return False
    indentation = text[start:start + column + 1]
    indentation = indentation[:len(indentation) - len(indentation.lstrip(" \t"))]
    return "\t" in indentation


def _looks_like_json(text: str) -> bool:
    return text.lstrip("\ufeff \t\r\n")[:1] in ("{", "[")


def _parse_json(text: str, source: str) -> list[Document]:
    """Concatenated JSON values (a JSON stream, as kubectl decodes one), without line numbers inside them.

    Raises:
        InputError: a syntax error, a key given twice, a non-mapping value, or a value beyond
            :data:`LIMITS` (nesting, size).
    """
    limits = LIMITS
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
        start = position
        try:
            obj, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as e:
            raise InputError(f"{source}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
        except _DuplicateKey as e:
            raise InputError(f"{source}:{line}: document {index}: invalid JSON: {e}") from None
        except RecursionError:
            obj, position = None, -1
        if position < 0 or _deeper_than(obj, limits.max_depth):
            raise _Unusable(f"{source}:{line}: document {index}: nests deeper than {limits.max_depth} levels")
        if position - start > limits.max_document_chars:
            raise _Unusable(f"{source}:{line}: document {index}: document is larger than "
                            f"{limits.max_document_chars:,} characters")
        if obj is not None:
            out += _documents(source, index, obj, None, line)


def _deeper_than(obj: Any, depth: int) -> bool:
    """Whether ``obj`` nests more than ``depth`` lists and dicts (iterative: any depth is measured)."""
    stack = [(obj, 1)]
    while stack:
        value, level = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if level > depth:
            return True
        stack += [(child, level + 1) for child in children]
    return False


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


class _Line:
    """The part of a mark a pruned node keeps: its 0-based line (what :meth:`Document.line_of` reads)."""

    __slots__ = ("line",)

    def __init__(self, line: int) -> None:
        self.line = line


def _prune(node: yaml.Node | None, depth: int) -> yaml.Node | None:
    """A copy of ``node`` down to ``depth`` collection levels, keeping only lines.

    Deeper values become empty scalars at their line.
    """
    if node is None:
        return None
    mark: Any = _Line(node.start_mark.line)
    if isinstance(node, yaml.ScalarNode) or depth <= 0:
        return yaml.ScalarNode(node.tag if isinstance(node, yaml.ScalarNode) else "tag:yaml.org,2002:null",
                               node.value if isinstance(node, yaml.ScalarNode) else "", mark, mark)
    if isinstance(node, yaml.MappingNode):
        return yaml.MappingNode(node.tag, [(_prune(k, 0), _prune(v, depth - 1)) for k, v in node.value], mark, mark)
    return yaml.SequenceNode(node.tag, [_prune(v, depth - 1) for v in node.value], mark, mark)


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
        InputError: unreadable file, directory, syntax error (with line), a duplicate key,
            a non-mapping document or one beyond :data:`LIMITS`.
    """
    return list(iter_file(path))


def iter_file(path: Path | str) -> Iterator[Document]:
    """:func:`load_file` one document at a time (the file is read first; documents are composed as asked).

    Raises:
        InputError: as :func:`load_file`, unreadable files before the first document.
    """
    source = str(path)
    if source == STDIN:
        return iter_text(read_stdin(), STDIN)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except IsADirectoryError:
        raise InputError(f"{source}: is a directory") from None
    except UnicodeDecodeError:
        raise InputError(f"{source}: not UTF-8 text") from None
    except OSError as e:
        raise InputError(f"{source}: cannot read: {e.strerror or e}") from None
    return iter_text(text, source)


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
    found: list[Path] = []
    pending = [root]
    while pending:  # os.scandir: ~3x faster than Path.rglob (--local lists the tree every poll, issue 34)
        directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False):  # as rglob: symlinked directories are not entered
                    pending.append(directory / entry.name)
                elif Path(entry.name).suffix in YAML_SUFFIXES and entry.is_file():
                    found.append(directory / entry.name)
    return sorted(found)


def load_paths(paths: Iterable[Path]) -> Iterator[Document]:
    """Every mapping document of every file (directories searched recursively), in order.

    Raises:
        InputError: as :func:`load_file` and :func:`yaml_files`.
    """
    for root in paths:
        for path in yaml_files(root):
            yield from iter_file(path)
