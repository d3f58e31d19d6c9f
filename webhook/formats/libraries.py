"""What an imported expression calls that Tollgate's CEL environment does not have, and what it reads (pure; no I/O).

Kubernetes' and Kyverno's CEL environments extend the one Tollgate implements
(:mod:`webhook.policy.cel.env`). An expression that compiles in Tollgate's environment uses nothing
else; one that does not is searched for the libraries Tollgate lacks, so the problem names the
library instead of CEL's ``undeclared reference``:

* Kyverno (``github.com/kyverno/sdk`` ``extensions/cel/libs``), what needs the network, a registry or
  Kyverno's controllers: ``http``, ``globalContext``, ``image.GetMetadata``/``imagedata``, ``resource.Post``,
  ``generator``; and what Tollgate does not implement: ``json.marshal``, ``random``, the older ``time_*``
  names, ``listObjToMap`` (transform), ``jmespath``, and PolicyException values (``exceptions``).

Kyverno's libraries that need no network are Tollgate's too (:mod:`webhook.policy.cel.library`:
``parseServiceAccount``, ``time.now``/``truncate``/``toCron``, ``image(...)`` and its parts,
``json.unmarshal``, ``yaml.parse``, ``x509.decode``, ``sha1``/``sha256``/``md5``, ``math.round`` with a
precision, ``regex.replace``): a call the environment declares is never named here.

Kyverno's ``resource.Get``/``resource.List`` are Tollgate's too, over the caches a policy's
``spec.references`` declares: :func:`resource_reads` lists what an expression reads, so the importer
declares it; a read whose ``apiVersion`` or ``resource`` is computed cannot be cached ahead and is a
problem.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from webhook.policy.cel import ast as celast
from webhook.policy.cel.env import compile_expression, environment
from webhook.policy.cel.scope import IMAGE_DATA_FUNCTIONS, RESOURCE_FUNCTIONS, image_data_offline

__all__ = ["Reads", "resource_reads", "unsupported_calls"]

#: Kyverno functions called on a library object (``http.Get(...)``): the receiver's name → the library.
_KYVERNO_RECEIVERS = {
    "http": "http library (requests to other services)",
    "globalContext": "GlobalContext library (GlobalContextEntry caches)",
    "image": "ImageData library (image registry lookups)",
    "imagedata": "ImageData library (image registry lookups)",
    "json": "json library",
    "yaml": "yaml library",
    "x509": "x509 library",
    "hash": "hash library",
    "time": "time library",
    "user": "user library",
    "generator": "generator library (GeneratingPolicy)",
}
#: Kyverno global functions → the library.
_KYVERNO_FUNCTIONS = {
    "random": "random library", "listObjToMap": "transform library", "jmespath": "jmespath library",
    **{f"time_{f}": "time library" for f in ("now", "now_utc", "parse", "add", "diff", "before", "after")},
}
#: Variables of the source environment Tollgate does not bind → what they are.
_KYVERNO_VARIABLES = {"exceptions": "exceptions holds Kyverno's PolicyException values (Tollgate does not import "
                                    "PolicyExceptions)"}


def _parsed(text: str) -> celast.Node | None:
    try:
        return celast.decode(environment().env.compile(text, disable_check=True).serialize()).root
    except (RuntimeError, ValueError):
        return None  # a syntax error: the compiler reports it with its position


def _bound_names(root: celast.Node) -> frozenset[str]:
    """Names a comprehension binds anywhere in the tree (an iteration variable named ``image`` is not the library)."""
    return frozenset(n for node in root.walk() if node.kind == "comprehension"
                     for n in (node.name, node.accu_var, node.iter_var2) if n)


def _findings(root: celast.Node, kyverno: bool) -> Iterator[str]:
    bound = _bound_names(root)
    declared = environment().python_functions
    if not image_data_offline():  # declared, but it compiles only where tollgate test installs image data
        declared = declared - IMAGE_DATA_FUNCTIONS
    variables = _KYVERNO_VARIABLES if kyverno else {}
    for node in root.walk():
        if node.kind == "ident" and node.name in variables and node.name not in bound:
            yield variables[node.name]
        if not kyverno or node.kind != "call":
            continue
        receiver = node.target.name if node.target is not None and node.target.kind == "ident" else None
        if receiver is not None and receiver in bound:
            continue
        if receiver is not None and f"{receiver}.{node.name}" in declared:
            continue  # a Kyverno library function Tollgate implements (json.unmarshal, time.now, ...)
        if receiver == "resource" and node.name == "Post":
            yield "resource.Post is a live API call per request; Tollgate reads other objects only from its caches"
        elif receiver in _KYVERNO_RECEIVERS:
            yield f"{receiver}.{node.name} is Kyverno's {_KYVERNO_RECEIVERS[receiver]}"
        elif node.target is None and node.name in _KYVERNO_FUNCTIONS and node.name not in bound:
            yield f"{node.name} is Kyverno's {_KYVERNO_FUNCTIONS[node.name]}"


def unsupported_calls(text: str, *, kyverno: bool) -> list[str]:
    """What ``text`` uses of its source's CEL libraries that Tollgate does not implement, one phrase each.

    Args:
        text: the expression.
        kyverno: the source is a Kyverno policy (its libraries are searched too).

    Returns:
        ``[]`` when the expression compiles in Tollgate's environment, or fails for another reason
        (the compiler's own message then names it); else one phrase per library use, in order, without
        repeats (``"http.Get is Kyverno's http library (...)"``).
    """
    try:
        compiled = compile_expression(text)
    except RuntimeError:
        pass
    else:
        if image_data_offline() or not any(c.function in IMAGE_DATA_FUNCTIONS for c in compiled.resource_calls):
            return []
    root = _parsed(text)
    if root is None:
        return []
    return list(dict.fromkeys(_findings(root, kyverno)))


@dataclass(frozen=True, slots=True)
class Reads:
    """What an expression reads with ``resource.Get``/``List``: ``(apiVersion, resource)`` pairs, and problems."""

    references: tuple[tuple[str, str], ...] = ()
    problems: tuple[str, ...] = ()


def resource_reads(text: str) -> Reads:
    """The caches ``text``'s ``resource.Get``/``resource.List`` calls read (Kyverno's resource library).

    Returns:
        Each literal ``(apiVersion, resource)`` once, in order; a problem for each call whose
        ``apiVersion`` or ``resource`` is not a string literal (nothing to cache before the first
        request). An expression that does not compile reads nothing here.
    """
    try:
        compiled = compile_expression(text)
    except RuntimeError:
        return Reads()
    found: list[tuple[str, str]] = []
    problems: list[str] = []
    for call in compiled.resource_calls:
        if call.function not in RESOURCE_FUNCTIONS:
            continue  # image.GetMetadata: no cache to declare (the compiler decides whether it may compile)
        if call.api_version is None or call.resource is None:
            problems.append(f"{call.where}: the apiVersion and resource of {call.function} must be string "
                            "literals: Tollgate serves reads from a cache it must start when the policy loads")
        elif (call.api_version, call.resource) not in found:
            found.append((call.api_version, call.resource))
    return Reads(tuple(found), tuple(problems))
