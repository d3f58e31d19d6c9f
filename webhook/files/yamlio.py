"""The one YAML loader of ``tollgate test``, ``tollgate lint`` and ``serve --local``.

Every document keeps where it came from (file, 1-based document index, and
the node tree for line numbers), so an error can name ``file:line``, the
document and the YAML path, the way ``kubectl apply -f`` names the
document it rejects. Safe loading only (``yaml.SafeLoader``: no Python
object tags).
"""

from __future__ import annotations

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

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
        obj: the parsed document (a mapping for every document :func:`load_file` returns).
        node: the YAML node tree, for line numbers.
    """

    source: str
    index: int
    obj: Any
    node: yaml.Node | None = field(default=None, compare=False, repr=False)

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
        """``file:line: document N`` for messages (line of ``path`` when known)."""
        line = self.line_of(path)
        return f"{self.source}{f':{line}' if line else ''}: document {self.index}"

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
    """Every non-empty document of a (multi-document) YAML text.

    Args:
        text: YAML text.
        source: the file name used in messages.

    Returns:
        The documents that are mappings, in order, with 1-based ``index``.

    Raises:
        InputError: a YAML syntax error (``file:line:column``) or a document that is not a mapping.
    """
    loader = _Loader(text)
    out = []
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            obj = loader.construct_document(node)
            if obj is None:
                continue
            if not isinstance(obj, dict):
                raise InputError(f"{source}:{node.start_mark.line + 1}: document {index}: must be a mapping, "
                                 f"got {_yaml_type(obj)}")
            out.append(Document(source, index, obj, node))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{source}{where}: invalid YAML: {problem}") from None
    finally:
        loader.dispose()
    return out


def _yaml_type(obj: Any) -> str:
    if isinstance(obj, list):
        return "a list"
    if isinstance(obj, str):
        return "a string"
    return f"a {type(obj).__name__}"


def load_file(path: Path | str) -> list[Document]:
    """Every mapping document of a YAML file (``-`` reads standard input once).

    Raises:
        InputError: unreadable file, directory, YAML syntax error (with line) or a non-mapping document.
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


_stdin_cache: list[str] = []


def read_stdin() -> str:
    """Standard input, read once per process (a second ``-`` sees the same text)."""
    if not _stdin_cache:
        try:
            _stdin_cache.append(sys.stdin.read())
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"-: cannot read standard input: {e}") from None
    return _stdin_cache[0]


def yaml_files(root: Path) -> list[Path]:
    """``root`` if it is a file, else every ``*.yaml``/``*.yml`` under it, recursively, sorted.

    Hidden files and directories (``.git``, ``.venv``) are skipped.

    Raises:
        InputError: ``root`` does not exist.
    """
    if str(root) == STDIN or root.is_file():
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
