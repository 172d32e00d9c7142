"""Steady-run speed of dmlshim against onnxruntime CPU in one process, runs interleaved (issue 22).

Separate processes measure memory and build honestly, but on a shared machine the two sides' steady runs
then see different loads (onnxruntime's own p50 moved 2x between repeats of bench/realistic.py). Here both
sessions live in one process and every round runs each once, in a random order, so both see the same
load; the medians of wall and process CPU time (onnxruntime's threads included) are compared.

Usage::

    python bench/interleaved.py MODEL.onnx FEEDS.npz [--rounds 60] [--warmup 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from typing import Any


def interleave(
    model: str, feeds_path: str, rounds: int = 60, warmup: int = 5, seed: int = 0
) -> dict[str, Any]:
    """Medians (ms) of each side's wall and CPU time per run, their ratios, and dmlshim's run path."""
    import numpy as np
    import onnxruntime as ort

    import dmlshim

    with np.load(feeds_path) as data:
        feeds = {k: data[k] for k in data.files}
    sides: dict[str, Any] = {
        "ort": ort.InferenceSession(model, providers=["CPUExecutionProvider"]),
        "dmlshim": dmlshim.InferenceSession(model),
    }
    for _ in range(warmup):
        for session in sides.values():
            session.run(None, feeds)
    wall: dict[str, list[float]] = {k: [] for k in sides}
    cpu: dict[str, list[float]] = {k: [] for k in sides}
    order = list(sides)
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            w, c = time.perf_counter(), time.process_time()
            sides[name].run(None, feeds)
            cpu[name].append(time.process_time() - c)
            wall[name].append(time.perf_counter() - w)
    med = {
        f"{k}_{what}_ms": statistics.median(v[k]) * 1e3
        for k in sides
        for what, v in (("wall", wall), ("cpu", cpu))
    }
    return {
        **med,
        "run_p50_wall": med["dmlshim_wall_ms"] / med["ort_wall_ms"],
        "run_p50_cpu": med["dmlshim_cpu_ms"] / med["ort_cpu_ms"],
        "rounds": rounds,
        "path": sides["dmlshim"].last_run_record.path,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    parser.add_argument("feeds")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = interleave(args.model, args.feeds, args.rounds, args.warmup)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"onnxruntime {result['ort_wall_ms']:.1f} ms wall / {result['ort_cpu_ms']:.1f} ms CPU, "
            f"dmlshim {result['dmlshim_wall_ms']:.1f} ms / {result['dmlshim_cpu_ms']:.1f} ms "
            f"({result['path']}): ratio {result['run_p50_wall']:.2f} wall, {result['run_p50_cpu']:.2f} CPU, "
            f"{result['rounds']} interleaved rounds"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
