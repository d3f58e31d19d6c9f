"""The policy being evaluated: its lazy ``variables``, its ``params`` and what its ``spec.references`` may read.

ONE Activation per request (and object view) is shared by every policy, so
what differs per policy is reached through hidden functions instead of
activation variables: :func:`webhook.policy.cel.rewrites.rewrite_for_runtime`
maps ``variables.x`` to ``__tg_var("x")`` and ``params`` to ``__tg_params()``,
and the engine installs the current policy's :class:`VariableScope` with
:func:`set_current_scope` around each evaluation (a context variable, so
concurrent evaluations in other tasks or threads never see it).
``resource.Get``/``List``/``ByIndex`` (Kyverno's read-only resource library,
over informer caches) read the scope's :class:`ReferenceReader`.

``image.GetMetadata``/``image.getMetadata`` (Kyverno's ImageData library) read image metadata a registry would
give; Tollgate calls no registry, so they answer only from the image data ``tollgate test`` installs with
:func:`offline_image_data` (a Kyverno test Context's ``spec.images``, as Kyverno's CLI answers them from its
fake context provider) and are refused at compile time anywhere else (:data:`IMAGE_DATA_FUNCTIONS`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from cel_expr_python import cel

from webhook.policy.cel.cost import PYTHON_OBJECT
from webhook.policy.cel.library._decl import LibraryError, T, function, overloads
from webhook.policy.rbac import Authorizer

__all__ = [
    "IMAGE_DATA_FUNCTIONS",
    "RESOURCE_FUNCTIONS",
    "ReferenceReader",
    "VariableScope",
    "current_authorizer",
    "declarations",
    "image_data_offline",
    "offline_image_data",
    "reset_scope",
    "set_current_scope",
]


class ReferenceReader(Protocol):
    """What ``resource.Get`` / ``resource.List`` read for the current policy (the engine implements it).

    Both raise :class:`LibraryError` (a CEL error value) for a reference the policy did not declare
    or may not read; objects are returned as plain JSON data.
    """

    def get(self, api_version: str, resource: str, namespace: str, name: str) -> Any:
        """The cached object, or None."""
        ...

    def list(self, api_version: str, resource: str, namespace: str, labels: Any) -> Any:
        """``{"items": [...]}``: cached objects in ``namespace`` (``""``: every namespace) with ``labels``."""
        ...

    def by_index(self, api_version: str, resource: str, index: str, value: str) -> Any:
        """``{"items": [...]}``: cached objects whose declared index ``index`` yields ``value``."""
        ...


class VariableScope:
    """Lazily evaluated ``variables`` and ``params`` of one policy in one request, and its references."""

    __slots__ = ("activation", "authorizer", "cache", "params", "programs", "references")

    def __init__(self, programs: dict[str, Any], activation: Any, params: Any,
                 references: ReferenceReader | None = None, authorizer: Authorizer | None = None) -> None:
        self.programs = programs
        self.activation = activation
        self.params = params
        self.references = references
        #: What ``authorizer...check(verb)`` asks (:mod:`webhook.policy.cel.authz`); None: checks error.
        self.authorizer = authorizer
        self.cache: dict[str, Any] = {}

    def variable(self, name: str) -> Any:
        """Evaluate ``variables.<name>`` once; raise on a CEL error value."""
        try:
            return self.cache[name]
        except KeyError:
            pass
        program = self.programs.get(name)
        if program is None:
            raise KeyError(f"no such variable: {name}")
        value = program.eval(self.activation)
        if value.type() == T.ERROR:
            raise RuntimeError(f"variables.{name}: {value.value()}")
        result = value.plain_value()
        self.cache[name] = result
        return result


_scope: contextvars.ContextVar[VariableScope | None] = contextvars.ContextVar("tollgate_cel_scope", default=None)


def set_current_scope(scope: VariableScope | None) -> contextvars.Token[VariableScope | None]:
    """Install the scope ``__tg_var``/``__tg_params`` read; returns a reset token."""
    return _scope.set(scope)


def reset_scope(token: contextvars.Token[VariableScope | None]) -> None:
    """Undo :func:`set_current_scope`."""
    _scope.reset(token)


def current_authorizer() -> Authorizer | None:
    """The authorizer of the policy being evaluated (:attr:`VariableScope.authorizer`), or None."""
    scope = _scope.get()
    return None if scope is None else scope.authorizer


def _tg_var(name: str) -> Any:
    scope = _scope.get()
    if scope is None:
        raise RuntimeError("variables evaluated outside a policy scope")
    return scope.variable(name)


def _tg_params() -> Any:
    scope = _scope.get()
    return None if scope is None else scope.params


def _reader(function_name: str) -> ReferenceReader:
    scope = _scope.get()
    if scope is None or scope.references is None:
        raise LibraryError(f"{function_name}: the policy declares no spec.references")
    return scope.references


def _resource_get(api_version: str, resource: str, namespace: str, name: str) -> Any:
    return _reader("resource.Get").get(api_version, resource, namespace, name)


def _resource_list(api_version: str, resource: str, namespace: str, labels: Any = None) -> Any:
    return _reader("resource.List").list(api_version, resource, namespace, labels)


def _resource_by_index(api_version: str, resource: str, index: str, value: str) -> Any:
    return _reader("resource.ByIndex").by_index(api_version, resource, index, value)


#: Kyverno's ImageData library (``github.com/kyverno/sdk`` ``extensions/cel/libs/imagedata``: ``GetMetadata``,
#: and ``getMetadata`` from Kyverno 1.18): image metadata from a registry.
IMAGE_DATA_FUNCTIONS = frozenset({"image.GetMetadata", "image.getMetadata"})

_image_data: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar("tollgate_image_data",
                                                                                       default=None)


@contextlib.contextmanager
def offline_image_data(images: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, ``image.GetMetadata(ref)`` compiles and answers ``images[ref]`` (``tollgate test`` only).

    Args:
        images: image reference as written in the policy's input → its metadata, in the shape Kyverno's CLI gives
            (``cmd/cli/kubectl-kyverno/apis/v1alpha1/context.go`` ``ImageData`` as JSON).
    """
    token = _image_data.set(images)
    try:
        yield
    finally:
        _image_data.reset(token)


def image_data_offline() -> bool:
    """Whether offline image data is installed (:func:`offline_image_data`): ImageData calls may compile."""
    return _image_data.get() is not None


def _image_metadata(image: str) -> Any:
    """As Kyverno's fake context provider (``pkg/cel/libs/fake_context.go`` ``GetImageData``): the data or an error."""
    images = _image_data.get()
    if images is None:
        raise LibraryError("image.GetMetadata reads an image registry, which Tollgate does not call")
    if image not in images:
        raise LibraryError(f"failed to get image data: image data for {image} not found in the context")
    return images[image]


#: The read-only half of Kyverno's CEL resource library, over the caches ``spec.references`` declares,
#: plus ``resource.ByIndex`` (client-go's ``Indexer.ByIndex`` over a declared index).
RESOURCE_FUNCTIONS = frozenset({"resource.Get", "resource.List", "resource.ByIndex"})


def declarations() -> list[Any]:
    """The hidden ``__tg_var``/``__tg_params`` functions and the resource library, for the environment."""
    return [
        function("__tg_var", "tg_var", T.DYN, [T.STRING], _tg_var, rule=PYTHON_OBJECT),
        function("__tg_params", "tg_params", T.DYN, [], _tg_params, rule=PYTHON_OBJECT),
        function("resource.Get", "tg_resource_get", T.DYN, [T.STRING] * 4, _resource_get, rule=PYTHON_OBJECT),
        function("image.GetMetadata", "tg_image_get_metadata", T.DYN, [T.STRING], _image_metadata,
                 rule=PYTHON_OBJECT),
        function("image.getMetadata", "tg_image_get_metadata_camel", T.DYN, [T.STRING], _image_metadata,
                 rule=PYTHON_OBJECT),
        function("resource.ByIndex", "tg_resource_by_index", T.DYN, [T.STRING] * 4, _resource_by_index,
                 rule=PYTHON_OBJECT),
        overloads("resource.List",
                  cel.Overload("tg_resource_list", T.DYN, [T.STRING] * 3, is_member=False, impl=_resource_list),
                  cel.Overload("tg_resource_list_labels", T.DYN, [T.STRING, T.STRING, T.STRING, T.DYN],
                               is_member=False, impl=_resource_list),
                  rule=PYTHON_OBJECT),
    ]
