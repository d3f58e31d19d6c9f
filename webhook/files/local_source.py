"""A ListerWatcher over YAML files in a directory (``tollgate serve --local DIR``).

Serves one kind (e.g. ``ConfigMap``), or one ``apiVersion``/resource, from every ``*.yaml``/``*.yml`` file
under DIR, recursively; documents of other kinds (Pods, TestSuites, ...) are
skipped. The files are read through one :class:`LocalDirectory` per
directory, which serves a file's change only once it is confirmed (a
half-written file never removes a policy). LIST returns the current objects with a synthetic
``resourceVersion``; WATCH polls the files and yields ADDED / MODIFIED /
DELETED for what changed, then ends cleanly at ``timeoutSeconds`` as the API
server does. So ``--local`` runs through the real Reflector, Indexer and
handlers, exactly like the cluster path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.aio import yield_to_loop
from webhook.files import schema
from webhook.files.yamlio import InputError, load_file, yaml_files
from webhook.formats.kinds import CONSTRAINT_GROUP
from webhook.informer.store import meta_namespace_key
from webhook.informer.types import KubeObject, ListOptions, ListResult, WatchEvent
from webhook.policy.labelquery import parse_label_selector_text
from webhook.policy.resources import resource_for_kind
from webhook.policy.selectors import LabelSelector
from webhook.policy.vocabulary import POLICY_KINDS

log = logging.getLogger("tollgate.local")


#: The kinds ``serve --local`` reads (TestSuites and resources under the directory are not checked).
_SERVED_KINDS = frozenset({*POLICY_KINDS, "ConfigMap", "Namespace"})

#: A directory listing: every YAML mapping document with its file, and the files in error (path → message).
Listing = tuple[list[tuple[Path, dict[str, Any]]], dict[str, str]]


def _check(path: Path) -> list[dict[str, Any]]:
    """The file's documents; raises InputError for bad YAML or a schema violation (first one)."""
    docs = load_file(path)
    for doc in docs:
        if doc.kind in _SERVED_KINDS:
            problems = schema.validate(doc.obj)
            if problems:
                raise InputError(doc.problem(problems[0].path, problems[0].message))
    return [d.obj for d in docs]


@dataclass(slots=True)
class _Content:
    """What one version of a file holds: its documents, or why it is unusable."""

    stamp: tuple[int, int]  # (st_mtime_ns, st_size)
    documents: list[dict[str, Any]]
    error: str | None = None


@dataclass(slots=True)
class _Candidate:
    """A change not yet confirmed: ``content`` (None: the file is gone), first seen at ``since``."""

    content: _Content | None
    since: float


@dataclass(slots=True)
class _FileState:
    served: _Content  # what the directory serves for the file: its last confirmed content
    candidate: _Candidate | None = None


class LocalDirectory:
    """The YAML files under one directory, parsed once per change and shared by every source reading it.

    A file is parsed again only when its ``(mtime, size)`` changed, so polling
    costs a stat per file. A change is served only once it is **confirmed**:
    the file has held the same content (or stayed absent) over two listings
    at least ``settle_seconds`` apart. Until then the file's last confirmed
    objects are served. A half-written file (an editor or ``cp`` caught
    mid-write: empty, only comments, a policy cut after its ``variables``, or
    not YAML at all) therefore never removes or weakens a policy for the moment
    it is seen; a file that stays unusable (bad YAML, or a policy, ConfigMap or
    Namespace document that ``kubectl apply`` would refuse) keeps its last good
    objects and is reported in :attr:`Listing` errors. A file that holds no
    documents (truncated to 0 bytes, or only comments) is such a file too: however
    long it stays so, it keeps its objects; only deleting the file removes them
    (logged once). The first listing of the directory is served as read (there
    is nothing older to keep).

    Args:
        root: the directory (or a single file).
        settle_seconds: how long a change must hold before it is served.
        clock: monotonic seconds (tests).
    """

    def __init__(self, root: Path, *, settle_seconds: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self.settle_seconds = settle_seconds
        self._clock = clock
        self._files: dict[Path, _FileState] = {}
        self._listing: tuple[float, Listing] | None = None
        self._listed = False
        self._listing_done: asyncio.Event | None = None  # set when the listing under way ends

    def _fresh(self, max_age: float) -> Listing | None:
        if max_age > 0 and self._listing is not None and self._clock() - self._listing[0] <= max_age:
            return self._listing[1]
        return None

    def listing(self, max_age: float = 0.0) -> Listing:
        """Every served YAML mapping document under ``root``, and the files in error (path → one-line message).

        Documents are shared with the parse cache: callers must not mutate them.

        Args:
            max_age: seconds a listing made by any caller may be reused (0: list now).
        """
        fresh = self._fresh(max_age)
        if fresh is not None:
            return fresh
        for _ in self._listing_steps():
            pass
        assert self._listing is not None
        return self._listing[1]

    async def listing_yielding(self, max_age: float) -> Listing:
        """:meth:`listing`, yielding the event loop every couple of milliseconds while it parses files.

        Sources whose polls come due together share one listing: a caller that finds one under way waits
        for it rather than walking the directory again (each walk holds the loop a few ms; one per served
        kind, back to back, held it 30-44 ms while serving ``policies/``, issue #29 item 8).
        """
        while True:
            fresh = self._fresh(max_age)
            if fresh is not None:
                return fresh
            if self._listing_done is None:
                break
            await self._listing_done.wait()  # then fresh, unless that listing was cancelled: list here
        done = self._listing_done = asyncio.Event()
        try:
            slice_started = time.perf_counter()
            for _ in self._listing_steps():
                if time.perf_counter() - slice_started > 0.002:
                    await yield_to_loop()
                    slice_started = time.perf_counter()
        finally:
            self._listing_done = None
            done.set()
        assert self._listing is not None
        return self._listing[1]

    def _listing_steps(self) -> Iterator[None]:
        """List ``root`` into ``_listing``, one step per file (a changed file is parsed in its step)."""
        started = self._clock()
        docs: list[tuple[Path, dict[str, Any]]] = []
        errors: dict[str, str] = {}
        try:
            files = yaml_files(self.root)
        except InputError as e:
            errors[str(self.root)] = str(e)
            files = []
        present = set(files)
        for path in [*files, *(p for p in self._files if p not in present)]:
            served = self._observe(path, present=path in present, now=started)
            if served is not None:
                docs += [(path, d) for d in served.documents]
                if served.error is not None:
                    errors[str(path)] = served.error
            yield
        self._listing = (started, (docs, errors))
        self._listed = True

    def _observe(self, path: Path, *, present: bool, now: float) -> _Content | None:
        """What to serve for ``path`` now; records a change and serves it once confirmed."""
        state = self._files.get(path)
        stamp = _file_stamp(path) if present else None
        if state is None:
            if stamp is None:
                return None
            content = _read(path, stamp)
            if self._listed:
                # A file new since the first listing is confirmed like any change.
                self._files[path] = _FileState(_Content((0, 0), []), _Candidate(content, now))
                return None
            return self._adopt(path, None, content)
        if stamp == state.served.stamp:
            state.candidate = None  # back to what is served (e.g. a save undone)
            return state.served
        candidate = state.candidate
        if candidate is None or (candidate.content.stamp if candidate.content else None) != stamp:
            changed = _read(path, stamp) if stamp is not None else None
            if changed is not None and changed.error is None and changed.documents == state.served.documents \
                    and state.served.error is None:
                state.served = changed  # touched, or rewritten identically: nothing to confirm
                state.candidate = None
                return changed
            state.candidate = _Candidate(changed, now)
            return state.served
        if now - candidate.since < self.settle_seconds:
            return state.served
        return self._adopt(path, state, candidate.content)

    def _adopt(self, path: Path, state: _FileState | None, content: _Content | None) -> _Content | None:
        """Serve ``content`` for ``path`` (None: the file is gone); a bad one keeps the last good documents."""
        if content is None:
            gone = self._files.pop(path, None)
            if gone is not None and gone.served.documents:
                log.info("%s: deleted: its %d document(s) are no longer served", path, len(gone.served.documents))
            return None
        previous = state.served if state is not None else None
        if content.error is None and not content.documents and previous is not None and previous.documents:
            # Truncated, or only comments left (a writer that died mid-save): never a removal.
            content = _Content(content.stamp, [], f"{path}: holds no documents (empty, or only comments); "
                                                  f"delete the file to remove its objects")
        if content.error is not None:
            kept = previous.documents if previous is not None else []
            if previous is None or previous.error != content.error:
                log.warning("%s (keeping its last good objects: %d document(s))", content.error, len(kept))
            content = _Content(content.stamp, kept, content.error)
        elif previous is not None and previous.error is not None:
            log.info("%s: parses again", path)
        self._files[path] = _FileState(content)
        return content


def _file_stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None  # removed between listing and stat
    return st.st_mtime_ns, st.st_size


def _read(path: Path, stamp: tuple[int, int]) -> _Content:
    try:
        return _Content(stamp, _check(path))
    except InputError as e:
        return _Content(stamp, [], str(e))


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
                 poll_interval: float = 1.0, api_resource: tuple[str, str] | None = None,
                 directory: LocalDirectory | None = None) -> None:
        self.root = root
        self.directory = directory if directory is not None else LocalDirectory(root, settle_seconds=poll_interval)
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
                if api_version.startswith(f"{CONSTRAINT_GROUP}/"):  # Gatekeeper's: plural = lower-case kind, cluster
                    r = dataclasses.replace(r, plural=kind.lower(), namespaced=False)
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

    def is_watch_list_semantics_unsupported(self) -> bool:
        """Always True: a directory has no watch cache to stream its initial state from.

        client-go's ``DoesClientNotSupportWatchListSemantics``: the Reflector lists it and never asks for a
        WatchList, instead of finding out from the first bookmark (and logging that it did).
        """
        return True

    async def list(self, options: ListOptions) -> ListResult:
        """All current objects of the kind (selector applied), with the directory's current RV."""
        self._scan(self.directory.listing())
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
            self._scan(await self.directory.listing_yielding(self.poll_interval / 2))
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
