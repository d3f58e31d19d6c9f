"""Size-routed evaluation: small reviews inline, large ones to the isolated workers."""

from __future__ import annotations

from typing import Any

from webhook.admission.isolation.evaluators import SizeRoutedEvaluator


class Recorder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, endpoint: str, request: Any, timeout: float, *, size: int = 0) -> Any:
        self.calls.append((endpoint, size))
        return self.name


async def test_bodies_over_the_threshold_are_isolated_and_the_rest_stay_inline() -> None:
    inline, isolated = Recorder("inline"), Recorder("isolated")
    route = SizeRoutedEvaluator(inline, isolated, threshold_bytes=32 * 1024)
    assert await route("validate", {}, 5.0, size=6_000) == "inline"
    assert await route("mutate", {}, 5.0, size=32 * 1024) == "inline"  # at the threshold: inline
    assert await route("validate", {}, 5.0, size=32 * 1024 + 1) == "isolated"
    assert inline.calls == [("validate", 6_000), ("mutate", 32 * 1024)]
    assert isolated.calls == [("validate", 32 * 1024 + 1)]
