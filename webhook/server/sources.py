"""Where the informers list and watch: YAML files with ``--local``, else the API server.

Two factories for :func:`webhook.server.app.build_components`: one for the
fixed informers (Namespaces, params ConfigMaps, both policy kinds, and the
imported kinds: :func:`import_informer_key`), one for the dynamic informers of
``spec.references`` and background audit (any GVR).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.files.local_source import LocalDirectory, LocalDirectoryListerWatcher
from webhook.formats.kinds import IMPORT_EXCEPTION_KINDS, IMPORT_KINDS, ImportKind
from webhook.informer import InformerKey, ListerWatcher
from webhook.informer.gvr import GVR
from webhook.policy.resources import (
    CLUSTER_POLICIES,
    CLUSTER_POLICY_EXCEPTIONS,
    CONFIGMAPS,
    NAMESPACED_POLICIES,
    NAMESPACES,
    POLICY_EXCEPTIONS,
)
from webhook.server.settings import Settings

_BY_INFORMER_RESOURCE = {r.informer_resource: r for r in (NAMESPACES, CONFIGMAPS, CLUSTER_POLICIES,
                                                            NAMESPACED_POLICIES, POLICY_EXCEPTIONS,
                                                            CLUSTER_POLICY_EXCEPTIONS)}


def import_informer_key(kind: ImportKind, version: str) -> InformerKey:
    """The informer of an imported kind in one version: ``resource.version.group`` (kubectl's fully qualified form)."""
    return InformerKey(f"{kind.plural}.{version}.{kind.group}")


_IMPORTED = {import_informer_key(k, v).resource: (k, v) for k in IMPORT_KINDS + IMPORT_EXCEPTION_KINDS
             for v in k.versions}


def _directory(settings: Settings, local_sources: list[LocalDirectoryListerWatcher]) -> LocalDirectory:
    """The one reader of ``--local``'s directory, shared by every source made for it (a change is parsed once)."""
    if local_sources:
        return local_sources[0].directory
    assert settings.local_dir is not None
    return LocalDirectory(settings.local_dir, settle_seconds=settings.local_poll_interval)


def lister_watcher_factory(settings: Settings, api_client: Any,
                           local_sources: list[LocalDirectoryListerWatcher]) -> Callable[[InformerKey], ListerWatcher]:
    """Where the fixed informers list and watch.

    Args:
        settings: ``local_dir`` and ``local_poll_interval`` choose the files.
        api_client: a kubernetes_asyncio ApiClient, used when ``settings.local_dir`` is None.
        local_sources: each file ListerWatcher made is appended here (their errors reach ``/readyz``); all
            share the first one's :class:`LocalDirectory`.

    Raises:
        ValueError: neither a ``local_dir`` nor an ``api_client``.
    """
    if settings.local_dir is not None:
        root, poll = settings.local_dir, settings.local_poll_interval

        def local(key: InformerKey) -> ListerWatcher:
            imported = _IMPORTED.get(key.resource)
            if imported is not None:
                # Every version of the kind: the importer reads each and names a version it does not.
                source = LocalDirectoryListerWatcher(root, kinds={imported[0].kind}, poll_interval=poll,
                                                     default_namespace="default" if imported[0].namespaced else None,
                                                     directory=_directory(settings, local_sources))
                local_sources.append(source)
                return source
            r = _BY_INFORMER_RESOURCE[key.resource]
            source = LocalDirectoryListerWatcher(root, kinds={r.kind}, poll_interval=poll,
                                                 default_namespace="default" if r.namespaced else None,
                                                 directory=_directory(settings, local_sources))
            local_sources.append(source)
            return source

        return local
    if api_client is None:
        raise ValueError("create_app: a cluster needs an api_client (or settings.local_dir)")
    from webhook.kube.listwatch import KubeListerWatcher

    def kube(key: InformerKey) -> ListerWatcher:
        imported = _IMPORTED.get(key.resource)
        if imported is not None:
            kind, version = imported
            return KubeListerWatcher(api_client, group=kind.group, version=version, plural=kind.plural)
        r = _BY_INFORMER_RESOURCE[key.resource]
        return KubeListerWatcher(api_client, group=r.group, version=r.version, plural=r.plural,
                                 namespace=key.namespace)

    return kube


def gvr_lister_watcher_factory(settings: Settings, api_client: Any, local_sources: list[LocalDirectoryListerWatcher]
                               ) -> Callable[[GVR], ListerWatcher] | None:
    """Where dynamic informers (``spec.references``, background audit) list and watch a GVR; None: nowhere."""
    if settings.local_dir is not None:
        root, poll = settings.local_dir, settings.local_poll_interval

        def local(gvr: GVR) -> ListerWatcher:
            # The directory is the cluster: every document of the resource is in its cache.
            source = LocalDirectoryListerWatcher(root, api_resource=(gvr.api_version, gvr.resource),
                                                 poll_interval=poll, directory=_directory(settings, local_sources))
            local_sources.append(source)
            return source

        return local
    if api_client is None:
        return None
    from webhook.kube.listwatch import KubeListerWatcher

    def kube(gvr: GVR) -> ListerWatcher:
        return KubeListerWatcher(api_client, group=gvr.group, version=gvr.version, plural=gvr.resource)

    return kube
