"""An RV-faithful fake kube-apiserver for component tests (docs/design/informer.md §D).

aiohttp on 127.0.0.1, port 0, speaking the real wire protocol so that the
real kubernetes_asyncio ``ApiClient`` (through ``KubeListerWatcher``) talks to
it over HTTP:

* one resourceVersion counter for every resource, bumped on every write, and
  a history of changes with a compaction floor (:meth:`FakeApiServer.compact`);
* LIST with ``limit``/``continue`` (RV constant across pages; the token
  encodes ``(rv, last key)``; a token below the floor gets 410 Expired), RV
  ``""``/``"0"``/``N``, an RV ahead of the current one gets 504 "Too large
  resource version" after a short wait, Exact below the floor gets 410;
* WATCH as a chunked stream of JSON lines: synthetic ADDED for RV ""/"0",
  events with RV > N, an ERROR 410 event (status 200) below the floor,
  BOOKMARKs when allowed (periodically and just before the deadline),
  ``timeoutSeconds`` ending the stream cleanly, label and field selectors
  with objects entering/leaving as ADDED/DELETED;
* WatchList (KEP-3157) as a server with the feature answers it
  (``watch_list="serve"``, the default): ``sendInitialEvents=true`` with
  ``resourceVersionMatch=NotOlderThan`` streams the state as ADDED events,
  then a BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` at the
  snapshot's RV (only when bookmarks are allowed), then live events on the same
  stream; never 410, 504 "Too large resource version" for an RV ahead; 422 for
  ``sendInitialEvents`` on a LIST, for ``sendInitialEvents`` without
  ``NotOlderThan``, and for ``resourceVersionMatch`` on a watch without
  ``sendInitialEvents``. ``watch_list="refuse"`` answers as a 1.20 server does
  (422 "resourceVersionMatch is forbidden for watch"); ``watch_list="ignore"``
  drops both parameters and serves a plain watch (a proxy or server that
  ignores them);
* any resource of any group/version (``/api/v1/...`` and ``/apis/G/V/...``),
  namespaced or cluster-scoped (by the path): GET, POST (409 AlreadyExists),
  PUT (409 Conflict on a stale ``metadata.resourceVersion``, 404 when absent),
  PATCH as JSON merge patch (RFC 7386) or JSON patch (RFC 6902; a failed
  ``test`` is 422), with a ``metadata.resourceVersion`` precondition, and
  DELETE; the ``/status`` subresource for the resources in ``status_resources``
  (writes there change only ``status``; writes to the main resource never
  change ``status``); ``metadata.generation`` bumped when anything but
  ``metadata``/``status`` changes; errors as ``metav1.Status`` bodies with the
  API server's reasons and messages;
* CRUD so tests drive changes (:meth:`FakeApiServer.apply`, ``delete``, ``get``),
  fault hooks (``faults`` for the watch protocol, :meth:`FakeApiServer.fail` for
  any request), and a request log (:meth:`FakeApiServer.log`, ``count``).
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import copy
import json
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import orjson
from aiohttp import web

from tests.fakeapi.discovery import FakeDiscovery

TRUE = {"1", "t", "T", "true", "TRUE", "True"}


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


#: Resources whose ``/status`` is a subresource (spec and status written apart), as for these on a real server.
STATUS_RESOURCES = frozenset({"clusteradmissionpolicies", "admissionpolicies", "pods", "deployments",
                              "namespaces", "certificates"})
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@dataclass
class Failure:
    """:meth:`FakeApiServer.fail`: answer ``times`` requests of ``method`` on paths ending in ``suffix``."""

    method: str
    suffix: str
    code: int
    times: int


@dataclass(frozen=True)
class Target:
    """What a request path names."""

    group: str
    version: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None

    @property
    def key(self) -> str | None:
        if self.name is None:
            return None
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def qualified(self) -> str:
        """``secrets`` or ``validatingwebhookconfigurations.admissionregistration.k8s.io``, as in messages."""
        return f"{self.resource}.{self.group}" if self.group else self.resource


def _status(code: int, reason: str, message: str, **extra: Any) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code, **extra}
    return web.json_response(body, status=code)


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """Everything that bumps ``metadata.generation``: all but ``metadata`` and ``status``."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _selects(obj: dict[str, Any], label_selector: str | None, field_selector: str | None) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for part in filter(None, (label_selector or "").split(",")):
        if "!=" in part:
            k, v = part.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in part:
            k, v = part.split("=", 1)
            if labels.get(k) != v.lstrip("="):
                return False
        elif part not in labels:
            return False
    for part in filter(None, (field_selector or "").split(",")):
        k, v = part.split("=", 1)
        if obj["metadata"].get(k.removeprefix("metadata.")) != v.lstrip("="):
            return False
    return True


@dataclass
class Faults:
    """Knobs a test turns; each ``next_*`` fault applies to the next matching request only."""

    list_errors: list[tuple[int, str, float | None]] = field(default_factory=list)  # (code, reason, retry_after)
    watch_abort_mid_line: int = 0
    watch_stall: int = 0
    watch_garbage: int = 0
    watch_html: int = 0
    watch_error_500: int = 0
    watch_close_at_once: int = 0
    expire_continue_tokens: bool = False
    list_delay: float = 0.0  # seconds before each LIST page is answered
    #: LIST pages past this many are held until ``list_release`` is set (a test's event, not a delay).
    list_held_after: int | None = None
    list_release: asyncio.Event = field(default_factory=asyncio.Event)
    bookmark_interval: float | None = None
    watch_errors: list[tuple[int, str, float | None]] = field(default_factory=list)  # answered as the watch opens
    watch_drop_at_open: int = 0  # connections closed before any response byte


class FakeApiServer:
    """The fake API server. ``await start()``, use ``url``, drive it with ``apply``/``delete``."""

    def __init__(self, *, status_resources: frozenset[str] = STATUS_RESOURCES, watch_list: str = "serve") -> None:
        if watch_list not in ("serve", "refuse", "ignore"):
            raise ValueError(f"watch_list: {watch_list!r}")
        self.watch_list = watch_list
        self._sorted_cache: dict[str, tuple[int, list[str], list[dict[str, Any]]]] = {}
        self.rv = 0
        self.floor = 0
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.history: list[tuple[int, str, str, dict[str, Any], dict[str, Any] | None]] = []
        self.requests: list[dict[str, Any]] = []
        self.faults = Faults()
        #: LIST requests that reached the handler (``Faults.list_held_after`` counts them).
        self.list_pages_started = 0
        self.failures: list[Failure] = []
        self.status_resources = status_resources
        self._changed = asyncio.Event()
        self._watches: set[asyncio.Task[Any]] = set()
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port = 0
        self.too_large_wait = 0.05
        self.discovery = FakeDiscovery(self)
        #: What ``GET /version`` answers.
        self.version: dict[str, str] = {"major": "1", "minor": "36", "gitVersion": "v1.36.0"}
        #: Webhook fields this server does not know and drops on write, as an older API server does
        #: (a 1.20 server drops ``matchConditions``, added in 1.27).
        self.drop_webhook_fields: frozenset[str] = frozenset()

    # -- lifecycle -----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
        await self._runner.setup()
        await self._listen()

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        self.port = self._site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def refuse_connections(self) -> None:
        """Stop listening (connections are refused) until :meth:`accept_connections`."""
        if self._site is not None:
            await self._site.stop()
            self._site = None
        await self.close_watches()
        # Kept-alive client connections outlive the listener: drop them too, as a dead server would.
        assert self._runner is not None and self._runner.server is not None
        for handler in list(self._runner.server.connections):
            handler.force_close()
        await asyncio.sleep(0.01)

    async def accept_connections(self) -> None:
        """Listen again on the same port."""
        await self._listen()

    async def close_watches(self) -> None:
        """End every open watch stream at once (as a server restart does)."""
        for task in list(self._watches):
            task.cancel()
        self._watches.clear()
        await asyncio.sleep(0.01)

    async def stop(self) -> None:
        await self.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- state ------------------------------------------------------------------------------------------
    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def apply(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace, whole object, status included (as if someone else wrote it).

        ``resource`` is the plural (``configmaps``); a ``plural.group`` informer key is accepted too.
        Returns the stored object (deep copy).
        """
        resource = resource.split(".", 1)[0]
        return copy.deepcopy(self._store(resource, copy.deepcopy(obj)))

    def _store(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        if resource.endswith("webhookconfigurations") and self.drop_webhook_fields:
            for hook in obj.get("webhooks") or []:
                for field in self.drop_webhook_fields:
                    hook.pop(field, None)
        self.rv += 1
        store = self.objects.setdefault(resource, {})
        key = _key(obj)
        old = store.get(key)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta["uid"] = (old or {}).get("metadata", {}).get("uid") or meta.get("uid") or f"uid-{resource}-{key}"
        meta.setdefault("creationTimestamp", (old or {}).get("metadata", {}).get("creationTimestamp")
                        or "2026-01-01T00:00:00Z")
        gen = (old or {}).get("metadata", {}).get("generation", 0)
        meta["generation"] = gen + 1 if old is None or _content(old) != _content(obj) else gen
        store[key] = obj
        self.history.append((self.rv, resource, "MODIFIED" if old else "ADDED", obj, old))
        self._notify()
        return obj

    def delete(self, resource: str, key: str) -> None:
        """Delete; the DELETED event carries the last state stamped with the deletion RV."""
        resource = resource.split(".", 1)[0]
        self.rv += 1
        old = self.objects[resource].pop(key)
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, resource, "DELETED", gone, old))
        self._notify()

    def get(self, resource: str, key: str) -> dict[str, Any] | None:
        """The stored object (deep copy) or ``None``; ``key`` is ``name`` or ``namespace/name``."""
        obj = self.objects.get(resource.split(".", 1)[0], {}).get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def fail(self, method: str, suffix: str, *, code: int = 500, times: int = 1) -> None:
        """Answer the next ``times`` ``method`` requests whose path ends in ``suffix`` with ``code``."""
        self.failures.append(Failure(method, suffix, code, times))

    def count(self, method: str, suffix: str = "") -> int:
        """How many ``method`` (HTTP) requests were made to paths ending in ``suffix``."""
        return sum(1 for r in self.requests if r["method"] == method and r["path"].endswith(suffix))

    def compact(self, rv: int | None = None) -> None:
        """Drop history up to ``rv`` (default: now); older RVs then get 410."""
        self.floor = self.rv if rv is None else rv
        self.history = [h for h in self.history if h[0] > self.floor]

    def state(self, resource: str) -> dict[str, dict[str, Any]]:
        """The server's current objects of ``resource`` by key (deep copy)."""
        return copy.deepcopy(self.objects.get(resource, {}))

    def log(self, verb: str, resource: str | None = None) -> list[dict[str, Any]]:
        """Requests of a verb (``list``/``watch``/``get``...), optionally for one resource."""
        return [r for r in self.requests if r["verb"] == verb and (resource is None or r["resource"] == resource)]

    # -- HTTP ---------------------------------------------------------------------------------------------
    @staticmethod
    def _parse(path: str) -> Target | None:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 3 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 4 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        return Target(group, version, rest[0], namespace, rest[1] if len(rest) > 1 else None,
                      rest[2] if len(rest) > 2 else None)

    def _failure(self, method: str, path: str) -> int | None:
        for failure in self.failures:
            if failure.times > 0 and failure.method == method and path.endswith(failure.suffix):
                failure.times -= 1
                return failure.code
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/version":
            self.requests.append({"verb": "version", "resource": None, "namespace": None, "query": {}})
            return web.json_response(self.version)
        if request.method == "GET" and self.discovery.is_discovery_path(request.path):
            self.requests.append({"verb": "discovery", "resource": request.path, "namespace": None, "query": {}})
            doc = self.discovery.document(request.path)
            return web.json_response(doc) if doc else _status(404, "NotFound", "the server could not find it")
        t = self._parse(request.path)
        q = request.query
        watch = q.get("watch") in TRUE
        name = t.name if t else None
        verb = {"GET": "watch" if watch else ("get" if name else "list")}.get(request.method, request.method.lower())
        self.requests.append({"verb": verb, "resource": t.resource if t else None,
                              "namespace": t.namespace if t else None, "name": name,
                              "subresource": t.subresource if t else None, "query": dict(q),
                              "method": request.method, "path": request.path,
                              "content_type": request.headers.get("Content-Type", "")})
        if t is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        code = self._failure(request.method, request.path)
        if code is not None:
            return _status(code, {409: "Conflict", 404: "NotFound", 403: "Forbidden"}.get(code, "InternalError"),
                           f"injected {code}")
        if request.method == "GET" and name is None:
            invalid = self._invalid_list_options(q, watch)
            if invalid is not None:
                return _status(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {invalid}',
                               details={"group": "meta.k8s.io", "kind": "ListOptions"})
            return await (self._watch(request, t.resource, t.namespace) if watch
                          else self._list(request, t.resource, t.namespace))
        if t.subresource is not None and (t.subresource != "status" or t.resource not in self.status_resources):
            return _status(404, "NotFound", "the server could not find the requested resource")
        if request.method == "POST" and name is None:
            return self._create(t, await request.json())
        if name is None:
            return _status(405, "MethodNotAllowed", f"{request.method} is not supported on a collection")
        current = self.objects.get(t.resource, {}).get(t.key or "")
        if current is None:
            return _status(404, "NotFound", f'{t.qualified} "{name}" not found',
                           details={"name": name, "group": t.group, "kind": t.resource})
        if request.method == "GET":
            return web.json_response(current)
        if request.method == "DELETE":
            self.delete(t.resource, t.key or "")
            return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                      "details": {"name": name, "group": t.group, "kind": t.resource,
                                                  "uid": current["metadata"]["uid"]}})
        if request.method == "PUT":
            return self._update(t, current, await request.json())
        if request.method == "PATCH":
            content_type = request.content_type
            body = await request.json()
            if content_type == MERGE_PATCH:
                return self._update(t, current, merge_patch(current, body), precondition=body.get("metadata"))
            if content_type == JSON_PATCH:
                try:
                    patched = jsonpatch.apply_patch(current, body)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    return _status(422, "Invalid", f'{t.qualified} "{name}" is invalid: {exc}')
                return self._update(t, current, patched)
            return _status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                                       f"accepted media types include: {JSON_PATCH}, {MERGE_PATCH}")
        return _status(405, "MethodNotAllowed", "not supported")

    def _create(self, t: Target, obj: dict[str, Any]) -> web.Response:
        meta = obj.setdefault("metadata", {})
        if t.namespace:
            meta["namespace"] = t.namespace
        name = meta.get("name")
        if not name:
            return _status(422, "Invalid", f"{t.qualified} is invalid: metadata.name: Required value: name is required")
        if _key(obj) in self.objects.get(t.resource, {}):
            return _status(409, "AlreadyExists", f'{t.qualified} "{name}" already exists',
                           details={"name": name, "group": t.group, "kind": t.resource})
        for server_set in ("resourceVersion", "uid", "generation", "creationTimestamp"):
            meta.pop(server_set, None)
        if t.resource in self.status_resources:
            obj.pop("status", None)  # status is written through /status only
        return web.json_response(self._store(t.resource, obj), status=201)

    def _update(self, t: Target, current: dict[str, Any], new: dict[str, Any],
                precondition: dict[str, Any] | None = None) -> web.Response:
        """PUT or patched object ``new`` replaces ``current`` (both whole objects)."""
        wanted_rv = (precondition if precondition is not None else new.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", f'Operation cannot be fulfilled on {t.qualified} "{t.name}": the object '
                                            "has been modified; please apply your changes to the latest version "
                                            "and try again", details={"name": t.name, "group": t.group,
                                                                      "kind": t.resource})
        if t.subresource == "status":
            stored = copy.deepcopy(current)
            if "status" in new:
                stored["status"] = new["status"]
            else:
                stored.pop("status", None)
        else:
            stored = copy.deepcopy(new)
            meta = stored.setdefault("metadata", {})
            for immutable in ("name", "namespace", "uid", "creationTimestamp"):
                if immutable in current["metadata"]:
                    meta[immutable] = current["metadata"][immutable]
            if t.resource in self.status_resources:
                if "status" in current:
                    stored["status"] = current["status"]
                else:
                    stored.pop("status", None)
        if stored == current:
            return web.json_response(current)  # a no-op write: no new resourceVersion, no event
        return web.json_response(self._store(t.resource, stored))

    def _invalid_list_options(self, q: Any, watch: bool) -> str | None:
        """apimachinery's ValidateListOptions, as this server's version has it; None when valid."""
        match, initial = q.get("resourceVersionMatch"), q.get("sendInitialEvents")
        if self.watch_list == "ignore":
            return None
        if self.watch_list == "refuse":  # 1.20: no sendInitialEvents at all; no match on a watch
            if match and watch:
                return "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch"
            if match and not q.get("resourceVersion"):
                return ("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
                        "resourceVersion is provided")
            return None
        if not watch:
            if initial is not None:
                return "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"
            if match and not q.get("resourceVersion"):
                return ("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
                        "resourceVersion is provided")
            return None
        if initial is not None and match != "NotOlderThan":
            return ("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch "
                    "to NotOlderThan")
        if match and initial is None:
            return ("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
                    "sendInitialEvents is provided")
        return None

    def _sorted(self, resource: str) -> tuple[list[str], list[dict[str, Any]]]:
        """Keys and objects of ``resource`` in key order, cached until the next write (pages of a big LIST)."""
        cached = self._sorted_cache.get(resource)
        if cached is None or cached[0] != self.rv:
            items = sorted(self.objects.get(resource, {}).items())
            cached = (self.rv, [k for k, _ in items], [o for _, o in items])
            self._sorted_cache[resource] = cached
        return cached[1], cached[2]

    def _visible(self, resource: str, namespace: str | None, q: Any, after: str = "",
                 limit: int | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Objects in key order after ``after`` that the namespace and selectors select, at most ``limit``."""
        keys, objs = self._sorted(resource)
        out: list[tuple[str, dict[str, Any]]] = []
        for i in range(bisect.bisect_right(keys, after) if after else 0, len(keys)):
            o = objs[i]
            if (namespace is None or o["metadata"].get("namespace") == namespace) and \
                    _selects(o, q.get("labelSelector"), q.get("fieldSelector")):
                out.append((keys[i], o))
                if limit is not None and len(out) >= limit:
                    break
        return out

    async def _list(self, request: web.Request, resource: str, namespace: str | None) -> web.StreamResponse:
        q = request.query
        if self.faults.list_delay:
            await asyncio.sleep(self.faults.list_delay)
        self.list_pages_started += 1
        if self.faults.list_held_after is not None and self.list_pages_started > self.faults.list_held_after:
            await self.faults.list_release.wait()
        if self.faults.list_errors:
            code, reason, retry_after = self.faults.list_errors.pop(0)
            headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else {}
            resp = _status(code, reason, f"injected {code}")
            resp.headers.update(headers)
            return resp
        rv_param = q.get("resourceVersion")
        limit = int(q["limit"]) if q.get("limit") else None
        token = q.get("continue")
        if token:
            if rv_param not in (None, "", "0"):
                return _status(400, "BadRequest", "specifying resource version is not allowed when using continue")
            start_rv, last_key = json.loads(base64.b64decode(token))
            if self.faults.expire_continue_tokens or start_rv < self.floor:
                return _status(410, "Expired", "The provided continue parameter is too old to display a consistent "
                                               "list result. You can start a new list without the continue parameter.")
            list_rv = start_rv
        else:
            last_key = ""
            if rv_param not in (None, "", "0"):
                wanted = int(rv_param)
                if wanted > self.rv:
                    await asyncio.sleep(self.too_large_wait)
                    return _status(504, "Timeout", f"Timeout: Too large resource version: {wanted}, current: {self.rv}",
                                   details={"causes": [{"reason": "ResourceVersionTooLarge",
                                                        "message": "Too large resource version"}],
                                            "retryAfterSeconds": 1})
                if limit is not None and wanted < self.floor:
                    return _status(410, "Expired", "The resourceVersion for the provided list is too old.")
            list_rv = self.rv
        items = self._visible(resource, namespace, q, after=last_key, limit=None if limit is None else limit + 1)
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit is not None and len(items) > limit:
            items = items[:limit]
            meta["continue"] = base64.b64encode(json.dumps([list_rv, items[-1][0]]).encode()).decode()
            keys, _ = self._sorted(resource)
            meta["remainingItemCount"] = len(keys) - bisect.bisect_right(keys, items[-1][0])
        kind = resource[:-1].capitalize() + "List"
        body = orjson.dumps({"kind": kind, "apiVersion": "v1", "metadata": meta, "items": [o for _, o in items]})
        return web.Response(body=body, content_type="application/json")

    async def _watch(self, request: web.Request, resource: str, namespace: str | None) -> web.StreamResponse:
        f = self.faults
        if f.watch_drop_at_open:
            f.watch_drop_at_open -= 1
            assert request.transport is not None
            request.transport.abort()  # no status line: the client sees the connection drop as the watch opens
            return web.Response()
        if f.watch_errors:
            code, reason, retry_after = f.watch_errors.pop(0)
            err = _status(code, reason, f"injected {code}", details={"retryAfterSeconds": int(retry_after)}
                          if retry_after is not None else {})
            if retry_after is not None:
                err.headers["Retry-After"] = str(int(retry_after))
            return err
        q = request.query
        initial = q.get("sendInitialEvents") in TRUE and self.watch_list == "serve"
        rv_param = q.get("resourceVersion") or ""
        if initial and rv_param not in ("", "0") and int(rv_param) > self.rv:
            await asyncio.sleep(self.too_large_wait)
            return _status(504, "Timeout", f"Timeout: Too large resource version: {rv_param}, current: {self.rv}",
                           details={"causes": [{"reason": "ResourceVersionTooLarge",
                                                "message": "Too large resource version"}], "retryAfterSeconds": 1})
        resp = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        task = asyncio.current_task()
        assert task is not None
        self._watches.add(task)
        try:
            await self._stream(resp, request, resource, namespace)
        except ConnectionResetError:
            pass
        except asyncio.CancelledError:
            # close_watches(): drop the connection, as a restarting server does.
            if request.transport is not None:
                request.transport.close()
            raise
        finally:
            self._watches.discard(task)
        return resp

    async def _stream(self, resp: web.StreamResponse, request: web.Request, resource: str,
                      namespace: str | None) -> None:
        q = request.query
        f = self.faults
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(q.get("timeoutSeconds") or 1800)
        bookmarks = q.get("allowWatchBookmarks") in TRUE
        rv_param = q.get("resourceVersion") or "0"

        async def send(etype: str, obj: dict[str, Any]) -> None:
            await resp.write(json.dumps({"type": etype, "object": obj}).encode() + b"\n")

        if f.watch_close_at_once:
            f.watch_close_at_once -= 1
            return
        if f.watch_stall:
            f.watch_stall -= 1
            await asyncio.sleep(3600)
        if f.watch_html:
            f.watch_html -= 1
            await resp.write(b"<html><body>502 Bad Gateway</body></html>\n")
            return
        if q.get("sendInitialEvents") in TRUE and self.watch_list == "serve":
            # WatchList: the state (NotOlderThan the RV asked: this server only has the current one) as ADDED
            # events, then the bookmark that ends them, then live events from the snapshot's RV.
            since = self.rv
            chunk = bytearray()
            for _, obj in self._visible(resource, namespace, q):
                chunk += orjson.dumps({"type": "ADDED", "object": obj}) + b"\n"
                if len(chunk) >= 256 * 1024:
                    await resp.write(bytes(chunk))
                    chunk.clear()
            if bookmarks:
                chunk += orjson.dumps({"type": "BOOKMARK", "object": {
                    "kind": resource[:-1].capitalize(), "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(since), "creationTimestamp": None,
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}}) + b"\n"
            if chunk:
                await resp.write(bytes(chunk))
        elif rv_param == "0":
            since = self.rv
            for _, obj in self._visible(resource, namespace, q):
                await send("ADDED", obj)
        else:
            since = int(rv_param)
            if since < self.floor:
                await send("ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": f"too old resource version: {since} ({self.floor})",
                                     "reason": "Expired", "code": 410})
                return
        sent_pre_deadline_bookmark = False
        while True:
            if since < self.floor:
                # The history this watcher still needed was compacted away under it (a watcher too slow
                # for the watch cache): it is told so and must relist.
                await send("ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": f"too old resource version: {since} ({self.floor})",
                                     "reason": "Expired", "code": 410})
                return
            for rv, res, etype, obj, old in list(self.history):
                if rv <= since or res != resource:
                    continue
                since = rv
                now_in = (namespace is None or obj["metadata"].get("namespace") == namespace) and \
                    _selects(obj, q.get("labelSelector"), q.get("fieldSelector"))
                was_in = old is not None and _selects(old, q.get("labelSelector"), q.get("fieldSelector"))
                if etype == "DELETED":
                    if was_in:
                        await send("DELETED", obj)
                    continue
                if now_in and (was_in or etype == "ADDED"):
                    await send(etype, obj)
                elif now_in:
                    await send("ADDED", obj)
                elif was_in:
                    assert old is not None
                    gone = copy.deepcopy(old)
                    gone["metadata"]["resourceVersion"] = str(rv)
                    await send("DELETED", gone)  # left the selector: DELETED with the event's RV
                if f.watch_abort_mid_line:
                    f.watch_abort_mid_line -= 1
                    await resp.write(b'{"type":"MODIFIED","object":{"metadata":{"na')
                    assert request.transport is not None
                    request.transport.abort()
                    return
                if f.watch_garbage:
                    f.watch_garbage -= 1
                    await resp.write(b"this is not json\n")
                    return
                if f.watch_error_500:
                    f.watch_error_500 -= 1
                    await send("ERROR", {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                         "message": "etcd is on fire", "reason": "InternalError", "code": 500})
                    return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return  # timeoutSeconds: a clean end of the chunked body, no ERROR event
            if bookmarks and not sent_pre_deadline_bookmark and remaining < 0.2:
                sent_pre_deadline_bookmark = True
                await send("BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1",
                                        "metadata": {"resourceVersion": str(self.rv), "creationTimestamp": None}})
                since = max(since, self.rv)
            wait = min(remaining, f.bookmark_interval or remaining, 0.2 if bookmarks else remaining)
            changed = self._changed
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that races
                # with the event being set, and close_watches() must always end the stream.
                async with asyncio.timeout(wait):
                    await changed.wait()
            except TimeoutError:
                if bookmarks and f.bookmark_interval:
                    await send("BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": str(self.rv)}})
                    since = max(since, self.rv)


class Cluster:
    """The fake API server as tests drive it: ``await apply(resource, obj)``, ``await delete(...)``, ``rv``.

    With an ApiClient, :meth:`lister_watcher` gives the production KubeListerWatcher for a core resource.
    """

    def __init__(self, fake: FakeApiServer, api: Any = None) -> None:
        self.fake = fake
        self.api = api

    @property
    def rv(self) -> int:
        return self.fake.rv

    async def apply(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.fake.apply(resource, obj)

    async def delete(self, resource: str, key: str) -> None:
        self.fake.delete(resource, key)

    def lister_watcher(self, resource: str) -> Any:
        """A KubeListerWatcher on ``resource`` (core group, v1) through the real ApiClient."""
        from webhook.kube.listwatch import KubeListerWatcher

        return KubeListerWatcher(self.api, group="", version="v1", plural=resource)
