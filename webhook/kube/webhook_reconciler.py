"""Keeps the cluster's webhook configurations equal to what the policies need (leader only).

The desired ``ValidatingWebhookConfiguration`` and ``MutatingWebhookConfiguration``
come from ``webhook.policy.webhook_configs.webhook_configurations`` over the current
policies; this module only reads and writes them, like Kyverno's webhook
controller and controller-runtime reconcilers:

* **Triggered, debounced.** :meth:`WebhookConfigReconciler.trigger` (wire it to
  every policy add/update/delete and to becoming leader) marks the state
  dirty; the worker waits ``debounce`` seconds so a burst of policy changes
  (``kubectl apply -k policies/``) costs one reconcile, then reconciles.
  Every ``resync_period`` seconds it reconciles anyway, undoing manual drift.
* **Leader only, caches synced.** Followers never write; the elector's
  ``on_started_leading`` calls :meth:`trigger`. Nothing is written before
  ``synced()`` (the policy informers have listed): a new leader with an empty
  cache would otherwise remove every rule for a moment.
* **Write only on difference.** Each configuration is read (``GET``) and
  replaced (``PUT`` with the ``resourceVersion`` read: a concurrent write
  answers 409 and the reconcile is retried) only when its ``webhooks`` or
  Tollgate's labels differ; server-set metadata (``resourceVersion``,
  ``generation``, ``managedFields``...) and other annotations (e.g.
  cert-manager's ``inject-ca-from``) are kept as they are.
* **caBundle.** From ``ca_bundle()`` when it returns one (the self-managed
  certificates, or the mounted ``ca.crt``), unless the configuration carries
  cert-manager's ``cert-manager.io/inject-ca-from`` annotation: then, as when
  ``ca_bundle()`` returns ``""``, each entry keeps the ``caBundle`` already in
  the cluster (the CA injector's), a new entry taking its sibling's.
* **Least privilege.** The objects are created by the manifests (without
  ``webhooks``), so the leader needs only ``get``/``update``/``patch`` on the
  two names. A missing configuration is an error (counted, retried with
  backoff) unless ``create_missing`` is set, which needs an unrestricted
  ``create`` grant: RBAC cannot narrow ``create`` by ``resourceNames``.

Metrics: ``webhook.metrics.WebhookConfigMetrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kubernetes_asyncio.client import ApiClient

from webhook.aio import cancel_and_wait
from webhook.informer import Backoff
from webhook.kube.api import ApiException, call_json, collection_path, describe
from webhook.metrics import WebhookConfigMetrics
from webhook.policy.model import PolicySpec
from webhook.policy.webhook_configs import WebhookTarget, webhook_configurations

__all__ = ["GROUP", "INJECTOR_ANNOTATIONS", "RESOURCES", "VERSION", "WebhookConfigReconciler", "dropped_fields",
           "merged_configuration"]

_log = logging.getLogger(__name__)

GROUP = "admissionregistration.k8s.io"
VERSION = "v1"
#: ``kind`` → (plural, short name used in metrics and results).
RESOURCES = {
    "ValidatingWebhookConfiguration": ("validatingwebhookconfigurations", "validating"),
    "MutatingWebhookConfiguration": ("mutatingwebhookconfigurations", "mutating"),
}

#: cert-manager's cainjector annotations: when present, it (not Tollgate) sets caBundle.
INJECTOR_ANNOTATIONS = ("cert-manager.io/inject-ca-from", "cert-manager.io/inject-ca-from-secret")


def _as_kept(hooks: list[dict[str, Any]], dropped: frozenset[str]) -> list[dict[str, Any]]:
    return [{k: v for k, v in h.items() if k not in dropped} for h in hooks]


def _comparable(live_hooks: list[dict[str, Any]], hooks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``live_hooks`` restricted to the fields ``hooks`` set (what the API server defaults is not a difference)."""
    if len(live_hooks) != len(hooks):
        return live_hooks
    return [{k: v for k, v in lh.items() if k in h} for lh, h in zip(live_hooks, hooks, strict=True)]


def dropped_fields(sent: dict[str, Any], stored: dict[str, Any]) -> frozenset[str]:
    """Webhook fields ``sent`` set that the API server did not store (e.g. ``matchConditions`` before 1.28).

    An older API server silently drops fields it does not know; comparing with them would find a difference
    on every reconcile and write the configuration for ever.
    """
    stored_by_name = {h.get("name"): h for h in stored.get("webhooks") or []}
    return frozenset(field for hook in sent.get("webhooks") or [] if hook.get("name") in stored_by_name
                     for field in hook if field not in stored_by_name[hook.get("name")])


def merged_configuration(live: dict[str, Any], desired: dict[str, Any], ca_bundle: str,
                         dropped: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """The object to ``PUT``, or ``None`` when ``live`` already says what ``desired`` says (pure).

    Args:
        live: the configuration as read from the API server.
        desired: the generated configuration (``webhooks`` and Tollgate's
            ``metadata.labels`` are compared; nothing else). Of each live
            webhook only the fields ``desired`` sets are compared, so fields
            the API server defaults are no difference.
        ca_bundle: the caBundle to set on every entry; ``""`` to keep the one
            in ``live`` (same entry name, else any entry's). Ignored when
            ``live`` has one of :data:`INJECTOR_ANNOTATIONS`.
        dropped: webhook fields this API server does not store (see
            :func:`dropped_fields`): left out of the comparison.

    Returns:
        ``live`` with the desired ``webhooks`` and labels (its metadata, with
        ``resourceVersion``, otherwise untouched), or ``None`` if equal.
    """
    if set(INJECTOR_ANNOTATIONS) & set((live.get("metadata") or {}).get("annotations") or {}):
        ca_bundle = ""  # cert-manager's CA injector owns caBundle
    live_hooks: list[dict[str, Any]] = live.get("webhooks") or []
    live_ca = {h.get("name"): (h.get("clientConfig") or {}).get("caBundle") for h in live_hooks}
    any_ca = next((ca for ca in live_ca.values() if ca), None)
    hooks = copy.deepcopy(desired.get("webhooks") or [])
    for hook in hooks:
        ca = ca_bundle or live_ca.get(hook["name"]) or any_ca
        if ca:
            hook["clientConfig"]["caBundle"] = ca
    meta = copy.deepcopy(live.get("metadata") or {})
    labels = {**(meta.get("labels") or {}), **(desired.get("metadata", {}).get("labels") or {})}
    kept = _as_kept(hooks, dropped)
    if kept == _comparable(live_hooks, kept) and labels == (meta.get("labels") or {}):
        return None
    meta["labels"] = labels
    return {**copy.deepcopy(live), "apiVersion": desired["apiVersion"], "kind": desired["kind"], "metadata": meta,
            "webhooks": hooks}


class WebhookConfigReconciler:
    """Debounced, leader-only reconciler of Tollgate's two webhook configurations.

    Lifecycle: :meth:`start` spawns the worker (it reconciles once at start,
    if leading); :meth:`stop` cancels it. :meth:`trigger` is synchronous and
    does no I/O, so informer handlers and election callbacks may call it.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient``; not closed here.
        target: Service, namespace, ServiceAccount and configuration name
            (``target.ca_bundle`` is ignored; see ``ca_bundle``).
        policies: returns every policy whose spec parsed, e.g.
            ``lambda: parsed_specs(cluster_informer.indexer.list() + namespaced_informer.indexer.list())``.
        is_leader: whether this replica may write now; default always.
        synced: whether ``policies()`` is complete (the policy informers and
            their handlers have synced); checked every ``sync_poll`` seconds
            until true.
        ca_bundle: returns the base64 caBundle to set, or ``""`` to keep the
            cluster's (cert-manager); default keeps.
        create_missing: ``POST`` a configuration that does not exist (needs
            the ``create`` verb); default: count an error and retry.
        debounce: seconds to wait after a trigger before reconciling.
        resync_period: seconds between reconciles without a trigger.
        sync_poll: seconds between checks of ``synced`` while it is false.
        backoff_factory: retry schedule after a failed reconcile.
        request_timeout: seconds per API request.
        metrics: where to count; default a private registry.
        sleep: ``await sleep(seconds)`` for the debounce and retries
            (injectable for tests).
    """

    def __init__(
        self,
        api_client: ApiClient,
        target: WebhookTarget,
        *,
        policies: Callable[[], Iterable[PolicySpec]],
        is_leader: Callable[[], bool] = lambda: True,
        synced: Callable[[], bool] = lambda: True,
        ca_bundle: Callable[[], str] = lambda: "",
        create_missing: bool = False,
        debounce: float = 1.0,
        resync_period: float = 600.0,
        sync_poll: float = 0.5,
        backoff_factory: Callable[[], Backoff] = lambda: Backoff(initial=1.0, cap=60.0),
        request_timeout: float = 10.0,
        metrics: WebhookConfigMetrics | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._api = api_client
        self._target = target
        self._policies = policies
        self._is_leader = is_leader
        self._synced = synced
        self._sync_poll = sync_poll
        self._ca_bundle = ca_bundle
        self._create_missing = create_missing
        self._debounce = debounce
        self._resync_period = resync_period
        self._backoff_factory = backoff_factory
        self._request_timeout = request_timeout
        self.metrics = metrics if metrics is not None else WebhookConfigMetrics()
        self._sleep = sleep
        self._dirty = asyncio.Event()
        self._idle = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Webhook fields the API server was seen not to store, per configuration kind.
        self._dropped: dict[str, frozenset[str]] = {}

    def trigger(self) -> None:
        """Ask for a reconcile (policies changed, or this replica became leader)."""
        self._idle.clear()
        self._dirty.set()

    async def start(self) -> None:
        """Start the worker task (it reconciles once right away). Idempotent."""
        if self._task is None or self._task.done():
            self.trigger()
            self._task = asyncio.create_task(self._run(), name="webhook-config-reconciler")

    async def stop(self) -> None:
        """Cancel the worker and wait for it to end."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def wait_idle(self) -> None:
        """Wait until no trigger is pending or being handled (tests, shutdown)."""
        await self._idle.wait()

    async def reconcile_once(self) -> dict[str, str]:
        """Reconcile both configurations now, leader or not.

        Returns:
            ``{"validating": result, "mutating": result}``; ``result`` is
            ``created``, ``updated`` or ``unchanged``.

        Raises:
            ApiException: a request failed (404 without ``create_missing``,
                409 on a concurrent write, 5xx ...); the first failure, after
                the other configuration was reconciled anyway.
        """
        configs = webhook_configurations(self._policies(), self._target)
        ca = self._ca_bundle()
        results = {}
        failure: Exception | None = None
        for desired in configs.documents():
            plural, short = RESOURCES[desired["kind"]]
            try:
                results[short] = await self._reconcile(plural, desired, ca)
            except Exception as exc:  # noqa: BLE001 - re-raised below, once the other configuration is done
                # One configuration failing (say, deleted by hand) must not keep the other stale.
                self.metrics.reconciles.labels(short, "error").inc()
                _log.warning("reconcile of %s %s failed: %s", desired["kind"], desired["metadata"]["name"],
                             describe(exc))
                failure = failure or exc
                continue
            self.metrics.reconciles.labels(short, results[short]).inc()
            self.metrics.webhooks.labels(short).set(len(desired["webhooks"]))
        if failure is not None:
            raise failure
        return results

    async def _reconcile(self, plural: str, desired: dict[str, Any], ca: str) -> str:
        collection = collection_path(GROUP, VERSION, plural)
        path = f"{collection}/{desired['metadata']['name']}"
        try:
            live = await call_json(self._api, "GET", path, timeout=self._request_timeout)
        except ApiException as exc:
            if exc.status != 404 or not self._create_missing:
                if exc.status == 404:
                    _log.error("webhook configuration %s is missing: apply manifests/ (or allow create)", path)
                raise
            created = copy.deepcopy(desired)
            for hook in created["webhooks"]:
                if ca:
                    hook["clientConfig"]["caBundle"] = ca
            stored = await call_json(self._api, "POST", collection, body=created, timeout=self._request_timeout)
            self._note_dropped(desired["kind"], created, stored)
            _log.info("created %s", path)
            return "created"
        body = merged_configuration(live, desired, ca, self._dropped.get(desired["kind"], frozenset()))
        if body is None:
            return "unchanged"
        stored = await call_json(self._api, "PUT", path, body=body, timeout=self._request_timeout)
        self._note_dropped(desired["kind"], body, stored)
        _log.info("updated %s: %d webhooks", path, len(body["webhooks"]))
        return "updated"

    def _note_dropped(self, kind: str, sent: dict[str, Any], stored: Any) -> None:
        """Remember (and say once) which fields the API server did not keep, so they stop counting as drift."""
        if not isinstance(stored, dict):
            return
        new = dropped_fields(sent, stored) - self._dropped.get(kind, frozenset())
        if new:
            self._dropped[kind] = self._dropped.get(kind, frozenset()) | new
            _log.warning("the API server did not store %s of the %s (a server older than Tollgate supports drops "
                         "fields it does not know): it sends Tollgate what those fields would have excluded",
                         ", ".join(sorted(new)), kind)

    async def _run(self) -> None:
        backoff = self._backoff_factory()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._resync_period):
                    await self._dirty.wait()
            if self._debounce > 0:
                await self._sleep(self._debounce)  # triggers meanwhile are folded into this reconcile
            self._dirty.clear()
            if self._is_leader() and not self._synced():
                await self._sleep(self._sync_poll)
                self._dirty.set()  # never reconcile from a partial cache: try again
                continue
            if self._is_leader():
                try:
                    await self.reconcile_once()
                    backoff = self._backoff_factory()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 — the worker must outlive any failed reconcile
                    _log.warning("webhook configuration reconcile failed: %s", describe(exc))
                    await self._sleep(backoff.next_delay())
                    self._dirty.set()
                    continue
            if not self._dirty.is_set():
                self._idle.set()
