"""dmlshim benchmark: DirectML kernels and whole models against onnxruntime CPU, onnx.reference and the
custom-op bridge; translation time per node; peak memory of a kernel call.

Usage::

    python bench/run.py [--quick] [--json] [--sizes 4096 262144 4194304] [--sections kernels models ...]

Every competitor runs on the same inputs in the same process; times are medians over interleaved rounds
and ratios are medians of per-round ratios (see ``bench/measure.py``). Pieces of dmlshim that are not
available are reported as ``n/a`` instead of failing the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import onnx
import onnxruntime as ort

from bench.cases import CASE_BUILDERS, KernelCase
from bench.measure import interleaved, peak_allocation, time_once
from bench.models import many_nodes_model
from dmlshim.kernels import execute

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO / "onnx_models"
SIZES = (4096, 262144, 4194304)
NA = "n/a (not available)"


@dataclass
class Config:
    """What one run measures.

    Attributes:
        sizes: element counts of the kernel cases.
        rounds: interleaved timing rounds per kernel case and per model.
        slow_budget: seconds one call of onnx.reference or the custom-op bridge may be expected to take;
            larger sizes are skipped (their time is extrapolated from the previous size).
        slow_repeats: calls of the slow competitors timed (best of).
        sections: which parts run.
        translation_nodes: node count of the generated translation model.
        cases: case-name filter (substring); empty = all.
    """

    sizes: tuple[int, ...] = SIZES
    rounds: int = 11
    slow_budget: float = 4.0
    slow_repeats: int = 2
    sections: tuple[str, ...] = ("kernels", "models", "translation")
    translation_nodes: int = 1000
    cases: tuple[str, ...] = ()
    log: Callable[[str], None] = field(default=lambda message: None)


def machine() -> dict[str, Any]:
    """The machine and the library versions."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    from dmlshim.kernels import parallel

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "kernel_threads": parallel.THREADS,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "platform": platform.platform(),
    }


def ort_session(model: onnx.ModelProto | str, threads: int | None = None) -> ort.InferenceSession:
    """An onnxruntime CPU session: default options (what users get), or ``threads`` intra-op threads."""
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    payload = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(payload, options, providers=["CPUExecutionProvider"])


def _error_note(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"failed: {type(e).__name__}{': ' + text[:80] if text else ''}"


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
            return None, _error_note(e)
        self._last[key] = (elements, seconds)
        return seconds, ""


def reference_call(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
    """An onnx.reference evaluation of the model."""
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model)
    return lambda: evaluator.run(None, feeds)


def dmlshim_session(model: onnx.ModelProto | str, engine: str) -> Any:
    """A dmlshim.InferenceSession on ``engine``; raises when dmlshim cannot provide it."""
    import dmlshim

    return dmlshim.InferenceSession(model, engine=engine)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 4)


def bench_kernel_case(
    case: KernelCase, config: Config, reference: SlowCompetitor, bridge: SlowCompetitor
) -> dict[str, Any]:
    """One kernel case: our kernel vs onnxruntime (default and 1 thread), onnx.reference, the bridge."""
    ours = execute(case.desc, case.bound).output
    default, single = ort_session(case.model), ort_session(case.model, 1)
    expected = single.run(None, case.feeds)[0]
    match = ours.shape == tuple(case.desc.tensors()["OutputTensor"].sizes) and np.array_equal(
        ours.reshape(expected.shape), expected
    )
    del ours
    timing = interleaved(
        {
            "ours": lambda: execute(case.desc, case.bound),
            "ort": lambda: default.run(None, case.feeds),
            "ort1": lambda: single.run(None, case.feeds),
        },
        config.rounds,
    )
    peak = peak_allocation(lambda: execute(case.desc, case.bound).output)
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
        "match": bool(match),
        "ours_ms": _ms(ours_s),
        "ort_ms": _ms(timing.medians["ort"]),
        "ort1_ms": _ms(timing.medians["ort1"]),
        "ratio_ort": round(timing.ratio("ours", "ort"), 3),
        "ratio_ort1": round(timing.ratio("ours", "ort1"), 3),
        "reference_ms": _ms(ref_s),
        "reference_speedup": None if ref_s is None else round(ref_s / ours_s, 1),
        "reference_note": ref_note,
        "bridge_ms": _ms(bridge_s),
        "bridge_speedup": None if bridge_s is None else round(bridge_s / ours_s, 1),
        "bridge_note": bridge_note,
        "peak_mb": round(peak / 2**20, 3),
        "io_mb": round(case.io_bytes / 2**20, 3),
        "memory_ratio": round(peak / case.io_bytes, 3),
    }


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
                    "error": _error_note(e),
                }
                config.log(traceback.format_exc())
            config.log(f"kernel {case.name} @ {case.elements}: {row.get('ratio_ort', row.get('error'))}")
            rows.append(row)
    return rows


def _same_outputs(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> bool:
    if len(actual) != len(expected):
        return False
    for a, e in zip(actual, expected, strict=True):
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape or a.dtype != e.dtype:
            return False
        if a.dtype.kind == "f":
            if not np.allclose(a, e, rtol=1e-5, atol=1e-6, equal_nan=True):
                return False
        elif not np.array_equal(a, e):
            return False
    return True


def _beam_feeds(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    beams = max(1, n // 80)
    return {
        "past_keys": rng.standard_normal((beams, 2, 5, 8), dtype=np.float32),
        "beam_idx": rng.integers(0, beams, size=beams, dtype=np.int64),
    }


def _last_token_feeds(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    batch = max(1, n // 128)
    return {
        "hidden_states": rng.standard_normal((batch, 8, 16), dtype=np.float32),
        "lengths": rng.integers(1, 9, size=batch, dtype=np.int64),
    }


SCALED_FEEDS: dict[str, Callable[[np.random.Generator, int], dict[str, np.ndarray]]] = {
    "gather_beam_reorder_dynamic": _beam_feeds,
    "gathernd_dynamic_batch": _last_token_feeds,
}
"""Models with a symbolic batch dimension, also run on generated inputs of about 4M elements: the
samples are tiny, so their timings only show fixed per-run overhead."""


def bench_model(path: Path, config: Config, scaled: int = 0) -> dict[str, Any]:
    """One model of onnx_models/: onnxruntime CPU alone vs the dmlshim engines and onnx.reference, on
    its sample input or (``scaled`` > 0) on generated inputs of about ``scaled`` elements."""
    if scaled:
        feeds = SCALED_FEEDS[path.stem](np.random.default_rng(0), scaled)
        name = f"{path.stem} @ {_size_label(scaled)}"
    else:
        feeds = dict(np.load(path.with_suffix(".npz")))
        name = path.stem
    row: dict[str, Any] = {"section": "model", "model": name}
    default = ort_session(str(path))
    expected = default.run(None, feeds)
    competitors: dict[str, Callable[[], Any]] = {"ort": lambda: default.run(None, feeds)}
    for engine, key in (("partitioned", "partitioned"), ("customop", "customop")):
        try:
            session = dmlshim_session(str(path), engine)
            row[f"{key}_match"] = _same_outputs(session.run(None, feeds), expected)
            if key == "partitioned":
                record = session.last_run_record
                if record is not None:
                    row["emulated_nodes"] = len(record.emulated)
                    row["gather_scatter_nodes"] = len(record.nodes)
            competitors[key] = (lambda s: lambda: s.run(None, feeds))(session)
            row[f"{key}_note"] = ""
        except Exception as e:
            row[f"{key}_note"] = NA if "unknown engine" in str(e) else _error_note(e)
            config.log(traceback.format_exc())
    timing = interleaved(competitors, config.rounds)
    row["ort_ms"] = _ms(timing.medians["ort"])
    for key in ("partitioned", "customop"):
        row[f"{key}_ms"] = _ms(timing.medians.get(key))
        row[f"ratio_{key}"] = round(timing.ratio(key, "ort"), 3) if key in timing.medians else None
    try:
        ref_s: float | None = time_once(reference_call(str(path), feeds), 1 if scaled else 3)
        row["reference_note"] = ""
    except Exception as e:
        ref_s = None
        row["reference_note"] = _error_note(e)
    row["reference_ms"] = _ms(ref_s)
    part = timing.medians.get("partitioned")
    row["reference_speedup"] = None if ref_s is None or part is None else round(ref_s / part, 1)
    return row


def bench_models(config: Config) -> list[dict[str, Any]]:
    """Every model in onnx_models/ that has a sample input."""
    rows = []
    for path in sorted(MODELS_DIR.glob("*.onnx")):
        if not path.with_suffix(".npz").exists():
            continue
        for scaled in (0, max(config.sizes)) if path.stem in SCALED_FEEDS else (0,):
            try:
                row = bench_model(path, config, scaled)
            except Exception as e:
                row = {"section": "model", "model": path.stem, "error": _error_note(e)}
                config.log(traceback.format_exc())
            config.log(f"model {row['model']}: {row.get('ratio_partitioned', row.get('error'))}")
            rows.append(row)
    return rows


def bench_translation(config: Config) -> list[dict[str, Any]]:
    """translate_model on a generated model of many distinct gather/scatter nodes."""
    count = config.translation_nodes
    row: dict[str, Any] = {"section": "translation", "nodes": count}
    try:
        from dmlshim.translate import infer_shapes, translate_model
    except Exception as e:
        row["note"] = NA if isinstance(e, ImportError) else _error_note(e)
        return [row]
    model = many_nodes_model(count)
    translate_model(many_nodes_model(12))  # imports, schema tables and first-use setup
    clear = _translation_cache_clear()
    cold, warm, shapes, lowest = [], [], [], []
    result = None
    for _ in range(3 if config.rounds > 5 else 1):
        start = time.perf_counter()
        infer_shapes(model, None)
        shapes.append(time.perf_counter() - start)
        if clear is not None:
            clear()
        start = time.perf_counter()
        result = translate_model(model)
        cold.append(time.perf_counter() - start)
        # The lowest feature level of each node is computed when first read (reports, JSON), not by
        # translate_model: time that separately.
        start = time.perf_counter()
        _ = [node.min_feature_level for node in result.nodes]
        lowest.append(time.perf_counter() - start)
        start = time.perf_counter()
        translate_model(model)
        warm.append(time.perf_counter() - start)
    assert result is not None
    summary = result.summary
    row.update(
        {
            "translated": summary.get("dml"),
            "gather_scatter_nodes": summary.get("gather_scatter_nodes"),
            "cold_us_per_node": round(statistics.median(cold) * 1e6 / count, 1),
            "warm_us_per_node": round(statistics.median(warm) * 1e6 / count, 1),
            "shape_inference_us_per_node": round(statistics.median(shapes) * 1e6 / count, 1),
            "lowest_level_us_per_node": round(statistics.median(lowest) * 1e6 / count, 1),
            "note": "" if clear is not None else "translation cache not found: cold = first call",
        }
    )
    return [row]


def _translation_cache_clear() -> Callable[[], None] | None:
    """The translator's cache reset, if it has one (cold timings must not hit it)."""
    try:
        from dmlshim.translate import translator
    except ImportError:
        return None
    cached = getattr(translator, "_translate", None)
    return getattr(cached, "cache_clear", None)


TARGETS = (
    ("kernel <= 1.5x onnxruntime CPU (default options)", "ratio_ort", 1.5, "max"),
    ("kernel >= 20x faster than onnx.reference", "reference_speedup", 20.0, "min"),
    ("kernel >= 20x faster than the custom-op bridge", "bridge_speedup", 20.0, "min"),
    ("kernel peak memory <= 1.5x input+output bytes", "memory_ratio", 1.5, "max"),
)


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target of issue 6, evaluated at the largest kernel size, met or not, with the offenders."""
    out: list[dict[str, Any]] = []
    kernels = [r for r in rows if r.get("section") == "kernel" and "error" not in r]
    if kernels:
        largest = max(r["elements"] for r in kernels)
        top = [r for r in kernels if r["elements"] == largest]
        for label, key, limit, kind in TARGETS:
            values = [(r["case"], r[key]) for r in top if r.get(key) is not None]
            if not values:
                out.append({"target": label, "size": largest, "met": None, "worst": NA, "offenders": []})
                continue
            bad = [(c, v) for c, v in values if (v > limit if kind == "max" else v < limit)]
            worst = max(values, key=lambda cv: cv[1]) if kind == "max" else min(values, key=lambda cv: cv[1])
            out.append(
                {
                    "target": label,
                    "size": largest,
                    "met": not bad,
                    "worst": f"{worst[0]}: {worst[1]}",
                    "offenders": [f"{c}: {v}" for c, v in bad],
                }
            )
    models = [r for r in rows if r.get("section") == "model" and r.get("ratio_partitioned") is not None]
    if models:
        bad = [(r["model"], r["ratio_partitioned"]) for r in models if r["ratio_partitioned"] > 1.3]
        worst = max(models, key=lambda r: r["ratio_partitioned"])
        out.append(
            {
                "target": "model (partitioned engine) <= 1.3x onnxruntime CPU alone",
                "size": None,
                "met": not bad,
                "worst": f"{worst['model']}: {worst['ratio_partitioned']}",
                "offenders": [f"{m}: {v}" for m, v in bad],
            }
        )
    for r in rows:
        if r.get("section") == "translation" and r.get("cold_us_per_node") is not None:
            out.append(
                {
                    "target": "translation < 100 us per node",
                    "size": r["nodes"],
                    "met": r["cold_us_per_node"] < 100,
                    "worst": f"cold {r['cold_us_per_node']} us, cached {r['warm_us_per_node']} us",
                    "offenders": [],
                }
            )
    return out


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _size_label(n: int) -> str:
    for unit, scale in (("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def markdown(rows: Sequence[dict[str, Any]], info: dict[str, Any]) -> str:
    """The rows as markdown tables."""
    lines = [
        f"Machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), kernel threads "
        f"{info['kernel_threads']}; Python {info['python']}, numpy {info['numpy']}, onnxruntime "
        f"{info['onnxruntime']}, onnx {info['onnx']}.",
        "",
    ]
    kernels = [r for r in rows if r.get("section") == "kernel"]
    if kernels:
        lines += [
            "### Kernels (ms per call; ratio = ours / onnxruntime, median of per-round ratios)",
            "",
            "| case | elements | ours | ORT | ORT 1 thr | ours/ORT | ours/ORT 1 thr | onnx.reference "
            "| ref/ours | custom-op bridge | bridge/ours | peak MB | peak / (in+out) | same as ORT |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in kernels:
            if "error" in r:
                lines.append(f"| {r['case']} | {_size_label(r['elements'])} | {r['error']} |")
                continue
            ref = _fmt(r["reference_ms"], 1) if r["reference_ms"] is not None else r["reference_note"] or "—"
            bridge = _fmt(r["bridge_ms"], 1) if r["bridge_ms"] is not None else r["bridge_note"] or "—"
            lines.append(
                f"| {r['case']} | {_size_label(r['elements'])} | {_fmt(r['ours_ms'], 3)} "
                f"| {_fmt(r['ort_ms'], 3)} | {_fmt(r['ort1_ms'], 3)} | {_fmt(r['ratio_ort'])} "
                f"| {_fmt(r['ratio_ort1'])} | {ref} | {_fmt(r['reference_speedup'], 0)} | {bridge} "
                f"| {_fmt(r['bridge_speedup'], 0)} | {_fmt(r['peak_mb'], 1)} | {_fmt(r['memory_ratio'])} "
                f"| {_fmt(r['match'])} |"
            )
        lines.append("")
    models = [r for r in rows if r.get("section") == "model"]
    if models:
        lines += [
            "### Whole models (ms per run; ratio = engine / onnxruntime CPU alone)",
            "",
            "| model | ORT | partitioned | partitioned/ORT | custom-op | custom-op/ORT | onnx.reference "
            "| ref/partitioned | emulated nodes | same as ORT |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in models:
            if "error" in r:
                lines.append(f"| {r['model']} | {r['error']} |")
                continue
            part = (
                _fmt(r.get("partitioned_ms"), 3)
                if r.get("partitioned_ms") is not None
                else r.get("partitioned_note", "—")
            )
            custom = (
                _fmt(r.get("customop_ms"), 3)
                if r.get("customop_ms") is not None
                else r.get("customop_note", "—")
            )
            ref = _fmt(r["reference_ms"], 2) if r["reference_ms"] is not None else r["reference_note"]
            emulated = f"{r['emulated_nodes']}/{r['gather_scatter_nodes']}" if "emulated_nodes" in r else "—"
            lines.append(
                f"| {r['model']} | {_fmt(r['ort_ms'], 3)} | {part} | {_fmt(r.get('ratio_partitioned'))} "
                f"| {custom} | {_fmt(r.get('ratio_customop'))} | {ref} "
                f"| {_fmt(r.get('reference_speedup'), 1)} "
                f"| {emulated} | {_fmt(r.get('partitioned_match'))} |"
            )
        lines.append("")
    for r in rows:
        if r.get("section") == "translation":
            lines += ["### Translation", ""]
            if r.get("cold_us_per_node") is None:
                lines += [f"translate_model: {r.get('note', NA)}", ""]
                continue
            lines += [
                "| nodes | translated | cold us/node | cached us/node | of which shape inference us/node "
                "| lowest feature level, on first read us/node |",
                "|---:|---:|---:|---:|---:|---:|",
                f"| {r['nodes']} | {r['translated']} | {r['cold_us_per_node']} | {r['warm_us_per_node']} "
                f"| {r['shape_inference_us_per_node']} | {r.get('lowest_level_us_per_node', NA)} |",
                "",
            ]
    goals = targets(rows)
    if goals:
        lines += ["### Targets", "", "| target | met | worst | over the limit |", "|---|---|---|---|"]
        for g in goals:
            met = "n/a" if g["met"] is None else ("yes" if g["met"] else "NO")
            lines.append(f"| {g['target']} | {met} | {g['worst']} | {', '.join(g['offenders']) or '—'} |")
        lines.append("")
    return "\n".join(lines)


def run(config: Config) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the configured sections; ``(machine info, rows)``."""
    info = machine()
    rows: list[dict[str, Any]] = []
    if "kernels" in config.sections:
        rows += bench_kernels(config)
    if "models" in config.sections:
        rows += bench_models(config)
    if "translation" in config.sections:
        rows += bench_translation(config)
    return info, rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and a small slow budget (< 1 min)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of tables")
    parser.add_argument("--sizes", type=int, nargs="+", help=f"kernel element counts (default {SIZES})")
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=("kernels", "models", "translation"),
        default=["kernels", "models", "translation"],
    )
    parser.add_argument("--cases", nargs="+", default=[], help="only kernel cases whose name contains one")
    parser.add_argument("--rounds", type=int, help="timing rounds (default 11, quick 5)")
    parser.add_argument("--save", metavar="PATH", help="also write the JSON document to PATH")
    parser.add_argument("--verbose", action="store_true", help="progress and tracebacks on stderr")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = Config(
        sizes=tuple(args.sizes) if args.sizes else SIZES,
        rounds=args.rounds or (5 if args.quick else 11),
        slow_budget=0.4 if args.quick else 4.0,
        slow_repeats=1 if args.quick else 2,
        sections=tuple(args.sections),
        cases=tuple(args.cases),
    )
    if args.verbose:
        config.log = lambda message: print(message, file=sys.stderr, flush=True)
    start = time.perf_counter()
    info, rows = run(config)
    info["bench_seconds"] = round(time.perf_counter() - start, 1)
    info["mode"] = "quick" if args.quick else "full"
    document = {"machine": info, "rows": rows, "targets": targets(rows)}
    if args.save:
        Path(args.save).write_text(json.dumps(document, indent=1) + "\n")
    if args.json:
        print(json.dumps(document, indent=1))
    else:
        print(markdown(rows, info))
        print(f"({info['mode']} run, {info['bench_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
