"""Session build cost of dmlshim against onnxruntime CPU on model files, and where dmlshim's build goes
(issue 36).

Usage::

    python bench/build_cost.py MODEL.onnx [MODEL.onnx ...] [--repeats 3]   # build wall/CPU and peak RSS
    python bench/build_cost.py MODEL.onnx --cold           # the same, dmlshim's imports counted in
    python bench/build_cost.py MODEL.onnx --runs 10        # also first run and run p50 (feeds: MODEL.npz)
    python bench/build_cost.py MODEL.onnx --profile        # dmlshim's build phase by phase, in this process
    python bench/build_cost.py MODEL.onnx --run-cost 300   # CPU per run, both sides in this process
    python bench/build_cost.py MODEL.onnx ... --steady 3   # later builds in one process (no first use)
    python bench/build_cost.py MODEL.onnx ... --against OTHER/provider   # this checkout against another
    python bench/build_cost.py MODEL.onnx ... --engine cpu   # the cpu engine (checks refuse_static_sizes)

Each side builds its session in a fresh process, sides alternating within a repeat: without ``--runs``
through ``build_probe.py --imported`` (the build alone, session modules imported first), with it through
``realistic.py --child`` (the ``.npz`` beside the model holds the feeds). The parent reads each child's
peak resident size from ``os.wait4``. ``build_cpu`` is the CPU time of every thread of the child during the
build: on a shared machine wall times move with the load, CPU times much less. ``settled_cpu`` (build
only) also counts the CPU the child's threads spend in the 0.2 s after the build returned: onnxruntime's
intra-op threads spin for about 20 ms of CPU after each session is built, after onnxruntime's own
``build_cpu`` is read but during dmlshim's (its check session is built on another thread while its build
goes on; see ``build_probe.py``). Ratios are dmlshim / onnxruntime of the same repeat; the table gives
medians.

``--profile`` builds a ``dmlshim.InferenceSession`` here under cProfile (after an onnxruntime session on a
one-node model, so that the build does not pay onnxruntime's first-use cost) and prints, for each phase of the
build, its wall and CPU seconds (the calling thread's) and how much it raised the process's peak resident
size (``ru_maxrss``
before and after each call of the phase's function).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import pstats
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import realistic

HERE = Path(__file__).resolve().parent

#: (module, attribute, label): the build's phases, patched where their callers look them up.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("dmlshim.ort.session", "load_model", "load: read, check, own the weights"),
    ("dmlshim.execute.weights.model_source", "check_model", "  model check"),
    ("dmlshim.model.modelcheck", "check_well_formed", "    well-formed walk"),
    ("dmlshim.model.modelcheck", "ort_accepts", "    acceptance session, waited for (before issue 36)"),
    ("dmlshim.model.ort_acceptance", "start_ort_acceptance", "    acceptance session started"),
    ("dmlshim.model.modelcheck", "_onnx_checker_findings", "    onnx.checker"),
    ("dmlshim.model.ort_acceptance.Acceptance", "verdict", "  wait for the acceptance session"),
    ("dmlshim.execute.weights.model_source", "snapshot_inline", "  copy of the inline weights"),
    ("dmlshim.ort.session.InferenceSession", "_describe", "describe inputs/outputs"),
    ("dmlshim.ort.session", "typed_outputs", "  output types (shape inference)"),
    ("dmlshim.ort.session.InferenceSession", "_build_engine", "engine"),
    ("dmlshim.execute.engines.partitioned", "infer_shapes", "  shape inference + data propagation"),
    ("dmlshim.execute.engines.partitioned", "tensor_infos", "  value infos"),
    ("dmlshim.execute.engines.partitioned", "plan_nodes", "  node plan (static translation)"),
    ("dmlshim.execute.engines.partitioned", "partition_graph", "  partitioning"),
    ("dmlshim.execute.engines.partitioned", "lean_gathers", "  gathers proved at build"),
    ("dmlshim.execute.engines.partitioned", "start_whole_model_check", "  check session started"),
    ("dmlshim.execute.engines.partitioned", "check_static_sizes", "  static size limits"),
    ("dmlshim.execute.engines.partitioned", "make_steps", "  step list"),
    ("dmlshim.execute.engines.whole_model_start.PendingCheck", "finish", "  wait for the check session"),
)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _resolve(dotted: str) -> Any:
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            owner = getattr(owner, name)
        return owner
    raise ImportError(dotted)


def _warm_up(ort: Any) -> None:
    """onnxruntime's first use in the process (its environment, thread pools), on a one-node model, so that
    it is not charged to the profiled build and leaves the peak resident size where it was."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "warm_up", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def profile(model: str, top: int) -> dict[str, Any]:
    """Phase times and peak-RSS growth of one dmlshim build in this process (see the module docstring)."""
    import onnxruntime as ort

    import dmlshim

    session_class = dmlshim.InferenceSession
    _resolve("dmlshim.execute.engines.partitioned")
    _warm_up(ort)
    grown: dict[str, float] = {}
    spent: dict[str, list[float]] = {}
    restore = []
    for owner_name, attr, label in PHASES:
        try:
            owner = _resolve(owner_name)
        except (ImportError, AttributeError):
            continue
        original = getattr(owner, attr, None)
        if original is None:  # another checkout's phases (``PYTHONPATH=OTHER/provider``)
            continue

        def wrapper(*args: Any, __f: Any = original, __label: str = label, **kwargs: Any) -> Any:
            before, wall, cpu = _peak_mb(), time.perf_counter(), time.thread_time()
            try:
                return __f(*args, **kwargs)
            finally:
                grown[__label] = grown.get(__label, 0.0) + _peak_mb() - before
                times = spent.setdefault(__label, [0.0, 0.0])
                times[0] += time.perf_counter() - wall
                times[1] += time.thread_time() - cpu

        functools.update_wrapper(wrapper, original)
        setattr(owner, attr, wrapper)
        restore.append((owner, attr, original))
    base = _peak_mb()
    profiler = cProfile.Profile() if top else None
    start, cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    try:
        session_class(model)
    finally:
        if profiler is not None:
            profiler.disable()
        for owner, attr, original in restore:
            setattr(owner, attr, original)
    wall, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    phases = [
        {
            "phase": label,
            "seconds": spent.get(label, [0.0, 0.0])[0],
            "cpu_seconds": spent.get(label, [0.0, 0.0])[1],
            "peak_growth_mb": grown.get(label, 0.0),
        }
        for _owner, _attr, label in PHASES
    ]
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(top)
    return {
        "model": model,
        "wall": wall,
        "cpu": cpu_seconds,
        "base_mb": base,
        "peak_mb": _peak_mb(),
        "phases": phases,
    }


def run_cost(model: str, runs: int, rounds: int = 3) -> dict[str, Any]:
    """Process CPU milliseconds per run of onnxruntime and dmlshim on the ``.npz`` beside ``model``, both in
    this process, least of ``rounds`` rounds of ``runs`` runs each (outputs checked equal first)."""
    import numpy as np
    import onnxruntime as ort

    import dmlshim

    with np.load(str(Path(model).with_suffix(".npz"))) as data:
        feeds = {k: data[k] for k in data.files}
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(model)
    want, got = theirs.run(None, feeds), ours.run(None, feeds)
    if not all(np.array_equal(a, b) for a, b in zip(want, got, strict=True)):
        raise AssertionError(f"{model}: outputs differ from onnxruntime's")

    def per_run(session: Any) -> float:
        start = time.process_time()
        for _ in range(runs):
            session.run(None, feeds)
        return 1e3 * (time.process_time() - start) / runs

    rows = [(per_run(theirs), per_run(ours)) for _ in range(rounds)]
    ort_ms, ours_ms = min(r[0] for r in rows), min(r[1] for r in rows)
    record = ours.last_run_record
    path = record.path if record is not None else None
    return {"model": model, "ort_ms": ort_ms, "ours_ms": ours_ms, "ratio": ours_ms / ort_ms, "path": path}


def _side(
    side: str, model: Path, runs: int, workdir: Path, cold: bool = False, engine: str = "partitioned"
) -> dict[str, Any]:
    py = sys.executable
    if runs:
        feeds = model.with_suffix(".npz")
        out = workdir / f"build_cost_{side}.npz"
        argv = [py, str(HERE / "realistic.py"), "--child", side, str(model), str(feeds), str(runs), str(out)]
        return realistic._measure(argv)
    probe = [py, str(HERE / "build_probe.py"), "ort" if side == "ort" else engine, str(model)]
    argv = probe + ([] if cold else ["--imported"])
    found = realistic._measure(argv)
    if "seconds" not in found:
        raise RuntimeError(f"{side} on {model}: the build failed (exit {found['returncode']})")
    settled = {"settled_cpu": found["settled_cpu_seconds"]} if "settled_cpu_seconds" in found else {}
    return found | {"build": found["seconds"], "build_cpu": found["cpu_seconds"]} | settled


def measure(
    model: Path, repeats: int, runs: int, workdir: Path, cold: bool = False, engine: str = "partitioned"
) -> dict[str, Any]:
    """Every repeat of both sides on ``model`` and the median ratios (``cold``: imports in the build;
    ``engine``: dmlshim's, without ``runs``)."""
    rows = []
    for r in range(repeats):
        order = ("ort", "dmlshim") if r % 2 == 0 else ("dmlshim", "ort")
        rows.append({side: _side(side, model, runs, workdir, cold, engine) for side in order})
    keys = ["build", "build_cpu", "rss_mb"] + (["first", "p50"] if runs else [])
    if all("settled_cpu" in side for row in rows for side in row.values()):
        keys.append("settled_cpu")  # another checkout's probe may not report it
    ratios = {k: statistics.median(row["dmlshim"][k] / row["ort"][k] for row in rows) for k in keys}
    medians = {
        side: {k: statistics.median(row[side][k] for row in rows) for k in keys}
        for side in ("ort", "dmlshim")
    }
    return {"model": str(model), "repeats": rows, "medians": medians, "ratios": ratios}


def against(
    models: list[Path], other: Path, repeats: int, workdir: Path, engine: str = "partitioned"
) -> list[dict[str, Any]]:
    """Every model measured (:func:`measure`) with another checkout's dmlshim (``other``, its ``provider``
    folder, as ``PYTHONPATH`` of the children: "before") and with this process's (``PYTHONPATH`` as it is:
    "after"), the two alternating model by model, so that both see the same load; each pair's
    ``paired`` is dmlshim's build CPU after / before."""
    import os

    own = os.environ.get("PYTHONPATH")
    found = []
    for i, model in enumerate(models):
        pair: dict[str, Any] = {}
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            if side == "before":
                os.environ["PYTHONPATH"] = str(other)
            elif own is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = own
            try:
                pair[side] = measure(model, repeats, 0, workdir, engine=engine)
            finally:
                if own is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = own
        ours = [pair[s]["medians"]["dmlshim"]["build_cpu"] for s in ("before", "after")]
        found.append({"model": str(model), **pair, "paired": ours[1] / ours[0]})
        print(json.dumps({"model": str(model), "paired": found[-1]["paired"]}), file=sys.stderr, flush=True)
    return found


def steady(models: list[Path], builds: int) -> dict[str, Any]:
    """CPU of builds after the first, both sides in this process (onnx's schema registry, onnxruntime's
    environment and the imports paid once before): per model, the least process CPU of ``builds`` builds by
    onnxruntime and by dmlshim, and the least CPU of dmlshim's building thread (onnxruntime's check session
    runs on another); medians over the models."""
    import onnxruntime as ort

    import dmlshim

    def least(build: Any) -> tuple[float, float]:
        build()  # first use in the process (of this model's kind): not counted
        cpu = thread = 1e9
        for _ in range(builds):
            start, own = time.process_time(), time.thread_time()
            build()
            cpu, thread = min(cpu, time.process_time() - start), min(thread, time.thread_time() - own)
        return cpu, thread

    rows = {}
    for model in models:
        theirs = functools.partial(ort.InferenceSession, str(model), providers=["CPUExecutionProvider"])
        rows[model.stem] = {
            "ort": least(theirs)[0],
            "dmlshim": least(lambda m=model: dmlshim.InferenceSession(str(m))),
        }
    median = statistics.median
    return {
        "models": rows,
        "ort_cpu": median(r["ort"] for r in rows.values()),
        "dmlshim_cpu": median(r["dmlshim"][0] for r in rows.values()),
        "dmlshim_thread": median(r["dmlshim"][1] for r in rows.values()),
        "ratio": median(r["dmlshim"][0] / r["ort"] for r in rows.values()),
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| model | build s ORT / ours (x) | build CPU s ORT / ours (x) [settled] "
        "| peak RSS MB ORT / ours (x) | run p50 (x) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for res in results:
        o, d, x = res["medians"]["ort"], res["medians"]["dmlshim"], res["ratios"]
        run = f"{x['p50']:.2f}" if "p50" in x else "-"
        settled = (
            f"; settled {o['settled_cpu']:.3f} / {d['settled_cpu']:.3f} ({x['settled_cpu']:.2f})"
            if "settled_cpu" in x
            else ""
        )
        lines.append(
            f"| {Path(res['model']).stem} | {o['build']:.2f} / {d['build']:.2f} ({x['build']:.2f}) "
            f"| {o['build_cpu']:.3f} / {d['build_cpu']:.3f} ({x['build_cpu']:.2f}){settled} "
            f"| {o['rss_mb']:.0f} / {d['rss_mb']:.0f} ({x['rss_mb']:.2f}) | {run} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs", type=int, default=0, help="steady runs per side (0: build only)")
    parser.add_argument("--profile", action="store_true", help="phases of one dmlshim build, in this process")
    parser.add_argument(
        "--run-cost",
        type=int,
        default=0,
        metavar="N",
        help="process CPU per run, both sides in this process, rounds of N runs",
    )
    parser.add_argument("--top", type=int, default=0, help="with --profile: also cProfile's top N functions")
    parser.add_argument(
        "--steady", type=int, default=0, metavar="N", help="least CPU of N later builds, both sides here"
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp"))
    parser.add_argument(
        "--cold",
        action="store_true",
        help="build only: dmlshim's imports (its session and engine modules, onnx) counted in the build",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--engine",
        default="partitioned",
        choices=("partitioned", "cpu", "customop"),
        help="build only: dmlshim's engine (cpu and customop check sizes with refuse_static_sizes)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="PROVIDER",
        help="build only: also measure another checkout's dmlshim (its provider folder), alternating",
    )
    args = parser.parse_args(argv)
    if args.against is not None:
        pairs = against(args.models, args.against, args.repeats, args.workdir, args.engine)
        if args.json:
            print(json.dumps(pairs))
        else:
            for pair in pairs:
                b, a = pair["before"], pair["after"]
                print(
                    f"{Path(pair['model']).stem}: before {b['ratios']['build_cpu']:.2f}x, after "
                    f"{a['ratios']['build_cpu']:.2f}x of onnxruntime's build CPU; dmlshim after / before "
                    f"{pair['paired']:.3f}"
                )
        return 0
    if args.steady:
        found = steady(args.models, args.steady)
        print(
            json.dumps(found)
            if args.json
            else f"medians over {len(found['models'])} models: onnxruntime {found['ort_cpu'] * 1e3:.1f} ms, "
            f"dmlshim {found['dmlshim_cpu'] * 1e3:.1f} ms ({found['ratio']:.2f}x), its building thread "
            f"{found['dmlshim_thread'] * 1e3:.1f} ms"
        )
        return 0
    if args.run_cost:
        for model in args.models:
            found = run_cost(str(model), args.run_cost)
            line = (
                f"{model}: CPU ms per run onnxruntime {found['ort_ms']:.3f}, dmlshim {found['ours_ms']:.3f}"
            )
            print(json.dumps(found) if args.json else f"{line} ({found['ratio']:.2f}x, {found['path']})")
        return 0
    if args.profile:
        for model in args.models:
            found = profile(str(model), args.top)
            if args.json:
                print(json.dumps(found))
                continue
            print(
                f"{model}: wall {found['wall']:.3f} s, CPU {found['cpu']:.3f} s, "
                f"peak RSS {found['base_mb']:.0f} -> {found['peak_mb']:.0f} MB"
            )
            for p in found["phases"]:
                print(
                    f"  {p['phase']:<54} {p['seconds']:7.3f} s  CPU {p['cpu_seconds']:7.3f} s  "
                    f"peak +{p['peak_growth_mb']:.0f} MB"
                )
        return 0
    results = []
    for model in args.models:
        results.append(measure(model, args.repeats, args.runs, args.workdir, args.cold, args.engine))
        print(json.dumps(results[-1]["ratios"]), file=sys.stderr, flush=True)
    print(json.dumps(results) if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
