"""Timing and memory measurement for the benchmark.

Other processes share the machine, so competitors are timed interleaved (round-robin, order rotated
each round) and compared through the median of per-round ratios rather than one-off runs.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """Per-call times of several competitors measured in the same rounds.

    Attributes:
        medians: median seconds per call, by competitor.
        rounds: per-round seconds per call, by competitor (same length for all).
    """

    medians: dict[str, float]
    rounds: dict[str, list[float]]

    def ratio(self, ours: str, theirs: str) -> float:
        """The median over rounds of ``ours / theirs`` (robust to a slow round hitting both)."""
        pairs = zip(self.rounds[ours], self.rounds[theirs], strict=True)
        return statistics.median(a / b for a, b in pairs if b > 0)


def calibrate(fn: Callable[[], Any], target: float) -> tuple[int, float]:
    """How many calls of ``fn`` make one timed sample of about ``target`` seconds; also one call's time."""
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    if once <= 0:
        return 1000, 0.0
    return max(1, min(1000, int(target / once))), once


def interleaved(
    fns: Mapping[str, Callable[[], Any]],
    rounds: int,
    sample_time: float = 0.002,
    settle: float = 0.005,
) -> Timing:
    """Time each function ``rounds`` times, round-robin, each sample long enough to be measurable.

    Every function is called once first (warm-up: caches, lazy imports, onnxruntime's first-run setup).
    Between samples of different functions the benchmark sleeps ``settle`` seconds: onnxruntime's
    intra-op threads keep spinning on the cores for a while after a run, which would otherwise be
    charged to whichever competitor runs next.
    """
    loops: dict[str, int] = {}
    for name, fn in fns.items():
        fn()
        loops[name], _ = calibrate(fn, sample_time)
    names = list(fns)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                fn, count = fns[name], loops[name]
                time.sleep(settle)
                start = time.perf_counter()
                for _ in range(count):
                    fn()
                per_round[name].append((time.perf_counter() - start) / count)
    finally:
        if gc_was_enabled:
            gc.enable()
    return Timing({n: statistics.median(v) for n, v in per_round.items()}, per_round)


def time_once(fn: Callable[[], Any], repeats: int = 1) -> float:
    """The best of ``repeats`` single calls (for slow competitors timed only once or twice)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def peak_allocation(fn: Callable[[], Any]) -> int:
    """The peak bytes allocated (and traced) during one call of ``fn``, its result included.

    numpy reports its data buffers to tracemalloc, so this covers every array a kernel creates.
    """
    gc.collect()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        if started:
            tracemalloc.stop()
    return max(0, peak - base)


def latencies(
    fns: Mapping[str, Callable[[], Any]], calls: int, budget: float = 2.0, settle: float = 0.0005
) -> dict[str, list[float]]:
    """Single-call latencies of each function, calls alternating between the functions.

    Unlike ``interleaved`` (which averages a batch of calls per sample), every sample here is one call,
    so the spread (p90 / p50) shows the tail a user of one call sees. Stops after ``calls`` rounds or
    once ``budget`` seconds have gone by (at least 20 rounds).
    """
    for fn in fns.values():
        fn()
    out: dict[str, list[float]] = {n: [] for n in fns}
    names = list(fns)
    deadline = time.perf_counter() + budget
    for r in range(calls):
        if r >= 20 and time.perf_counter() > deadline:
            break
        k = r % len(names)
        for name in names[k:] + names[:k]:
            time.sleep(settle)
            start = time.perf_counter()
            fns[name]()
            out[name].append(time.perf_counter() - start)
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear interpolation."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)
