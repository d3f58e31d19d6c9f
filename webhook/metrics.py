"""Prometheus metrics, one registry per app (prometheus-client).

Names follow Prometheus conventions (``_total`` counters, ``_seconds`` units).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector


class Metrics:
    """Every metric Tollgate exports, registered on its own :class:`CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("tollgate_admission_requests_total", "AdmissionReviews answered",
                                ["endpoint", "decision"], registry=r)
        self.latency = Histogram("tollgate_admission_duration_seconds", "Time to answer an AdmissionReview",
                                 ["endpoint", "decision"], registry=r,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 5.0,
                                          10.0))
        self.events = Counter("tollgate_events_total",
                              "Kubernetes Events for denials and warnings by outcome (created, patched, throttled, "
                              "dropped: queue full, failed)", ["outcome"], registry=r)
        self.bad_requests = Counter("tollgate_admission_bad_requests_total", "Malformed webhook calls (HTTP 4xx)",
                                    ["endpoint", "status"], registry=r)
        self.policy_results = PolicyResultCollector()
        r.register(self.policy_results)
        self.policy_durations = PolicyDurationCollector()
        r.register(self.policy_durations)
        self.policies_ready = Gauge("tollgate_policies", "Known policies by readiness", ["ready"], registry=r)
        self.exceptions_applied = Counter(
            "tollgate_policy_exceptions_applied_total",
            "Requests a PolicyException exempted from a policy (result skip, or fail under mode Audit)",
            ["policy", "exception", "result"], registry=r)
        self.local_file_errors = Gauge(
            "tollgate_local_file_errors",
            "--local files that do not parse or violate their schema (their last good objects keep serving)",
            registry=r)
        self.policies_unmatchable = Gauge(
            "tollgate_policies_unmatchable",
            "Policies whose match rules cannot be read, so they select no request at all", registry=r)
        self.informer_synced = Gauge("tollgate_informer_synced", "1 once the informer's first list is applied",
                                     ["resource"], registry=r)
        self.informer_rv = Gauge("tollgate_informer_last_resource_version", "Last synced resourceVersion",
                                 ["resource"], registry=r)
        self.informer_events = Gauge("tollgate_informer_events", "Events applied to the cache",
                                     ["resource"], registry=r)
        self.informer_objects = Gauge("tollgate_informer_objects", "Objects in the cache", ["resource"], registry=r)
        self.cache_age = Gauge("tollgate_informer_cache_age_seconds",
                               "Seconds since the cache's last list, event or bookmark", ["resource"], registry=r)
        self.informer_staleness = Gauge(
            "tollgate_informer_staleness_seconds",
            "Seconds the cache may be behind the API server (0 while a watch is open)", ["resource"], registry=r)
        self.handler_queue_depth = Gauge(
            "tollgate_informer_handler_queue_depth",
            "Notifications waiting for an informer event handler (bounded; a full queue holds the informer back)",
            ["resource", "handler"], registry=r)
        self.cert_expiry = Gauge("tollgate_certificate_expiry_timestamp_seconds",
                                 "notAfter of the served certificate (Unix time)", registry=r)
        self.cert_expiry_seconds = Gauge("tollgate_certificate_expiry_seconds",
                                         "Seconds until the served certificate's notAfter (negative once expired)",
                                         registry=r)
        self.cert_reloads = Counter("tollgate_certificate_reloads_total", "Certificate reload attempts",
                                    ["result"], registry=r)
        self.eval_aborted = Counter("tollgate_evaluation_aborted_total",
                                    "Evaluations answered per failurePolicy because they could not finish "
                                    "(reason: timeout, busy, worker_died, worker_error)",
                                    ["endpoint", "reason"], registry=r)
        self.eval_over_budget = Counter("tollgate_evaluation_over_budget_total",
                                        "Reviews whose estimated evaluation cost exceeded the inline budget, "
                                        "evaluated in a worker instead of on the event loop", ["endpoint"],
                                        registry=r)
        self.eval_worker_restarts = Counter("tollgate_evaluation_worker_restarts_total",
                                            "Evaluation worker processes replaced (reason: timeout, worker_died, "
                                            "worker_error, cancelled, recycled)", ["reason"], registry=r)
        self.connections = Gauge("tollgate_http_connections",
                                 "Open client connections past the TLS handshake", registry=r)
        self.connections_closed = Counter(
            "tollgate_http_connections_closed_total",
            "Client connections the server closed for its limits (reason: header_timeout, evicted, refused)",
            ["reason"], registry=r)
        self.malformed_requests = Counter("tollgate_http_malformed_requests_total",
                                          "Request heads that did not parse (answered 400)", registry=r)
        self.loop_lag = Histogram(
            "tollgate_event_loop_lag_seconds",
            "How late a task sleeping a fixed interval wakes up: time the event loop was held by other work",
            registry=r, buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))
        self.status = StatusMetrics(r)
        self.webhook_configs = WebhookConfigMetrics(r)
        self.managed_certs = ManagedCertMetrics(r)


class CountedResult(Protocol):
    """What :meth:`PolicyResultCollector.record` reads of a result (e.g. ``webhook.policy.PolicyResult``)."""

    @property
    def policy(self) -> str:
        """The policy's label (``name``, or ``namespace/name`` for an AdmissionPolicy)."""
        ...

    @property
    def result(self) -> str:
        """``pass``, ``fail``, ``skip`` or ``error`` (a ``webhook.policy.Result``)."""
        ...


class PolicyResultCollector(Collector):
    """Per-policy verdict counts, kept as plain ints and exported at scrape time.

    Exports ``tollgate_policy_evaluations_total{policy,result}`` ("Policy
    evaluations by result") and ``tollgate_policy_errors_total{policy}``
    ("CEL runtime errors by policy"), with the ``_created`` samples a
    prometheus-client ``Counter`` has, so the exposition is the one the two
    labelled Counters produced. A review has one result per selected policy;
    a labelled ``Counter.inc`` takes a lock and resolves its labels each
    time, while :meth:`record` only bumps dict entries, so counting stays a
    small part of a review. The error count of a policy is its
    ``result="error"`` count, so it is derived when scraped.

    Not thread-safe for writers: call :meth:`record` from one thread (the
    server's event loop; worker-pool decisions come back to it). A scrape
    from another thread is safe (it copies the dicts, an atomic step under
    the GIL).

    Args:
        clock: Unix time of a series' first count (its ``_created`` sample).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._created: dict[tuple[str, str], float] = {}
        self._clock = clock

    def record(self, results: Iterable[CountedResult]) -> None:
        """Count one evaluation of each policy in ``results`` under its result."""
        counts = self._counts
        for r in results:
            key = (r.policy, r.result)
            try:
                counts[key] += 1
            except KeyError:
                counts[key] = 1
                self._created[key] = self._clock()

    def collect(self) -> Iterator[Metric]:
        """Yield the two counter families (series in order of first appearance)."""
        counts, created = self._counts.copy(), self._created.copy()
        evaluations = CounterMetricFamily("tollgate_policy_evaluations", "Policy evaluations by result",
                                          labels=["policy", "result"])
        errors = CounterMetricFamily("tollgate_policy_errors", "CEL runtime errors by policy", labels=["policy"])
        for key, value in counts.items():
            policy, result = key[0], str(key[1])
            evaluations.add_metric([policy, result], value, created=created.get(key))
            if result == "error":
                errors.add_metric([policy], value, created=created.get(key))
        yield evaluations
        yield errors


#: Buckets of ``tollgate_policy_evaluation_duration_seconds``: a policy's share of one review, 10 µs to 1 s.
POLICY_DURATION_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                           0.1, 1.0)
#: Most policies with a series of their own; the time of any further policy is counted under
#: ``policy="_other"``, so tenants creating policies cannot grow the exposition without bound.
MAX_POLICY_SERIES = 500
OTHER_POLICY = "_other"


class PolicyDurationCollector(Collector):
    """Per-policy evaluation time, a histogram kept in plain lists and exported at scrape time.

    Exports ``tollgate_policy_evaluation_duration_seconds{policy,endpoint}`` (Kyverno's
    ``kyverno_policy_execution_duration_seconds`` for Tollgate): the seconds one policy took on one
    review (its preparation and expressions; a fused group's time shared by the policies it decided; a
    memo hit counts nothing), with :data:`POLICY_DURATION_BUCKETS`. At most :data:`MAX_POLICY_SERIES`
    policies get series of their own (first come); later ones share ``policy="_other"``. A labelled
    prometheus-client ``Histogram.observe`` takes a lock and resolves labels per call; :meth:`record`
    runs once per policy per review on the event loop, so it only bumps list entries.

    Not thread-safe for writers (the event loop records); a scrape from another thread copies first.
    """

    def __init__(self) -> None:
        # (policy, endpoint) → [bucket counts..., +Inf count, sum of seconds]: one lookup per policy and review
        self._series: dict[tuple[str, str], list[float]] = {}
        # endpoint → policy label → its entry in _series (no key tuple built per policy and review)
        self._by_endpoint: dict[str, dict[str, list[float]]] = {}
        self._policies: set[str] = set()

    def record(self, endpoint: str, durations: Iterable[tuple[str, float]]) -> None:
        """Count one review's ``(policy label, seconds)`` pairs on ``endpoint`` (``validate`` or ``mutate``).

        ``seconds`` go in the first bucket whose bound is at least ``seconds`` (``bisect_left``: a bucket's
        bound is inclusive, as Prometheus' ``le``), else ``+Inf``; they are never NaN (a clock difference).
        """
        series = self._by_endpoint.get(endpoint)
        if series is None:
            series = self._by_endpoint[endpoint] = {}
        buckets = POLICY_DURATION_BUCKETS
        for label, seconds in durations:
            entry = series.get(label)
            if entry is None:
                entry = self._series_of(label, endpoint)
                if label in self._policies:  # an overflow label is not remembered: the dict stays bounded
                    series[label] = entry
            entry[bisect_left(buckets, seconds)] += 1
            entry[-1] += seconds

    def _series_of(self, label: str, endpoint: str) -> list[float]:
        policy = label
        if label not in self._policies:
            if len(self._policies) >= MAX_POLICY_SERIES:
                policy = OTHER_POLICY  # not remembered under its own label: the dict stays bounded
            else:
                self._policies.add(label)
        entry = self._series.get((policy, endpoint))
        if entry is None:
            entry = self._series[(policy, endpoint)] = [0] * (len(POLICY_DURATION_BUCKETS) + 1) + [0.0]
        return entry

    def collect(self) -> Iterator[Metric]:
        """Yield the histogram family (cumulative buckets, as the exposition format wants)."""
        series = {k: list(v) for k, v in self._series.items()}
        family = HistogramMetricFamily("tollgate_policy_evaluation_duration_seconds",
                                       "Seconds one policy took to evaluate on one review",
                                       labels=["policy", "endpoint"])
        for key, entry in series.items():
            running: float = 0
            cumulative = []
            for bound, count in zip((*map(str, POLICY_DURATION_BUCKETS), "+Inf"), entry[:-1], strict=True):
                running += count
                cumulative.append((bound, running))
            family.add_metric(list(key), cumulative, entry[-1])
        yield family


class StatusMetrics:
    """The policy status writer's metrics (``webhook.kube.status.StatusWriter``).

    Attributes:
        writes: ``tollgate_status_writes_total{result}``; ``result`` is
            ``written`` (a PATCH succeeded), ``skipped`` (the cached status was
            already current), ``error`` (a failed attempt, retried), ``dropped``
            (given up after the last attempt) or ``gone`` (404: the policy was
            deleted).
        pending: ``tollgate_status_pending``: policies with a write not yet done.

    Args:
        registry: where to register; default a new private registry (tests).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        self.writes = Counter("tollgate_status_writes_total", "Policy status writes by result", ["result"], registry=r)
        self.pending = Gauge("tollgate_status_pending", "Policies whose status write is not done yet", registry=r)


class WebhookConfigMetrics:
    """The webhook configuration reconciler's metrics (``webhook.kube.webhook_reconciler``).

    Attributes:
        reconciles: ``tollgate_webhook_config_reconciles_total{configuration,result}``;
            ``result`` is ``created``, ``updated``, ``unchanged`` or ``error``;
            ``configuration`` is ``validating`` or ``mutating``.
        rules: ``tollgate_webhook_config_webhooks{configuration}``: webhook
            entries last written (0 when no policy needs the path).

    Args:
        registry: where to register; default a new private registry (tests).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        self.reconciles = Counter("tollgate_webhook_config_reconciles_total",
                                  "Webhook configuration reconciles by result", ["configuration", "result"],
                                  registry=r)
        self.webhooks = Gauge("tollgate_webhook_config_webhooks", "Webhook entries in the reconciled configuration",
                              ["configuration"], registry=r)


class ManagedCertMetrics:
    """The self-managed certificate controller's metrics (``webhook.kube.managed_certs``).

    Attributes:
        rotations: ``tollgate_managed_certificate_rotations_total{what}``;
            ``what`` is ``ca`` or ``serving``.
        errors: ``tollgate_managed_certificate_errors_total``: failed reconciles.
        expiry: ``tollgate_managed_certificate_expiry_timestamp_seconds{what}``:
            notAfter (Unix time) of the CA and serving certificate in the Secret.

    Args:
        registry: where to register; default a new private registry (tests).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        self.rotations = Counter("tollgate_managed_certificate_rotations_total",
                                 "Certificates issued by the self-managed mode", ["what"], registry=r)
        self.errors = Counter("tollgate_managed_certificate_errors_total",
                              "Failed self-managed certificate reconciles", registry=r)
        self.expiry = Gauge("tollgate_managed_certificate_expiry_timestamp_seconds",
                            "notAfter of the self-managed CA and serving certificate (Unix time)", ["what"],
                            registry=r)


class DynamicInformerCollector(Collector):
    """Scrape-time metrics of the dynamic informers and the background auditor (nothing to update by hand).

    Args:
        usage: ``{gvr: (objects, json_bytes)}`` of running dynamic informers
            (e.g. ``{str(g): (u.objects, u.bytes) for g, u in factory.usage().items()}``).
        refused: ``{gvr: reason}`` of informers refused by the budget.
        counters: ``{name: value}`` exported as ``tollgate_<name>_total`` counters
            (e.g. ``audit_evaluations``, ``policy_report_writes``).
    """

    def __init__(self, usage: Callable[[], Mapping[str, tuple[int, int]]],
                 refused: Callable[[], Mapping[str, str]],
                 counters: Callable[[], Mapping[str, int]] = dict) -> None:
        self._usage = usage
        self._refused = refused
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        """Yield the current values."""
        objects = GaugeMetricFamily("tollgate_dynamic_informer_objects", "Objects cached by a dynamic informer",
                                    labels=["gvr"])
        nbytes = GaugeMetricFamily("tollgate_dynamic_informer_bytes",
                                   "Bytes cached by a dynamic informer, as compact JSON", labels=["gvr"])
        for gvr, (count, size) in sorted(self._usage().items()):
            objects.add_metric([gvr], count)
            nbytes.add_metric([gvr], size)
        refused = GaugeMetricFamily("tollgate_dynamic_informer_refused",
                                    "1 for a dynamic informer refused by the budget", labels=["gvr", "reason"])
        for gvr, reason in sorted(self._refused().items()):
            refused.add_metric([gvr, reason], 1)
        yield from (objects, nbytes, refused)
        for name, value in sorted(self._counters().items()):
            counter = CounterMetricFamily(f"tollgate_{name}", f"Tollgate {name.replace('_', ' ')}")
            counter.add_metric([], value)
            yield counter


class MemoStats(Protocol):
    """What :class:`DecisionMemoCollector` reads (e.g. ``webhook.policy.memo.DecisionMemo``)."""

    hits: int
    misses: int
    evictions: int
    bytes: int
    max_bytes: int

    def __len__(self) -> int:
        """Entries held."""
        ...


class DecisionMemoCollector(Collector):
    """Scrape-time metrics of the decision memo: the hit ratio is ``hits / (hits + misses)``.

    Args:
        memo: the memo the handler evaluates with.
    """

    def __init__(self, memo: MemoStats) -> None:
        self._memo = memo

    def collect(self) -> Iterator[Metric]:
        """Yield the current values."""
        m = self._memo
        for name, doc, value in (
                ("hits", "Fused-program lookups answered by the decision memo", m.hits),
                ("misses", "Fused-program lookups the decision memo did not hold (the program was evaluated)",
                 m.misses),
                ("evictions", "Decision memo entries dropped for its byte budget", m.evictions)):
            yield CounterMetricFamily(f"tollgate_decision_memo_{name}", doc, value=value)
        yield GaugeMetricFamily("tollgate_decision_memo_entries", "Entries in the decision memo", value=len(m))
        yield GaugeMetricFamily("tollgate_decision_memo_bytes", "Bytes counted by the decision memo", value=m.bytes)
        yield GaugeMetricFamily("tollgate_decision_memo_max_bytes", "The decision memo's byte budget",
                                value=m.max_bytes)
