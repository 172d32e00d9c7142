"""``dmlshim inspect`` on long chains of Gathers against onnxruntime's own session creation (issue 12).

Usage::

    python bench/inspect_scale.py [--nodes 10000 100000] [--json] [--inspect-args --json] [--check]

For each size the script writes a model holding a chain of that many Gather nodes (each reads the previous
one's output with the same four indices), then measures, each in a fresh subprocess so that peak memory
is the process's own: ``python -m dmlshim inspect MODEL`` and ``onnxruntime.InferenceSession(MODEL)`` on
the CPU provider. Both include the interpreter's start and imports. It prints wall time and peak RSS of
each, their ratios (the target is at most about 2), and how the time per node grows from the smallest to
the largest chain (linear growth keeps it near 1). ``--check`` exits 1 when a ratio passes 2.5 at the
largest size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 2.0
CHECK_RATIO = 2.5


def gather_chain(count: int) -> onnx.ModelProto:
    """A chain of ``count`` unnamed Gather nodes over a [4, 3] float tensor (a row permutation each)."""
    nodes = [
        helper.make_node("Gather", ["x" if i == 0 else f"g{i - 1}", "idx"], [f"g{i}"], axis=0)
        for i in range(count)
    ]
    graph = helper.make_graph(
        nodes,
        "gather_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info(f"g{count - 1}", TensorProto.FLOAT, [4, 3])],
        initializer=[numpy_helper.from_array(np.array([3, 1, 0, 2], dtype=np.int64), "idx")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def measure(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one subprocess; its output is discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:4]} exited {proc.returncode}: {err.strip()[-500:]}")
    return wall, usage.ru_maxrss / 1024  # Linux reports kilobytes


def bench(counts: list[int], inspect_args: list[str]) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "provider"), env.get("PYTHONPATH")]))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for count in counts:
            path = Path(tmp) / f"chain_{count}.onnx"
            onnx.save(gather_chain(count), path)
            ours = measure([sys.executable, "-m", "dmlshim", "inspect", str(path), *inspect_args], env)
            ort_code = (
                "import sys, onnxruntime as ort; "
                "ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])"
            )
            theirs = measure([sys.executable, "-c", ort_code, str(path)], env)
            rows.append(
                {
                    "nodes": count,
                    "inspect_s": round(ours[0], 3),
                    "ort_session_s": round(theirs[0], 3),
                    "time_ratio": round(ours[0] / theirs[0], 2),
                    "inspect_peak_mb": round(ours[1], 1),
                    "ort_session_peak_mb": round(theirs[1], 1),
                    "rss_ratio": round(ours[1] / theirs[1], 2),
                }
            )
    first, last = rows[0], rows[-1]
    if len(rows) > 1:
        growth = (last["inspect_s"] / last["nodes"]) / (first["inspect_s"] / first["nodes"])
        for row in rows:
            row["time_per_node_vs_smallest"] = round(
                (row["inspect_s"] / row["nodes"]) / (first["inspect_s"] / first["nodes"]), 2
            )
        last["time_per_node_vs_smallest"] = round(growth, 2)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if a ratio passes {CHECK_RATIO}")
    parser.add_argument(
        "--inspect-args", nargs=argparse.REMAINDER, default=[], help="extra arguments for dmlshim inspect"
    )
    args = parser.parse_args(argv)
    rows = bench(sorted(args.nodes), args.inspect_args)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        extra = " ".join(args.inspect_args)
        print(f"dmlshim inspect {extra} vs onnxruntime session creation (target ratio <= {TARGET_RATIO})")
        print(f"{'nodes':>8} {'inspect s':>10} {'ort s':>8} {'ratio':>6} {'inspect MB':>11} {'ort MB':>8} "
              f"{'ratio':>6} {'s/node vs smallest':>19}")  # fmt: skip
        for r in rows:
            print(
                f"{r['nodes']:>8} {r['inspect_s']:>10.2f} {r['ort_session_s']:>8.2f} {r['time_ratio']:>6.2f} "
                f"{r['inspect_peak_mb']:>11.0f} {r['ort_session_peak_mb']:>8.0f} {r['rss_ratio']:>6.2f} "
                f"{r.get('time_per_node_vs_smallest', 1.0):>19.2f}"
            )
    last = rows[-1]
    if args.check and max(last["time_ratio"], last["rss_ratio"]) > CHECK_RATIO:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
