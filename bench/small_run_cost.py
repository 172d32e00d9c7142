"""Per-run cost of small models, dmlshim's session against onnxruntime's, each side in its own process
(issue 36: median <= 1.5x, worst <= 3x).

Usage::

    python bench/small_run_cost.py [MODEL.onnx ...] [--runs 300] [--rounds 3] [--partitioned] [--json]

For each model (feeds from the ``.npz`` beside it; default: the four small models issue 36 names), each
round starts one fresh process per side, the order alternating between rounds. A process builds its
session (``dmlshim.InferenceSession`` or ``onnxruntime.InferenceSession``, CPU provider, both with one
intra-op thread), runs it 10 times (dmlshim's proved runs and lean check are behind it then), then times
``--runs`` runs one by one on the thread's CPU clock (``time.thread_time``: it does not count waiting for
the other jobs of a shared machine) and reports the median (and the lower quartile, steadier on a
loaded machine). Printed per model: each side's median of
its rounds' medians in microseconds and their ratio, then the median and worst ratio over the models.
``PYTHONPATH=OTHER/provider`` measures another checkout's dmlshim (onnxruntime's side is the same).
``--partitioned`` drops dmlshim's whole-model check once the session is built, so that every run goes
through the partitioned steps (the path of a model whose check was given up, or never built).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = (
    "onnx_models/tiny_decoder_step.onnx",
    "onnx_models/embedding_gather.onnx",
    "onnx_models/topk_gather.onnx",
    "onnx_models/real/bert_dynamo.onnx",
)
SIDES = ("onnxruntime", "dmlshim")
WARM_RUNS = 10


def measure_side(model: str, side: str, runs: int, partitioned: bool = False) -> dict[str, Any]:
    """In this process: ``side``'s session of ``model``, warmed up, then the median thread CPU per run
    (``partitioned``: dmlshim's check dropped first)."""
    import numpy as np
    import onnxruntime as ort

    with np.load(str(Path(model).with_suffix(".npz"))) as data:
        feeds = {k: data[k] for k in data.files}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    if side == "dmlshim":
        import dmlshim

        session: Any = dmlshim.InferenceSession(model, options)
        if partitioned:
            session.engine.drop_check()
    else:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    feeds = {k: v for k, v in feeds.items() if k in names}
    for _ in range(WARM_RUNS):
        session.run(None, feeds)
    clock = time.thread_time
    times = []
    for _ in range(runs):
        start = clock()
        session.run(None, feeds)
        times.append(clock() - start)
    record = getattr(session, "last_run_record", None)
    return {
        "us": statistics.median(times) * 1e6,
        "p25_us": sorted(times)[len(times) // 4] * 1e6,
        "path": getattr(record, "path", None),
    }


def _child(model: str, side: str, runs: int, partitioned: bool) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, model, "--side", side, "--runs", str(runs)]
        + (["--partitioned"] if partitioned else []),
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def compare(model: str, runs: int, rounds: int, partitioned: bool = False) -> dict[str, Any]:
    """One model: ``rounds`` rounds of one process per side (order alternating), medians and ratio."""
    found: dict[str, list[float]] = {side: [] for side in SIDES}
    quartiles: dict[str, list[float]] = {side: [] for side in SIDES}
    path = None
    for r in range(rounds):
        for side in SIDES if r % 2 else SIDES[::-1]:
            row = _child(model, side, runs, partitioned)
            found[side].append(row["us"])
            quartiles[side].append(row["p25_us"])
            path = row["path"] or path
    us = {side: statistics.median(v) for side, v in found.items()}
    p25 = {side: statistics.median(v) for side, v in quartiles.items()}
    return {
        "model": Path(model).stem,
        "path": path,
        "us": {k: round(v, 1) for k, v in us.items()},
        "rounds_us": {k: [round(x, 1) for x in v] for k, v in found.items()},
        "ratio": round(us["dmlshim"] / us["onnxruntime"], 2),
        "p25_ratio": round(p25["dmlshim"] / p25["onnxruntime"], 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--partitioned", action="store_true", help="drop dmlshim's whole-model check")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a child process's one side
    args = parser.parse_args(argv)
    models = args.models or [str(REPO / m) for m in DEFAULT_MODELS]
    if args.side:
        print(json.dumps(measure_side(models[0], args.side, args.runs, args.partitioned)), flush=True)
        return 0
    ratios, p25_ratios = [], []
    for model in models:
        row = compare(model, args.runs, args.rounds, args.partitioned)
        ratios.append(row["ratio"])
        p25_ratios.append(row["p25_ratio"])
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            us = row["us"]
            print(
                f"{row['model']} ({row['path']}): onnxruntime {us['onnxruntime']} us, "
                f"dmlshim {us['dmlshim']} us "
                f"-> {row['ratio']:.2f}x (rounds: ort {row['rounds_us']['onnxruntime']}, "
                f"dmlshim {row['rounds_us']['dmlshim']}); lower quartiles: {row['p25_ratio']:.2f}x",
                flush=True,
            )
    summary = {
        "median_ratio": round(statistics.median(ratios), 2),
        "worst_ratio": max(ratios),
        "p25_median_ratio": round(statistics.median(p25_ratios), 2),
        "p25_worst_ratio": max(p25_ratios),
    }
    print(
        json.dumps(summary)
        if args.json
        else f"median {summary['median_ratio']:.2f}x, worst {summary['worst_ratio']:.2f}x (lower quartiles: "
        f"median {summary['p25_median_ratio']:.2f}x, worst {summary['p25_worst_ratio']:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
