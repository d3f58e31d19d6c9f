"""Policy notifications compiled off the event loop, filed on it.

Compiling a policy (CEL compilation, cost estimation, the projection of what it reads) takes 10–40 ms
of CPU. :class:`~webhook.policy.events.PolicyEventHandler` does it where it is called; registered on the
loop, every add or spec change would hold the loop, and every request waiting on it, that long.
:class:`CompileOffLoop` wraps it as an async handler: the compile runs in a thread (pure Python for the
most part, so the loop gets the GIL back every switch interval, 5 ms), then the index is updated on
the loop, where the request path reads it. The informer awaits each call before the next
notification, so a policy's notifications are still filed in order. The initial list is compiled on the
loop: nothing is served before it is filed.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from webhook.formats.events import ImportEventHandler
from webhook.formats.imported import Imported, SourceRef
from webhook.policy.compiler import compile_policy
from webhook.policy.events import PolicyEventHandler, Tombstone

__all__ = ["CompileOffLoop", "ImportOffLoop"]


class CompileOffLoop:
    """An async ``ResourceEventHandler`` around a :class:`PolicyEventHandler` that compiles in a thread.

    Args:
        handler: files the compiled policy, reports its condition and forgets deleted ones (on the loop).
        serving: whether reviews are answered yet (None: the informer's ``is_in_initial_list`` alone says
            it); an initial list's add is compiled on the loop only before (a kind discovered later
            arrives as an initial list while reviews are answered).
    """

    def __init__(self, handler: PolicyEventHandler, *, serving: Callable[[], bool] | None = None) -> None:
        self.handler = handler
        self.serving = serving

    async def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        """Compile ``obj`` in a thread, then file it; the initial list's adds are compiled on the loop.

        Before the first sync no review is answered (``/readyz`` waits for the policies), so nothing waits on
        the loop, and compiling there is what starts fastest: a thread per policy makes every compile wait
        for the GIL while the loop answers probes (2,000 policies ready after 0.97 s inline, 3.8 s in threads).
        """
        if is_in_initial_list and (self.serving is None or not self.serving()):
            self.handler.on_add(obj, True)
            return
        compiled = await asyncio.to_thread(compile_policy, obj)
        self.handler.on_add(obj, is_in_initial_list, compiled)

    async def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Compile ``new`` in a thread when its spec changed, then file it (a status-only update compiles nothing)."""
        if not self.handler.needs_compile(old, new):
            self.handler.report_known(new)
            return
        self.handler.on_update(old, new, await asyncio.to_thread(compile_policy, new))

    async def on_delete(self, obj: dict[str, Any] | Tombstone) -> None:
        """Forget the policy (nothing to compile)."""
        self.handler.on_delete(obj)


class ImportOffLoop:
    """An async ``ResourceEventHandler`` for the imported kinds' informers around an :class:`ImportEventHandler`.

    Each notification, under one lock (the informers of every imported kind deliver concurrently; a
    binding's conversion reads its policy's): the catalog is updated on the loop, the affected sources
    are converted in a thread, and the resulting policy notifications are passed on in order, each
    handler's awaitable awaited (a :class:`CompileOffLoop` compiles in its thread meanwhile). Before
    ``serving`` (the initial lists: nothing is answered yet) the conversion runs on the loop, which
    starts fastest (see :meth:`CompileOffLoop.on_add`).

    Args:
        imports: holds the sources and what is served; its handlers receive the notifications.
        serving: whether reviews are answered yet (None: never, i.e. only ``is_in_initial_list`` decides).
    """

    def __init__(self, imports: ImportEventHandler, *, serving: Callable[[], bool] | None = None) -> None:
        self.imports = imports
        self.serving = serving
        self._lock = asyncio.Lock()

    async def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        """A source object appeared: convert what depends on it (in a thread), pass the changes on."""
        async with self._lock:
            await self._refresh(self.imports.changed(obj), initial=is_in_initial_list)

    async def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """A source object changed: convert what depends on it (in a thread), pass the changes on."""
        async with self._lock:
            await self._refresh(self.imports.changed(new), initial=False)

    async def on_delete(self, obj: dict[str, Any] | Tombstone) -> None:
        """A source object went away: withdraw or convert again (in a thread), pass the changes on."""
        async with self._lock:
            await self._refresh(self.imports.removed(obj), initial=False)

    async def _refresh(self, sources: list[SourceRef], *, initial: bool) -> None:
        if not sources:
            return
        converted: list[tuple[SourceRef, Imported | None]]
        if initial and (self.serving is None or not self.serving()):
            converted = self.imports.convert(sources)
        else:
            converted = await asyncio.to_thread(self.imports.convert, sources)
        for n in self.imports.apply(converted, initial=initial):
            for h in self.imports.handlers:
                result = getattr(h, n.method)(*n.args)
                if inspect.isawaitable(result):
                    await result
