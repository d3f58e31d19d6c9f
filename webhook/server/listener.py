"""The TLS listener of ``tollgate serve``: every request head under a deadline, connections under a cap.

aiohttp's server has no header read timeout and no connection limit: a client
that sends part of a request head and stops keeps its connection (and a file
descriptor) until the keep-alive timeout, and a thousand of them exhaust the
process's descriptors, failing reviews and the informers' watches alike. This
listener serves the same app with those limits (:class:`ConnectionLimits`,
from :class:`~webhook.server.settings.Settings`), as Go's ``http.Server``
does for kube-apiserver and controller-runtime webhooks:

* ``header_timeout`` (Go's ``ReadHeaderTimeout``, and its TLS handshake timeout):
  the TLS handshake must complete this long after the connection is accepted,
  the first request head this long after the handshake, and each later head
  this long after its first byte; otherwise the connection is closed
  (``tollgate_http_connections_closed_total{reason="header_timeout"}``).
  A request body is bounded separately, by the review's deadline.
* ``idle_timeout`` (Go's ``IdleTimeout``): a kept-alive connection with no
  request closes after this long. It is longer than the API server's own idle
  timeout for its webhook connections, so the client closes first and never
  sends a review into a connection the server is closing.
* ``max_connections``: connections open past the handshake. At the cap a new
  connection takes the place of the one that has waited longest for a request
  head, else of the one whose request body has been arriving longest
  (``evicted``): a flood of slow or idle clients cannot lock out the API server
  or the kubelet's probes. Only when every connection has its whole request
  and is being answered is the new one closed (``refused``). The cap never exceeds half the
  soft ``RLIMIT_NOFILE``, so the informers' watches keep descriptors too.
* A request head that does not parse is answered 400 as before, counted in
  ``tollgate_http_malformed_requests_total`` and logged as one line at most
  every :data:`MALFORMED_LOG_INTERVAL` seconds, with no traceback.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse
from aiohttp.web_server import Server

from webhook.logs import Throttle
from webhook.metrics import Metrics
from webhook.server.components import CERTS, COMPONENTS
from webhook.server.settings import Settings

log = logging.getLogger("tollgate.http")

#: Seconds between two log lines about malformed request heads (the rest are counted).
MALFORMED_LOG_INTERVAL = 10.0
#: Backlog of the listening socket: connections the kernel queues before they are accepted.
BACKLOG = 1024


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What the listener allows each client connection (see the module docstring).

    Attributes:
        header_timeout: seconds for the TLS handshake, then for the first request head, and for
            each later request head from its first byte.
        idle_timeout: seconds a kept-alive connection may wait for its next request.
        max_connections: connections open past the TLS handshake.
    """

    header_timeout: float
    idle_timeout: float
    max_connections: int

    @classmethod
    def of(cls, settings: Settings, *, open_files: int | None = None) -> ConnectionLimits:
        """The limits ``settings`` asks for, the cap lowered to half of ``open_files``.

        Args:
            settings: ``header_timeout``, ``idle_timeout``, ``max_connections``.
            open_files: the soft limit on open file descriptors; default this process's ``RLIMIT_NOFILE``.
        """
        if open_files is None:
            open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        cap = settings.max_connections
        if open_files != resource.RLIM_INFINITY and cap > open_files // 2:
            log.warning("max_connections lowered to half the open-file limit",
                        extra={"max_connections": cap, "open_files": open_files, "effective": open_files // 2})
            cap = max(open_files // 2, 1)
        return cls(settings.header_timeout, settings.idle_timeout, cap)


class ConnectionGuard:
    """The open connections: which wait for a request head and which have one, each in the order they got there.

    Args:
        limits: the cap.
        metrics: ``tollgate_http_connections`` and ``tollgate_http_connections_closed_total``.
    """

    def __init__(self, limits: ConnectionLimits, metrics: Metrics) -> None:
        self.limits = limits
        self._metrics = metrics
        self._open: set[GuardedRequestHandler] = set()
        # Insertion order is the order they started waiting: the first is the one evicted at the cap.
        self._waiting: dict[GuardedRequestHandler, None] = {}
        # Insertion order is the order their heads arrived; one still reading its body may be evicted next.
        self._busy: dict[GuardedRequestHandler, None] = {}
        self._malformed_log = Throttle(MALFORMED_LOG_INTERVAL)

    @property
    def open(self) -> int:
        """Connections open past the TLS handshake."""
        return len(self._open)

    def opened(self, conn: GuardedRequestHandler) -> bool:
        """Admit a new connection (it waits for its first head); False when it must be closed (at the cap)."""
        if len(self._open) >= self.limits.max_connections:
            victim = next(iter(self._waiting), None) or next((c for c in self._busy if c.reading_body()), None)
            if victim is None:
                self._metrics.connections_closed.labels("refused").inc()
                return False
            self.cut(victim, "evicted")
        self._open.add(conn)
        self._waiting[conn] = None
        self._metrics.connections.set(len(self._open))
        return True

    def busy(self, conn: GuardedRequestHandler) -> None:
        """``conn`` has a complete request head: evicted at the cap only while its body is still arriving."""
        if conn in self._open:
            self._waiting.pop(conn, None)
            self._busy.pop(conn, None)
            self._busy[conn] = None

    def waiting(self, conn: GuardedRequestHandler) -> None:
        """``conn`` answered its request and waits for the next head (kept alive)."""
        if conn in self._open:
            self._busy.pop(conn, None)
            self._waiting.pop(conn, None)
            self._waiting[conn] = None

    def cut(self, conn: GuardedRequestHandler, reason: str) -> None:
        """Close ``conn`` for a limit (``header_timeout``, ``evicted``), counted under ``reason``."""
        self._metrics.connections_closed.labels(reason).inc()
        self.closed(conn)
        conn.force_close()

    def closed(self, conn: GuardedRequestHandler) -> None:
        """``conn`` is gone (idempotent)."""
        self._open.discard(conn)
        self._waiting.pop(conn, None)
        self._busy.pop(conn, None)
        self._metrics.connections.set(len(self._open))

    def malformed(self, peer: str | None, exc: HttpProcessingError) -> None:
        """Count a request head that did not parse; log it on one line, throttled."""
        self._metrics.malformed_requests.inc()
        dropped = self._malformed_log.admit()
        if dropped is not None:
            log.warning("malformed HTTP request head, answered 400", extra={
                "peer": peer, "reason": " ".join(str(exc.message).split())[:200],
                "not_logged_since_last": dropped})


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection handler with the head deadline and the guard's bookkeeping.

    Args:
        manager: the runner's ``web.Server`` (routes, request factory, connection registry).
        guard: the listener's :class:`ConnectionGuard`.
        loop: the event loop.
        kwargs: aiohttp ``RequestHandler`` options (``keepalive_timeout``, ``access_log``...).
    """

    def __init__(self, manager: Server, *, guard: ConnectionGuard, loop: asyncio.AbstractEventLoop,
                 **kwargs: Any) -> None:
        super().__init__(manager, loop=loop, **kwargs)
        self._guard = guard
        self._head_timer: asyncio.TimerHandle | None = None
        # When the head being awaited must have arrived (loop time); None while no head's clock runs. The
        # timer is not cancelled when a head arrives in time: it finds no deadline (or a later one, and
        # waits for that), so a kept-alive connection arms one timer per header_timeout, not per request.
        self._head_deadline: float | None = None
        self._awaiting_head = True
        self._body: Any = None  # the request body's StreamReader, once a head has arrived
        self._quiet = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Admit the connection past its TLS handshake (or close it at the cap); the first head's clock runs."""
        super().connection_made(transport)
        if not self._guard.opened(self):
            self.force_close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Start the head's clock on its first byte; stop it once aiohttp has parsed the head."""
        if data and self._awaiting_head and self._head_deadline is None:
            self._arm()
        heads = self._request_count
        super().data_received(data)
        if self._request_count != heads:
            self._awaiting_head = False
            self._body = self._messages[-1][1] if self._messages else None
            self._head_deadline = None  # its timer, if pending, finds no deadline when it fires
            self._guard.busy(self)

    def reading_body(self) -> bool:
        """Whether the current request's body is still arriving."""
        return self._body is not None and not self._body.is_eof()

    def log_access(self, request: BaseRequest, response: StreamResponse, time: float | None) -> None:
        """Called once a response is written: the connection now waits for its next request head."""
        super().log_access(request, response, time)
        self._awaiting_head = True
        self._guard.waiting(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        """Forget the connection."""
        self._disarm()
        self._guard.closed(self)
        super().connection_lost(exc)

    def handle_error(self, request: BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> StreamResponse:
        """Answer as aiohttp does; a head that did not parse is counted and logged by the guard, no traceback."""
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        self._guard.malformed(request.remote, exc)
        self._quiet = True
        try:
            return super().handle_error(request, status, exc, message)
        finally:
            self._quiet = False

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """Log as aiohttp does, except what :meth:`handle_error` already reported."""
        if not self._quiet:
            super().log_exception(*args, **kw)

    def _arm(self) -> None:
        """Start the head's clock: a timer at its deadline unless one is pending (it fires no later)."""
        deadline = self._head_deadline = self._loop.time() + self._guard.limits.header_timeout
        if self._head_timer is None:
            self._head_timer = self._loop.call_at(deadline, self._head_timed_out)

    def _disarm(self) -> None:
        self._head_deadline = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        deadline = self._head_deadline
        if deadline is None:  # the head it was armed for arrived in time, and no later one has started
            return
        if deadline - self._loop.time() > 0.001:  # armed for an earlier head: this head's deadline is later
            # (a loop may run a timer up to its clock resolution early: within 1 ms is the deadline)
            self._head_timer = self._loop.call_at(deadline, self._head_timed_out)
            return
        self._head_deadline = None
        if self._awaiting_head and not self._request_in_progress and not self._messages and self.transport is not None:
            self._guard.cut(self, "header_timeout")


class GuardedSite(web.BaseSite):
    """A TCP site serving through :class:`GuardedRequestHandler` (TLS handshake bounded by the head deadline).

    Args:
        runner: a set-up ``AppRunner``.
        host, port: where to listen (port 0: any free port; see :attr:`port`).
        ssl_context: the TLS context.
        guard: the connection guard.
        handler_options: aiohttp ``RequestHandler`` options for every connection.
    """

    __slots__ = ("_bound_port", "_guard", "_handler_options", "_host", "_port")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, ssl_context: Any, guard: ConnectionGuard,
                 handler_options: dict[str, Any]) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=BACKLOG)
        self._host = host
        self._port = port
        self._guard = guard
        self._handler_options = handler_options
        self._bound_port = port

    @property
    def name(self) -> str:
        """``https://host:port``."""
        return f"https://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the chosen one when asked for port 0)."""
        return self._bound_port

    async def start(self) -> None:
        """Listen."""
        await super().start()
        loop = asyncio.get_running_loop()
        manager = self._runner.server
        if manager is None:
            raise RuntimeError("GuardedSite: the runner is not set up")

        def connection() -> GuardedRequestHandler:
            return GuardedRequestHandler(manager, guard=self._guard, loop=loop, **self._handler_options)

        server = await loop.create_server(connection, self._host, self._port, ssl=self._ssl_context,
                                          backlog=self._backlog, reuse_address=True,
                                          ssl_handshake_timeout=self._guard.limits.header_timeout)
        self._server = server
        if server.sockets:
            self._bound_port = server.sockets[0].getsockname()[1]


@dataclass(frozen=True, slots=True)
class Listener:
    """A started listener: ``runner.cleanup()`` (or ``graceful_stop``) stops it.

    Attributes:
        runner: the app's runner.
        site: the listening site (``site.port`` is the bound port).
        guard: the connection bookkeeping (tests read ``guard.open``).
    """

    runner: web.AppRunner
    site: GuardedSite
    guard: ConnectionGuard


async def start_listener(app: web.Application, settings: Settings) -> Listener:
    """Serve ``app`` over TLS on ``settings.host:settings.port`` with the connection limits of ``settings``.

    Args:
        app: from :func:`webhook.server.app.create_app`, with a certificate (``app[CERTS]``).
        settings: the listen address, ``shutdown_timeout`` and the limits.

    Raises:
        OSError: the address cannot be bound (in use, not available, not permitted).
    """
    runner = web.AppRunner(app, shutdown_timeout=settings.shutdown_timeout, access_log=None)
    try:
        await runner.setup()  # the app's start-up: informers synced, policies compiled
    except BaseException:  # a failure or a cancellation (a signal during start-up): stop what already started
        await runner.cleanup()
        raise
    limits = ConnectionLimits.of(settings)
    guard = ConnectionGuard(limits, app[COMPONENTS].metrics)
    site = GuardedSite(runner, settings.host, settings.port, ssl_context=app[CERTS].context, guard=guard,
                       handler_options={"keepalive_timeout": limits.idle_timeout, "access_log": None})
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return Listener(runner, site, guard)
