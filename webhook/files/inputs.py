"""The inputs of offline evaluation read from files, as the server would hold them.

``tollgate test`` and ``tollgate audit`` read policies, params, Namespaces,
referenced objects and the resources under test from YAML files; this module
turns them into what the server's informers would cache and what its engine
reads. Policies, ConfigMaps and Namespaces are schema-checked
(:mod:`webhook.files.checks`); other resources need ``kind`` and
``metadata.name``. Unusable input is one :class:`~webhook.files.yamlio.InputError`
line naming file, line, document and field.

Policies are compiled the way the server files them: Tollgate's kinds and the
imported ones (:mod:`webhook.files.imported`); one that cannot be honoured is
not Ready and answers what it selects per its failurePolicy, with a warning.

Caches, as on a cluster: a ConfigMap is a param only when the params selector
(``--params-selector``, the server's) selects it; others are ignored with a
warning. Objects of ``spec.references`` are keyed by apiVersion and resource, a
namespaced one without a namespace in ``default``, as ``kubectl apply`` puts it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.files.checks import compile_for_evaluation, schema_problems
from webhook.files.imported import IMPORTED_KIND_NAMES, import_documents, is_imported_kind
from webhook.files.requests import describe_key, resource_key
from webhook.files.yamlio import Document, InputError, load_paths
from webhook.formats.kyverno.exceptions import compile_any_exception
from webhook.policy import CompiledPolicy
from webhook.policy.exceptions import EXCEPTION_KINDS, ExceptionSet
from webhook.policy.labelquery import parse_label_selector_text
from webhook.policy.model import Reference
from webhook.policy.resources import resource_for_kind
from webhook.policy.vocabulary import POLICY_KINDS, PolicyKind


@dataclass(frozen=True, slots=True)
class LoadedPolicy:
    """A compiled policy and the document it came from."""

    doc: Document
    compiled: CompiledPolicy

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return self.compiled.name

    @property
    def key(self) -> str:
        """The policy's key as the server, the audit and the metrics name it (``namespace/name`` if namespaced).

        Two tenants' AdmissionPolicies may share a ``metadata.name``; their keys differ.
        """
        return self.compiled.key

    @property
    def namespaced(self) -> bool:
        """True for an ``AdmissionPolicy``."""
        return self.doc.kind == PolicyKind.NAMESPACED

    @property
    def actions(self) -> frozenset[str]:
        """``spec.validationActions`` (default ``[Deny]``)."""
        return frozenset(self.doc.obj.get("spec", {}).get("validationActions") or ("Deny",))


#: Kinds a policies file may hold beside its policies (a kustomization's params ConfigMap, Namespaces),
#: which ``-p`` leaves to ``-c``/``-n`` without a warning.
_POLICY_COMPANIONS = frozenset({"ConfigMap", "Namespace", "TestSuite"})


def load_policies(paths: Iterable[Path]) -> list[LoadedPolicy]:
    """Every ClusterAdmissionPolicy / AdmissionPolicy in the files, schema-checked and compiled.

    Raises:
        InputError: none found, a duplicate name, a schema violation or match rules that cannot be read
            (one line: file, line, document, policy, spec path, CEL position).
    """
    paths = list(paths)
    out: list[LoadedPolicy] = []
    seen: dict[tuple[str, str], Document] = {}
    docs = list(load_paths(paths))
    for doc in docs:
        if doc.kind not in POLICY_KINDS:
            continue
        problems = schema_problems(doc)
        if problems:
            raise InputError(problems[0])
        compiled, error = compile_for_evaluation(doc)
        if compiled is None:
            raise InputError(str(error))
        if error is not None:
            # As in a cluster: the policy is not Ready, and what it selects is answered per its failurePolicy.
            print(f"tollgate test: warning: {error} (not Ready: the requests it selects are answered per its "
                  f"failurePolicy)", file=sys.stderr)
        key = (doc.kind, compiled.key)
        if key in seen:
            raise InputError(f"{doc.where()}: {doc.display_name}: defined twice (first in {seen[key].where()})")
        seen[key] = doc
        out.append(LoadedPolicy(doc, compiled))
    out += _imported_policies(docs)
    if not out:
        raise InputError(f"no ClusterAdmissionPolicy or AdmissionPolicy (nor any of {', '.join(IMPORTED_KIND_NAMES)}) "
                         f"in {', '.join(map(str, paths))}")
    named = {str(p) for p in paths if not p.is_dir()}
    for doc in docs:
        if doc.source in named and not _policy_input(doc):
            # A file given as policies is never passed over in silence (a directory's other kinds are).
            print(f"tollgate test: warning: {doc.where()}: {doc.display_name} is not a kind tollgate reads as a "
                  "policy: ignored", file=sys.stderr)
    return out


def _policy_input(doc: Document) -> bool:
    """Whether a document among the policies is read: a policy, an imported kind, or what policies come with."""
    return (doc.kind in POLICY_KINDS or is_imported_kind(doc) or doc.kind in EXCEPTION_KINDS
            or doc.kind in _POLICY_COMPANIONS)


def _imported_policies(docs: list[Document]) -> list[LoadedPolicy]:
    """The policies the imported kinds among ``docs`` give (see :mod:`webhook.files.imported`), compiled.

    As for a Tollgate policy: one that cannot be honoured is not Ready, reported with a warning, and
    answers what it selects per its failurePolicy; one whose match rules cannot be read (a binding
    without its policy) is unusable input.

    Raises:
        InputError: an imported document without a name, defined twice, or selecting nothing readable.
    """
    imported = import_documents(docs)
    if imported.problems:
        raise InputError(imported.problems[0])
    for note in imported.notes:
        print(f"tollgate test: {note}", file=sys.stderr)
    for line in imported.refused:
        print(f"tollgate test: warning: {line}", file=sys.stderr)
    out = []
    for doc in imported.documents:
        compiled, error = compile_for_evaluation(doc)
        problems = doc.problems or [str(error)]
        if compiled is None:
            raise InputError(problems[0])
        if error is not None:
            for line in problems:
                print(f"tollgate test: warning: {line} (not Ready: the requests it selects are answered per its "
                      f"failurePolicy)", file=sys.stderr)
        out.append(LoadedPolicy(doc, compiled))
    return out


def load_exceptions(paths: Iterable[Path]) -> ExceptionSet:
    """The PolicyExceptions and ClusterPolicyExceptions among the policy files, schema-checked and compiled.

    Kyverno's CEL PolicyExceptions (``policies.kyverno.io``) among them are read too, converted by
    :mod:`webhook.formats.kyverno.exceptions` (checked there, not by Tollgate's schema).

    As in a cluster, one that does not compile exempts nothing: it is left out with a warning (``tollgate
    lint`` refuses it).

    Raises:
        InputError: the first schema violation.
    """
    out = []
    for doc in load_paths(paths):
        if doc.kind not in EXCEPTION_KINDS:
            continue
        problems = schema_problems(doc)
        if problems:
            raise InputError(problems[0])
        result = compile_any_exception(doc.obj)
        if result.exception is None:
            print(f"tollgate: warning: {doc.where()}: {doc.display_name}: {result.condition['message']} (not Ready: "
                  "it exempts nothing)", file=sys.stderr)
            continue
        out.append(result.exception)
    return ExceptionSet.of(out)


def load_kind(paths: Iterable[Path], kind: str) -> list[Document]:
    """Every document of ``kind`` in the files, schema-checked (other kinds are ignored).

    Raises:
        InputError: unreadable file or the first schema violation.
    """
    out = []
    for doc in load_paths(paths):
        if doc.kind != kind:
            continue
        problems = schema_problems(doc)
        if problems:
            raise InputError(problems[0])
        out.append(doc)
    return out


def select_params(docs: Iterable[Document], selector: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The ConfigMaps the server's params informer would cache, and a warning for each it would not.

    Raises:
        InputError: an unparsable selector.
    """
    sel = parse_label_selector_text(selector)
    kept, warnings = [], []
    for doc in docs:
        if sel.matches_object(doc.obj):
            kept.append(doc.obj)
        else:
            warnings.append(f"{doc.where()}: {doc.display_name} is ignored: its labels do not match the params "
                            f"selector {selector} (the server would not cache it; add the label)")
    return kept, warnings


def load_resources(paths: Iterable[Path]) -> list[Document]:
    """The resources under test: every document except policies and TestSuites, each with kind and name.

    Raises:
        InputError: unreadable file, or a resource without ``kind`` or ``metadata.name``.
    """
    return list(iter_resources(paths))


def iter_resources(paths: Iterable[Path]) -> Iterator[Document]:
    """:func:`load_resources` one at a time, as the files are read (a caller that keeps none holds one).

    Raises:
        InputError: as :func:`load_resources`, when the document at fault is reached.
    """
    for doc in load_paths(paths):
        if doc.kind in POLICY_KINDS or doc.kind in EXCEPTION_KINDS or doc.kind == "TestSuite" or is_imported_kind(doc):
            continue
        if not doc.kind:
            raise InputError(doc.problem(("kind",), "required field is missing"))
        if not isinstance(doc.obj.get("metadata"), dict) or not doc.obj["metadata"].get("name"):
            raise InputError(doc.problem(("metadata", "name"), "required field is missing"))
        yield doc.shallow()  # only its top fields are ever named: its node tree would cost 4x its objects


def reference_objects(docs: Iterable[Document]) -> dict[Reference, list[dict[str, Any]]]:
    """Objects standing in for the caches of ``spec.references``, keyed by apiVersion and resource.

    The resource of a kind is the API machinery's (:func:`webhook.policy.resources.resource_for_kind`);
    a namespaced object without a namespace is in ``default``, as ``kubectl apply`` puts it.

    Raises:
        InputError: an object without ``apiVersion``, or two with the same resource, namespace and name.
    """
    out: dict[Reference, dict[tuple[str, str], dict[str, Any]]] = {}
    for doc in docs:
        api_version = doc.obj.get("apiVersion")
        if not isinstance(api_version, str) or not api_version:
            raise InputError(doc.problem(("apiVersion",), "required field is missing"))
        r = resource_for_kind(str(doc.kind), api_version)
        meta = dict(doc.obj["metadata"])
        if r.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        ref = Reference(api_version, r.plural)
        key = (str(meta.get("namespace") or ""), str(meta["name"]))
        if key in out.setdefault(ref, {}):
            raise InputError(f"{doc.where()}: {ref.cache} {'/'.join(k for k in key if k)} is defined twice")
        out[ref][key] = {**doc.obj, "metadata": meta}
    return {ref: list(objs.values()) for ref, objs in out.items()}


def index_resources(docs: Iterable[Document]) -> dict[tuple[str, str, str], Document]:
    """Resources by :func:`resource_key`.

    Raises:
        InputError: two documents with the same kind, namespace and name.
    """
    out: dict[tuple[str, str, str], Document] = {}
    for doc in docs:
        key = resource_key(doc.obj)
        if key in out:
            raise InputError(f"{doc.where()}: {describe_key(key)} is defined twice (first in {out[key].where()})")
        out[key] = doc
    return out
