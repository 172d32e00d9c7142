"""Whole-model section: every shipped model (``onnx_models/`` and the real-architecture corpus in
``onnx_models/real/``) on its sample inputs, onnxruntime CPU alone against dmlshim's engines.

Per model: median time per run (interleaved rounds) and the ratio to onnxruntime; single-call latency
p50/p90 on both sides (the spread a user sees); session build time on both sides; the peak memory a
session build adds, each side in a fresh process. Optionally all of it again while a second process
keeps one core busy (``load="busy"``), as when a validation job shares the machine.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    MODELS_DIR,
    NA,
    REAL_MODELS_DIR,
    REPO,
    Config,
    dmlshim_session,
    error_note,
    ms,
    ort_session,
    size_label,
)
from bench.measure import interleaved, latencies, percentile, time_once


def same_outputs(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> bool:
    """Every output has the same shape and dtype and equal values (floats within 1e-5 relative)."""
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


def shipped_models(names: Sequence[str] = ()) -> list[Path]:
    """Every shipped model with a sample input (``M.npz`` beside ``M.onnx``), filtered by ``names``
    (substrings of the file stem, or paths)."""
    found = [
        p
        for folder in (MODELS_DIR, REAL_MODELS_DIR)
        for p in sorted(folder.glob("*.onnx"))
        if p.with_suffix(".npz").exists()
    ]
    if not names:
        return found
    picked = [Path(n) for n in names if n.endswith(".onnx") and Path(n).exists()]
    picked += [p for p in found if any(n in p.stem for n in names if not n.endswith(".onnx"))]
    return picked


def build_probe(engine: str, model: Path) -> dict[str, float] | None:
    """Session build time and the peak memory it adds, measured in a fresh process."""
    probe = REPO / "bench" / "build_probe.py"
    try:
        done = subprocess.run(
            [sys.executable, str(probe), engine, str(model)], capture_output=True, text=True, timeout=600
        )
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def _spin(stop: Any) -> None:
    # A second process doing numeric work on one core, like another job sharing the machine.
    a = np.random.default_rng(0).standard_normal((256, 256))
    while not stop.is_set():
        a = np.tanh(a @ a * 1e-3)


@contextmanager
def machine_load(load: str) -> Iterator[None]:
    """``"idle"``: nothing; ``"busy"``: one other process keeps a core busy meanwhile."""
    if load != "busy":
        yield
        return
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    worker = context.Process(target=_spin, args=(stop,), daemon=True)
    worker.start()
    time.sleep(0.3)
    try:
        yield
    finally:
        stop.set()
        worker.join(5)
        if worker.is_alive():
            worker.kill()


def bench_model(
    path: Path, config: Config, scaled: int = 0, load: str = "idle", memory: bool = False
) -> dict[str, Any]:
    """One model: onnxruntime CPU alone vs the dmlshim engines, on its sample input or (``scaled`` > 0)
    on generated inputs of about ``scaled`` elements."""
    if scaled:
        feeds = SCALED_FEEDS[path.stem](np.random.default_rng(0), scaled)
        name = f"{path.stem} @ {size_label(scaled)}"
    else:
        with np.load(path.with_suffix(".npz"), allow_pickle=False) as sample:
            feeds = {k: sample[k] for k in sample.files}
        name = path.stem if path.parent == MODELS_DIR else f"real/{path.stem}"
    row: dict[str, Any] = {"section": "model", "model": name, "load": load}
    row["ort_build_ms"] = ms(time_once(lambda: ort_session(str(path)), 2))
    default = ort_session(str(path))
    expected = default.run(None, feeds)
    competitors: dict[str, Callable[[], Any]] = {"ort": lambda: default.run(None, feeds)}
    for engine in ("partitioned", "customop"):
        if engine == "customop" and not config.customop:
            row["customop_note"] = "not run"
            continue
        try:
            start = time.perf_counter()
            session = dmlshim_session(str(path), engine)
            row[f"{engine}_build_ms"] = ms(time.perf_counter() - start)
            row[f"{engine}_match"] = same_outputs(session.run(None, feeds), expected)
            if engine == "partitioned":
                again = time_once(lambda: dmlshim_session(str(path), "partitioned"))
                row["partitioned_build_ms"] = ms(min(row["partitioned_build_ms"] / 1e3, again))
                record = session.last_run_record
                if record is not None:
                    row["emulated_nodes"] = len(record.emulated)
                    row["gather_scatter_nodes"] = len(record.nodes)
            competitors[engine] = (lambda s: lambda: s.run(None, feeds))(session)
            row[f"{engine}_note"] = ""
        except Exception as e:
            row[f"{engine}_note"] = NA if "unknown engine" in str(e) else error_note(e)
            config.log(traceback.format_exc())
    timing = interleaved(competitors, config.rounds)
    row["ort_ms"] = ms(timing.medians["ort"])
    for key in ("partitioned", "customop"):
        row[f"{key}_ms"] = ms(timing.medians.get(key))
        row[f"ratio_{key}"] = round(timing.ratio(key, "ort"), 3) if key in timing.medians else None
    if "partitioned" in competitors and "customop" in competitors:
        row["ratio_customop_partitioned"] = round(timing.ratio("customop", "partitioned"), 3)
    if "partitioned" in competitors:
        samples = latencies({k: competitors[k] for k in ("ort", "partitioned")}, config.latency_calls)
        for key in ("ort", "partitioned"):
            p50, p90 = percentile(samples[key], 50), percentile(samples[key], 90)
            row[f"{key}_p50_ms"], row[f"{key}_p90_ms"] = ms(p50), ms(p90)
            row[f"{key}_spread"] = round(p90 / p50, 3) if p50 > 0 else None
        if row["ort_spread"] and row["partitioned_spread"]:
            row["spread_ratio"] = round(row["partitioned_spread"] / row["ort_spread"], 3)
    if memory and not scaled:
        for engine in ("ort", "partitioned"):
            probe = build_probe(engine, path)
            row[f"{engine}_build_mb"] = None if probe is None else round(probe["added_mb"], 1)
        if row.get("ort_build_mb") and row.get("partitioned_build_mb") is not None:
            row["build_memory_ratio"] = round(row["partitioned_build_mb"] / max(row["ort_build_mb"], 1.0), 3)
    if row.get("partitioned_build_ms") is not None and row["ort_build_ms"]:
        row["build_ratio"] = round(row["partitioned_build_ms"] / row["ort_build_ms"], 3)
    return row


def bench_models(config: Config) -> list[dict[str, Any]]:
    """Every selected model, under every selected machine load."""
    rows = []
    for load in config.loads:
        with machine_load(load):
            for path in shipped_models(config.models):
                scales = (0, max(config.sizes)) if path.stem in SCALED_FEEDS and not config.models else (0,)
                for scaled in scales:
                    try:
                        row = bench_model(path, config, scaled, load, memory=config.memory and load == "idle")
                    except Exception as e:
                        row = {"section": "model", "model": path.stem, "load": load, "error": error_note(e)}
                        config.log(traceback.format_exc())
                    outcome = row.get("ratio_partitioned", row.get("error"))
                    config.log(f"model {row['model']} ({load}): {outcome}")
                    rows.append(row)
    return rows
