"""Command line: ``tollgate serve | certs | test``. Argument parsing and process lifecycle only."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from webhook import certs, logs
from webhook.config import MAX_REQUEST_BYTES, Settings

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
    p.add_argument("--port", type=int, default=8443, help="listen port (default 8443)")
    p.add_argument("--params-selector", default="tollgate.dev/params=true",
                   help="label selector of the ConfigMaps cached for paramRef (default tollgate.dev/params=true)")
    p.add_argument("--max-request-bytes", type=int, default=MAX_REQUEST_BYTES, help="request body cap in bytes")
    p.add_argument("--cert-poll-interval", type=float, default=10.0, help="seconds between certificate checks")
    p.add_argument("--no-status", dest="write_status", action="store_false",
                   help="never write policy status (extra replicas without leader election)")
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


def build_parser() -> argparse.ArgumentParser:
    """The ``tollgate`` argument parser."""
    parser = argparse.ArgumentParser(prog="tollgate", description="Kubernetes admission webhook with CEL policies")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _certs_parser(sub)
    sub.add_parser("test", help="evaluate policies against resource files offline (see `tollgate test --help`)",
                   add_help=False)
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


def _resolve_certs(args: argparse.Namespace) -> tuple[Path, Path, Path | None]:
    if args.tls_cert_file and args.tls_key_file:
        return args.tls_cert_file, args.tls_key_file, None
    if args.cert_dir:
        return args.cert_dir / "tls.crt", args.cert_dir / "tls.key", args.cert_dir / "ca.crt"
    if args.local is None:
        raise SystemExit("tollgate serve: --cert-dir (or --tls-cert-file/--tls-key-file) is required without --local")
    out = Path(tempfile.mkdtemp(prefix="tollgate-certs-"))
    paths = certs.write_certs(out, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=30)
    return paths.cert, paths.key, paths.ca


async def _serve(settings: Settings, ca_file: Path | None) -> None:
    from aiohttp import web

    from webhook.app import CERTS, create_app

    app = create_app(settings)
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
    # AppRunner.cleanup stops the site, waits for handlers (shutdown_timeout), then runs cleanup_ctx.
    await runner.cleanup()


def run_serve(args: argparse.Namespace) -> int:
    """``tollgate serve``."""
    logs.setup(args.log_level)
    cert, key, ca = _resolve_certs(args)
    settings = Settings(
        local_dir=args.local, kubeconfig=args.kubeconfig, context=args.context, cert_file=cert, key_file=key,
        client_ca=args.client_ca, host=args.host or ("127.0.0.1" if args.local else "0.0.0.0"), port=args.port,
        params_selector=args.params_selector, max_request_bytes=args.max_request_bytes,
        cert_poll_interval=args.cert_poll_interval, write_status=args.write_status and args.local is None,
        pod_name=os.environ.get("POD_NAME", ""), namespace=os.environ.get("POD_NAMESPACE", "tollgate-system"),
    )
    runner: Callable[[Coroutine[Any, Any, None]], None]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a Linux/macOS dependency
        runner = asyncio.run
    runner(_serve(settings, ca if ca and ca.exists() else None))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tollgate`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "test":
        from webhook.offline import main as offline_main

        return offline_main(argv[1:])
    if argv and argv[0] == "audit":
        from webhook.audit_cli import main as audit_main

        return audit_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "certs":
        return run_certs(args)
    return run_serve(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
