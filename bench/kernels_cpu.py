"""CPU time of one kernel call, numpy and compiled kernels against onnxruntime, one thread each.

On a machine shared with other jobs, wall-clock times move by up to 10x between rounds; the CPU time of
a call made on one thread (``time.thread_time``: our kernels with ``DMLSHIM_KERNEL_THREADS=1``,
onnxruntime with ``intra_op_num_threads=1``, which then runs on the calling thread) moves far less. Each
round takes the least of a few calls per side, the sides interleaved; the table gives the median over
rounds of each side's time and of the per-round ratios.

    python bench/kernels_cpu.py [--size 4194304] [--rounds 5] [--calls 5] [--cases NAME ...] [--json]
"""

from __future__ import annotations

import os

os.environ["DMLSHIM_KERNEL_THREADS"] = "1"  # read once, when dmlshim.kernels is imported

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.cases import CASE_BUILDERS, KernelCase
from bench.common import ort_session
from dmlshim.kernels import compiled, execute


def least_cpu(call: Callable[[], Any], calls: int) -> float:
    """The least thread CPU time of ``calls`` calls, in ms."""
    best = float("inf")
    for _ in range(calls):
        start = time.thread_time()
        call()
        best = min(best, time.thread_time() - start)
    return best * 1e3


def _calls(case: KernelCase, sides: Sequence[str]) -> dict[str, Callable[[], Any]]:
    """One call of onnxruntime (one thread) and of each kernel set on the case."""
    single = ort_session(case.model, 1)
    fns: dict[str, Callable[[], Any]] = {"ort1": lambda: single.run(None, case.feeds)}
    for side in sides:
        fns[side] = lambda side=side: execute(case.desc, case.bound, kernels=side)
    return fns


def measure(size: int, rounds: int, calls: int, names: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    sides = ["numpy", "compiled"] if compiled.installed() else ["numpy"]
    for i, build in enumerate(CASE_BUILDERS):
        case = build(size, np.random.default_rng(i))
        if names and not any(n in case.name for n in names):
            continue
        fns = _calls(case, sides)
        for fn in fns.values():
            fn()
        times: dict[str, list[float]] = {name: [] for name in fns}
        order = list(fns)
        for r in range(rounds):
            for name in order[r % len(order) :] + order[: r % len(order)]:
                times[name].append(least_cpu(fns[name], calls))
        row: dict[str, Any] = {"case": case.name, "elements": case.elements}
        for name, values in times.items():
            row[f"{name}_cpu_ms"] = round(statistics.median(values), 3)
        for side in sides:
            ratios = [a / b for a, b in zip(times[side], times["ort1"], strict=True) if b > 0]
            row[f"{side}_ratio_ort1"] = round(statistics.median(ratios), 3)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 22, help="elements per case (default 4M)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="calls per side per round (least is kept)")
    parser.add_argument("--cases", nargs="+", default=[], help="only cases whose name contains one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(args.size, args.rounds, args.calls, args.cases)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| case | ORT 1 thr CPU ms | numpy CPU ms | compiled CPU ms | numpy / ORT | compiled / ORT |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['case']} | {r['ort1_cpu_ms']} | {r['numpy_cpu_ms']} | {r.get('compiled_cpu_ms', '-')} "
            f"| {r['numpy_ratio_ort1']} | {r.get('compiled_ratio_ort1', '-')} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
