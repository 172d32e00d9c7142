"""dmlshim benchmark: DirectML kernels and whole models against onnxruntime CPU, onnx.reference and the
custom-op bridge; translation time per node; session build time and memory; latency spread.

Usage::

    python bench/run.py [--quick] [--json] [--sizes 4096 262144 4194304] [--sections kernels models ...]
    python bench/run.py --models [NAME ...] [--busy]

Every competitor runs on the same inputs in the same process; times are medians over interleaved rounds
and ratios are medians of per-round ratios (see ``bench/measure.py``). Pieces of dmlshim that are not
available are reported as ``n/a`` instead of failing the run.
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

from bench.common import MODELS_DIR, NA, REAL_MODELS_DIR, SIZES, Config, machine
from bench.kernels_bench import bench_kernel_case, bench_kernels
from bench.models_bench import bench_model, bench_models, same_outputs, shipped_models
from bench.report import markdown, targets
from bench.translation_bench import bench_translation

__all__ = [
    "MODELS_DIR",
    "NA",
    "REAL_MODELS_DIR",
    "Config",
    "bench_kernel_case",
    "bench_kernels",
    "bench_model",
    "bench_models",
    "bench_translation",
    "machine",
    "markdown",
    "run",
    "same_outputs",
    "shipped_models",
    "targets",
]


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
    parser.add_argument(
        "--models",
        nargs="*",
        metavar="NAME",
        help="only the whole-model section; NAMEs (substrings of model names, or .onnx paths) pick models",
    )
    parser.add_argument("--busy", action="store_true", help="models also under a busy 2nd process")
    parser.add_argument("--no-memory", action="store_true", help="no session-build memory probes")
    parser.add_argument("--no-customop", action="store_true", help="no custom-op engine on models")
    parser.add_argument("--cases", nargs="+", default=[], help="only kernel cases whose name contains one")
    parser.add_argument("--rounds", type=int, help="timing rounds (default 11, quick 5)")
    parser.add_argument("--save", metavar="PATH", help="also write the JSON document to PATH")
    parser.add_argument("--verbose", action="store_true", help="progress and tracebacks on stderr")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sections = ("models",) if args.models is not None else tuple(args.sections)
    config = Config(
        sizes=tuple(args.sizes) if args.sizes else SIZES,
        rounds=args.rounds or (5 if args.quick else 11),
        slow_budget=0.4 if args.quick else 4.0,
        slow_repeats=1 if args.quick else 2,
        sections=sections,
        cases=tuple(args.cases),
        models=tuple(args.models or ()),
        loads=("idle", "busy") if args.busy else ("idle",),
        latency_calls=60 if args.quick else 200,
        memory=not args.no_memory,
        customop=not args.no_customop,
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
