"""Imported policies among documents read from files: Kubernetes admission policies and Kyverno CEL policies.

``tollgate test``, ``lint``, ``audit`` read these beside Tollgate's own kinds. The documents of every
file given are converted together (a binding and its policy may be in different files), with
:mod:`webhook.formats`; each resulting policy is an :class:`ImportedDocument`: a
:class:`~webhook.files.yamlio.Document` whose ``obj`` is the ``ClusterAdmissionPolicy`` object the
server would serve and whose locations are its sources' (a compile error in
``spec.validations[0].expression`` names the line of the ValidatingAdmissionPolicy's expression; a
problem with ``spec.paramRef`` the binding's line), so every message names the author's file, line,
document and field.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.files.yamlio import Document, InputError, load_paths, parse_path
from webhook.formats.catalog import import_policies, unbound_note
from webhook.formats.common import source_ref
from webhook.formats.gatekeeper.convert import constraint_kind
from webhook.formats.imported import Imported, Problem, SourceRef
from webhook.formats.kinds import CONSTRAINT_GROUP, GATEKEEPER_TEMPLATE, IMPORT_KINDS, import_kind_of, refused_kind_of
from webhook.policy.provenance import IMPORT_ERROR_ANNOTATION
from webhook.policy.vocabulary import POLICY_KINDS

__all__ = ["IMPORTED_KIND_NAMES", "ImportedDocument", "ImportedPolicies", "import_documents", "is_imported_kind",
           "policy_documents"]

#: The kinds imported, for messages (``no policy found``).
IMPORTED_KIND_NAMES = (*(k.kind for k in IMPORT_KINDS), "Gatekeeper constraints")


def is_imported_kind(doc: Document) -> bool:
    """Whether ``doc`` is of a kind Tollgate imports (any version: an unread version is a problem, not skipped)."""
    return import_kind_of(doc.obj) is not None


@dataclass(frozen=True, slots=True)
class ImportedDocument(Document):
    """The policy an import gives, located at its source documents.

    ``obj`` is the ``ClusterAdmissionPolicy`` object; ``source``, ``index``, ``node`` and ``item``
    are those of the source policy's document (the binding's when the policy is missing).

    Attributes:
        imported: the conversion (its problems and notes).
        located: each source object's document.
        unbound: a policy no binding names, converted with a stand-in binding so that lint checks it
            (the stand-in's own problems are not the author's).
    """

    imported: Imported | None = field(default=None, compare=False)
    located: Mapping[SourceRef, Document] = field(default_factory=dict, compare=False)
    unbound: bool = field(default=False, compare=False)

    def _at(self, path: Sequence[str | int]) -> tuple[Document, tuple[str | int, ...]]:
        assert self.imported is not None
        source, source_path = self.imported.origin(path)
        doc = self.located.get(source)
        if doc is None:
            doc = next(iter(self.located.values()))
            source_path = ()
        return doc, source_path

    def where(self, path: Sequence[str | int] = ()) -> str:
        """``file:line: document N`` of the source field ``path`` of the policy object came from."""
        doc, source_path = self._at(path)
        return doc.where(source_path)

    @property
    def display_name(self) -> str:
        """``ValidatingAdmissionPolicy require-labels (binding require-labels-prod)``, ``ValidatingPolicy x``."""
        assert self.imported is not None
        binding = self.imported.binding
        return f"{self.imported.policy}" + (f" (binding {binding.name})" if binding is not None else "")

    def locate(self, problem: Problem) -> str:
        """One line: the problem (or note) at its source document's line of its field."""
        return self.locate_in(self.located, problem)

    @staticmethod
    def locate_in(located: Mapping[SourceRef, Document], problem: Problem) -> str:
        """:meth:`locate` over a mapping of source documents."""
        doc = located.get(problem.source)
        if doc is None:
            return str(problem)
        return f"{doc.where(parse_path(problem.path))}: {problem}"

    def unmarked(self) -> ImportedDocument:
        """The same document without its import problem, so compiling it finds its CEL errors too (lint)."""
        meta = dict(self.obj.get("metadata") or {})
        meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items()
                               if k != IMPORT_ERROR_ANNOTATION}
        return dataclasses.replace(self, obj={**self.obj, "metadata": meta})

    @property
    def problems(self) -> list[str]:
        """The import's problems, located (``[]`` when it can be honoured)."""
        if self.imported is None:
            return []
        stand_in = self.imported.binding if self.unbound else None
        return [self.locate(p) for p in self.imported.problems if p.source != stand_in]


@dataclass(slots=True)
class ImportedPolicies:
    """What the imported kinds among some documents give.

    Attributes:
        documents: one :class:`ImportedDocument` per policy (per binding; per Kyverno policy).
        problems: documents that cannot be imported at all: without a name, or defined twice (located).
        notes: how fields are honoured differently, and policies no binding names.
        refused: one line per document of a kind Tollgate refuses (Kyverno's GeneratingPolicy, DeletingPolicy,
            ImageValidatingPolicy and their namespaced twins: :data:`~webhook.formats.kinds.REFUSED_KINDS`),
            located; ``tollgate lint`` reports them as problems, ``test`` and ``audit`` as warnings.
        count: how many documents were of an imported (or refused) kind.
    """

    documents: list[ImportedDocument] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    count: int = 0


def _stand_in_binding(policy: dict[str, Any], ref: SourceRef) -> dict[str, Any] | None:
    """A binding for a policy no binding names, so that its own fields and expressions can be checked.

    For a ConstraintTemplate: a constraint of its kind without parameters (``variables.params`` is null).
    """
    if ref.kind == GATEKEEPER_TEMPLATE.kind:
        return {"apiVersion": f"{CONSTRAINT_GROUP}/v1beta1", "kind": constraint_kind(policy) or ref.name,
                "metadata": {"name": STAND_IN}, "spec": {}}
    kind = next((k for k in IMPORT_KINDS if k.binds == ref.kind), None)
    if kind is None:
        return None
    spec: dict[str, Any] = {"policyName": ref.name}
    if not kind.mutating:
        spec["validationActions"] = ["Deny"]
    if (policy.get("spec") or {}).get("paramKind") is not None:
        spec["paramRef"] = {"name": "params", "parameterNotFoundAction": "Deny"}
    return {"apiVersion": policy.get("apiVersion"), "kind": kind.kind, "metadata": {"name": STAND_IN}, "spec": spec}


#: The name of the binding :func:`import_documents` stands in for a policy no binding names.
STAND_IN = "(no binding)"


def import_documents(docs: Iterable[Document], *, check_unbound: bool = False) -> ImportedPolicies:
    """Convert the documents of imported kinds among ``docs`` (others are ignored) together.

    A second document with the kind and name of an earlier one is a problem and is left out, as
    ``tollgate test`` refuses a Tollgate policy defined twice.

    Args:
        docs: the documents.
        check_unbound: also give a policy no binding names, with a stand-in binding (``tollgate lint``
            checks its fields and expressions; it selects nothing anywhere).
    """
    out = ImportedPolicies()
    by_ref: dict[SourceRef, Document] = {}
    for doc in docs:
        kind = import_kind_of(doc.obj)
        if kind is None:
            why = refused_kind_of(doc.obj)
            if why is not None:
                out.count += 1
                out.refused.append(doc.problem(("kind",), f"{doc.display_name}: refused: a {doc.kind} {why}; "
                                                          "it is not evaluated"))
            continue
        out.count += 1
        meta = doc.obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            out.problems.append(doc.problem(("metadata", "name"), f"{kind.kind}: required field is missing"))
            continue
        ref = source_ref(kind, doc.obj)
        if ref in by_ref:
            out.problems.append(f"{doc.where()}: {ref}: defined twice (first in {by_ref[ref].where()})")
            continue
        by_ref[ref] = doc
    result = import_policies(d.obj for d in by_ref.values())
    for imported in result.policies:
        located = {s: by_ref[s] for s in imported.sources if s in by_ref}
        first = located[imported.binding] if imported.missing_policy and imported.binding else located[imported.policy]
        out.documents.append(ImportedDocument(first.source, first.index, imported.obj, first.node, first.item,
                                              imported=imported, located=located))
        out.notes += [_note(located.get(n.source), n.source, n.path, n.message) for n in imported.notes]
    out.notes += [_note(by_ref.get(ref), ref, "", unbound_note(ref)) for ref in result.unbound]
    for ref in result.unbound if check_unbound else ():
        stand_in = _stand_in_binding(by_ref[ref].obj, ref)
        if stand_in is None:
            continue
        (alone,) = import_policies([by_ref[ref].obj, stand_in]).policies
        doc = by_ref[ref]
        out.documents.append(ImportedDocument(doc.source, doc.index, alone.obj, doc.node, doc.item, imported=alone,
                                              located={ref: doc}, unbound=True))
    return out


def _note(doc: Document | None, source: SourceRef, path: str, message: str) -> str:
    """``file:line: document N: Kind name: note: path: message`` (as lint's warnings read)."""
    where = f"{doc.where(parse_path(path))}: " if doc is not None else ""
    return f"{where}{source}: note: {path + ': ' if path else ''}{message}"


def policy_documents(paths: Iterable[Path], notes: list[str] | None = None) -> list[Document]:
    """Every Tollgate policy document in the files, then every imported policy (for ``tollgate audit``).

    Args:
        paths: files and directories.
        notes: when given, collects the imports' notes.

    Raises:
        InputError: unusable files, or an imported document without a name or defined twice.
    """
    docs = list(load_paths(paths))
    imported = import_documents(docs)
    if imported.problems:
        raise InputError(imported.problems[0])
    if notes is not None:
        notes += imported.notes + imported.refused
    return [d for d in docs if d.kind in POLICY_KINDS] + list(imported.documents)


_UNDECLARED = re.compile(r"undeclared reference to '([^']+)'")


def _repeats_a_library_problem(line: str, lacking: list[tuple[str, str]]) -> bool:
    """A compile error naming one of the calls a library problem of the same expression already names.

    Either CEL's ``undeclared reference`` to one of its names, or the compiler's own refusal of a library it
    declares for ``tollgate test`` only (``image.GetMetadata is Kyverno's ImageData library ...``).
    """
    m = _UNDECLARED.search(line)
    for path, message in lacking:
        if f": {path}: ERROR: " not in line:
            continue
        if m is not None and re.search(rf"\b{re.escape(m.group(1))}\b", message):
            return True
        library = message.split(", which ", 1)[0]
        if " is Kyverno's " in library and library in line:
            return True
    return False


def import_problems(docs: Iterable[Document], warnings: list[str] | None = None) -> tuple[list[str], int]:
    """Every problem of the imported kinds among ``docs`` (``tollgate lint``), one line each, and how many there were.

    Problems: documents without a name or defined twice; documents of a kind Tollgate refuses (Kyverno's
    GeneratingPolicy, DeletingPolicy, ImageValidatingPolicy); whatever a conversion cannot honour, at
    its source field's line; and every compile error of its expressions (the server's compiler, at
    the author's line; with import problems, only CEL errors, as for a spec with schema violations).

    Args:
        docs: the documents (other kinds are ignored).
        warnings: when given, collects the notes (``warning: note: ...``, at their field's line) and, for a
            sound policy, :func:`~webhook.files.checks.document_warnings` (list merges an ApplyConfiguration
            cannot know).
    """
    from webhook.files.checks import compile_problems, document_warnings  # checks calls this module

    imported = import_documents(docs, check_unbound=True)
    problems = list(imported.problems) + imported.refused
    for doc in imported.documents:
        found = [p for p in doc.problems if p not in problems]  # a policy's own problem, once for all its bindings
        problems += found
        if doc.imported is None or doc.imported.missing_policy:
            continue
        compiled = compile_problems(doc.unmarked(), spec_checked=not found)
        # An expression calling a library Tollgate lacks was reported as such: its "undeclared reference"
        # errors (the library's own names) would only repeat it.
        lacking = [(p.path, p.message) for p in doc.imported.problems if p.unsupported_library]
        compiled = [c for c in compiled if not _repeats_a_library_problem(c, lacking)]
        for found_line in compiled:
            # An expression is the policy's, whatever binding: named by the policy, reported once.
            line = found_line.replace(f"{doc.display_name}: ", f"{doc.imported.policy}: ", 1)
            if line not in problems:
                problems.append(line)
        if warnings is not None and not found and not compiled:
            warnings += [w for w in document_warnings(doc) if w not in warnings]
    if warnings is not None:
        warnings += [note for note in imported.notes if note not in warnings]
    return problems, imported.count
