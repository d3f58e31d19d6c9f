"""Settings for ``tollgate serve`` (a frozen dataclass; the CLI fills it) and the one default of each.

A field's default here is ``serve``'s default: the CLI's flags and the
components read :data:`DEFAULTS` rather than repeating a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from webhook.admission.server import DEFAULT_TIMEOUT
from webhook.policy import memo
from webhook.policy.budget import INLINE_WORK_BUDGET

#: controller-runtime's maxRequestSize (pkg/webhook/admission/http.go), derived
#: the same way: etcd's recommended maximum client request is 1.5 MB, and the API
#: server accepts twice that per object (3 MB) because a JSON body shrinks when
#: converted to protobuf for etcd. An AdmissionReview carries at most two
#: objects (``object`` and ``oldObject``) plus an envelope well under 1 MB:
#: 2 x 3 + 1 = 7 MiB.
MAX_REQUEST_BYTES = 7 * 1024 * 1024

#: The decision memo's default byte budget (``serve --decision-memo-bytes``).
DEFAULT_MEMO_BYTES = memo.DEFAULT_MAX_BYTES


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``create_app`` needs.

    Attributes:
        local_dir: serve policies/ConfigMaps/Namespaces from YAML under this
            directory instead of a cluster (``--local``).
        kubeconfig: kubeconfig path (None: in-cluster, else ``~/.kube/config``).
        context: kubeconfig context.
        cert_file, key_file: serving certificate and key (PEM).
        client_ca: require client certificates signed by this CA.
        host, port: listen address.
        params_selector: label selector of the ConfigMaps cached as params.
        max_request_bytes: body cap, bytes.
        cert_poll_interval: seconds between certificate file checks.
        local_poll_interval: seconds between scans of ``local_dir``.
        write_status: write policy Ready conditions to the CRs (leader only).
        default_timeout: seconds to answer when the API server sends no ``timeout``.
        shutdown_timeout: seconds in-flight requests get on SIGTERM.
        pod_name: this replica's identity in the Lease (``POD_NAME``).
        namespace: the webhook's own namespace (``POD_NAMESPACE``): Lease, Service, Secret.
        manage_webhooks: the leader keeps both webhook configurations equal to what the
            loaded policies need (``--manage-webhooks``; never with ``--local``).
        create_webhooks: create a missing webhook configuration (needs RBAC ``create``).
        self_managed_certs: the replicas keep the CA and serving certificate in a Secret,
            written into ``cert_dir``; the leader rotates them and patches the caBundle.
        cert_dir: the certificate directory (``tls.crt``, ``tls.key``, ``ca.crt``).
        ca_file: the CA whose bundle the reconciler writes into ``caBundle`` (static certificates).
        webhook_service: the Service the webhook configurations point at.
        webhook_url: when set, the configurations call this base URL (``clientConfig.url``) instead.
        webhook_config_name: ``metadata.name`` of both webhook configurations.
        service_account: the webhook's own ServiceAccount (its writes are never sent to it).
        eval_workers: evaluation worker processes (0: every review is evaluated inline on the
            event loop).
        isolate_above_bytes: request bodies larger than this are evaluated in a worker, where
            the deadline is enforced; smaller ones inline (0: every review goes to a worker).
        inline_work_budget: a smaller review still goes to a worker when its estimated evaluation work
            (~10 ns units, :mod:`webhook.policy.budget`) exceeds this; 0 evaluates it inline whatever it costs.
        eval_memory_limit_bytes: address-space limit of each worker.
        shutdown_delay: seconds of service after SIGTERM with ``Connection: close``, so
            kept-alive clients move to another replica before the listener closes.
        background_audit: evaluate existing objects for policies with ``spec.background: true``
            and have the leader write PolicyReports (needs the background-audit RBAC overlay).
        audit_max_objects: budget of objects over every dynamic informer (None: unbounded).
        audit_max_bytes: budget of cached JSON bytes over every dynamic informer (None: unbounded).
        discovery_interval: seconds between API discovery refreshes (besides CRD events).
        decision_memo_bytes: byte budget of the decision memo (:mod:`webhook.policy.memo`); 0 turns it off.
        header_timeout: seconds a client has for its TLS handshake, then for its request head (and for
            each later head from its first byte) before the connection is closed
            (:mod:`webhook.server.listener`).
        idle_timeout: seconds a kept-alive connection may wait for its next request; longer than the
            API server's own 90 s, so the client always closes an idle connection first.
        max_connections: client connections open at once; at the cap a new one replaces the one that
            has waited longest for a request head.
        ready_max_staleness: seconds the core caches may go without word from the API server (no watch
            open, no list page) before ``/readyz`` says not ready, so the Service routes reviews to a
            replica that still hears it (0: never).
        explain: serve ``POST /explain``, the explanation of one AdmissionReview (``--explain``;
            :mod:`webhook.admission.explain`).
        imports: whose policies a cluster's Tollgate imports and enforces as well (``--import``): names of
            :data:`~webhook.formats.kinds.IMPORT_SOURCES` (``admission``, ``kyverno``); none by
            default. ``--local`` reads every importable kind in its directory whatever this says.
        events: record a Kubernetes Event on the object of each denied or warned review (``--no-events``
            turns it off; :mod:`webhook.admission.events`); with ``--local`` they are log lines.
    """

    local_dir: Path | None = None
    kubeconfig: str | None = None
    context: str | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca: Path | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    params_selector: str = "tollgate.dev/params=true"
    max_request_bytes: int = MAX_REQUEST_BYTES
    cert_poll_interval: float = 10.0
    local_poll_interval: float = 1.0
    write_status: bool = True
    default_timeout: float = DEFAULT_TIMEOUT
    shutdown_timeout: float = 10.0
    pod_name: str = ""
    namespace: str = "tollgate-system"
    manage_webhooks: bool = True
    create_webhooks: bool = False
    self_managed_certs: bool = False
    cert_dir: Path | None = None
    ca_file: Path | None = None
    webhook_service: str = "tollgate"
    webhook_url: str = ""
    webhook_config_name: str = "tollgate"
    service_account: str = "tollgate"
    eval_workers: int = 2
    isolate_above_bytes: int = 32 * 1024
    inline_work_budget: int = INLINE_WORK_BUDGET
    eval_memory_limit_bytes: int = 1024**3
    shutdown_delay: float = 5.0
    background_audit: bool = False
    audit_max_objects: int | None = 200_000
    audit_max_bytes: int | None = 512 * 1024 * 1024
    discovery_interval: float = 300.0
    decision_memo_bytes: int = DEFAULT_MEMO_BYTES
    header_timeout: float = 10.0
    idle_timeout: float = 120.0
    max_connections: int = 512
    ready_max_staleness: float = 30.0
    explain: bool = False
    imports: frozenset[str] = frozenset()
    events: bool = True


#: Every setting's default, in one place: ``tollgate serve``'s flags and the components read them from here
#: (``DEFAULTS.eval_memory_limit_bytes``...).
DEFAULTS = Settings()
