"""``tollgate webhook-config``: print the webhook configurations a set of policy files needs (offline, for GitOps).

Reads every ClusterAdmissionPolicy / AdmissionPolicy from the YAML files
given (directories are searched recursively; other documents, such as
resources and test suites, are ignored) and prints the
ValidatingWebhookConfiguration and MutatingWebhookConfiguration that
``webhook.policy.webhook_configs.webhook_configurations`` generates for them, the
same as the in-cluster reconciler (``--manage-webhooks``) writes.
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from webhook.cli.command import ExitStatus, Subparsers, add_command
from webhook.policy.vocabulary import POLICY_KINDS
from webhook.policy.webhook_configs import WebhookTarget, parse_webhook_url, parsed_specs, webhook_configurations

__all__ = ["add_parser", "load_policies", "read_ca_bundle", "render", "run"]


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate webhook-config``."""
    p = add_command(sub, "webhook-config", run, help="print the webhook configurations the policies need (YAML)",
                       description="Print the ValidatingWebhookConfiguration and MutatingWebhookConfiguration "
                                   "generated from the policies under --policies: only the resources, operations "
                                   "and failure policies they use. Apply the output instead of running the "
                                   "webhook with --manage-webhooks (GitOps).")
    p.add_argument("--policies", type=Path, nargs="+", default=[Path("policies")], metavar="PATH",
                   help="policy YAML files or directories (recursive; default: policies)")
    p.add_argument("--url", metavar="BASE",
                   help="call the webhook at BASE/validate and BASE/mutate (clientConfig.url, e.g. "
                        "https://127.0.0.1:8443 for a local or out-of-cluster Tollgate) instead of the Service")
    p.add_argument("--service", default="tollgate", help="webhook Service name (default tollgate)")
    p.add_argument("--namespace", default="tollgate-system", help="webhook namespace (default tollgate-system)")
    p.add_argument("--service-account", default="tollgate",
                   help="the webhook's ServiceAccount, whose own requests are never sent (default tollgate)")
    p.add_argument("--name", default="tollgate", help="metadata.name of both configurations (default tollgate)")
    p.add_argument("--ca-bundle", type=Path, metavar="FILE",
                   help="CA certificate (PEM, e.g. ca.crt from `tollgate certs`) for clientConfig.caBundle; "
                        "omit when cert-manager or the self-managed mode injects it")
    p.add_argument("--timeout-seconds", type=int, default=5, help="timeoutSeconds of every webhook (default 5)")


def _yaml_files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        else:
            yield path


def load_policies(paths: list[Path]) -> list[dict[str, Any]]:
    """Every ClusterAdmissionPolicy / AdmissionPolicy document in ``paths`` (files or directories).

    Raises:
        FileNotFoundError: a path does not exist.
        yaml.YAMLError: a file is not YAML.
    """
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or directory")
    policies = []
    for path in _yaml_files(paths):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in POLICY_KINDS:
                policies.append(doc)
    return policies


def read_ca_bundle(path: Path) -> str:
    """``caBundle`` from a file holding PEM certificate(s) or their base64 already."""
    data = path.read_bytes().strip()
    if data.startswith(b"-----BEGIN"):
        return base64.b64encode(data + b"\n").decode("ascii")
    base64.b64decode(data, validate=True)  # raises binascii.Error if it is neither
    return data.decode("ascii")


def render(policies: list[dict[str, Any]], target: WebhookTarget) -> str:
    """The two configurations as a YAML stream (validating first)."""
    configs = webhook_configurations(parsed_specs(policies), target)
    return yaml.safe_dump_all(configs.documents(), sort_keys=False, width=120)


def run(args: argparse.Namespace) -> int:
    """``tollgate webhook-config``: exit 0 with the YAML on stdout, 2 on unreadable input."""
    try:
        policies = load_policies(list(args.policies))
        ca = read_ca_bundle(args.ca_bundle) if args.ca_bundle else ""
        url = parse_webhook_url(args.url) if args.url else ""
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"tollgate webhook-config: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    target = WebhookTarget(name=args.name, url=url, service=args.service, namespace=args.namespace,
                           service_account=args.service_account, ca_bundle=ca,
                           timeout_seconds=args.timeout_seconds)
    sys.stdout.write(render(policies, target))
    return ExitStatus.OK
