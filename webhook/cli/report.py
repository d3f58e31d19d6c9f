"""Render ``tollgate test`` rows as a table, JSON, YAML or JUnit XML (text in, text out; no I/O).

JUnit follows the schema CI systems read (Jenkins, GitLab, GitHub test
reporters): one ``<testsuite>`` per TestSuite file (``tollgate test`` for
ad-hoc runs), one ``<testcase>`` per row, a ``<failure>`` for an unmet
expectation (ad-hoc: a ``fail`` or ``error`` row) carrying the mismatch.

With ``--explain`` a row carries its policy's trace: JSON and YAML rows have it under
``explanation``, JUnit test cases print it in ``<system-out>``, and after a table
:func:`explanations` prints it as a tree per row.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence

import yaml

from webhook.files.requests import describe_key
from webhook.files.testsuite import Row
from webhook.policy.explain import render_policy

FORMATS = ("table", "json", "yaml", "junit")


def render(rows: Sequence[Row], output: str) -> str:
    """The rows in ``output`` format (one of :data:`FORMATS`), ending with a newline.

    Raises:
        ValueError: an unknown format.
    """
    if output == "json":
        return json.dumps([r.as_dict() for r in rows], indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump([r.as_dict() for r in rows], sort_keys=False, allow_unicode=True, width=1 << 16)
    if output == "junit":
        return junit(rows)
    if output == "table":
        return table(rows)
    raise ValueError(f"unknown output format {output!r} (want one of {', '.join(FORMATS)})")


def table(rows: Sequence[Row]) -> str:
    """Aligned columns; suite rows add EXPECTED (``MISMATCH: ...`` in MESSAGE when unmet)."""
    suite = any(r.expected is not None for r in rows)
    headers = ["POLICY", "KIND", "NAMESPACE", "NAME", "RESULT"] + (["EXPECTED"] if suite else []) + ["MESSAGE"]
    body = []
    for r in rows:
        cells = [r.policy, r.kind, r.namespace, r.name, r.result]
        if suite:
            cells.append(r.expected or "")
        message = r.message if r.ok or not r.mismatch else f"MISMATCH: {r.mismatch}"
        body.append([*cells, message.replace("\n", " ")])
    widths = [max(len(row[i]) for row in [headers, *body]) for i in range(len(headers) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1] for row in
             [headers, *body]]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def explanation(row: Row) -> str:
    """One row's explanation as text: a heading naming the policy, resource and operation, then its trees."""
    where = describe_key((row.kind, row.namespace, row.name))
    verdict = f"{row.result}, expected {row.expected}" if row.expected is not None else row.result
    lines = [f"=== {row.policy} on {where} ({row.request}): {verdict}"]
    if not row.explanation:
        lines.append("  not evaluated: the request has no object to mutate and the policy only mutates")
    for trace in row.explanation or []:
        lines += render_policy(trace, 1)
    return "\n".join(lines) + "\n"


def explanations(rows: Sequence[Row]) -> str:
    """Every explained row's tree (see :func:`explanation`), separated by blank lines; ``""`` when none is."""
    return "".join("\n" + explanation(r) for r in rows if r.explanation is not None)


def junit(rows: Sequence[Row]) -> str:
    """JUnit XML: ``<testsuites>`` → ``<testsuite name=FILE>`` → ``<testcase>`` (+ ``<failure>``)."""
    root = ET.Element("testsuites", name="tollgate test")
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.suite or "tollgate test", []).append(r)
    total = failed = 0
    for name, members in groups.items():
        bad = [r for r in members if not r.ok]
        suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(members)), failures=str(len(bad)),
                              errors="0", skipped="0")
        for r in members:
            where = f"{r.kind} {r.namespace}/{r.name}" if r.namespace else f"{r.kind} {r.name}"
            case = ET.SubElement(suite, "testcase", classname=r.policy, name=f"{where} {r.request}")
            if not r.ok:
                text = r.mismatch or f"{r.result}: {r.message}"
                failure = ET.SubElement(case, "failure", message=text, type=r.result)
                failure.text = f"expected: {r.expected or 'pass'}\ngot: {r.result}\nmessage: {r.message}\n"
            if r.explanation is not None:
                ET.SubElement(case, "system-out").text = explanation(r)
            elif r.ok and r.message:
                ET.SubElement(case, "system-out").text = f"{r.result}: {r.message}"
        total += len(members)
        failed += len(bad)
    root.set("tests", str(total))
    root.set("failures", str(failed))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
