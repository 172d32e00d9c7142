"""Where a dmlshim run's time goes, per model (issue 36, run cost).

    python bench/run_profile.py MODEL.onnx ... [--runs 100] [--partitioned] [--json]

Builds ``dmlshim.InferenceSession(MODEL)``, runs it on the ``.npz`` beside the model (a few warm-up runs
first), then profiles ``--runs`` runs with cProfile on the thread's CPU clock and prints, per model: the
run path, the Python function calls per run (deterministic: it does not move with the machine's load, so
it compares two checkouts on a busy machine; ``PYTHONPATH=OTHER/provider`` runs another one) and the
profiled CPU microseconds per run spent inside each part of the per-run path (inclusive; profiling
inflates Python calls, so read them as shares, not as times). ``--partitioned`` drops the session's
whole-model check after the build (every run through the partitioned steps).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PARTS: dict[str, tuple[str, str]] = {
    "total": ("session.py", "_run_values"),
    "feeds": ("session.py", "_feeds"),
    "onnxruntime": ("", "run"),  # onnxruntime's pybind run (the check's, a CPU segment's)
    "emulated_steps": ("steps.py", "__call__"),  # a step the whole-model check computes
    "planned_steps": ("steps.py", "run_planned"),  # a step of a partitioned run (its run plan or kernel)
    "lean_gathers": ("whole_model.py", "_given_by_shapes"),
    "verify": ("steps.py", "verify"),  # a scatter verified, a gather proved or given
    "proved_again": ("steps.py", "given_again"),  # a node proved again on a lean check's run
    "steady_lane": ("steady_lane.py", "answer"),  # a run as one onnxruntime call plus the index proofs
    "compare": ("whole_model.py", "identical"),
    "record": ("partitioned_runs.py", "_record"),
}
"""Part -> (file name, function name) of the function whose inclusive time stands for it ("" file:
a built-in)."""


def profile_model(model: str, runs: int, partitioned: bool = False) -> dict[str, Any]:
    """One model's calls per run and profiled microseconds per part (see the module docstring)."""
    import numpy as np

    import dmlshim

    with np.load(str(Path(model).with_suffix(".npz"))) as data:
        feeds = {k: data[k] for k in data.files}
    session = dmlshim.InferenceSession(model)
    if partitioned:
        session.engine.drop_check()
    for _ in range(5):
        session.run(None, feeds)
    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    for _ in range(runs):
        session.run(None, feeds)
    profiler.disable()
    stats = pstats.Stats(profiler)
    parts = dict.fromkeys(PARTS, 0.0)
    for (filename, _, name), (_, _, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        for part, (file, function) in PARTS.items():
            builtin = not file and filename == "~" and "onnxruntime_pybind11_state" in name
            if builtin or (file and name == function and os.path.basename(filename) == file):
                parts[part] += cumulative
    record = session.last_run_record
    return {
        "model": Path(model).stem,
        "path": record.path if record is not None else None,
        "calls_per_run": stats.total_calls // runs,  # type: ignore[attr-defined]
        "us_per_run": {k: round(v / runs * 1e6) for k, v in parts.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--partitioned", action="store_true", help="drop the whole-model check")
    args = parser.parse_args(argv)
    for model in args.models:
        found = profile_model(model, args.runs, args.partitioned)
        if args.json:
            print(json.dumps(found), flush=True)
        else:
            shares = ", ".join(f"{k} {v}" for k, v in found["us_per_run"].items() if v)
            print(f"{found['model']} ({found['path']}): {found['calls_per_run']} calls/run; us/run {shares}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
