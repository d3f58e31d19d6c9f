"""Command line: ``tollgate serve | certs | webhook-config | test | lint``. Argument parsing and process lifecycle only.

Exit status (every failure is one line on stderr, never a traceback):

- 0: success.
- 1: ``tollgate test``: an expectation does not hold (ad-hoc: a ``fail`` or
  ``error`` row); ``tollgate lint``: a problem was found.
- 2: usage error or unusable input: bad arguments, unreadable or invalid
  files, no Kubernetes configuration for ``serve``, a missing or invalid
  certificate, the port already in use.
- 70: an unexpected internal error (one line; ``TOLLGATE_DEBUG=1`` shows the traceback).
- 141: standard output was closed early (``tollgate test ... | head``), as a
  program killed by SIGPIPE; nothing is printed.
"""

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
from collections.abc import Callable, Coroutine, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from webhook import logs
from webhook.cli import webhook_config as webhookconfig
from webhook.cli.parsing import EXIT_USAGE, OneLineParser
from webhook.server.settings import DEFAULT_MEMO_BYTES, MAX_REQUEST_BYTES, Settings
from webhook.tls import generate as certs

EXIT_INTERNAL = 70
EXIT_BROKEN_PIPE = 141

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


def _port(text: str) -> int:
    """An argparse type: a TCP port, 1-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: not a number") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"invalid port {port}: must be 1-65535")
    return port


def _serve_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="run the admission webhook over TLS",
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
    p.add_argument("--host", help="listen address (default 127.0.0.1 with --local, else 0.0.0.0)")
    p.add_argument("--port", type=_port, default=8443, help="listen port (default 8443)")
    p.add_argument("--params-selector", default="tollgate.dev/params=true",
                   help="label selector of the ConfigMaps cached for paramRef (default tollgate.dev/params=true)")
    p.add_argument("--max-request-bytes", type=int, default=MAX_REQUEST_BYTES, help="request body cap in bytes")
    p.add_argument("--cert-poll-interval", type=float, default=10.0, help="seconds between certificate checks")
    p.add_argument("--no-status", dest="write_status", action="store_false",
                   help="never write policy status (extra replicas without leader election)")
    p.add_argument("--manage-webhooks", action=argparse.BooleanOptionalAction, default=True,
                   help="in a cluster, the leader keeps both webhook configurations as narrow as the loaded "
                        "policies need (default on; never with --local)")
    p.add_argument("--webhook-url", metavar="BASE",
                   help="with --manage-webhooks: the configurations call BASE/validate and BASE/mutate "
                        "(clientConfig.url, e.g. https://127.0.0.1:8443 out of the cluster) instead of the Service")
    p.add_argument("--eval-workers", type=int, default=2, metavar="N",
                   help="evaluation worker processes for large reviews, killed at the review's deadline "
                        "(default 2; 0 evaluates every review on the event loop)")
    p.add_argument("--isolate-above-bytes", type=int, default=32 * 1024, metavar="BYTES",
                   help="reviews with a larger body go to a worker; smaller ones are evaluated inline "
                        "(default 32768; 0 sends every review to a worker)")
    p.add_argument("--eval-memory-limit", type=int, default=1024**3, metavar="BYTES",
                   help="address-space limit of each evaluation worker (default 1 GiB)")
    p.add_argument("--shutdown-delay", type=float, metavar="SECONDS",
                   help="after SIGTERM, keep serving this long with Connection: close before closing the "
                        "listener (default 5, 0 with --local)")
    p.add_argument("--background-audit", action="store_true",
                   help="evaluate existing objects for policies with spec.background: true and write "
                        "PolicyReports (leader only; needs the background-audit RBAC overlay)")
    p.add_argument("--audit-max-objects", type=int, default=200_000, metavar="N",
                   help="refuse to cache more objects than this over every dynamic informer: background audit and "
                        "spec.references (default 200000)")
    p.add_argument("--decision-memo-bytes", type=int, default=DEFAULT_MEMO_BYTES, metavar="BYTES",
                   help="remember fused policy programs that passed, keyed by exactly the fields they read, in up to "
                        f"this many bytes (default {DEFAULT_MEMO_BYTES}; 0 turns the memo off)")
    p.add_argument("--create-webhooks", action="store_true",
                   help="create a missing webhook configuration (needs RBAC create)")
    p.add_argument("--self-managed-certs", action="store_true",
                   help="keep the CA and serving certificate in the Secret tollgate-tls, written into --cert-dir; "
                        "the leader rotates them and patches the caBundle")
    p.add_argument("--log-level", default="INFO")


def _certs_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("certs", help="generate a CA and serving certificate; print the caBundle",
                       description="Write ca.crt, tls.crt and tls.key (ECDSA P-256 by default) for the webhook "
                                   "Service and print the base64 caBundle for the webhook configurations.")
    p.add_argument("--out-dir", type=Path, required=True, help="directory to write ca.crt, tls.crt, tls.key")
    p.add_argument("--service", default="tollgate", help="Service name (default tollgate)")
    p.add_argument("--namespace", default="tollgate-system", help="Service namespace (default tollgate-system)")
    p.add_argument("--dns-name", action="append", default=[], help="extra SAN DNS name (repeatable)")
    p.add_argument("--ip", action="append", default=[], help="extra SAN IP address (repeatable)")
    p.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    p.add_argument("--algorithm", choices=("ecdsa", "rsa"), default="ecdsa", help="key type (default ecdsa)")


def package_version() -> str:
    """The installed ``tollgate`` distribution's version (``unknown`` when run from a bare checkout)."""
    try:
        return version("tollgate")
    except PackageNotFoundError:  # pragma: no cover - always installed in practice
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The ``tollgate`` argument parser."""
    parser = OneLineParser(prog="tollgate", description="Kubernetes admission webhook with CEL policies",
                           epilog="Exit status: 0 ok, 1 test expectations or lint problems, 2 usage or unusable "
                                  "input, 70 internal error, 141 output closed early.")
    parser.add_argument("--version", action="version", version=f"tollgate {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    _serve_parser(sub)
    _certs_parser(sub)
    webhookconfig.add_parser(sub)
    sub.add_parser("test", help="evaluate policies against resource files offline (see `tollgate test --help`)",
                   add_help=False)
    sub.add_parser("lint", help="check policy files against the CRD schema and compile their CEL "
                                "(see `tollgate lint --help`)", add_help=False)
    sub.add_parser("audit", help="print the PolicyReports the background audit would write (offline)", add_help=False)
    return parser


def run_certs(args: argparse.Namespace) -> int:
    """``tollgate certs``."""
    names = certs.service_dns_names(args.service, args.namespace) + args.dns_name
    paths = certs.write_certs(args.out_dir, dns_names=names, ip_addresses=args.ip, days=args.days,
                              algorithm=args.algorithm)
    print(f"wrote {paths.ca}, {paths.cert}, {paths.key}", file=sys.stderr)
    print(certs.ca_bundle(paths.ca.read_bytes()))
    return 0


class UsageError(Exception):
    """A one-line reason ``tollgate serve`` cannot start (exit status 2)."""


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
    """Load the pair (and client CA) once before starting, so a bad one is a one-line error."""
    for label, path in (("certificate", cert), ("key", key), ("client CA", client_ca)):
        if path is not None and not path.is_file():
            raise UsageError(f"{label} {path}: no such file")
    from webhook.tls.reload import build_context

    try:
        build_context(cert, key, client_ca=client_ca)
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
    """Fail early, in one line, when no cluster configuration can exist (the loader would log and raise)."""
    if args.local is not None:
        return
    if args.kubeconfig:
        if not Path(args.kubeconfig).expanduser().is_file():
            raise UsageError(f"--kubeconfig {args.kubeconfig}: no such file")
        return
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return  # in-cluster configuration
    candidates = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates = candidates or [str(Path("~/.kube/config").expanduser())]
    if not any(Path(p).expanduser().is_file() for p in candidates):
        raise UsageError(f"no Kubernetes configuration: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no "
                         f"kubeconfig ({', '.join(candidates)} not found); give --kubeconfig, or use --local DIR")


def _is_kube_config_error(e: BaseException) -> bool:
    # kubernetes_asyncio.config.ConfigException, matched by name: only webhook.kube imports kubernetes_asyncio.
    return any(t.__name__ == "ConfigException" for t in type(e).__mro__)


async def _serve(settings: Settings, ca_file: Path | None) -> None:
    from webhook.server.app import create_app

    api_client = None
    if settings.local_dir is None:
        from webhook.kube.client import new_api_client

        api_client = await new_api_client(kubeconfig=settings.kubeconfig, context=settings.context)
    try:
        if settings.self_managed_certs:
            from webhook.server.app import bootstrap_certificates

            await bootstrap_certificates(settings, api_client)  # the listener needs the files first
        await _run_app(create_app(settings, api_client=api_client), settings, ca_file)
    finally:
        if api_client is not None:
            await api_client.close()


async def _run_app(app: Any, settings: Settings, ca_file: Path | None) -> None:
    """Serve ``app`` over TLS until SIGTERM/SIGINT, then drain (see ``Settings.shutdown_timeout``)."""
    from aiohttp import web

    from webhook.server.app import CERTS

    runner = web.AppRunner(app, shutdown_timeout=settings.shutdown_timeout, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, ssl_context=app[CERTS].context,
                       backlog=1024, reuse_address=True)
    await site.start()
    log.info("serving", extra={"host": settings.host, "port": settings.port,
                               "local": str(settings.local_dir) if settings.local_dir else None})
    if settings.local_dir is not None:
        sample = Path(tempfile.mkdtemp(prefix="tollgate-sample-")) / "review.json"
        sample.write_text(json.dumps(SAMPLE_REVIEW, indent=2))
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
        cacert = f"--cacert {ca_file}" if ca_file else "-k"
        print(f"\nTollgate is serving policies from {settings.local_dir} on https://{host}:{settings.port}\n"
              f"Try it (a privileged Pod with a :latest image):\n\n"
              f"  curl -s {cacert} -H 'Content-Type: application/json' "
              f"--data @{sample} https://{host}:{settings.port}/validate\n\n"
              f"Mutating endpoint: same with /mutate. Readiness: https://{host}:{settings.port}/readyz\n",
              file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down: no new connections, finishing in-flight requests")
    # Connection: close on every response, serve shutdown_delay more seconds, wait for reviews in flight,
    # then AppRunner.cleanup stops the site and runs cleanup_ctx.
    from webhook.admission.lifecycle import graceful_stop
    from webhook.server.app import COMPONENTS

    await graceful_stop(app[COMPONENTS].server, runner, delay=settings.shutdown_delay,
                        timeout=settings.shutdown_timeout)


def run_serve(args: argparse.Namespace) -> int:
    """``tollgate serve``; returns the exit status (2 with one line on stderr when it cannot start)."""
    try:
        logs.setup(args.log_level)
    except (ValueError, TypeError) as e:
        raise UsageError(f"--log-level {args.log_level}: {e}") from None
    if args.local is not None and not args.local.exists():
        raise UsageError(f"--local {args.local}: no such file or directory")
    with _private_tempdir(args.local is not None):
        return _run_serve(args)


def _run_serve(args: argparse.Namespace) -> int:
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
    settings = Settings(
        local_dir=args.local, kubeconfig=args.kubeconfig, context=args.context, cert_file=cert, key_file=key,
        client_ca=args.client_ca, host=args.host or ("127.0.0.1" if args.local else "0.0.0.0"), port=args.port,
        params_selector=args.params_selector, max_request_bytes=args.max_request_bytes,
        cert_poll_interval=args.cert_poll_interval, write_status=args.write_status and args.local is None,
        pod_name=os.environ.get("POD_NAME", ""), namespace=os.environ.get("POD_NAMESPACE", "tollgate-system"),
        manage_webhooks=args.manage_webhooks and args.local is None, create_webhooks=args.create_webhooks,
        self_managed_certs=args.self_managed_certs, cert_dir=args.cert_dir, ca_file=ca, webhook_url=webhook_url,
        service_account=os.environ.get("POD_SERVICE_ACCOUNT", "tollgate"),
        eval_workers=max(args.eval_workers, 0), isolate_above_bytes=max(args.isolate_above_bytes, 0),
        eval_memory_limit_bytes=args.eval_memory_limit,
        shutdown_delay=args.shutdown_delay if args.shutdown_delay is not None else (0.0 if args.local else 5.0),
        background_audit=args.background_audit and args.local is None, audit_max_objects=args.audit_max_objects,
        decision_memo_bytes=max(args.decision_memo_bytes, 0),
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
            raise UsageError(f"no Kubernetes configuration: {e} (give --kubeconfig, run in a cluster, "
                             "or use --local DIR)") from None
        raise
    return 0


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] == "test":
        from webhook.cli.test import main as offline_main

        return offline_main(argv[1:])
    if argv and argv[0] == "lint":
        from webhook.cli.lint import main as lint_main

        return lint_main(argv[1:])
    if argv and argv[0] == "audit":
        from webhook.cli.audit import main as audit_main

        return audit_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "certs":
        try:
            return run_certs(args)
        except OSError as e:
            raise UsageError(f"--out-dir {args.out_dir}: {e.strerror or e}") from None
    if args.command == "webhook-config":
        return webhookconfig.run(args)
    return run_serve(args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tollgate`` console script; returns the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and not argv[0].startswith("-") else ""
    try:
        return _dispatch(argv)
    except UsageError as e:
        print(f"tollgate {command}: {e}" if command else f"tollgate: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (| head): silence the final flush, as a SIGPIPE'd program would.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except SystemExit as e:  # argparse: --help/--version (0) and usage errors (2, already printed)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if os.environ.get("TOLLGATE_DEBUG"):
            raise
        print(f"tollgate {command}: internal error: {type(e).__name__}: {e} (TOLLGATE_DEBUG=1 shows the "
              "traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
