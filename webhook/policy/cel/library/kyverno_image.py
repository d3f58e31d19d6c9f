"""Kyverno's image library: ``image(s)``/``parseImageReference(s)``, ``isImage(s)`` and an image's parts (pure).

Follows ``github.com/kyverno/sdk`` ``extensions/cel/libs/image`` (``impl.go``, ``lib.go``), which parses with
go-containerregistry's ``name.ParseReference`` (``pkg/name``: ``ref.go``, ``tag.go``, ``digest.go``,
``repository.go``, ``registry.go``) and its defaults: a reference is a tag reference if it parses as one,
else a digest reference (``<name>@sha256:<64 hex>``, a tag before the ``@`` dropped); the registry defaults
to ``index.docker.io`` (``docker.io`` is an alias of it), the tag to ``latest``; a repository of Docker
Hub without ``/`` is in ``library/``. Parsing needs no registry: nothing here touches the network
(``image.GetMetadata``, Kyverno's imagedata library, does and stays refused).

Members of an image value:

* ``registry()``: ``"index.docker.io"`` for ``nginx``, ``"ghcr.io"`` for ``ghcr.io/a/b:1``;
* ``repository()``: ``"library/nginx"``, ``"a/b"``;
* ``tag()``: the tag of a tag reference (``"latest"`` when none is written), ``""`` for a digest reference;
* ``digest()``: ``"sha256:..."`` of a digest reference, else ``""``;
* ``identifier()``: the tag or the digest;
* ``containsDigest()``: whether it is a digest reference.

An image value is ``{"@image": "<the reference as written>"}`` (Kyverno's opaque ``kyverno.image``; two
images are equal when written alike). ``image(s)`` on a string that is no reference is an error value
(``could not parse reference: <s>``); ``isImage(s)`` is then false.

Cost: each function is linear in the length of the reference string; results are at most that long.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from cel_expr_python import cel

from webhook.policy.cel.cost import PYTHON_PART, PYTHON_SCALAR
from webhook.policy.cel.library._decl import VALUE, LibraryError, T, member, overloads

KEY = "@image"
DEFAULT_REGISTRY = "index.docker.io"
_REGISTRY_ALIAS = "docker.io"
DEFAULT_TAG = "latest"
_TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-.ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_REPOSITORY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-./")
_SHA256_HEX = re.compile(r"[a-f0-9]{64}")
#: What Go's ``url.Parse`` accepts in a host (``shouldEscape`` in host mode), besides non-ASCII characters.
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:[]<>\"")


class _BadName(ValueError):
    pass


class Reference(NamedTuple):
    """A parsed image reference: registry, repository (as written), tag (``""`` for a digest) and digest."""

    registry: str
    repository: str
    tag: str
    digest: str

    def repository_str(self) -> str:
        """go-containerregistry's ``RepositoryStr``: Docker Hub's one-part names are in ``library/``."""
        if "/" not in self.repository and self.registry == DEFAULT_REGISTRY:
            return f"library/{self.repository}"
        return self.repository


def _check(what: str, element: str, allowed: frozenset[str], low: int, high: int) -> None:
    if not low <= len(element) <= high:
        raise _BadName(f"{what} must be between {low} and {high} characters in length: {element}")
    if any(c not in allowed for c in element):
        raise _BadName(f"{what} can only contain the characters `{''.join(sorted(allowed))}`: {element}")


def _check_registry(name: str) -> None:
    """``checkRegistry``: ``url.Parse("//" + name).Host == name`` (host characters, an optional numeric port)."""
    if any(c not in _HOST_CHARS and ord(c) < 0x80 for c in name):
        raise _BadName(f"registries must be valid RFC 3986 URI authorities: {name}")
    if name.startswith("["):
        close = name.find("]")
        if close < 0:
            raise _BadName(f"registries must be valid RFC 3986 URI authorities: {name}")
        port = name[close + 1:]
    else:
        colon = name.rfind(":")
        port = name[colon:] if colon >= 0 else ""
    if port and (port[0] != ":" or any(c not in "0123456789" for c in port[1:])):
        raise _BadName(f"registries must be valid RFC 3986 URI authorities: {name}")


def _repository(name: str) -> tuple[str, str]:
    if not name:
        raise _BadName("a repository name must be specified")
    registry, repo = "", name
    first, slash, rest = name.partition("/")
    if slash and (first == "localhost" or any(c in first for c in ".:")):
        registry, repo = first, rest
    _check("repository", repo, _REPOSITORY_CHARS, 1, 255)
    _check_registry(registry)
    if registry in ("", _REGISTRY_ALIAS):
        registry = DEFAULT_REGISTRY
    return registry, repo


def _tag(name: str) -> Reference:
    base, tag = name, ""
    parts = name.split(":")
    if len(parts) > 1 and "/" not in parts[-1]:
        base, tag = ":".join(parts[:-1]), parts[-1]
        if not tag:
            raise _BadName(f"{name} must specify a tag name after the colon")
    if tag:
        _check("tag", tag, _TAG_CHARS, 1, 128)
    registry, repo = _repository(base)
    return Reference(registry, repo, tag or DEFAULT_TAG, "")


def _digest(name: str) -> Reference:
    parts = name.split("@")
    if len(parts) != 2:
        raise _BadName(f"a digest must contain exactly one '@' separator (e.g. registry/repository@digest) saw: {name}")
    base, dig = parts
    if not dig.startswith("sha256:"):
        raise _BadName(f"unsupported digest algorithm: {dig}")
    if not _SHA256_HEX.fullmatch(dig[len("sha256:"):]):
        raise _BadName("invalid checksum digest format")
    try:
        tagged = _tag(base)
    except _BadName:
        pass
    else:
        base = f"{tagged.registry}/{tagged.repository_str()}"
    registry, repo = _repository(base)
    return Reference(registry, repo, "", dig)


def parse(text: str) -> Reference:
    """go-containerregistry's ``name.ParseReference`` with its default options.

    Raises:
        LibraryError: ``could not parse reference: <text>``.
    """
    for parser in (_tag, _digest):
        try:
            return parser(text)
        except _BadName:
            continue
    raise LibraryError(f"could not parse reference: {text}")


def image(text: str) -> dict[str, str]:
    """``image(<string>)``/``parseImageReference(<string>) -> Image``."""
    parse(text)
    return {KEY: text}


def is_image(text: str) -> bool:
    """``isImage(<string>) -> bool``: whether the string parses as a reference."""
    try:
        parse(text)
    except LibraryError:
        return False
    return True


def _get(v: Any) -> Reference:
    if isinstance(v, dict) and isinstance(v.get(KEY), str):
        return parse(v[KEY])
    raise LibraryError("no such overload: expected an image")


def declarations() -> list[Any]:
    """The image library's functions."""
    return [
        overloads("image", cel.Overload("tg_kyverno_image", VALUE, [T.STRING], impl=image), rule=PYTHON_PART),
        overloads("parseImageReference", cel.Overload("tg_kyverno_parse_image_reference", VALUE, [T.STRING],
                                                      impl=image), rule=PYTHON_PART),
        overloads("isImage", cel.Overload("tg_kyverno_is_image", T.BOOL, [T.STRING], impl=is_image),
                  rule=PYTHON_SCALAR),
        member("containsDigest", "tg_kyverno_image_contains_digest", T.BOOL, [VALUE], lambda v: bool(_get(v).digest),
               rule=PYTHON_SCALAR),
        member("registry", "tg_kyverno_image_registry", T.STRING, [VALUE], lambda v: _get(v).registry,
               rule=PYTHON_PART),
        member("repository", "tg_kyverno_image_repository", T.STRING, [VALUE], lambda v: _get(v).repository_str(),
               rule=PYTHON_PART),
        member("identifier", "tg_kyverno_image_identifier", T.STRING, [VALUE],
               lambda v: _get(v).tag or _get(v).digest, rule=PYTHON_PART),
        member("tag", "tg_kyverno_image_tag", T.STRING, [VALUE], lambda v: _get(v).tag, rule=PYTHON_PART),
        member("digest", "tg_kyverno_image_digest", T.STRING, [VALUE], lambda v: _get(v).digest, rule=PYTHON_PART),
    ]
