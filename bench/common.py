"""What every benchmark section shares: the run configuration, the machine description, onnxruntime and
dmlshim sessions, number formatting."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO / "onnx_models"
REAL_MODELS_DIR = MODELS_DIR / "real"
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
        models: model filter (substrings of file stems, or paths); empty = every shipped model.
        loads: machine loads the model section runs under ("idle", "busy").
        latency_calls: single calls per side for the p50/p90 latency of a model.
        memory: measure each session build's added peak memory in a fresh process.
        customop: also time the custom-op engine on whole models.
    """

    sizes: tuple[int, ...] = SIZES
    rounds: int = 11
    slow_budget: float = 4.0
    slow_repeats: int = 2
    sections: tuple[str, ...] = ("kernels", "models", "translation")
    translation_nodes: int = 1000
    cases: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    loads: tuple[str, ...] = ("idle",)
    latency_calls: int = 200
    memory: bool = True
    customop: bool = True
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


def error_note(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"failed: {type(e).__name__}{': ' + text[:80] if text else ''}"


def dmlshim_session(model: onnx.ModelProto | str, engine: str) -> Any:
    """A dmlshim.InferenceSession on ``engine``; raises when dmlshim cannot provide it."""
    import dmlshim

    return dmlshim.InferenceSession(model, engine=engine)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 4)


def size_label(n: int) -> str:
    for unit, scale in (("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: a dash for None, yes/NO for bools, fixed digits for floats."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
