"""What the whole-model check's extra outputs cost onnxruntime, per model (issue 36, item 2).

Usage::

    python bench/check_outputs_cost.py MODEL.onnx [...] [--runs 200] [--rounds 3] [--json]
    python bench/check_outputs_cost.py MODEL.onnx [...] --session   # dmlshim's session vs onnxruntime's
    python bench/check_outputs_cost.py MODEL.onnx --peak dmlshim --runs 6   # peak RSS (a fresh process)

For each model (feeds from the ``.npz`` beside it), builds ``dmlshim.InferenceSession`` and runs it past
the proved runs, then times onnxruntime alone (CPU provider, one intra-op thread; one run of each
session in turn, the order rotating, ``--runs`` x ``--rounds`` times; the lower quartile of each's
thread CPU per run) on:

- ``plain``: the model as it is;
- ``check``: the model with the check's extra outputs (every emulated node's inputs and output, the lean
  gathers' shapes): what the whole-model check runs today;
- ``proofs``: the model with only what the proofs of the given nodes read (a given gather's or scatter's
  computed indices, and a ``Shape`` of its other computed inputs), the computed nodes' inputs and output,
  and the lean gathers' outputs as today;
- ``indices``: as ``proofs`` without the ``Shape`` outputs (the least any lean session could list);
- ``lean``: what the lean check lists (:mod:`dmlshim.execute.engines.lean_check`: as ``proofs``, but no
  ``Shape`` for the inputs whose shapes follow from the feeds').
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NOTE_GIVEN = "output_from_onnxruntime"


def _outputs(model_path: str) -> tuple[Any, dict[str, Any], dict[str, list[str]], dict[str, int]]:
    """The model, its feeds, and the extra outputs of each variant; counts of node kinds."""
    import numpy as np
    import onnx

    import dmlshim
    from dmlshim.execute.proofs.gather_given import shape_output

    with np.load(str(Path(model_path).with_suffix(".npz"))) as data:
        feeds = {k: data[k] for k in data.files}
    session = dmlshim.InferenceSession(model_path)
    for _ in range(6):
        session.run(None, feeds)
    engine = session._engine
    check = getattr(engine, "_check", None)
    model = onnx.load(model_path, load_external_data=False)
    graph = model.graph
    static = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    static |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    graph_outputs = {o.name for o in graph.output}
    counts = {"lean": 0, "given": 0, "computed": 0}
    variants: dict[str, list[str]] = {"plain": [], "check": [], "proofs": [], "indices": [], "lean": []}
    if check is None:
        return model, feeds, variants, counts
    record = session.last_run_record
    notes = {n.name: {k for k, _ in n.notes} for n in record.nodes} if record is not None else {}
    variants["check"] = list(check._fetch[len(graph.output) :])
    proofs: list[str] = []
    indices: list[str] = []
    seen = set(static) | graph_outputs

    def add(name: str, *into: list[str]) -> None:
        if name and name not in seen:
            seen.add(name)
            for lst in into:
                lst.append(name)

    for step, lean, *_ in check._plan:
        if lean:
            counts["lean"] += 1
            continue
        if NOTE_GIVEN in notes.get(step.name, ()):
            counts["given"] += 1
            add(step.inputs[1], proofs, indices)
            for other in (step.inputs[0], *step.inputs[2:3]):
                if other and other not in static and other not in seen:
                    add(shape_output(other), proofs)
            continue
        counts["computed"] += 1
        for name in (*step.inputs, step.output):
            add(name, proofs, indices)
    # the lean gathers' extra outputs stay as the check lists them
    lean_extra = [n for n in variants["check"] if n.endswith("__dmlshim_shape") or n in check._lean]
    for name in lean_extra:
        add(name, proofs, indices)
    variants["proofs"] = proofs
    variants["indices"] = indices
    spec = getattr(check, "_spec", None)
    variants["lean"] = list(spec.extra) if spec is not None else []
    return model, feeds, variants, counts


def measure(model_path: str, runs: int, rounds: int) -> dict[str, Any]:
    """One model's onnxruntime CPU per run for each variant (see the module docstring)."""
    import onnxruntime as ort

    from dmlshim.execute.engines.whole_model import augmented_model

    model, feeds, variants, counts = _outputs(model_path)
    sessions = {}
    for name, extra in variants.items():
        if name in ("proofs", "indices", "lean") and not extra and not variants["check"]:
            continue
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        payload = augmented_model(model, extra)
        sessions[name] = ort.InferenceSession(payload, options, providers=["CPUExecutionProvider"])
    names = {k: [o.name for o in s.get_outputs()] for k, s in sessions.items()}
    inputs = {k: {i.name for i in s.get_inputs()} for k, s in sessions.items()}
    fed = {k: {n: v for n, v in feeds.items() if n in inputs[k]} for k in sessions}
    for s_name, s in sessions.items():
        for _ in range(3):
            s.run(names[s_name], fed[s_name])
    # One run of each session in turn, ``runs * rounds`` times; each session's lower quartile of its
    # thread CPU per run (the runs least disturbed by other processes on a shared machine).
    times: dict[str, list[float]] = {k: [] for k in sessions}
    clock = time.thread_time
    order = list(sessions)
    for i in range(runs * rounds):
        for s_name in order[i % len(order) :] + order[: i % len(order)]:  # no session always first
            start = clock()
            sessions[s_name].run(names[s_name], fed[s_name])
            times[s_name].append(clock() - start)
    best = {k: sorted(v)[len(v) // 4] for k, v in times.items()}
    return {
        "model": Path(model_path).stem,
        **counts,
        "extra": {k: len(v) for k, v in variants.items()},
        "us": {k: round(v * 1e6) for k, v in best.items()},
    }


def session_cost(model_path: str, runs: int, rounds: int) -> dict[str, Any]:
    """``--session``: dmlshim's session against onnxruntime's (both one intra-op thread), one run of each
    in turn, ``runs * rounds`` times after 10 runs of each; the lower quartile of each's thread CPU per
    run. Run it with ``PYTHONPATH`` pointing at another checkout of ``provider`` to compare two dmlshims."""
    import numpy as np
    import onnxruntime as ort

    import dmlshim

    with np.load(str(Path(model_path).with_suffix(".npz"))) as data:
        feeds = {k: data[k] for k in data.files}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    sides = {
        "onnxruntime": ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"]),
        "dmlshim": dmlshim.InferenceSession(model_path, options),
    }
    for side in sides.values():
        for _ in range(10):
            side.run(None, feeds)
    times: dict[str, list[float]] = {k: [] for k in sides}
    clock = time.thread_time
    for i in range(runs * rounds):
        for name in ("onnxruntime", "dmlshim") if i % 2 else ("dmlshim", "onnxruntime"):
            start = clock()
            sides[name].run(None, feeds)
            times[name].append(clock() - start)
    best = {k: sorted(v)[len(v) // 4] for k, v in times.items()}
    return {"model": Path(model_path).stem, "us": {k: round(v * 1e6) for k, v in best.items()}}


def peak(model_path: str, side: str, runs: int) -> dict[str, Any]:
    """``--peak SIDE``: this process's peak resident size after building ``side``'s session (``ort`` or
    ``dmlshim``, default options) and ``runs`` runs; run each side in a fresh process."""
    import resource

    import numpy as np

    with np.load(str(Path(model_path).with_suffix(".npz"))) as data:
        feeds = {k: data[k] for k in data.files}
    if side == "ort":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        session: Any = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    else:
        import dmlshim

        session = dmlshim.InferenceSession(model_path)
    names = {i.name for i in session.get_inputs()}
    feeds = {k: v for k, v in feeds.items() if k in names}
    start = time.perf_counter()
    for _ in range(runs):
        session.run(None, feeds)
    check = getattr(getattr(session, "_engine", None), "_check", None)
    return {
        "model": Path(model_path).stem,
        "side": side,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "runs_s": round(time.perf_counter() - start, 1),
        "lean_runs": getattr(check, "lean_runs", None),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--session", action="store_true", help="dmlshim's session against onnxruntime's")
    parser.add_argument("--peak", choices=("ort", "dmlshim"), help="peak RSS of one side, --runs runs")
    args = parser.parse_args(argv)
    for model in args.models:
        if args.peak:
            print(json.dumps(peak(model, args.peak, args.runs)), flush=True)
            continue
        if args.session:
            row = session_cost(model, args.runs, args.rounds)
            us = row["us"]
            print(
                f"{row['model']}: onnxruntime {us['onnxruntime']} us, dmlshim {us['dmlshim']} us "
                f"({us['dmlshim'] / us['onnxruntime']:.2f}x)",
                flush=True,
            )
            continue
        row = measure(model, args.runs, args.rounds)
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        us = row["us"]
        plain = us["plain"]
        cells = "  ".join(f"{k} {v} ({v / plain:.2f}x)" for k, v in us.items())
        print(
            f"{row['model']}: lean {row['lean']} given {row['given']} computed {row['computed']}; "
            f"extra {row['extra']}; {cells}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
