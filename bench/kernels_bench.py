"""Kernel section: each one-node case of cases.py through our kernels (numpy, and compiled when numba is
installed), onnxruntime (default options and one thread), onnx.reference and the custom-op bridge.

The numpy and compiled kernels and onnxruntime are timed in the same interleaved rounds, so their ratios
share every round's load. ``ours_ms`` / ``ratio_ort`` are the numpy kernels (the reference); the
``compiled_*`` keys are the compiled ones (None when numba is missing).

Run alone, it times only the kernels against onnxruntime (no onnx.reference, bridge or memory probe), in
several repeats of interleaved rounds, and prints each case's ratios per repeat and their median:

    python bench/kernels_bench.py [--size 4194304] [--rounds 9] [--repeats 3] [--cases NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.cases import CASE_BUILDERS, KernelCase
from bench.common import Config, dmlshim_session, error_note, ms, ort_session
from bench.measure import interleaved, peak_allocation, time_once
from dmlshim.kernels import compiled, execute, recycle


class SlowCompetitor:
    """A competitor far slower than the others (onnx.reference, the custom-op bridge): timed with a few
    single calls, and skipped at sizes where a call is expected to exceed the budget."""

    def __init__(self, budget: float, repeats: int) -> None:
        self.budget = budget
        self.repeats = repeats
        self._last: dict[str, tuple[int, float]] = {}

    def measure(
        self, key: str, elements: int, make: Callable[[], Callable[[], Any]]
    ) -> tuple[float | None, str]:
        """``(seconds or None, note)``; ``make`` builds the call (its failures are reported too)."""
        last = self._last.get(key)
        if last is not None and last[1] == float("inf"):
            return None, "skipped: failed at a smaller size"
        if last is not None:
            estimate = last[1] * elements / max(1, last[0])
            if estimate > self.budget:
                return None, f"skipped: ~{estimate:.1f} s per call expected (budget {self.budget:g} s)"
        try:
            call = make()
            first = time_once(call)
            seconds = first if first > self.budget / 2 else min(first, time_once(call, self.repeats - 1))
        except Exception as e:
            self._last[key] = (elements, float("inf"))
            return None, error_note(e)
        self._last[key] = (elements, seconds)
        return seconds, ""


def reference_call(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
    """An onnx.reference evaluation of the model."""
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model)
    return lambda: evaluator.run(None, feeds)


def bench_kernel_case(
    case: KernelCase, config: Config, reference: SlowCompetitor, bridge: SlowCompetitor
) -> dict[str, Any]:
    """One kernel case: our kernel vs onnxruntime (default and 1 thread), onnx.reference, the bridge."""
    default, single = ort_session(case.model), ort_session(case.model, 1)
    expected = single.run(None, case.feeds)[0]
    sides = ["numpy", "compiled"] if compiled.installed() else ["numpy"]
    match = {
        side: _matches(execute(case.desc, case.bound, kernels=side).output, case, expected) for side in sides
    }
    calls: dict[str, Callable[[], Any]] = {
        "ours": lambda: execute(case.desc, case.bound, kernels="numpy"),
        "ort": lambda: default.run(None, case.feeds),
        "ort1": lambda: single.run(None, case.feeds),
    }
    if "compiled" in sides:
        calls["compiled"] = lambda: execute(case.desc, case.bound, kernels="compiled")
    timing = interleaved(calls, config.rounds)
    # Without the recycled output buffers the timed calls left free, so that the peak includes the output.
    recycle.clear()
    peak = peak_allocation(lambda: execute(case.desc, case.bound, kernels="numpy").output)
    ref_s, ref_note = reference.measure(
        case.name, case.elements, lambda: reference_call(case.model, case.feeds)
    )

    def bridge_call() -> Callable[[], Any]:
        session = dmlshim_session(case.model, "customop")
        return lambda: session.run(None, case.feeds)

    bridge_s, bridge_note = bridge.measure(case.name, case.elements, bridge_call)
    ours_s = timing.medians["ours"]
    return {
        "section": "kernel",
        "case": case.name,
        "op": case.op_type,
        "dml_operator": case.desc.operator_type.dml_name,
        "shape": list(case.shape),
        "elements": case.elements,
        "match": match["numpy"],
        "ours_ms": ms(ours_s),
        "ort_ms": ms(timing.medians["ort"]),
        "ort1_ms": ms(timing.medians["ort1"]),
        "ratio_ort": round(timing.ratio("ours", "ort"), 3),
        "ratio_ort1": round(timing.ratio("ours", "ort1"), 3),
        "compiled_match": match.get("compiled"),
        "compiled_ms": ms(timing.medians["compiled"]) if "compiled" in calls else None,
        "compiled_ratio_ort": round(timing.ratio("compiled", "ort"), 3) if "compiled" in calls else None,
        "compiled_ratio_ort1": round(timing.ratio("compiled", "ort1"), 3) if "compiled" in calls else None,
        "reference_ms": ms(ref_s),
        "reference_speedup": None if ref_s is None else round(ref_s / ours_s, 1),
        "reference_note": ref_note,
        "bridge_ms": ms(bridge_s),
        "bridge_speedup": None if bridge_s is None else round(bridge_s / ours_s, 1),
        "bridge_note": bridge_note,
        "peak_mb": round(peak / 2**20, 3),
        "io_mb": round(case.io_bytes / 2**20, 3),
        "memory_ratio": round(peak / case.io_bytes, 3),
    }


def _matches(ours: np.ndarray, case: KernelCase, expected: np.ndarray) -> bool:
    """Whether a kernel output has OutputTensor's Sizes and equals onnxruntime's output."""
    return ours.shape == tuple(case.desc.tensors()["OutputTensor"].sizes) and bool(
        np.array_equal(ours.reshape(expected.shape), expected)
    )


def bench_kernels(config: Config) -> list[dict[str, Any]]:
    """Every kernel case at every size."""
    rows = []
    reference = SlowCompetitor(config.slow_budget, config.slow_repeats)
    bridge = SlowCompetitor(config.slow_budget, config.slow_repeats)
    for n in sorted(config.sizes):
        for i, build in enumerate(CASE_BUILDERS):
            case = build(n, np.random.default_rng(i))
            if config.cases and not any(c in case.name for c in config.cases):
                continue
            try:
                row = bench_kernel_case(case, config, reference, bridge)
            except Exception as e:
                row = {
                    "section": "kernel",
                    "case": case.name,
                    "elements": case.elements,
                    "error": error_note(e),
                }
                config.log(traceback.format_exc())
            config.log(f"kernel {case.name} @ {case.elements}: {row.get('ratio_ort', row.get('error'))}")
            rows.append(row)
    return rows


def _kernel_call(case: KernelCase, side: str) -> Callable[[], Any]:
    return lambda: execute(case.desc, case.bound, kernels=side)


def compare_case(case: KernelCase, rounds: int) -> dict[str, Any]:
    """One case: numpy and compiled kernels against onnxruntime (default options and one thread), the
    same interleaved rounds for all; outputs checked against onnxruntime's first."""
    default, single = ort_session(case.model), ort_session(case.model, 1)
    expected = single.run(None, case.feeds)[0]
    sides = ["numpy", "compiled"] if compiled.installed() else ["numpy"]
    calls: dict[str, Callable[[], Any]] = {
        "ort": lambda: default.run(None, case.feeds),
        "ort1": lambda: single.run(None, case.feeds),
    }
    row: dict[str, Any] = {"case": case.name, "elements": case.elements}
    for side in sides:
        row[f"{side}_match"] = _matches(execute(case.desc, case.bound, kernels=side).output, case, expected)
        calls[side] = _kernel_call(case, side)
    timing = interleaved(calls, rounds)
    row["ort_ms"] = ms(timing.medians["ort"])
    for side in sides:
        row[f"{side}_ms"] = ms(timing.medians[side])
        row[f"{side}_ratio_ort"] = round(timing.ratio(side, "ort"), 3)
        row[f"{side}_ratio_ort1"] = round(timing.ratio(side, "ort1"), 3)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kernels against onnxruntime at its default thread count")
    parser.add_argument("--size", type=int, default=1 << 22, help="elements per case (default 4M)")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per case (ratios: median)")
    parser.add_argument("--cases", nargs="+", default=[], help="only cases whose name contains one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for i, build in enumerate(CASE_BUILDERS):
        case = build(args.size, np.random.default_rng(i))
        if args.cases and not any(c in case.name for c in args.cases):
            continue
        runs = [compare_case(case, args.rounds) for _ in range(args.repeats)]
        row: dict[str, Any] = {"case": case.name, "elements": case.elements, "repeats": runs}
        for key in runs[0]:
            if key.endswith(("_ratio_ort", "_ratio_ort1", "_ms")):
                row[key] = round(statistics.median(r[key] for r in runs), 3)
            elif key.endswith("_match"):
                row[key] = all(r[key] for r in runs)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "repeats"}), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print("| case | ORT ms | numpy / ORT | compiled / ORT | compiled / ORT 1 thread | each repeat |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        each = " / ".join(f"{x['compiled_ratio_ort']:.2f}" for x in r["repeats"] if "compiled_ratio_ort" in x)
        compiled_ratios = (r.get("compiled_ratio_ort", "-"), r.get("compiled_ratio_ort1", "-"))
        ratios = f"{r['numpy_ratio_ort']:.2f} | {compiled_ratios[0]} | {compiled_ratios[1]}"
        print(f"| {r['case']} | {r['ort_ms']} | {ratios} | {each or '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
