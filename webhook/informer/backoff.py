"""Jittered exponential backoff, as client-go's Reflector uses it (pure).

``wait.Backoff{Duration: 0.8s, Factor: 2, Jitter: 1.0, Cap: 30s}`` with
``DelayWithReset(clock, 2m)``: each delay is uniform in ``[d, 2d)``, ``d``
doubles up to the cap, and resets when no failure happened for ``reset_after``
seconds (docs/design/informer.md §A1). Clock and RNG are injectable for tests.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable


class Backoff:
    """Delays in seconds: 0.8, 1.6, 3.2, ... capped at 30, each jittered by up to +100%."""

    def __init__(self, *, initial: float = 0.8, factor: float = 2.0, cap: float = 30.0, jitter: float = 1.0,
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

    def next_delay(self) -> float:
        """The delay before the next attempt, in seconds; advances the schedule."""
        now = self._clock()
        if self._last is not None and now - self._last >= self.reset_after:
            self._current = self.initial
        self._last = now
        base = self._current
        self._current = min(self._current * self.factor, self.cap)
        return base + base * self.jitter * self._rng()
