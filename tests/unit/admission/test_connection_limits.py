"""The listener's limits from Settings, a connection's head deadline on a hand-driven clock, and the throttle
that keeps a repeated event to one log line."""

from __future__ import annotations

import collections
from collections.abc import Callable
from types import SimpleNamespace

from webhook.logs import Throttle
from webhook.server.listener import ConnectionLimits, GuardedRequestHandler
from webhook.server.settings import Settings


def test_the_connection_cap_keeps_half_the_open_file_limit_for_everything_else() -> None:
    settings = Settings(max_connections=512, header_timeout=3.0, idle_timeout=60.0)
    assert ConnectionLimits.of(settings, open_files=4096) == ConnectionLimits(3.0, 60.0, 512)
    assert ConnectionLimits.of(settings, open_files=256).max_connections == 128


def test_a_throttled_event_is_logged_once_per_interval_with_the_count_it_left_out() -> None:
    now = [100.0]
    throttle = Throttle(10.0, clock=lambda: now[0])
    assert throttle.admit() == 0
    assert [throttle.admit() for _ in range(3)] == [None, None, None]
    now[0] = 109.9
    assert throttle.admit() is None
    now[0] = 110.0
    assert throttle.admit() == 4
    assert throttle.admit() is None


class _Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class _Loop:
    """The clock and timers a connection's head deadline uses, advanced by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[_Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        self.timers.append(_Timer(when, callback))
        return self.timers[-1]

    def fire_until(self, now: float) -> None:
        self.now = now
        while due := [t for t in self.timers if not t.cancelled and t.when <= now]:
            self.timers.remove(due[0])
            due[0].callback()


def _connection(loop: _Loop, cut: list[str]) -> GuardedRequestHandler:
    # Only the head-deadline bookkeeping of the connection handler; no transport, parser or app.
    conn = GuardedRequestHandler.__new__(GuardedRequestHandler)
    guard = SimpleNamespace(limits=ConnectionLimits(10.0, 60.0, 8), cut=lambda _conn, reason: cut.append(reason))
    for name, value in {"_loop": loop, "_guard": guard, "_head_timer": None, "_head_deadline": None,
                        "_awaiting_head": True, "transport": object(), "_request_in_progress": False,
                        "_messages": collections.deque()}.items():
        setattr(conn, name, value)
    return conn


def _head_arrived(conn: GuardedRequestHandler) -> None:  # what data_received does once aiohttp parsed a head
    conn._awaiting_head = False
    conn._head_deadline = None


def test_a_later_head_is_cut_at_its_own_deadline_by_the_timer_armed_for_an_earlier_one() -> None:
    loop, cut = _Loop(), []
    conn = _connection(loop, cut)
    conn._arm()  # connection made: the first head is due at 10
    loop.fire_until(2.0)
    _head_arrived(conn)
    loop.fire_until(4.0)
    conn._awaiting_head = True  # answered; the next head's first byte arrives at 4: due at 14
    conn._arm()
    assert len([t for t in loop.timers if not t.cancelled]) == 1, "one timer per connection, not one per head"
    loop.fire_until(13.9)
    assert cut == []
    loop.fire_until(14.0)
    assert cut == ["header_timeout"]


def test_a_head_that_arrived_in_time_leaves_the_pending_timer_nothing_to_cut() -> None:
    loop, cut = _Loop(), []
    conn = _connection(loop, cut)
    conn._arm()
    _head_arrived(conn)
    loop.fire_until(100.0)
    assert cut == [] and conn._head_timer is None
