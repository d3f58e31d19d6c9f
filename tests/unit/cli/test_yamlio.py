"""The one YAML loader (webhook.files.yamlio): documents keep file, index and line; errors are one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.files.yamlio import InputError, format_path, load_file, parse_path, parse_text, yaml_files

TEXT = "a: 1\n---\n---\nkind: X\nspec:\n  l:\n  - a\n  - b: 2\n"


def test_documents_keep_their_index_and_line_of_a_path() -> None:
    docs = parse_text(TEXT, "f.yaml")
    assert [(d.index, d.obj.get("kind")) for d in docs] == [(1, None), (3, "X")]  # the empty document counts
    assert docs[1].line_of(("spec", "l", 1, "b")) == 8
    assert docs[1].line_of(("spec", "missing")) == 5  # deepest existing node
    assert docs[1].problem(("spec", "l", 1, "b"), "bad") == "f.yaml:8: document 3: spec.l[1].b: bad"


@pytest.mark.parametrize(("text", "message"), [
    ("a: [unclosed", "g.yaml:2:1: invalid YAML: did not find expected ',' or ']'"),
    ("a: 1\n b: 2", "g.yaml:2:3: invalid YAML: mapping values are not allowed in this context"),
    ("a: 1\n---\n- 1\n", "g.yaml:3: document 2: must be a mapping, got a list"),
    ("!!python/object:os.system x", "g.yaml:1:1: invalid YAML: could not determine a constructor for the tag"),
])
def test_errors_name_file_line_and_document(text: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_text(text, "g.yaml")
    assert str(exc.value).startswith(message)
    assert "\n" not in str(exc.value)


def test_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    for path, message in [(tmp_path, "is a directory"), (tmp_path / "nope.yaml", "cannot read: No such file"),
                          (tmp_path / "bin.yaml", "not UTF-8 text")]:
        with pytest.raises(InputError, match=message):
            load_file(path)


def test_directories_are_searched_recursively_skipping_hidden(tmp_path: Path) -> None:
    for name in ("a.yaml", "sub/b.yml", "sub/c.txt", ".git/d.yaml", "sub/.e.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a: 1\n")
    assert [p.relative_to(tmp_path).as_posix() for p in yaml_files(tmp_path)] == ["a.yaml", "sub/b.yml"]
    with pytest.raises(InputError, match="no such file or directory"):
        yaml_files(tmp_path / "missing")


def test_paths_round_trip() -> None:
    assert format_path(("spec", "validations", 0, "expression")) == "spec.validations[0].expression"
    assert parse_path("spec.validations[0].expression: ERROR: x") == ("spec", "validations", 0, "expression")
    assert format_path(()) == "<root>"
