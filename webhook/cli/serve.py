"""``tollgate serve``: the admission webhook over TLS, from a cluster or from local files, until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from webhook import logs
from webhook.aio import cancel_and_wait
from webhook.cli.arguments import dns_label, dns_subdomain, int_in_range, port, seconds
from webhook.cli.command import Subparsers, UsageError, add_command
from webhook.files.yamlio import InputError, load_single
from webhook.formats.kinds import IMPORT_SOURCES
from webhook.server.settings import DEFAULTS, Settings
from webhook.tls import generate as certs

__all__ = ["DEFAULT_LOG_LEVEL", "SAMPLE_REVIEW", "add_parser", "run"]

log = logging.getLogger("tollgate")

SAMPLE_REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": "bad-pod",
        "namespace": "default",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bad-pod", "namespace": "default", "labels": {"app": "demo"}},
            "spec": {"containers": [{"name": "app", "image": "docker.io/library/nginx:latest",
                                     "securityContext": {"privileged": True}}]},
        },
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    },
}

#: ``--log-level`` when not given.
DEFAULT_LOG_LEVEL = "INFO"


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate serve`` (every default is :data:`webhook.server.settings.DEFAULTS`')."""
    d = DEFAULTS
    p = add_command(sub, "serve", run, help="run the admission webhook over TLS",
                    description="Serve /validate and /mutate from informer caches. With --local DIR, read "
                                "policies, ConfigMaps and Namespaces from YAML files under DIR (no cluster).")
    p.add_argument("--local", type=Path, metavar="DIR", help="serve from YAML files under DIR instead of a cluster")
    p.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, else ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--cert-dir", type=Path, help="directory with tls.crt and tls.key (with --local: generated "
                                                 "into a temporary directory when omitted)")
    p.add_argument("--tls-cert-file", type=Path, help="serving certificate (overrides --cert-dir)")
    p.add_argument("--tls-key-file", type=Path, help="serving key (overrides --cert-dir)")
    p.add_argument("--client-ca", type=Path, help="require API server client certificates signed by this CA")
    p.add_argument("--host", help=f"listen address (default 127.0.0.1 with --local, else {d.host})")
    p.add_argument("--port", type=port, default=d.port, help=f"listen port (default {d.port})")
    p.add_argument("--params-selector", default=d.params_selector,
                   help=f"label selector of the ConfigMaps cached for paramRef (default {d.params_selector})")
    p.add_argument("--max-request-bytes", type=int_in_range(1, None), default=d.max_request_bytes,
                   help=f"request body cap in bytes (default {d.max_request_bytes})")
    p.add_argument("--cert-poll-interval", type=seconds(allow_zero=False), default=d.cert_poll_interval,
                   help=f"seconds between certificate checks (default {d.cert_poll_interval:g})")
    p.add_argument("--no-status", dest="write_status", action="store_false",
                   help="never write policy status (extra replicas without leader election)")
    p.add_argument("--manage-webhooks", action=argparse.BooleanOptionalAction, default=True,
                   help="in a cluster, the leader keeps both webhook configurations as narrow as the loaded "
                        "policies need (default on; never with --local)")
    p.add_argument("--webhook-url", metavar="BASE",
                   help="with --manage-webhooks: the configurations call BASE/validate and BASE/mutate "
                        "(clientConfig.url, e.g. https://127.0.0.1:8443 out of the cluster) instead of the Service")
    p.add_argument("--eval-workers", type=int_in_range(0, None), default=d.eval_workers, metavar="N",
                   help="evaluation worker processes for large reviews, killed at the review's deadline "
                        f"(default {d.eval_workers}; 0 evaluates every review on the event loop)")
    p.add_argument("--isolate-above-bytes", type=int_in_range(0, None), default=d.isolate_above_bytes,
                   metavar="BYTES", help="reviews with a larger body go to a worker; smaller ones are evaluated "
                                         f"inline (default {d.isolate_above_bytes}; 0 sends every review to a worker)")
    p.add_argument("--inline-work-budget", type=int_in_range(0, None), default=d.inline_work_budget, metavar="UNITS",
                   help="a smaller review still goes to a worker when its estimated evaluation cost (~10 ns units) "
                        f"exceeds this (default {d.inline_work_budget}; 0 evaluates it inline whatever it costs)")
    p.add_argument("--eval-memory-limit", type=int_in_range(0, None), default=d.eval_memory_limit_bytes,
                   metavar="BYTES", help="address-space limit of each evaluation worker "
                                         f"(default {d.eval_memory_limit_bytes}; 0: none)")
    p.add_argument("--shutdown-delay", type=seconds(allow_zero=True), metavar="SECONDS",
                   help="after SIGTERM, keep serving this long with Connection: close before closing the "
                        f"listener (default {d.shutdown_delay:g}, 0 with --local)")
    p.add_argument("--background-audit", action="store_true",
                   help="evaluate existing objects for policies with spec.background: true and write "
                        "PolicyReports (leader only; needs the background-audit RBAC overlay)")
    p.add_argument("--audit-max-objects", type=int_in_range(1, None), default=d.audit_max_objects, metavar="N",
                   help="refuse to cache more objects than this over every dynamic informer: background audit and "
                        f"spec.references (default {d.audit_max_objects})")
    p.add_argument("--decision-memo-bytes", type=int_in_range(0, None), default=d.decision_memo_bytes,
                   metavar="BYTES",
                   help="remember fused policy programs that passed, keyed by exactly the fields they read, in up to "
                        f"this many bytes (default {d.decision_memo_bytes}; 0 turns the memo off)")
    p.add_argument("--webhook-config-name", type=dns_subdomain, default=d.webhook_config_name, metavar="NAME",
                   help=f"metadata.name of both webhook configurations (default {d.webhook_config_name})")
    p.add_argument("--webhook-service", type=dns_label, default=d.webhook_service, metavar="NAME",
                   help=f"the Service the webhook configurations call (default {d.webhook_service})")
    p.add_argument("--header-timeout", type=seconds(allow_zero=False), default=d.header_timeout, metavar="SECONDS",
                   help="seconds a client has for its TLS handshake, then for its request head "
                        f"(default {d.header_timeout:g})")
    p.add_argument("--idle-timeout", type=seconds(allow_zero=False), default=d.idle_timeout, metavar="SECONDS",
                   help=f"seconds a kept-alive connection may wait for its next request (default {d.idle_timeout:g})")
    p.add_argument("--max-connections", type=int_in_range(1, None), default=d.max_connections, metavar="N",
                   help=f"client connections open at once (default {d.max_connections})")
    p.add_argument("--ready-max-staleness", type=seconds(allow_zero=True), default=d.ready_max_staleness,
                   metavar="SECONDS", help="/readyz says not ready once a cache has heard nothing from the API "
                                           f"server for this long (default {d.ready_max_staleness:g}; 0: never)")
    p.add_argument("--create-webhooks", action="store_true",
                   help="create a missing webhook configuration (needs RBAC create)")
    p.add_argument("--self-managed-certs", action="store_true",
                   help="keep the CA and serving certificate in the Secret tollgate-tls, written into --cert-dir; "
                        "the leader rotates them and patches the caBundle")
    p.add_argument("--explain", action="store_true",
                   help="serve POST /explain: why each policy decided one AdmissionReview as it did, with the "
                        "values it computed (rate- and size-limited; needs --client-ca in a cluster)")
    p.add_argument("--import", dest="imports", action="append", choices=sorted(IMPORT_SOURCES), default=[],
                   metavar="OWNER",
                   help="in a cluster, also enforce the policies of OWNER (repeatable): 'admission' for "
                        "ValidatingAdmissionPolicy/MutatingAdmissionPolicy and their bindings, 'kyverno' for Kyverno's "
                        "ValidatingPolicy/MutatingPolicy; only where their owner does not enforce them itself "
                        "(default: none; --local reads every kind in its directory)")
    p.add_argument("--no-events", dest="events", action="store_false",
                   help="record no Kubernetes Event on the object of a denied or warned request (default: one "
                        "PolicyViolation/PolicyWarning Event, aggregated and rate-limited as client-go's; "
                        "log lines with --local)")
    p.add_argument("--log-level", default=DEFAULT_LOG_LEVEL, help=f"(default {DEFAULT_LOG_LEVEL})")


def _resolve_certs(args: argparse.Namespace) -> tuple[Path, Path, Path | None]:
    if args.tls_cert_file and args.tls_key_file:
        return args.tls_cert_file, args.tls_key_file, None
    if args.tls_cert_file or args.tls_key_file:
        raise UsageError("--tls-cert-file and --tls-key-file go together")
    if args.cert_dir:
        if not args.cert_dir.is_dir():
            raise UsageError(f"--cert-dir {args.cert_dir}: no such directory")
        return args.cert_dir / "tls.crt", args.cert_dir / "tls.key", args.cert_dir / "ca.crt"
    if args.local is None:
        raise UsageError("--cert-dir (or --tls-cert-file/--tls-key-file) is required without --local")
    out = Path(tempfile.mkdtemp(prefix="tollgate-certs-"))
    paths = certs.write_certs(out, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=30)
    return paths.cert, paths.key, paths.ca


def _check_certs(cert: Path, key: Path, client_ca: Path | None) -> None:
    """Load the pair (and client CA) once before starting, so a bad one is a one-line error, not a crash.

    The pair must be what the server would serve (:func:`webhook.tls.generate.check_pair`: PEM, a key that
    matches, inside notBefore..notAfter), since the API server refuses any other at the handshake.
    """
    for label, path in (("certificate", cert), ("key", key), ("client CA", client_ca)):
        if path is not None and not path.is_file():
            raise UsageError(f"{label} {path}: no such file")
    from webhook.tls.reload import build_context

    try:
        certs.check_pair(cert.read_bytes(), key.read_bytes(), now=time.time())
        build_context(cert, key, client_ca=client_ca)
    except certs.CertificateRejected as e:
        raise UsageError(f"cannot use certificate {cert} and key {key}: {e}") from None
    except (ssl.SSLError, OSError, ValueError) as e:
        raise UsageError(f"cannot use certificate {cert} and key {key}: {getattr(e, 'reason', None) or e}") from None


@contextlib.contextmanager
def _private_tempdir(enabled: bool) -> Iterator[None]:
    """Route every temporary file of the run (certificates, the sample review) into one directory, removed on exit."""
    if not enabled:
        yield
        return
    root = tempfile.mkdtemp(prefix="tollgate-local-")
    previous, tempfile.tempdir = tempfile.tempdir, root
    try:
        yield
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(root, ignore_errors=True)


def _check_kube_config(args: argparse.Namespace) -> None:
    """Fail early, in one line, when no usable cluster configuration can exist (the loader would log and raise)."""
    if args.local is not None:
        return
    if args.kubeconfig:
        path = Path(args.kubeconfig).expanduser()
        if not path.is_file():
            raise UsageError(f"--kubeconfig {args.kubeconfig}: no such file")
        _check_kubeconfig_file(path, f"--kubeconfig {args.kubeconfig}")
        return
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return  # in-cluster configuration
    candidates = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates = candidates or [str(Path("~/.kube/config").expanduser())]
    found = [Path(p).expanduser() for p in candidates if Path(p).expanduser().is_file()]
    if not found:
        raise UsageError(f"no Kubernetes configuration: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no "
                         f"kubeconfig ({', '.join(candidates)} not found); give --kubeconfig, or use --local DIR")
    for path in found:
        _check_kubeconfig_file(path, f"kubeconfig {path}")


def _check_kubeconfig_file(path: Path, label: str) -> None:
    """A kubeconfig must be a YAML mapping (``kind: Config``); anything else is refused in one line."""
    try:
        text = path.read_text(encoding="utf-8")
        loaded = load_single(text, str(path))  # bounded: no alias bomb reaches the Kubernetes client
    except UnicodeDecodeError:
        raise UsageError(f"{label}: not a kubeconfig (not UTF-8 text)") from None
    except InputError as e:
        raise UsageError(f"{label}: not a kubeconfig ({str(e).removeprefix(f'{path}:')})") from None
    except OSError as e:
        raise UsageError(f"{label}: not a kubeconfig ({e.strerror or type(e).__name__})") from None
    if not isinstance(loaded, dict):
        raise UsageError(f"{label}: not a kubeconfig (a YAML mapping with clusters, users and contexts)")


class _KubeConfigUnusable(Exception):
    """The cluster configuration could not be loaded (its message is one line)."""


def _is_kube_config_error(e: BaseException) -> bool:
    # kubernetes_asyncio.config.ConfigException, matched by name: only webhook.kube imports kubernetes_asyncio.
    return isinstance(e, _KubeConfigUnusable) or any(t.__name__ == "ConfigException" for t in type(e).__mro__)


class _Signals:
    """SIGTERM/SIGINT while serving: the first stops (or interrupts start-up), the second hurries the drain.

    Installed on the event loop before anything starts, so a signal during start-up (informers syncing,
    policies compiling) is never lost nor turned into a traceback.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stop = asyncio.Event()
        self.hurry = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._received, sig)

    def _received(self, sig: signal.Signals) -> None:
        if self.stop.is_set():
            if not self.hurry.is_set():
                log.info("second signal: not waiting for the shutdown delay", extra={"signal": sig.name})
            self.hurry.set()
        self.stop.set()


async def _serve(settings: Settings, ca_file: Path | None) -> None:
    signals = _Signals(asyncio.get_running_loop())
    from webhook.server.app import create_app

    api_client = None
    if settings.local_dir is None:
        from webhook.kube.client import new_api_client

        try:
            api_client = await new_api_client(kubeconfig=settings.kubeconfig, context=settings.context)
        except Exception as e:  # loading only reads the files and environment it names: a failure is theirs
            raise _KubeConfigUnusable(f"{type(e).__name__}: {e}" if not _is_kube_config_error(e) else str(e)) from e
    try:
        if settings.self_managed_certs:
            from webhook.server.app import bootstrap_certificates

            if not await _unless_stopped(bootstrap_certificates(settings, api_client), signals):
                return  # the listener needs the files first
        await _run_app(create_app(settings, api_client=api_client), settings, ca_file, signals)
    finally:
        if api_client is not None:
            await api_client.close()


async def _unless_stopped(work: Awaitable[Any], signals: _Signals) -> bool:
    """Run ``work`` unless a signal comes first (then ``work`` is cancelled and waited for); True if it finished."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(signals.stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        log.info("stopped during start-up")
        await cancel_and_wait(task)
        return False
    task.result()  # its exception, if any (e.g. the address in use)
    return True


async def _run_app(app: Any, settings: Settings, ca_file: Path | None, signals: _Signals) -> None:
    """Serve ``app`` over TLS until SIGTERM/SIGINT, then drain (see ``Settings.shutdown_timeout``)."""
    from webhook.server.listener import start_listener

    listening = asyncio.ensure_future(start_listener(app, settings))
    if not await _unless_stopped(listening, signals):
        return  # start_listener cleaned up what had started
    runner = listening.result().runner
    log.info("serving", extra={"host": settings.host, "port": settings.port,
                               "local": str(settings.local_dir) if settings.local_dir else None})
    if settings.local_dir is not None and await _unless_stopped(_until_ready(app), signals):
        _print_try_it(settings, ca_file)
    await signals.stop.wait()
    log.info("shutting down: no new connections, finishing in-flight requests")
    # Connection: close on every response, serve shutdown_delay more seconds, wait for reviews in flight,
    # then AppRunner.cleanup stops the site and runs cleanup_ctx.
    from webhook.admission.lifecycle import graceful_stop
    from webhook.server.app import COMPONENTS

    await graceful_stop(app[COMPONENTS].server, runner, delay=settings.shutdown_delay,
                        timeout=settings.shutdown_timeout, hurry=signals.hurry)


async def _until_ready(app: Any) -> None:
    """Return once ``/readyz`` would answer 200 (polled every 50 ms: readiness has no event of its own)."""
    from webhook.server.app import COMPONENTS
    from webhook.server.health import is_ready

    while not is_ready(app[COMPONENTS]):
        await asyncio.sleep(0.05)


def _print_try_it(settings: Settings, ca_file: Path | None) -> None:
    """``serve --local``'s ready-to-run curl, printed once a review would be answered (not 503)."""
    sample = Path(tempfile.mkdtemp(prefix="tollgate-sample-")) / "review.json"
    sample.write_text(json.dumps(SAMPLE_REVIEW, indent=2))
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    cacert = f"--cacert {ca_file}" if ca_file else "-k"
    print(f"\nTollgate is serving policies from {settings.local_dir} on https://{host}:{settings.port}\n"
          f"Try it (a privileged Pod with a :latest image):\n\n"
          f"  curl -s {cacert} -H 'Content-Type: application/json' "
          f"--data @{sample} https://{host}:{settings.port}/validate\n\n"
          f"Mutating endpoint: same with /mutate. Readiness: https://{host}:{settings.port}/readyz\n"
          + ("Explain the decision: the same with '.../explain?format=text' in place of .../validate\n"
             if settings.explain else ""),
          file=sys.stderr, flush=True)


def _check_port(host: str, port: int) -> None:
    """Refuse at once, before any policy is compiled, an address another process listens on.

    Binds and closes a socket with ``SO_REUSEADDR`` as aiohttp's site does (Linux refuses it only while
    another socket listens there); the server binds again once started, so a process that takes the port
    in between still gets the same one-line error then.
    """
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    for family, kind, proto, _, address in infos[:1]:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as e:
                reason = "address already in use" if e.errno == errno.EADDRINUSE else e.strerror
                raise UsageError(f"cannot listen on {host}:{port}: {reason}") from None


class _Interrupted(Exception):
    """SIGTERM before the event loop's own handlers are installed (while certificates are generated)."""


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise _Interrupted(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    """``tollgate serve``; returns the exit status (2 with one line on stderr when it cannot start)."""
    try:
        logs.setup(args.log_level)
    except (ValueError, TypeError) as e:
        raise UsageError(f"--log-level {args.log_level}: {e}") from None
    if args.local is not None and not args.local.exists():
        raise UsageError(f"--local {args.local}: no such file or directory")
    # Until the event loop installs its own handlers (_Signals), SIGTERM and SIGINT unwind through the
    # temporary directory's cleanup instead of killing the process with ca.key left behind.
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        with _private_tempdir(args.local is not None):
            return _run_serve(args)
    except (KeyboardInterrupt, _Interrupted):
        log.info("stopped during start-up")
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _loopback(host: str | None) -> bool:
    """Whether ``--host`` listens on this machine only (None: the ``--local`` default, 127.0.0.1)."""
    if host is None or host == "localhost":
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost may resolve to any address
        return False


def _run_serve(args: argparse.Namespace) -> int:
    if args.explain and args.local is None and args.client_ca is None:
        raise UsageError("--explain in a cluster needs --client-ca: an explanation shows the params, referenced "
                         "objects and Namespace labels the policies read, so only clients with a certificate "
                         "signed by that CA may ask for one")
    if args.explain and args.local is not None and args.client_ca is None and not _loopback(args.host):
        raise UsageError(f"--explain on --host {args.host} needs --client-ca: an explanation shows the params, "
                         "referenced objects and Namespace labels the policies read, so off this machine only "
                         "clients with a certificate signed by that CA may ask for one")
    if args.imports and args.local is not None:
        raise UsageError("--import chooses what a cluster's Tollgate imports; --local already reads every importable "
                         "kind in its directory")
    cert, key, ca = _resolve_certs(args)
    if args.self_managed_certs:
        if args.local is not None or args.cert_dir is None:
            raise UsageError("--self-managed-certs needs --cert-dir and a cluster (not --local)")
    else:
        _check_certs(cert, key, args.client_ca)
    webhook_url = ""
    if args.webhook_url:
        from webhook.policy.webhook_configs import parse_webhook_url

        try:
            webhook_url = parse_webhook_url(args.webhook_url)
        except ValueError as e:
            raise UsageError(f"--webhook-url: {e}") from None
    _check_kube_config(args)
    host = args.host or ("127.0.0.1" if args.local else DEFAULTS.host)
    _check_port(host, args.port)
    settings = Settings(
        local_dir=args.local, kubeconfig=args.kubeconfig, context=args.context, cert_file=cert, key_file=key,
        client_ca=args.client_ca, host=host, port=args.port,
        params_selector=args.params_selector, max_request_bytes=args.max_request_bytes,
        cert_poll_interval=args.cert_poll_interval, write_status=args.write_status and args.local is None,
        pod_name=os.environ.get("POD_NAME", DEFAULTS.pod_name),
        namespace=os.environ.get("POD_NAMESPACE", DEFAULTS.namespace),
        manage_webhooks=args.manage_webhooks and args.local is None, create_webhooks=args.create_webhooks,
        self_managed_certs=args.self_managed_certs, cert_dir=args.cert_dir, ca_file=ca, webhook_url=webhook_url,
        service_account=os.environ.get("POD_SERVICE_ACCOUNT", DEFAULTS.service_account),
        eval_workers=args.eval_workers, isolate_above_bytes=args.isolate_above_bytes,
        inline_work_budget=args.inline_work_budget, eval_memory_limit_bytes=args.eval_memory_limit,
        webhook_config_name=args.webhook_config_name, webhook_service=args.webhook_service,
        header_timeout=args.header_timeout, idle_timeout=args.idle_timeout, max_connections=args.max_connections,
        ready_max_staleness=args.ready_max_staleness,
        shutdown_delay=(args.shutdown_delay if args.shutdown_delay is not None
                        else 0.0 if args.local else DEFAULTS.shutdown_delay),
        background_audit=args.background_audit and args.local is None, audit_max_objects=args.audit_max_objects,
        decision_memo_bytes=args.decision_memo_bytes, explain=args.explain, imports=frozenset(args.imports),
        events=args.events,
    )
    runner: Callable[[Coroutine[Any, Any, None]], None]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a Linux/macOS dependency
        runner = asyncio.run
    try:
        runner(_serve(settings, ca if ca and ca.exists() else None))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"cannot listen on {settings.host}:{settings.port}: address already in use") from None
        if e.errno in (errno.EACCES, errno.EADDRNOTAVAIL):
            raise UsageError(f"cannot listen on {settings.host}:{settings.port}: {e.strerror}") from None
        raise
    except Exception as e:
        if _is_kube_config_error(e):
            detail = " ".join(str(e).split())
            raise UsageError(f"no usable Kubernetes configuration: {detail} (give --kubeconfig, run in a cluster, "
                             "or use --local DIR)") from None
        raise
    return 0
