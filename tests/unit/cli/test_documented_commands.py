"""Every offline ``tollgate test``/``lint``/``webhook-config`` example of the README and the docs runs as shown.

A fenced ``text``/``console`` block with ``$ `` lines is a transcript: each
command (``\\`` continues it) is run and its output (stdout and stderr, in
order) must be the lines below it; ``$ echo $?`` states the exit status. A
``yaml`` block whose first line is ``# NAME`` is a file the transcript uses.
Inline code spans that run a command on paths of the repository must exit 0.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", ROOT / "docs" / "writing-policies.md", ROOT / "docs" / "server.md"]
SUBCOMMANDS = ("test", "lint", "webhook-config")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`((?:\.venv/bin/)?tollgate (?:" + "|".join(SUBCOMMANDS) + r") [^`]+)`")


@dataclass
class Step:
    argv: list[str]
    output: list[str] = field(default_factory=list)
    status: int | None = None


@dataclass
class Transcript:
    doc: str
    line: int
    steps: list[Step]
    files: dict[str, str]

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def _tollgate(argv: list[str]) -> list[str] | None:
    """The arguments after ``tollgate`` when ``argv`` runs an offline subcommand, else None."""
    if argv and argv[0] in ("tollgate", ".venv/bin/tollgate") and len(argv) > 1 and argv[1] in SUBCOMMANDS:
        return argv[1:]
    return None


def transcripts() -> list[Transcript]:
    out = []
    for doc in DOCS:
        text = doc.read_text()
        files = {}
        for m in _FENCE.finditer(text):
            if m.group(1) == "yaml" and m.group(2).startswith("# "):
                name = m.group(2).split("\n", 1)[0][2:].strip()
                if re.fullmatch(r"[\w.-]+\.ya?ml", name):
                    files[name] = m.group(2)
        for m in _FENCE.finditer(text):
            if m.group(1) not in ("text", "console", "sh", "") or "\n$ " not in "\n" + m.group(2):
                continue
            steps: list[Step] = []
            lines = m.group(2).splitlines()
            i = 0
            while i < len(lines):
                line = lines[i]
                if line.startswith("$ "):
                    command = line[2:]
                    while command.endswith("\\") and i + 1 < len(lines):
                        i += 1
                        command = command[:-1] + " " + lines[i].strip()
                    argv = shlex.split(command)
                    if argv == ["echo", "$?"] and steps:
                        i += 1
                        steps[-1].status = int(lines[i])
                    elif (args := _tollgate(argv)) is not None:
                        steps.append(Step(args))
                    else:
                        steps.append(Step([]))  # a command of another tool: its output is not checked
                elif steps:
                    steps[-1].output.append(line)
                i += 1
            steps = [s for s in steps if s.argv]
            if steps:
                out.append(Transcript(doc.relative_to(ROOT).as_posix(), text.count("\n", 0, m.start()) + 1, steps,
                                      files))
    return out


def inline_commands() -> list[tuple[str, list[str]]]:
    out = []
    for doc in DOCS:
        for m in _INLINE.finditer(doc.read_text()):
            args = _tollgate(shlex.split(m.group(1)))
            operands = [a for a in (args or [])[1:] if not a.startswith("-")]
            if args and operands and all((ROOT / a).exists() for a in operands):
                out.append((f"{doc.name}: {m.group(1)}", args))
    return out


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # stdout and stderr interleaved as written
    return subprocess.run([sys.executable, "-m", "webhook.cli.main", *args], cwd=cwd, env=env, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)


TRANSCRIPTS = transcripts()
INLINE = inline_commands()


def test_the_docs_hold_the_examples_this_test_checks() -> None:
    # The harvest itself must not silently shrink: a transcript in each document, of each subcommand.
    assert {str(t).split(":")[0] for t in TRANSCRIPTS} == {"README.md", "docs/writing-policies.md", "docs/server.md"}
    assert {s.argv[0] for t in TRANSCRIPTS for s in t.steps} == set(SUBCOMMANDS)
    assert len(INLINE) >= 2


@pytest.mark.parametrize("transcript", TRANSCRIPTS, ids=str)
def test_documented_transcript_runs_as_shown(transcript: Transcript, tmp_path: Path) -> None:
    for name, content in transcript.files.items():
        (tmp_path / name).write_text(content)
    for step in transcript.steps:
        operands = [a for a in step.argv[1:] if not a.startswith("-")]
        cwd = ROOT if all((ROOT / a).exists() for a in operands) else tmp_path
        result = run(step.argv, cwd)
        assert [line.rstrip() for line in result.stdout.splitlines()] == step.output, (
            f"{transcript}: tollgate {' '.join(step.argv)}")
        if step.status is not None:
            assert result.returncode == step.status, f"{transcript}: tollgate {' '.join(step.argv)}"


@pytest.mark.parametrize(("where", "args"), INLINE, ids=[w for w, _ in INLINE])
def test_documented_inline_command_succeeds(where: str, args: list[str]) -> None:
    result = run(args, ROOT)
    assert result.returncode == 0, f"{where}\n{result.stdout}"
    assert "Traceback" not in result.stdout
