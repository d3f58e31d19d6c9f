"""PolicyExceptions on the admission path, in process: CPU per AdmissionReview with and without them.

    python bench/exceptions.py [--seconds 2] [--json out.json]

What is timed: ``AdmissionHandler.validate`` (the server's validating work minus JSON parsing) over the
shipped policies (policies/) on two streams of bench/engine.py: ``distinct`` (128 compliant Pods, mostly
allowed) and ``corpus`` (the Kyverno Pod Security corpus, mostly denied: every denial asks for exceptions).
Variants, interleaved request by request (order rotated); medians over passes of the stream:

  none       the handler as before exceptions existed (no exception source)
  empty      wired as the server wires it, with no exception present: the goal is a ratio of ~1.00
  unrelated  100 ClusterPolicyExceptions naming policies the requests never meet
  matching   100 PolicyExceptions, 1 per namespace, one naming every shipped policy in the requests'
             namespace with a matchCondition that holds (each denial becomes skip)

Ratios against ``none`` are what compare across machines (CONTRIBUTING: speed goals are ratios).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine import corpus_stream, distinct_stream, shipped  # noqa: E402

from webhook.admission.handler import AdmissionHandler  # noqa: E402
from webhook.policy import PolicyIndex  # noqa: E402
from webhook.policy.exceptions import ExceptionCache, ExceptionSet  # noqa: E402


def exception_sets(policy_names: list[str]) -> dict[str, ExceptionSet | None]:
    """The variants' exception sets (None: no exception source at all)."""
    unrelated, matching = ExceptionCache(), ExceptionCache()
    for i in range(100):
        unrelated.on_add({"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterPolicyException",
                          "metadata": {"name": f"other-{i}"},
                          "spec": {"policies": [{"name": f"not-a-shipped-policy-{i}"}], "reason": "bench"}})
        matching.on_add({"apiVersion": "tollgate.dev/v1alpha1", "kind": "PolicyException",
                         "metadata": {"name": "bench", "namespace": "default" if i == 0 else f"ns-{i}"},
                         "spec": {"policies": [{"name": n} for n in policy_names[:64]], "reason": "bench",
                                  "matchConditions": [{"name": "named", "expression": "has(object.metadata.name)"}]}})
    return {"none": None, "empty": ExceptionSet(), "unrelated": unrelated.current, "matching": matching.current}


def measure(stream: list[dict[str, Any]], seconds: float) -> dict[str, float]:
    """Microseconds of process CPU per request, per variant (medians of 9 interleaved passes)."""
    policies, lookups = shipped()
    index = PolicyIndex()
    for p in policies:
        index.upsert(p)
    while index.compile_pending():
        pass
    names = sorted(s.key for s in index.states())
    handlers: dict[str, AdmissionHandler] = {}
    for variant, current in exception_sets(names).items():
        source: Callable[[], ExceptionSet] | None = None if current is None else (lambda c=current: c)
        handlers[variant] = AdmissionHandler(index, lookups, None, exceptions=source)
    for h in handlers.values():  # warm up: plans, fused programs
        for r in stream:
            h.validate(r)  # type: ignore[arg-type]
    samples: dict[str, list[float]] = {v: [] for v in handlers}
    order = list(handlers)
    deadline = time.perf_counter() + seconds
    rounds = 0
    clock = time.process_time
    # Interleaved per request (each request through every variant, the order rotated): the variants share
    # whatever else the machine is doing at that instant. One sample per variant per pass of the stream.
    while rounds < 9 or time.perf_counter() < deadline:
        spent = dict.fromkeys(order, 0.0)
        for r in stream:
            for variant in order:
                started = clock()
                handlers[variant].validate(r)  # type: ignore[arg-type]
                spent[variant] += clock() - started
            order = order[1:] + order[:1]
        for variant, total in spent.items():
            samples[variant].append(total / len(stream) * 1e6)
        rounds += 1
    return {v: statistics.median(s) for v, s in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per stream")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    for name, stream in (("distinct", distinct_stream()), ("corpus", corpus_stream())):
        figures = measure(stream, args.seconds)
        out[name] = {v: {"us_per_request": round(us, 1), "ratio": round(us / figures["none"], 3)}
                     for v, us in figures.items()}
        print(f"{name:9s} " + "  ".join(f"{v} {us:8.1f} us ({us / figures['none']:.2f}x)"
                                        for v, us in figures.items()))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
