"""Every YAML/JSON input is bounded: alias expansion, nesting depth and size are refused in one line naming the
file and line (exit 2 from the CLI), and a tab in indentation is named as a tab."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from webhook.cli.command import ExitStatus
from webhook.cli.main import main
from webhook.files import yamlio
from webhook.files.yamlio import InputError, Limits, iter_text, load_single, parse_text
from webhook.tls import generate as certs

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "policies" / "pod-security" / "baseline" / "disallow-privileged-containers.yaml"
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n  containers: [{name: c, image: i}]\n"


def laughs(levels: int, width: int = 9) -> str:
    """A Pod carrying a "billion laughs": ``levels`` anchors, each ``width`` aliases of the one before."""
    lines = [POD.rstrip("\n"), f"  x0: &x0 [{', '.join(['lol'] * width)}]"]
    lines += [f"  x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def nested(depth: int) -> str:
    """A Pod whose ``spec.x`` nests lists so that the document is ``depth`` deep (the root mapping is 1)."""
    return POD + f"  x: {'[' * (depth - 2)}{']' * (depth - 2)}\n"


def refusal(text: str, source: str = "f.yaml") -> str:
    with pytest.raises(InputError) as exc:
        parse_text(text, source)
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_a_billion_laughs_is_refused_at_its_line_as_go_yaml_refuses_excessive_aliasing() -> None:
    # 9 levels of 9 aliases would be 387 million nodes; go-yaml (kubectl) refuses it, and so does the loader.
    message = refusal(laughs(9))
    assert message.startswith("f.yaml:9:")
    assert "document 1: aliases expand to" in message and "(excessive aliasing" in message


def test_aliases_within_go_yamls_ratio_are_expanded() -> None:
    # Anchors reused as kubectl users do (shared defaults, merge keys) are read as before.
    defaults = "defaults: &d {" + ", ".join(f"k{i}: v{i}" for i in range(20)) + "}\n"
    objects = "".join(f"o{i}: {{<<: *d, name: n{i}}}\n" for i in range(200))
    [doc] = parse_text(defaults + objects, "f.yaml")
    assert doc.obj["o199"] == {**{f"k{i}": f"v{i}" for i in range(20)}, "name": "n199"}
    [doc] = parse_text(laughs(2), "f.yaml")
    assert len(doc.obj["spec"]["x2"]) == 9
    # Below go-yaml's floor of 1,000 nodes any share may come from aliases (here 600 of 605).
    [doc] = parse_text("a: &a x\nl: [" + ", ".join(["*a"] * 600) + "]\n", "f.yaml")
    assert len(doc.obj["l"]) == 600


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: *a}\n", "a: &a [b, {c: [*a]}]\n"])
def test_an_alias_inside_its_own_anchor_is_refused(text: str) -> None:
    # A recursive structure would be an endless walk for every reader after the loader.
    assert "refers to a node that contains it (a recursive structure)" in refusal(text)


def test_nesting_deeper_than_the_limit_is_refused_at_its_line_and_column() -> None:
    [doc] = parse_text(nested(100), "f.yaml")
    assert isinstance(doc.obj["spec"]["x"], list)  # read as before
    assert refusal(nested(101)) == "f.yaml:6:104: document 1: nests deeper than 100 levels"  # the 101st '['

    block = "".join(f"{'  ' * i}k{i}:\n" for i in range(100)) + f"{'  ' * 100}leaf: 1\n"
    assert refusal("a: 1\n---\n" + block) == "f.yaml:103:201: document 2: nests deeper than 100 levels"  # leaf's


def test_nesting_through_an_alias_counts_the_expanded_depth() -> None:
    deep = "[" * 60 + "]" * 60
    text = f"a: &a {deep}\nb: {'[' * 40}*a{']' * 40}\n"
    assert refusal(text) == "f.yaml:2:44: document 1: alias *a nests deeper than 100 levels"
    [doc] = parse_text(f"a: &a {deep}\nb: {'[' * 39}*a{']' * 39}\n", "f.yaml")  # 1 + 39 + 60 = 100 levels
    assert doc.obj["b"]


@pytest.mark.parametrize("depth", [101, 100_000])
def test_deep_json_is_refused_not_a_recursion_error(depth: int) -> None:
    text = '{"kind": "Pod", "spec": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    message = refusal(text, "d.json")
    assert message.startswith("d.json:1:") and message.endswith(": document 1: nests deeper than 100 levels")
    # JSON only the JSON reader accepts (a surrogate pair, as kubectl prints non-ASCII) is bounded the same way.
    text = text.replace('"Pod"', '"P\\ud83d\\ude00d"')
    assert refusal(text, "d.json") == "d.json:1: document 1: nests deeper than 100 levels"


def test_a_document_larger_than_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlio, "LIMITS", Limits(max_document_chars=1000))
    big = POD + "  x: " + "y" * 1000 + "\n"
    assert refusal(POD + "---\n" + big) == "f.yaml:12:1006: document 2: document is larger than 1,000 characters"
    assert "larger than 1,000 characters" in refusal('{"x": "' + "y" * 1000 + '", "t": "\t"}', "b.json")
    assert len(parse_text(POD + "---\n" + POD, "f.yaml")) == 2


def test_documents_are_composed_one_at_a_time() -> None:
    # A stream is read document by document: the first is handed over before the second is composed.
    documents = iter_text(POD + "---\n" + laughs(9), "f.yaml")
    assert next(documents).obj["metadata"]["name"] == "p"
    with pytest.raises(InputError, match="excessive aliasing"):
        next(documents)


@pytest.mark.parametrize(("text", "where"), [
    ("a:\n\tb: 1\n", "f.yaml:2:1"),
    ("a: 1\n\tb: 2\n", "f.yaml:2:1"),
    ("a:\n  b: 1\n  \tc: 2\n", "f.yaml:3:3"),
])
def test_a_tab_in_indentation_is_named(text: str, where: str) -> None:
    assert refusal(text) == f"{where}: invalid YAML: a tab character (YAML allows only spaces for indentation)"


def test_tabs_where_yaml_allows_them_are_read() -> None:
    [doc] = parse_text('a: [1,\n\t2]\nb: "x\ty"\n', "f.yaml")
    assert doc.obj == {"a": [1, 2], "b": "x\ty"}
    assert "tab" not in refusal("a: [unclosed\n")


# The CLI: each subcommand reading files refuses a bomb in one line and exit 2 (never 70 after minutes).

@pytest.fixture
def bomb(tmp_path: Path) -> Path:
    path = tmp_path / "bomb.yaml"
    path.write_text(laughs(9))
    return path


@pytest.mark.parametrize("argv", [
    ["test", "-p", str(POLICY), "-r", "{bomb}"],
    ["test", "-p", "{bomb}", "-r", str(POLICY)],
    ["test", "{suite}"],
    ["audit", "-p", str(POLICY), "-r", "{bomb}"],
    ["audit", "-p", str(POLICY), "-r", "{deep}"],
    ["webhook-config", "--policies", "{bomb}"],
    ["export", "{bomb}"],
], ids=" ".join)
def test_the_cli_refuses_a_bomb_in_one_line_and_exit_2(bomb: Path, tmp_path: Path, argv: list[str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"apiVersion: tollgate.dev/v1alpha1\nkind: TestSuite\npolicies: [{POLICY}]\n"
                     f"resources: [bomb.yaml]\nresults: [{{policy: p, resource: {{kind: Pod, name: p}}, "
                     f"result: pass}}]\n")
    deep = tmp_path / "deep.json"
    deep.write_text('{"apiVersion": "v1", "kind": "Pod", "spec": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main([a.format(bomb=bomb, suite=suite, deep=deep) for a in argv]) == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tollgate"), err
    assert ("excessive aliasing" in err or "nests deeper than 100 levels" in err) and "Traceback" not in err
    assert str(deep if "{deep}" in argv else bomb) in err


def test_lint_reports_a_bomb_as_the_files_problem(bomb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # lint reports every file's problems in one run (exit 1), an unreadable file among them, as for bad YAML.
    assert main(["lint", str(bomb), str(POLICY)]) == ExitStatus.FINDINGS
    out = capsys.readouterr().out
    assert out.startswith(f"{bomb}:9:") and out.count("\n") == 1 and "excessive aliasing" in out


def test_standard_input_is_bounded(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(laughs(9)))
    assert main(["test", "-p", str(POLICY), "-r", "-"]) == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-:9:" in err and "excessive aliasing" in err


def test_a_document_at_the_depth_limit_is_evaluated_end_to_end(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # What the loader accepts, the engine must handle: no RecursionError (exit 70) below the limit.
    resource = tmp_path / "deep.yaml"
    resource.write_text(nested(100).replace("namespace: default}", "namespace: default, labels: {a: b}}"))
    assert main(["test", "-p", str(POLICY), "-r", str(resource)]) == ExitStatus.OK
    assert "pass" in capsys.readouterr().out
    assert main(["audit", "-p", str(POLICY), "-r", str(resource), "--all"]) == ExitStatus.OK


def test_a_shallow_document_keeps_the_lines_of_its_top_fields_only() -> None:
    # Resources under test keep no deep node tree (it cost 4x their objects) but are still named by line.
    [doc] = parse_text("# a Pod\n" + POD, "f.yaml")
    shallow = doc.shallow()
    assert shallow.obj is doc.obj
    assert shallow.where() == doc.where() == "f.yaml:2: document 1"
    assert shallow.problem(("apiVersion",), "x") == doc.problem(("apiVersion",), "x")
    assert shallow.problem(("apiVersion",), "x") == "f.yaml:2: document 1: apiVersion: x"
    assert shallow.line_of(("spec", "containers", 0, "image")) == 5  # the line of spec: nothing below it is kept
    assert doc.line_of(("spec", "containers", 0, "image")) == 6
    assert isinstance(shallow.node, yaml.MappingNode) and all(
        isinstance(value, yaml.ScalarNode) for _key, value in shallow.node.value)


def test_load_single_is_bounded_and_lenient_like_client_go() -> None:
    assert load_single("a: 1\na: 2\n", "k") == {"a": 2}  # client-go decodes a kubeconfig leniently
    assert load_single("", "k") is None
    with pytest.raises(InputError, match=r"^k:9:27: document 1: aliases expand to .* \(excessive aliasing"):
        load_single(laughs(9), "k")
    with pytest.raises(InputError, match=r"^k:2:1: invalid YAML: a tab character"):
        load_single("a:\n\tb: 1\n", "k")


def test_serve_refuses_a_kubeconfig_bomb_in_one_line_and_exit_2(bomb: Path, tmp_path: Path) -> None:
    certs.write_certs(tmp_path / "certs", dns_names=["a"], days=1)
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""}
    result = subprocess.run([sys.executable, "-m", "webhook.cli.main", "serve", "--kubeconfig", str(bomb),
                             "--cert-dir", str(tmp_path / "certs")],
                            check=False, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert result.returncode == ExitStatus.USAGE, result.stderr
    assert result.stderr.count("\n") == 1 and "not a kubeconfig (9:27: document 1: aliases expand" in result.stderr


def test_resources_under_test_are_read_one_at_a_time(tmp_path: Path) -> None:
    # tollgate test -r evaluates each resource as it is read, keeping only its top node level: a 100 MB file
    # is never held whole (its objects, or their node trees).
    from webhook.files.inputs import iter_resources

    path = tmp_path / "pods.yaml"
    path.write_text(POD + "---\n" + laughs(9))
    resources = iter_resources([path])
    first = next(resources)
    assert first.obj["metadata"]["name"] == "p" and first.where() == f"{path}:1: document 1"
    assert isinstance(first.node, yaml.MappingNode)
    assert all(isinstance(value, yaml.ScalarNode) for _key, value in first.node.value)
    with pytest.raises(InputError, match="excessive aliasing"):
        next(resources)
