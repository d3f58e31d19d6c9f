"""A ListerWatcher over YAML files in a directory (``tollgate serve --local DIR``).

Serves one kind (e.g. ``ConfigMap``), or one ``apiVersion``/resource, from every ``*.yaml``/``*.yml`` file
under DIR, recursively; documents of other kinds (Pods, TestSuites, ...) are
skipped. LIST returns the current objects with a synthetic
``resourceVersion``; WATCH polls the files and yields ADDED / MODIFIED /
DELETED for what changed, then ends cleanly at ``timeoutSeconds`` as the API
server does. So ``--local`` runs through the real Reflector, Indexer and
handlers, exactly like the cluster path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.aio import yield_to_loop
from webhook.files import schema
from webhook.files.yamlio import InputError, load_file, yaml_files
from webhook.informer.store import meta_namespace_key
from webhook.informer.types import KubeObject, ListOptions, ListResult, WatchEvent
from webhook.policy.labelquery import parse_label_selector_text
from webhook.policy.resources import resource_for_kind
from webhook.policy.selectors import LabelSelector

log = logging.getLogger("tollgate.local")


@dataclass(slots=True)
class _FileState:
    stamp: tuple[int, int]
    documents: list[dict[str, Any]]  # the last good parse
    error: str | None = None


#: path → state: a file is parsed again only when it changed, so polling a directory costs a stat
#: per file, not a YAML parse (which blocked the event loop for tens of ms). A file that stops
#: parsing (or whose policy, ConfigMap or Namespace documents violate their schema, which
#: ``kubectl apply`` would have refused) keeps its last good documents and records the error.
_files: dict[Path, _FileState] = {}


#: The kinds ``serve --local`` reads (TestSuites and resources under the directory are not checked).
_SERVED_KINDS = frozenset({*schema.POLICY_KINDS, "ConfigMap", "Namespace"})


def _check(path: Path) -> list[dict[str, Any]]:
    """The file's documents; raises InputError for bad YAML or a schema violation (first one)."""
    docs = load_file(path)
    for doc in docs:
        if doc.kind in _SERVED_KINDS:
            problems = schema.validate(doc.obj)
            if problems:
                raise InputError(doc.problem(problems[0].path, problems[0].message))
    return [d.obj for d in docs]


def _state_of(path: Path) -> _FileState | None:
    try:
        st = path.stat()
    except OSError:
        _files.pop(path, None)
        return None  # removed between listing and stat: its objects go with it
    stamp = (st.st_mtime_ns, st.st_size)
    state = _files.get(path)
    if state is not None and state.stamp == stamp:
        return state
    try:
        docs = _check(path)
    except InputError as e:
        previous = state.documents if state is not None else []
        if state is None or state.error != str(e):
            log.warning("%s (keeping its last good objects: %d document(s))", e, len(previous))
        state = _FileState(stamp, previous, str(e))
    else:
        if state is not None and state.error is not None:
            log.info("%s: parses again", path)
        state = _FileState(stamp, docs)
    _files[path] = state
    return state


#: root → (perf_counter time, documents, errors) of its last listing: every source of one directory (one
#: per informer: Namespaces, ConfigMaps, two policy kinds, each reference) shares it instead of stat-ing every
#: file itself (each such scan took ~1-1.5 ms of the event loop, once a second per source).
_listings: dict[Path, tuple[float, list[tuple[Path, dict[str, Any]]], dict[str, str]]] = {}


#: A directory listing: every YAML mapping document with its file, and the files in error (path → message).
Listing = tuple[list[tuple[Path, dict[str, Any]]], dict[str, str]]


def _fresh(root: Path, max_age: float) -> Listing | None:
    cached = _listings.get(root)
    if cached is not None and time.perf_counter() - cached[0] <= max_age:
        return cached[1], cached[2]
    return None


def _listing_steps(root: Path) -> Iterator[None]:
    """List ``root`` into :data:`_listings`, one step per file (a changed file is parsed in its step)."""
    started = time.perf_counter()
    docs: list[tuple[Path, dict[str, Any]]] = []
    errors: dict[str, str] = {}
    try:
        files = yaml_files(root)
    except InputError as e:
        errors[str(root)] = str(e)
        files = []
    for path in files:
        state = _state_of(path)
        if state is not None:
            docs += [(path, d) for d in state.documents]
            if state.error is not None:
                errors[str(path)] = state.error
        yield
    _listings[root] = (started, docs, errors)


def load_documents(root: Path, max_age: float = 0.0) -> Listing:
    """Every YAML mapping document under ``root``, and the files in error (path → one-line message).

    Documents are shared with a parse cache: callers must not mutate them.

    Args:
        root: the directory (or a single file).
        max_age: seconds a listing of ``root`` made by any caller may be reused (0: list now).
    """
    fresh = _fresh(root, max_age)
    if fresh is not None:
        return fresh
    for _ in _listing_steps(root):
        pass
    return _listings[root][1:]


async def load_documents_yielding(root: Path, max_age: float) -> Listing:
    """:func:`load_documents`, yielding the event loop every couple of milliseconds while it lists.

    50 policy files rewritten at once took ~60 ms to parse in one loop turn.
    """
    fresh = _fresh(root, max_age)
    if fresh is not None:
        return fresh
    slice_started = time.perf_counter()
    for _ in _listing_steps(root):
        if time.perf_counter() - slice_started > 0.002:
            await yield_to_loop()
            slice_started = time.perf_counter()
    return _listings[root][1:]


class LocalDirectoryListerWatcher:
    """Lists and watches one kind from a directory of YAML files.

    Follows the API server: ``labelSelector`` filters LIST and WATCH, and an
    object whose labels change across the selector arrives as ADDED (it now
    matches) or DELETED (it no longer does), as the watch cache sends it.

    Args:
        root: the directory (or a single file).
        kinds: accepted ``kind`` values, e.g. ``{"ConfigMap"}``.
        default_namespace: namespace given to namespaced objects without one
            (None for cluster-scoped kinds).
        poll_interval: seconds between scans while a WATCH is open.
        api_resource: instead of ``kinds``, accept the documents of one
            ``(apiVersion, resource)``, e.g. ``("networking.k8s.io/v1", "ingresses")``
            (a ``spec.references`` cache): the kind's resource and scope are the
            API machinery's (:func:`webhook.policy.resources.resource_for_kind`), and a
            namespaced object without a namespace is in ``default_namespace`` or ``default``.

    Attributes:
        errors: files that do not parse or violate their schema, path → one-line
            message (file, line, document, YAML path); their last good objects
            are still served. Empty when every file is sound.
        error_count: how many times a file entered (or changed) an error state:
            a monotonic counter for a metric.
    """

    def __init__(self, root: Path, *, kinds: set[str] | None = None, default_namespace: str | None = None,
                 poll_interval: float = 1.0, api_resource: tuple[str, str] | None = None) -> None:
        self.root = root
        self.kinds = kinds or set()
        self.api_resource = api_resource
        self.default_namespace = default_namespace
        self.poll_interval = poll_interval
        self.errors: dict[str, str] = {}
        self.error_count = 0
        self._rv = 0
        self._objects: dict[str, KubeObject] = {}
        self._history: list[tuple[int, str, KubeObject, KubeObject | None]] = []

    def _scan(self, listing: Listing) -> None:
        documents, errors = listing
        self.error_count += sum(1 for path, msg in errors.items() if self.errors.get(path) != msg)
        self.errors = errors
        current: dict[str, KubeObject] = {}
        for _path, doc in documents:
            default_namespace = self.default_namespace
            if self.api_resource is not None:
                kind, api_version = doc.get("kind"), doc.get("apiVersion")
                if not isinstance(kind, str) or api_version != self.api_resource[0]:
                    continue
                r = resource_for_kind(kind, api_version)
                if r.plural != self.api_resource[1]:
                    continue
                default_namespace = (default_namespace or "default") if r.namespaced else None
            elif doc.get("kind") not in self.kinds:
                continue
            meta = dict(doc.get("metadata") or {})
            if not meta.get("name"):
                continue
            if default_namespace is not None:
                meta.setdefault("namespace", default_namespace)
            else:
                meta.pop("namespace", None)  # a cluster-scoped kind
            current[meta_namespace_key({"metadata": meta})] = {**doc, "metadata": meta}
        for key, obj in current.items():
            old = self._objects.get(key)
            if old is not None and _strip_rv(old) == obj:
                continue
            self._rv += 1
            stamped = _stamp(obj, self._rv, generation=(old or {}).get("metadata", {}).get("generation", 0) + 1)
            self._history.append((self._rv, "MODIFIED" if old is not None else "ADDED", stamped, old))
            self._objects[key] = stamped
        for key in [k for k in self._objects if k not in current]:
            self._rv += 1
            gone = _stamp(_strip_rv(self._objects.pop(key)), self._rv)
            self._history.append((self._rv, "DELETED", gone, None))
        del self._history[:-1000]

    async def list(self, options: ListOptions) -> ListResult:
        """All current objects of the kind (selector applied), with the directory's current RV."""
        self._scan(load_documents(self.root))
        selector = parse_label_selector_text(options.label_selector)
        items = [o for o in self._objects.values() if selector.matches_object(o)]
        return ListResult(items=items, resource_version=str(self._rv))

    async def watch(self, options: ListOptions) -> AsyncIterator[WatchEvent]:
        """Poll the files; yield events with RV above the requested one; end at ``timeoutSeconds``."""
        selector = parse_label_selector_text(options.label_selector)
        since = int(options.resource_version or 0)
        deadline = time.monotonic() + (options.timeout_seconds or 300)
        while time.monotonic() < deadline:
            # Sources polling the same directory share one listing per half poll interval (a LIST is always fresh).
            self._scan(await load_documents_yielding(self.root, self.poll_interval / 2))
            for rv, etype, obj, old in self._history:
                if rv <= since:
                    continue
                since = rv
                event = _selected_event(etype, obj, old, selector)
                if event is not None:
                    yield event
            if options.allow_watch_bookmarks:
                yield WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": str(self._rv)}})
            await asyncio.sleep(self.poll_interval)


def _selected_event(etype: str, obj: KubeObject, old: KubeObject | None, selector: LabelSelector) -> WatchEvent | None:
    """The event a selector-filtered watch sees (the watch cache's rule: crossing the selector is ADDED/DELETED)."""
    now = selector.matches_object(obj)
    if etype != "MODIFIED":
        return WatchEvent(etype, obj) if now else None
    before = old is not None and selector.matches_object(old)
    if now and before:
        return WatchEvent("MODIFIED", obj)
    if now:
        return WatchEvent("ADDED", obj)
    if before:
        return WatchEvent("DELETED", obj)
    return None


def _strip_rv(obj: KubeObject) -> KubeObject:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "generation")}
    return {**obj, "metadata": meta}


def _stamp(obj: KubeObject, rv: int, generation: int | None = None) -> KubeObject:
    meta = {**obj["metadata"], "resourceVersion": str(rv)}
    if generation is not None:
        meta["generation"] = generation
    return {**obj, "metadata": meta}
