"""Realistic sizes: session build, first run, steady run and peak memory of dmlshim against onnxruntime CPU,
and ``dmlshim validate`` against onnxruntime alone, on generated models (issue 22).

Usage::

    python bench/realistic.py                       # GPT-2-small-like step (~650 MB), 2 repeats
    python bench/realistic.py --config held-out     # another configuration (6 x 1024, 32000 vocab)
    python bench/realistic.py --external            # weights in an external-data file
    python bench/realistic.py --config large --external   # 16 x 1536, ~2.4 GB: above protobuf's 2 GiB
    python bench/realistic.py --repeats 3 --runs 20 --json
    python bench/realistic.py --engine customop     # also the custom-op engine, against the default one
    python bench/realistic.py --with-options        # both sides given the same caller's SessionOptions
    python bench/realistic.py --polygraphy VENV/bin/polygraphy   # also `polygraphy run --onnxrt --onnxrt`

The model is generated into ``--workdir`` (default: the system temp folder) the first time and reused;
it is never committed. Every measurement runs in its own fresh process: the child reports build, first
run and steady-run p50 from inside, and the parent reads the child's peak resident size from
``os.wait4`` (``ru_maxrss``), so imports count on both sides alike. Sides alternate within each repeat;
ratios are dmlshim / onnxruntime of the same repeat. With ``--engine NAME`` a third side runs dmlshim with
that engine (``dmlshim:NAME``), and its ratios are taken against onnxruntime and against the default engine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.realistic_models import GPT2_SMALL, HELD_OUT, LARGE, DecoderConfig

CONFIGS = {"gpt2-small": GPT2_SMALL, "held-out": HELD_OUT, "large": LARGE}
SIDES = ("ort", "dmlshim")
ENGINE_SIDE = "dmlshim:"
"""Prefix of the side that runs dmlshim with a named engine (``dmlshim:customop``)."""


def _sides(engine: str | None) -> tuple[str, ...]:
    return SIDES if engine is None else (*SIDES, ENGINE_SIDE + engine)


def caller_options() -> Any:
    """The ``SessionOptions`` a typical client passes (``--with-options``): two intra-op threads and an
    explicit optimization level. Both sides get the same settings."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    return so


def _child(
    side: str, model: str, feeds_path: str, runs: int, out_path: str, with_options: bool = False
) -> int:
    """One side in this (fresh) process; prints its timings as JSON."""
    import numpy as np

    start = time.perf_counter()
    import onnxruntime as ort

    imported = time.perf_counter() - start
    with np.load(feeds_path) as data:
        feeds = {k: data[k] for k in data.files}
    so = caller_options() if with_options else None
    if side == "ort":
        cpu, start = time.process_time(), time.perf_counter()
        session: Any = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    else:
        # Imports are a once-per-process cost, timed apart from the session build on both sides:
        # onnxruntime's package above, dmlshim's session machinery (and onnx) here.
        start = time.perf_counter()
        import dmlshim

        session_class = dmlshim.InferenceSession  # the first use imports the session modules
        imported = time.perf_counter() - start
        engine = side[len(ENGINE_SIDE) :] if side.startswith(ENGINE_SIDE) else None
        cpu, start = time.process_time(), time.perf_counter()
        session = session_class(model, so) if engine is None else session_class(model, so, engine=engine)
    build = time.perf_counter() - start
    # CPU seconds of every thread of the process: what a shared machine's load does not inflate
    build_cpu = time.process_time() - cpu
    start = time.perf_counter()
    outputs = session.run(None, feeds)
    first = time.perf_counter() - start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    result: dict[str, Any] = {"import": imported, "build": build, "build_cpu": build_cpu, "first": first}
    result["p50"] = statistics.median(times)
    if side != "ort":
        record = session.last_run_record
        result["path"] = getattr(record, "path", None)
    names = [o.name for o in session.get_outputs()]
    np.savez(out_path, **dict(zip(names, outputs, strict=True)))
    print(json.dumps(result))
    return 0


def _measure(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` as a child; its JSON line (if any), wall seconds and peak RSS in MB."""
    start = time.perf_counter()
    # stderr to a file: a child writing more than a pipe holds there (onnxruntime's warnings on a large
    # model) while this process reads its stdout would block both for good
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err_file)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        err_file.seek(0)
        err = err_file.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # validate exits 1 on a difference; that is still a measurement
        raise RuntimeError(f"{argv} failed ({proc.returncode}):\n{err.decode()[-2000:]}")
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines and argv[-1] != "--json" else {}
    result.update(wall=wall, rss_mb=usage.ru_maxrss / 1024, returncode=proc.returncode)
    return result


_ORT_VALIDATE = """
import sys, numpy as np, onnxruntime as ort
model, feeds = sys.argv[1], dict(np.load(sys.argv[2]))
a = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
if len(sys.argv) > 3:  # two runners compared, as `polygraphy run MODEL --onnxrt --onnxrt` does
    b = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
"""


def prepare(config: DecoderConfig, workdir: Path, external: bool) -> tuple[Path, Path]:
    """The model and feeds files (generated when missing, in a child process: Linux carries a process's
    peak resident size over to the children it forks, so this process must stay small)."""
    tag = f"decoder_{config.layers}x{config.hidden}_v{config.vocab}_s{config.positions}"
    model_path = workdir / f"{tag}{'_ext' if external else ''}" / f"{tag}.onnx"
    feeds_path = workdir / f"{tag}_feeds.npz"
    if not (model_path.exists() and feeds_path.exists()):
        code = _GENERATE.format(
            repo=str(Path(__file__).resolve().parent.parent),
            config=repr(vars(config)),
            model=str(model_path),
            feeds=str(feeds_path),
            external=external,
        )
        subprocess.run([sys.executable, "-c", code], check=True)
    return model_path, feeds_path


_GENERATE = """
import sys; sys.path.insert(0, {repo!r})
import numpy as np
from pathlib import Path
from bench.realistic_models import DecoderConfig, decoder_feeds, write_decoder_step
config = DecoderConfig(**{config})
write_decoder_step(config, Path({model!r}), external={external})
np.savez({feeds!r}, **decoder_feeds(config))
"""

_DIFF = """
import sys, numpy as np
with np.load(sys.argv[1]) as a, np.load(sys.argv[2]) as b:
    print(max(float(np.max(np.abs(a[k] - b[k]), initial=0.0)) for k in b.files))
"""


def _max_diff(ours: Path, theirs: Path) -> float:
    # In a child, for the reason prepare() gives.
    done = subprocess.run(
        [sys.executable, "-c", _DIFF, str(ours), str(theirs)], check=True, capture_output=True, text=True
    )
    return float(done.stdout.strip())


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Every repeat of every measurement, and the median ratios."""
    config = CONFIGS[args.config]
    workdir = Path(args.workdir)
    model, feeds = prepare(config, workdir, args.external)
    py, me = sys.executable, str(Path(__file__).resolve())
    env_cli = [py, "-m", "dmlshim", "validate", str(model), "--inputs", str(feeds), "-q"]
    repeats: list[dict[str, Any]] = []
    diff = None
    engine_diff = None
    sides = _sides(args.engine)
    for r in range(args.repeats):
        row: dict[str, Any] = {}
        order = sides if r % 2 == 0 else sides[::-1]
        for side in order:
            out = workdir / f"out_{side.replace(':', '_')}.npz"
            child = [py, me, "--child", side, str(model), str(feeds), str(args.runs), str(out)]
            row[side] = _measure(child + (["--with-options"] if args.with_options else []))
        diff = _max_diff(workdir / "out_dmlshim.npz", workdir / "out_ort.npz")
        if args.engine is not None:
            engine_out = workdir / f"out_{(ENGINE_SIDE + args.engine).replace(':', '_')}.npz"
            engine_diff = _max_diff(engine_out, workdir / "out_ort.npz")
        if not args.skip_validate:
            row["validate"] = _measure(env_cli)
            row["ort_once"] = _measure([py, "-c", _ORT_VALIDATE, str(model), str(feeds)])
            row["ort_twice"] = _measure([py, "-c", _ORT_VALIDATE, str(model), str(feeds), "twice"])
            if args.polygraphy:
                row["polygraphy"] = _measure(
                    [
                        args.polygraphy,
                        "run",
                        str(model),
                        "--onnxrt",
                        "--onnxrt",
                        "--load-inputs",
                        str(_polygraphy_feeds(args.polygraphy, feeds)),
                    ]
                )
        repeats.append(row)
        args.log(f"repeat {r + 1}: " + json.dumps(_ratios(row)))
    return {
        "config": vars(config)
        | {"weight_mb": config.weight_bytes / 2**20, "external": args.external}
        | {"with_options": args.with_options},
        "repeats": repeats,
        "ratios": [_ratios(row) for row in repeats],
        "max_abs_diff": diff,
        "engine": args.engine,
        "engine_max_abs_diff": engine_diff,
    }


def _polygraphy_feeds(polygraphy: str, feeds: Path) -> Path:
    """The feeds as polygraphy's JSON, written by polygraphy's own Python (the interpreter of its script)."""
    target = feeds.with_suffix(".polygraphy.json")
    if not target.exists():
        with open(polygraphy, encoding="utf-8") as script:
            interpreter = script.readline()[2:].strip()
        code = (
            "import sys, numpy as np; from polygraphy.json import save_json; "
            "save_json([dict(np.load(sys.argv[1]))], sys.argv[2])"
        )
        subprocess.run([interpreter, "-c", code, str(feeds), str(target)], check=True)
    return target


def _ratios(row: dict[str, Any]) -> dict[str, float]:
    o, d = row["ort"], row["dmlshim"]
    ratios = {
        "build": d["build"] / o["build"],
        "build_with_import": (d["build"] + d.get("import", 0.0)) / o["build"],
        "first_run": d["first"] / o["first"],
        "run_p50": d["p50"] / o["p50"],
        "peak_rss": d["rss_mb"] / o["rss_mb"],
    }
    engine = next((side for side in row if side.startswith(ENGINE_SIDE)), None)
    if engine is not None:
        e = row[engine]
        for key, num, den in (
            ("build", "build", "build"),
            ("first_run", "first", "first"),
            ("run_p50", "p50", "p50"),
            ("peak_rss", "rss_mb", "rss_mb"),
        ):
            ratios[f"{engine} {key} vs ort"] = e[num] / o[den]
            ratios[f"{engine} {key} vs default"] = e[num] / d[den]
    if "validate" in row:
        ratios["validate_wall_vs_ort_once"] = row["validate"]["wall"] / row["ort_once"]["wall"]
        ratios["validate_rss_vs_ort_once"] = row["validate"]["rss_mb"] / row["ort_once"]["rss_mb"]
        ratios["validate_wall_vs_ort_twice"] = row["validate"]["wall"] / row["ort_twice"]["wall"]
        ratios["validate_rss_vs_ort_twice"] = row["validate"]["rss_mb"] / row["ort_twice"]["rss_mb"]
    if "polygraphy" in row:
        ratios["validate_wall_vs_polygraphy"] = row["validate"]["wall"] / row["polygraphy"]["wall"]
        ratios["validate_rss_vs_polygraphy"] = row["validate"]["rss_mb"] / row["polygraphy"]["rss_mb"]
    return ratios


def table(result: dict[str, Any]) -> str:
    """The repeats as a markdown table (seconds, MB, ratios)."""
    lines = [
        "| repeat | side | import s | build s | first run s | run p50 ms | peak RSS MB | path |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for i, row in enumerate(result["repeats"], 1):
        for side in _sides(result.get("engine")):
            m = row[side]
            lines.append(
                f"| {i} | {side} | {m.get('import', 0.0):.2f} | {m['build']:.2f} | {m['first']:.3f} | "
                f"{m['p50'] * 1e3:.1f} | "
                f"{m['rss_mb']:.0f} | {m.get('path') or ''} |"
            )
        for side in ("validate", "ort_once", "ort_twice", "polygraphy"):
            if side in row:
                m = row[side]
                lines.append(
                    f"| {i} | {side} (whole process) | | {m['wall']:.2f} | | | {m['rss_mb']:.0f} | |"
                )
    lines += [
        "",
        "| ratio (dmlshim / onnxruntime) | "
        + " | ".join(f"repeat {i + 1}" for i in range(len(result["ratios"])))
        + " |",
        "| --- |" + " ---: |" * len(result["ratios"]),
    ]
    for key in result["ratios"][0]:
        lines.append(f"| {key} | " + " | ".join(f"{r[key]:.2f}" for r in result["ratios"]) + " |")
    lines.append(f"\nmax |dmlshim - onnxruntime| over the outputs: {result['max_abs_diff']}")
    if result.get("engine"):
        lines.append(f"max |{ENGINE_SIDE}{result['engine']} - onnxruntime|: {result['engine_max_abs_diff']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        side, model, feeds, runs, out = argv[1:6]
        return _child(side, model, feeds, int(runs), out, with_options="--with-options" in argv[6:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2-small")
    parser.add_argument("--external", action="store_true", help="weights in an external-data file")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10, help="steady runs per side (p50)")
    parser.add_argument("--skip-validate", action="store_true")
    parser.add_argument("--engine", help="also run dmlshim with this engine (customop, partitioned, ...)")
    parser.add_argument(
        "--with-options",
        action="store_true",
        help="both sides built with the same caller's SessionOptions "
        "(2 intra-op threads, extended optimization)",
    )
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "dmlshim-bench-realistic"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--polygraphy", help="a polygraphy executable: also time `polygraphy run --onnxrt --onnxrt`"
    )
    args = parser.parse_args(argv)
    args.log = lambda message: print(message, file=sys.stderr, flush=True)
    result = bench(args)
    print(json.dumps(result, indent=1) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
