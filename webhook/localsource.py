"""A ListerWatcher over YAML files in a directory (``tollgate serve --local DIR``).

Serves one kind (e.g. ``ConfigMap``) from every ``*.yaml``/``*.yml`` file
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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from webhook.informer.store import meta_namespace_key
from webhook.informer.types import KubeObject, ListOptions, ListResult, WatchEvent
from webhook.policy.selectors import LabelSelector, Requirement

log = logging.getLogger("tollgate.local")


def _parse_label_selector(text: str | None) -> LabelSelector:
    """The equality subset of the ``labelSelector`` query syntax (``k=v``, ``k!=v``, ``k``, ``!k``)."""
    reqs = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        if "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append(Requirement(k.strip(), "NotIn", frozenset({v.strip()})))
        elif "=" in part:
            k, v = part.split("=", 1)
            reqs.append(Requirement(k.strip(), "In", frozenset({v.strip().lstrip("=")})))
        elif part.startswith("!"):
            reqs.append(Requirement(part[1:], "DoesNotExist", frozenset()))
        else:
            reqs.append(Requirement(part, "Exists", frozenset()))
    return LabelSelector(tuple(reqs))


#: path → ((mtime_ns, size), documents): a file is parsed again only when it changed, so polling a
#: directory costs a stat per file, not a YAML parse (which blocked the event loop for tens of ms).
_parsed: dict[Path, tuple[tuple[int, int], list[dict[str, Any]]]] = {}


def _documents_of(path: Path) -> list[dict[str, Any]]:
    try:
        st = path.stat()
    except OSError as e:
        log.warning("skipping %s: %s", path, e)
        return []
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _parsed.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as e:
        log.warning("skipping %s: %s", path, e)
        docs = []
    _parsed[path] = (stamp, docs)
    return docs


def load_documents(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every YAML mapping document under ``root`` (unreadable files are logged and skipped).

    Documents are shared with a parse cache: callers must not mutate them.
    """
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml"))
    return [(path, doc) for path in files for doc in _documents_of(path)]


class LocalDirectoryListerWatcher:
    """Lists and watches one kind from a directory of YAML files.

    Args:
        root: the directory (or a single file).
        kinds: accepted ``kind`` values, e.g. ``{"ConfigMap"}``.
        default_namespace: namespace given to namespaced objects without one
            (None for cluster-scoped kinds).
        poll_interval: seconds between scans while a WATCH is open.
    """

    def __init__(self, root: Path, *, kinds: set[str], default_namespace: str | None = None,
                 poll_interval: float = 1.0) -> None:
        self.root = root
        self.kinds = kinds
        self.default_namespace = default_namespace
        self.poll_interval = poll_interval
        self._rv = 0
        self._objects: dict[str, KubeObject] = {}
        self._history: list[tuple[int, str, KubeObject]] = []

    def _scan(self) -> None:
        current: dict[str, KubeObject] = {}
        for _path, doc in load_documents(self.root):
            if doc.get("kind") not in self.kinds:
                continue
            meta = dict(doc.get("metadata") or {})
            if not meta.get("name"):
                continue
            if self.default_namespace is not None:
                meta.setdefault("namespace", self.default_namespace)
            else:
                meta.pop("namespace", None)  # a cluster-scoped kind
            current[meta_namespace_key({"metadata": meta})] = {**doc, "metadata": meta}
        for key, obj in current.items():
            old = self._objects.get(key)
            if old is not None and _strip_rv(old) == obj:
                continue
            self._rv += 1
            stamped = _stamp(obj, self._rv, generation=(old or {}).get("metadata", {}).get("generation", 0) + 1)
            self._history.append((self._rv, "MODIFIED" if old is not None else "ADDED", stamped))
            self._objects[key] = stamped
        for key in [k for k in self._objects if k not in current]:
            self._rv += 1
            gone = _stamp(_strip_rv(self._objects.pop(key)), self._rv)
            self._history.append((self._rv, "DELETED", gone))
        del self._history[:-1000]

    async def list(self, options: ListOptions) -> ListResult:
        """All current objects of the kind (selector applied), with the directory's current RV."""
        self._scan()
        selector = _parse_label_selector(options.label_selector)
        items = [o for o in self._objects.values() if selector.matches_object(o)]
        return ListResult(items=items, resource_version=str(self._rv))

    async def watch(self, options: ListOptions) -> AsyncIterator[WatchEvent]:  # type: ignore[override]
        """Poll the files; yield events with RV above the requested one; end at ``timeoutSeconds``."""
        selector = _parse_label_selector(options.label_selector)
        since = int(options.resource_version or 0)
        deadline = time.monotonic() + (options.timeout_seconds or 300)
        while time.monotonic() < deadline:
            self._scan()
            for rv, etype, obj in self._history:
                if rv > since:
                    since = rv
                    if selector.matches_object(obj):
                        yield WatchEvent(etype, obj)
            if options.allow_watch_bookmarks:
                yield WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": str(self._rv)}})
            await asyncio.sleep(self.poll_interval)


def _strip_rv(obj: KubeObject) -> KubeObject:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "generation")}
    return {**obj, "metadata": meta}


def _stamp(obj: KubeObject, rv: int, generation: int | None = None) -> KubeObject:
    meta = {**obj["metadata"], "resourceVersion": str(rv)}
    if generation is not None:
        meta["generation"] = generation
    return {**obj, "metadata": meta}
