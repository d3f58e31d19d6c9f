"""``tollgate webhook-config``: print the webhook configurations a set of policy files needs (offline, for GitOps).

Reads every ClusterAdmissionPolicy / AdmissionPolicy from the YAML or JSON
files given (directories are searched recursively; documents of other kinds,
such as resources and test suites, are skipped; Lists are read item by item)
and prints the ValidatingWebhookConfiguration and MutatingWebhookConfiguration
that ``webhook.policy.webhook_configs.webhook_configurations`` generates for
them, the same as the in-cluster reconciler (``--manage-webhooks``) writes.

Input it would ignore is refused: a policy that ``kubectl apply`` would
reject (its schema) or whose spec cannot be read has no rules to route by, so
each is named (file, line, document, YAML path) and the command exits 2
without printing a configuration. A policy whose CEL does not compile is
routed (the server answers it per its failurePolicy), with a warning. Flag
values the API server would refuse (``timeoutSeconds`` outside 1-30, a name
that is not a DNS label, a caBundle that is not PEM certificates) are refused
here too.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509

from webhook.cli.arguments import dns_label, dns_subdomain, int_in_range
from webhook.cli.command import ExitStatus, Subparsers, UsageError, add_command
from webhook.files.checks import schema_problems
from webhook.files.yamlio import STDIN, InputError, load_paths
from webhook.policy import compile_policy
from webhook.policy.vocabulary import POLICY_KINDS
from webhook.policy.webhook_configs import WebhookTarget, parse_webhook_url, parsed_specs, webhook_configurations

__all__ = ["InvalidPolicies", "add_parser", "load_policies", "read_ca_bundle", "render", "run"]

_DEFAULTS = WebhookTarget()


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate webhook-config``."""
    p = add_command(sub, "webhook-config", run, help="print the webhook configurations the policies need (YAML)",
                    description="Print the ValidatingWebhookConfiguration and MutatingWebhookConfiguration "
                                "generated from the policies under --policies: only the resources, operations "
                                "and failure policies they use. Apply the output instead of running the "
                                "webhook with --manage-webhooks (GitOps). An invalid policy is refused (exit 2).")
    p.add_argument("--policies", type=Path, nargs="+", default=[Path("policies")], metavar="PATH",
                   help="policy YAML/JSON files or directories (recursive; - reads standard input; default: policies)")
    p.add_argument("--url", metavar="BASE",
                   help="call the webhook at BASE/validate and BASE/mutate (clientConfig.url, e.g. "
                        "https://127.0.0.1:8443 for a local or out-of-cluster Tollgate) instead of the Service")
    p.add_argument("--service", type=dns_label, default=_DEFAULTS.service,
                   help=f"webhook Service name (default {_DEFAULTS.service})")
    p.add_argument("--namespace", type=dns_label, default=_DEFAULTS.namespace,
                   help=f"webhook namespace (default {_DEFAULTS.namespace})")
    p.add_argument("--service-account", type=dns_subdomain, default=_DEFAULTS.service_account,
                   help=f"the webhook's ServiceAccount, whose own requests are never sent "
                        f"(default {_DEFAULTS.service_account})")
    p.add_argument("--name", type=dns_subdomain, default=_DEFAULTS.name,
                   help=f"metadata.name of both configurations (default {_DEFAULTS.name})")
    p.add_argument("--ca-bundle", type=Path, metavar="FILE",
                   help="CA certificate (PEM, e.g. ca.crt from `tollgate certs`) for clientConfig.caBundle; "
                        "omit when cert-manager or the self-managed mode injects it")
    p.add_argument("--timeout-seconds", type=int_in_range(1, 30, "the API server's limit for timeoutSeconds"),
                   default=_DEFAULTS.timeout_seconds, metavar="N",
                   help=f"timeoutSeconds of every webhook, 1-30 (default {_DEFAULTS.timeout_seconds})")


class InvalidPolicies(InputError):
    """Policies that cannot be routed; ``problems`` holds one line per problem (file, line, document, YAML path)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{len(problems)} invalid polic{'y' if len(problems) == 1 else 'ies'}: {problems[0]}")
        self.problems = problems


def load_policies(paths: Iterable[Path], *, warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """Every ClusterAdmissionPolicy / AdmissionPolicy document in ``paths`` (files or directories).

    Args:
        paths: files (YAML or JSON; ``-`` is standard input) or directories, searched recursively.
        warnings: when given, receives a line for each policy that is routed although its CEL
            does not compile (the server answers what it selects per its failurePolicy).

    Returns:
        The policy objects, in file and document order.

    Raises:
        InvalidPolicies: a policy that violates its schema or whose spec cannot be read (every one, each
            problem named by file, line, document and YAML path), or a file given by name without a policy.
        InputError: a path that does not exist, unreadable or invalid YAML/JSON.
    """
    policies: list[dict[str, Any]] = []
    problems: list[str] = []
    for root in paths:
        before = len(policies) + len(problems)
        for doc in load_paths([root]):
            if doc.kind not in POLICY_KINDS:
                continue
            found = schema_problems(doc)
            result = compile_policy(doc.obj)
            if not found and result.condition.get("reason") == "InvalidSpec":
                found = [f"{doc.where()}: {doc.display_name}: {result.condition.get('message', 'invalid spec')}"]
            if found:
                problems += found
                continue
            if result.policy is None and warnings is not None:
                warnings.append(f"{doc.where()}: {doc.display_name} is not Ready "
                                f"({result.condition.get('message')}): the requests it selects are answered per "
                                "its failurePolicy")
            policies.append(doc.obj)
        if len(policies) + len(problems) == before and (str(root) == STDIN or not root.is_dir()):
            problems.append(f"{root}: no ClusterAdmissionPolicy or AdmissionPolicy (a file given by name must hold "
                            "one; in directories other kinds are skipped)")
    if problems:
        raise InvalidPolicies(problems)
    return policies


def read_ca_bundle(path: Path) -> str:
    """``caBundle`` from a file holding PEM certificate(s) or their base64 already.

    Raises:
        UsageError: the file cannot be read, or holds no PEM certificate (as is, or base64-encoded).
    """
    try:
        data = path.read_bytes().strip()
    except OSError as e:
        raise UsageError(f"--ca-bundle {path}: cannot read: {e.strerror or e}") from None
    pem = data
    if not data.startswith(b"-----BEGIN"):
        try:
            pem = base64.b64decode(data, validate=True).strip()
        except (binascii.Error, ValueError):
            pem = b""
    try:
        certificates = x509.load_pem_x509_certificates(pem) if pem.startswith(b"-----BEGIN") else []
    except ValueError:
        certificates = []
    if not certificates:
        raise UsageError(f"--ca-bundle {path}: not a PEM CA certificate (ca.crt from `tollgate certs`) nor its base64")
    return base64.b64encode(pem + b"\n").decode("ascii")


def render(policies: list[dict[str, Any]], target: WebhookTarget) -> str:
    """The two configurations as a YAML stream (validating first)."""
    configs = webhook_configurations(parsed_specs(policies), target)
    return yaml.safe_dump_all(configs.documents(), sort_keys=False, width=120)


def run(args: argparse.Namespace) -> int:
    """``tollgate webhook-config``: exit 0 with the YAML on stdout, 2 on unusable input (nothing printed)."""
    try:
        url = parse_webhook_url(args.url) if args.url else ""
    except ValueError as e:
        raise UsageError(str(e)) from None
    ca = read_ca_bundle(args.ca_bundle) if args.ca_bundle else ""
    warnings: list[str] = []
    try:
        policies = load_policies(list(args.policies), warnings=warnings)
    except InvalidPolicies as e:
        for line in e.problems:
            print(f"tollgate webhook-config: {line}", file=sys.stderr)
        if len(e.problems) > 1:
            print(f"tollgate webhook-config: {len(e.problems)} problem(s): no configuration printed", file=sys.stderr)
        return ExitStatus.USAGE
    except InputError as e:
        raise UsageError(str(e)) from None
    if not policies:
        warnings.append(f"no ClusterAdmissionPolicy or AdmissionPolicy under {', '.join(map(str, args.policies))}: "
                        "both configurations have no webhooks")
    for line in warnings:
        print(f"tollgate webhook-config: warning: {line}", file=sys.stderr)
    if not ca:
        print("tollgate webhook-config: note: no caBundle (no --ca-bundle): the API server then trusts only its own "
              "roots, which a self-signed Tollgate certificate is not under; give --ca-bundle ca.crt (from `tollgate "
              "certs`), or let a CA injector (cert-manager) or `serve --self-managed-certs` fill it in",
              file=sys.stderr)
    target = WebhookTarget(name=args.name, url=url, service=args.service, namespace=args.namespace,
                           service_account=args.service_account, ca_bundle=ca,
                           timeout_seconds=args.timeout_seconds)
    sys.stdout.write(render(policies, target))
    return ExitStatus.OK
