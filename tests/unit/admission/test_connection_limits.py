"""The listener's limits from Settings, and the throttle that keeps a repeated event to one log line."""

from __future__ import annotations

from webhook.logs import Throttle
from webhook.server.listener import ConnectionLimits
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
