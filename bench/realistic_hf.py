"""Real configurations through transformers: session build, first run, steady run and peak memory of
dmlshim against onnxruntime CPU, and ``dmlshim validate`` against onnxruntime alone (issue 22).

Usage::

    python bench/realistic_hf.py                              # GPT-2 small step, BERT-base, Llama-style step
    python bench/realistic_hf.py --models gpt2 --repeats 3 --runs 20
    python bench/realistic_hf.py --held-out                   # Qwen2-0.5B-config step, T5, DeBERTa-v3, ViT
    python bench/realistic_hf.py --export-python VENV/bin/python   # the Python that has torch + transformers
    python bench/realistic_hf.py --prepare-only               # export (or fall back) and print the files

The models are exported by ``realistic_hf_models.py`` in a fresh process of ``--export-python`` (default:
this Python; ``$DMLSHIM_EXPORT_PYTHON`` if set): transformers classes at real configurations with seeded
random weights, no model hub. They go to ``--workdir`` (default: the system temp folder), are reused on
later runs and never committed. When that Python lacks torch or transformers the script says so and
measures the hand-built decoder step of ``realistic_models.py`` instead (``--fallback`` picks its
configuration). Measuring reuses ``realistic.py``: each side in its own fresh process, peak resident size
from ``os.wait4``, ratios dmlshim / onnxruntime of the same repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import realistic
from bench.realistic_models import DecoderConfig

HERE = Path(__file__).resolve().parent
#: The transformers models (names of realistic_hf_models.MODELS; kept here so that this file does not
#: import torch) and the ones whose weights always go to an external-data file.
MODELS = ("gpt2", "bert", "llama")
#: Held-out models (``--held-out``): other architectures at real configurations - a Qwen2-0.5B-config
#: static-cache step (external data), T5-small, DeBERTa-v3-small (GatherElements), ViT-base.
HELD_OUT = ("qwen2", "t5", "deberta", "vit")
EXTERNAL = frozenset({"llama", "qwen2"})
#: Configurations of the hand-built fallback: realistic.py's, and a tiny one for smoke tests.
FALLBACKS: dict[str, DecoderConfig] = {
    **realistic.CONFIGS,
    "tiny": DecoderConfig(layers=1, hidden=16, heads=2, vocab=64, positions=8, past=3),
}


@dataclass(frozen=True)
class Prepared:
    """One model ready to measure: its files and where it came from (``transformers`` or ``hand-built``)."""

    name: str
    description: str
    model: Path
    feeds: Path
    source: str
    megabytes: float


def exporter_missing(python: str) -> str | None:
    """Why ``python`` cannot export (torch or transformers not importable), or None when it can."""
    try:
        done = subprocess.run(
            [python, "-c", "import torch, transformers"], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python}: {exc}"
    if done.returncode == 0:
        return None
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def _size_mb(model: Path) -> float:
    data = model.with_name(model.name + ".data")
    return (model.stat().st_size + (data.stat().st_size if data.exists() else 0)) / 1e6


def prepare(
    names: Sequence[str],
    workdir: Path,
    export_python: str,
    *,
    external: bool = False,
    fallback: str = "gpt2-small",
    log: Callable[[str], None] = print,
) -> list[Prepared]:
    """Export every model of ``names`` (reusing earlier exports), or the hand-built fallback step when
    ``export_python`` lacks torch or transformers. Every export runs in its own process."""
    reason = exporter_missing(export_python)
    if reason is not None:
        log(
            f"torch + transformers not available in {export_python} ({reason}); measuring the hand-built "
            f"decoder step ({fallback}, bench/realistic_models.py) instead. Install the export extra "
            "(pip install '.[export]') into some Python and pass it as --export-python."
        )
        config = FALLBACKS[fallback]
        model, feeds = realistic.prepare(config, workdir, external)
        return [
            Prepared(
                f"hand-built-{fallback}",
                f"hand-built decoder step, {config}",
                model,
                feeds,
                "hand-built",
                _size_mb(model),
            )
        ]
    prepared = []
    for name in names:
        ext = external or name in EXTERNAL
        out_dir = workdir / "hf" / f"{name}{'_ext' if ext else ''}"
        model, feeds, info = out_dir / f"{name}.onnx", out_dir / f"{name}.npz", out_dir / "export.json"
        if not (model.exists() and feeds.exists() and info.exists()):
            log(f"exporting {name} with {export_python} ...")
            argv = [export_python, str(HERE / "realistic_hf_models.py"), name, str(out_dir)]
            done = subprocess.run(argv + (["--external"] if ext else []), capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"exporting {name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
            info.write_text(done.stdout.strip().splitlines()[-1] + "\n", encoding="utf-8")
        described = json.loads(info.read_text(encoding="utf-8"))
        prepared.append(
            Prepared(name, described["description"], model, feeds, "transformers", _size_mb(model))
        )
    return prepared


def measure(item: Prepared, args: argparse.Namespace) -> dict[str, Any]:
    """realistic.py's measurements on one prepared model: sides alternating, ``args.repeats`` times."""
    py, child = sys.executable, str(HERE / "realistic.py")
    model, feeds, workdir = str(item.model), str(item.feeds), Path(args.workdir)
    repeats: list[dict[str, Any]] = []
    diff = None
    for r in range(args.repeats):
        row: dict[str, Any] = {}
        for side in realistic.SIDES if r % 2 == 0 else realistic.SIDES[::-1]:
            out = workdir / f"out_{side}.npz"
            argv = [py, child, "--child", side, model, feeds, str(args.runs), str(out)]
            row[side] = realistic._measure(argv + (["--with-options"] if args.with_options else []))
        diff = realistic._max_diff(workdir / "out_dmlshim.npz", workdir / "out_ort.npz")
        if not args.skip_validate:
            row["validate"] = realistic._measure(
                [py, "-m", "dmlshim", "validate", model, "--inputs", feeds, "-q"]
            )
            row["ort_once"] = realistic._measure([py, "-c", realistic._ORT_VALIDATE, model, feeds])
            row["ort_twice"] = realistic._measure([py, "-c", realistic._ORT_VALIDATE, model, feeds, "twice"])
        repeats.append(row)
        args.log(f"{item.name} repeat {r + 1}: " + json.dumps(realistic._ratios(row)))
    return {
        "model": item.name,
        "description": item.description,
        "source": item.source,
        "megabytes": item.megabytes,
        "file": model,
        "repeats": repeats,
        "ratios": [realistic._ratios(row) for row in repeats],
        "max_abs_diff": diff,
    }


def summary(results: Sequence[dict[str, Any]]) -> str:
    """One line per model: median ratios over the repeats, the dmlshim path and the largest difference."""
    keys = (
        "build",
        "build_with_import",
        "first_run",
        "run_p50",
        "peak_rss",
        "validate_wall_vs_ort_once",
        "validate_rss_vs_ort_once",
        "validate_wall_vs_ort_twice",
        "validate_rss_vs_ort_twice",
    )
    present = [k for k in keys if all(k in r for res in results for r in res["ratios"])]
    lines = [
        "| model | MB | " + " | ".join(present) + " | dmlshim path | max abs diff |",
        "| --- | ---: |" + " ---: |" * len(present) + " --- | ---: |",
    ]
    for res in results:
        med = [statistics.median(r[k] for r in res["ratios"]) for k in present]
        paths = sorted({str(row["dmlshim"].get("path")) for row in res["repeats"]})
        lines.append(
            f"| {res['description']} | {res['megabytes']:.0f} | "
            + " | ".join(f"{m:.2f}x" for m in med)
            + f" | {', '.join(paths)} | {res['max_abs_diff']} |"
        )
    return "\n".join(lines)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", choices=MODELS + HELD_OUT, help=f"default: {' '.join(MODELS)}")
    parser.add_argument(
        "--held-out",
        action="store_true",
        help=f"the held-out models ({' '.join(HELD_OUT)}) instead of the default set",
    )
    parser.add_argument(
        "--export-python",
        default=os.environ.get("DMLSHIM_EXPORT_PYTHON", sys.executable),
        help="a Python with torch and transformers (the export extra)",
    )
    parser.add_argument(
        "--external",
        action="store_true",
        help="every model's weights in an external-data file (the Llama step always)",
    )
    parser.add_argument(
        "--fallback",
        choices=sorted(FALLBACKS),
        default="gpt2-small",
        help="configuration of the hand-built step measured when torch is missing",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10, help="steady runs per side (p50)")
    parser.add_argument("--skip-validate", action="store_true")
    parser.add_argument(
        "--with-options",
        action="store_true",
        help="both sides get the SessionOptions of realistic.py --with-options (a typical client's)",
    )
    parser.add_argument(
        "--prepare-only", action="store_true", help="export or generate, print the files, stop"
    )
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "dmlshim-bench-realistic"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(list(argv))
    if args.repeats < 1 or args.runs < 1:
        parser.error("--repeats and --runs must be at least 1")
    if args.held_out and args.models:
        parser.error("--held-out and --models exclude each other")
    if not args.models:
        args.models = list(HELD_OUT if args.held_out else MODELS)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    args.log = lambda message: print(message, file=sys.stderr, flush=True)
    if sys.flags.dont_write_bytecode:
        args.log(
            "note: PYTHONDONTWRITEBYTECODE is set, so every dmlshim process compiles its modules from "
            "source (~0.4 s counted in dmlshim's build and validate, not in onnxruntime's); unset it for "
            "numbers an installed package gives"
        )
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    items = prepare(
        args.models, workdir, args.export_python, external=args.external, fallback=args.fallback, log=args.log
    )
    if args.prepare_only:
        print(json.dumps([{k: str(v) for k, v in vars(item).items()} for item in items], indent=1))
        return 0
    results = [measure(item, args) for item in items]
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for res in results:
        print(f"\n## {res['description']} ({res['megabytes']:.0f} MB, {res['source']})\n")
        print(realistic.table(res))
    print("\n## Medians over the repeats (dmlshim / onnxruntime CPU)\n")
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
