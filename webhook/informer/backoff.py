"""Jittered exponential backoff for the Reflector's retries (pure).

client-go's Reflector uses ``wait.Backoff{Duration: 0.8s, Factor: 2, Jitter: 1.0, Cap: 30s}`` with
``DelayWithReset(clock, 2m)``: delays uniform in ``[d, 2d)``, ``d`` doubling up to 30 s (so up to
60 s between attempts), reset after 2 minutes without a failure. After an API server outage that is
up to a minute of stale caches once the server is back (issue 20 measured 33-48 s after a 36 s
outage). Tollgate keeps the shape and bounds the *jittered* delay by ``cap`` (default 8 s: delays
at the cap are uniform in ``[4, 8)`` s), and the Reflector calls :meth:`Backoff.reset` after every
success (a LIST, a watch that delivered events) as well, so a failure after a healthy period starts
again at 0.8 s (docs/design/informer.md §A1). Clock and RNG are injectable for tests.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable


class Backoff:
    """Delays in seconds: 0.8, 1.6, 3.2, ... each jittered by up to +100 %, never above ``cap``.

    Args:
        initial: the first base delay, seconds.
        factor: growth of the base delay per failure.
        cap: the longest delay returned, jitter included, seconds.
        jitter: each delay is ``base * (1 + jitter * rng())``.
        reset_after: seconds without any delay asked after which the schedule starts again.
        clock: monotonic seconds.
        rng: uniform in ``[0, 1)``.
    """

    def __init__(self, *, initial: float = 0.8, factor: float = 2.0, cap: float = 8.0, jitter: float = 1.0,
                 reset_after: float = 120.0, clock: Callable[[], float] = time.monotonic,
                 rng: Callable[[], float] = random.random) -> None:
        self.initial = initial
        self.factor = factor
        self.cap = cap
        self.jitter = jitter
        self.reset_after = reset_after
        self._clock = clock
        self._rng = rng
        self._current = initial
        self._last: float | None = None

    def reset(self) -> None:
        """Start the schedule again (after a success)."""
        self._current = self.initial
        self._last = None

    def next_delay(self) -> float:
        """The delay before the next attempt, in seconds; advances the schedule."""
        now = self._clock()
        if self._last is not None and now - self._last >= self.reset_after:
            self._current = self.initial
        self._last = now
        # The base stops growing where its jittered value would pass the cap, so delays at the cap
        # keep their spread ([cap / (1 + jitter), cap)) instead of all being the cap.
        base = min(self._current, self.cap / (1 + self.jitter))
        self._current = min(self._current * self.factor, self.cap)
        return base + base * self.jitter * self._rng()
