"""The one YAML loader (webhook.files.yamlio): documents keep file, index and line; errors are one line."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize(("text", "message"), [
    ("spec:\n  validationActions: [Deny]\n  x: 1\n  validationActions: [Warn]\n",
     "k.yaml:4:3: invalid YAML: duplicate key 'validationActions' (first on line 2)"),
    ("a: {b: 1, b: 2}\n", "k.yaml:1:11: invalid YAML: duplicate key 'b' (first on line 1)"),
    ('{"a": 1,\n "a": 2, "\\ud83d\\ude00": 1}', "k.yaml:1: document 1: invalid JSON: duplicate key 'a'"),
])
def test_a_key_given_twice_is_an_error_as_in_kubectl_strict_decoding(text: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_text(text, "k.yaml")
    assert str(exc.value) == message


def test_merge_keys_may_still_be_overridden() -> None:
    docs = parse_text("base: &b {x: 1, y: 2}\nobj:\n  <<: *b\n  x: 3\n", "m.yaml")
    assert docs[0].obj["obj"] == {"x": 3, "y": 2}


LIST_YAML = """\
apiVersion: v1
kind: List
metadata: {resourceVersion: ""}
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: a, namespace: default}
- apiVersion: v1
  kind: Pod
  metadata:
    name: b
"""


def test_a_list_stands_for_its_items_and_messages_name_the_item() -> None:
    docs = parse_text("kind: X\n---\n" + LIST_YAML, "pods.yaml")
    assert [(d.index, d.item, d.obj.get("kind"), d.obj["metadata"].get("name")) for d in docs[1:]] == [
        (2, 0, "Pod", "a"), (2, 1, "Pod", "b")]
    assert docs[2].problem(("metadata", "name"), "bad") == "pods.yaml:13: document 2 items[1]: metadata.name: bad"
    assert parse_text("apiVersion: v1\nkind: PodList\nitems: []\n", "e.yaml") == []  # an empty namespace
    with pytest.raises(InputError, match=r"^l.yaml:3: document 1 items\[0\]: must be a mapping, got a string$"):
        parse_text("kind: List\nitems:\n- oops\n", "l.yaml")


def test_json_as_kubectl_prints_it_one_or_several_values() -> None:
    # kubectl get -o json escapes non-ASCII as surrogate pairs, which the YAML parser refuses.
    text = ('{\n\t"apiVersion": "v1", "kind": "List",\n\t"items": [{"kind": "Pod", "metadata": '
            '{"name": "p\\ud83d\\ude00"}}]\n}\n{"kind": "Namespace", "metadata": {"name": "n"}}\n')
    docs = parse_text(text, "all.json")
    assert [(d.index, d.item, d.obj["metadata"]["name"]) for d in docs] == [(1, 0, "p\U0001f600"), (2, None, "n")]
    plain = parse_text('{"kind": "Pod",\n "metadata": {"name": "p"}}', "p.json")
    assert plain[0].problem(("metadata", "name"), "bad") == "p.json:2: document 1: metadata.name: bad"
    with pytest.raises(InputError, match=r"^bad.json:2:15: invalid JSON: Expecting ',' delimiter$"):
        parse_text('{\n\t"kind": "Pod"', "bad.json")


def test_a_pipe_is_read_like_a_file(tmp_path: Path) -> None:
    # Process substitution (-r <(kubectl get pods -o yaml)) hands over /dev/fd/N: a pipe, not a regular file.
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, LIST_YAML.encode())
        os.close(write_end)
        path = Path(f"/dev/fd/{read_end}")
        assert yaml_files(path) == [path]
        assert [d.obj["metadata"]["name"] for d in load_file(path)] == ["a", "b"]
    finally:
        os.close(read_end)
    os.mkfifo(tmp_path / "fifo.yaml")  # ... but a FIFO inside a directory is never opened (it could block)
    (tmp_path / "a.yaml").write_text("a: 1\n")
    assert yaml_files(tmp_path) == [tmp_path / "a.yaml"]


def test_yaml_files_walks_as_rglob_did(tmp_path: Path) -> None:
    """Hidden files and directories skipped, symlinked directories not entered, symlinked files read, pathlib order."""
    for rel in ("a-b.yaml", "a/b.yaml", "a/c/d.yml", ".hidden/x.yaml", "a/.h.yaml", "a/notes.txt", "z.YAML"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}\n")
    outside = tmp_path.parent / (tmp_path.name + "-outside")
    outside.mkdir()
    (outside / "o.yaml").write_text("{}\n")
    (tmp_path / "linked").symlink_to(outside, target_is_directory=True)
    (tmp_path / "file-link.yaml").symlink_to(outside / "o.yaml")
    listed = [p.relative_to(tmp_path).as_posix() for p in yaml_files(tmp_path)]
    assert listed == ["a/b.yaml", "a/c/d.yml", "a-b.yaml", "file-link.yaml"]
    assert listed == sorted(listed, key=lambda p: Path(p).parts)
