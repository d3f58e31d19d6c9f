"""Decoded objects of compact Indexers, one per stored version (no I/O).

A compact Indexer (:mod:`webhook.informer.store`) keeps each object as its JSON and parses it into a new dict
on every read. Objects a policy reads through ``resource.Get``/``List``/``ByIndex`` cross cel-expr-python's
Python-function boundary, and cel-expr-python 0.1.3 (the pinned engine; no later release exists) keeps one
reference to every value a Python function returns and never gives it back (``PyCelFunctionAdapter::Invoke``
in ``cel_expr_python/py_cel_function.cc``; the project's current source releases it, the released wheel does
not). A new dict per read is then a new dict leaked per request: measured on ``serve --local policies/`` at
c=1, ~2 ConfigMap dicts a request (the Kyverno ``restrict-image-registries`` example), 63,000 after 30 s, and
the collector's full passes over them holding the event loop 45-60 ms every ~10 s (p99 10.7 ms, issue 34).

:class:`DecodedMemo` hands out **the same dict for the same stored version**, so what the binding keeps is one
more reference to an object that is cached anyway, not a new object per request. A new version of the object
is a new stored ``bytes`` object, hence a new entry; the memo holds at most ``size`` entries (least recently
read first out) and keeps each entry's stored form, so an identity key is never reused while its entry lives.
The dicts it returns are shared: callers must not change them (the policy engine only reads). It is read from
the event loop and from ``/explain``'s worker thread: its table is changed under a lock (the parse is not).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from webhook.informer.store import Stored, decode
from webhook.informer.types import KubeObject

__all__ = ["DEFAULT_SIZE", "DecodedMemo"]

#: Objects kept decoded (each the size of its object): enough for every object a cluster's policies read on
#: the request path in practice; the least recently read is dropped first.
DEFAULT_SIZE = 4096


class DecodedMemo:
    """The decoded object of each stored form, kept for the stored form's life (bounded, LRU).

    Args:
        size: the most entries kept (above 0).

    Raises:
        ValueError: ``size`` is not above 0.
    """

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if size <= 0:
            raise ValueError(f"size must be above 0, not {size}")
        self.size = size
        self._entries: OrderedDict[int, tuple[Stored, KubeObject]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def decode(self, stored: Stored) -> KubeObject:
        """The object of ``stored``: a dict as is; ``bytes`` parsed once and then the same dict again."""
        if type(stored) is not bytes:
            return decode(stored)
        entries = self._entries
        with self._lock:
            entry = entries.get(id(stored))
            if entry is not None and entry[0] is stored:
                entries.move_to_end(id(stored))
                self.hits += 1
                return entry[1]
            self.misses += 1
        obj = decode(stored)
        with self._lock:
            entries[id(stored)] = (stored, obj)
            while len(entries) > self.size:
                entries.popitem(last=False)
        return obj
