"""client-go's SharedIndexInformer pattern on asyncio: Reflector → Indexer → handlers.

Pure of transports: everything here talks to the API server through the
:class:`~webhook.informer.types.ListerWatcher` protocol only.
"""

from webhook.informer.backoff import Backoff
from webhook.informer.handlers import (
    AddNotification,
    DeleteNotification,
    HandlerRegistration,
    Notification,
    ResourceEventHandler,
    ResourceEventHandlerFuncs,
    SyncCalls,
    SyncHandlerError,
    UpdateNotification,
)
from webhook.informer.informer import InformerKey, SharedInformer, SharedInformerFactory
from webhook.informer.reflector import Reflector, ReflectorOptions
from webhook.informer.store import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    Indexer,
    ListBuffer,
    drop_managed_fields,
    keep_fields,
    meta_namespace_key,
)
from webhook.informer.types import ListerWatcher, ListOptions, ListResult, WatchEvent

__all__ = [
    "NAMESPACE_INDEX",
    "AddNotification",
    "Backoff",
    "DeleteNotification",
    "DeletedFinalStateUnknown",
    "HandlerRegistration",
    "Indexer",
    "InformerKey",
    "ListBuffer",
    "ListOptions",
    "ListResult",
    "ListerWatcher",
    "Notification",
    "Reflector",
    "ReflectorOptions",
    "ResourceEventHandler",
    "ResourceEventHandlerFuncs",
    "SharedInformer",
    "SharedInformerFactory",
    "SyncCalls",
    "SyncHandlerError",
    "UpdateNotification",
    "WatchEvent",
    "drop_managed_fields",
    "keep_fields",
    "meta_namespace_key",
]
