"""Every dmlshim command and engine on one model written by ``bench/big_models52.py``, each in its own
process under ``/usr/bin/time -v``, against onnxruntime CPU alone::

    python bench/big_models52_run.py DIR/MODEL.onnx [--cases ort,run,...] [--json OUT.json]

Needs ``MODEL.npz`` beside the model. Each case is a fresh process: its wall time and peak RSS (``Maximum
resident set size``) are compared with onnxruntime's (default options, session + one run); every case that
yields outputs is compared bit for bit with onnxruntime CPU at ``intra_op_num_threads=1``. Files go to
``DIR/MODEL.out/``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

LOG = logging.getLogger("big_models52_run")

_ORT = (
    "import sys, numpy as np, onnxruntime as ort\n"
    "so = ort.SessionOptions()\n"
    "if sys.argv[4] == '1': so.intra_op_num_threads = 1\n"
    "s = ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])\n"
    "feeds = dict(np.load(sys.argv[2]))\n"
    "outs = s.run(None, feeds)\n"
    "np.savez(sys.argv[3], **{o.name: v for o, v in zip(s.get_outputs(), outs)})\n"
)
_ORT_TWICE = (
    "import sys, numpy as np, onnxruntime as ort\n"
    "feeds = dict(np.load(sys.argv[2]))\n"
    "a = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider']).run(None, feeds)\n"
    "b = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider']).run(None, feeds)\n"
    "assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))\n"
)
"""Two onnxruntime runners compared, as ``polygraphy run MODEL --onnxrt --onnxrt`` does (the yardstick
of ``validate``: issue 36)."""
_LOWERED = _ORT.replace(
    "so = ort.SessionOptions()\n",
    "from dmlshim.execute.engines.custom_op import session_options_with_custom_ops\n"
    "so = session_options_with_custom_ops()\n",
)
_ENGINE = (
    "import sys, numpy as np, dmlshim\n"
    "s = dmlshim.InferenceSession(sys.argv[1], engine=sys.argv[4])\n"
    "feeds = dict(np.load(sys.argv[2]))\n"
    "outs = s.run(None, feeds)\n"
    "np.savez(sys.argv[3], **{o.name: v for o, v in zip(s.get_outputs(), outs)})\n"
)


def _cases(model: Path, out: Path) -> dict[str, tuple[list[str], Path | None]]:
    py = sys.executable
    npz = str(model.with_suffix(".npz"))
    m = str(model)
    cli = [py, "-m", "dmlshim", "-q"]
    script = out / "ort_script.py"
    script.write_text(_ORT)
    cases: dict[str, tuple[list[str], Path | None]] = {
        "ort_1thread": ([py, "-c", _ORT, m, npz, str(out / "ref.npz"), "1"], out / "ref.npz"),
        "ort": ([py, "-c", _ORT, m, npz, str(out / "ort.npz"), "0"], out / "ort.npz"),
        "ort_twice": ([py, "-c", _ORT_TWICE, m, npz], None),
        "inspect": ([*cli, "inspect", m], None),
        "inspect_inputs": ([*cli, "inspect", m, "--inputs", npz], None),
        "validate": ([*cli, "validate", m, "--inputs", npz], None),
        "validate_generated": ([*cli, "validate", m], None),
        "run": (
            [*cli, "run", m, "--inputs", npz, "-o", str(out / "run.npz"), "--overwrite"],
            out / "run.npz",
        ),
        "run_generated": ([*cli, "run", m], None),
        "lower": ([*cli, "lower", m, "-o", str(out / "low.onnx"), "--overwrite"], None),
        "lowered_run": (
            [py, "-c", _LOWERED, str(out / "low.onnx"), npz, str(out / "lowered.npz"), "0"],
            out / "lowered.npz",
        ),
        "export": ([*cli, "export", m, "--inputs", npz, "-o", str(out / "export"), "--overwrite"], None),
        "ort_standin": (
            [py, "-m", "dmlshim.ort", "--summary", "off", str(script), m, npz, str(out / "standin.npz"), "0"],
            out / "standin.npz",
        ),
    }
    for engine in ("cpu", "partitioned", "customop"):
        dest = out / f"engine_{engine}.npz"
        cases[f"engine_{engine}"] = ([py, "-c", _ENGINE, m, npz, str(dest), engine], dest)
    return cases


def _timed(argv: list[str], log: Path) -> dict[str, float | int]:
    # bytecode caches on, as in an installed package (without them every dmlshim process compiles ~0.5 s)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with log.open("w") as err:
        code = subprocess.run(
            ["/usr/bin/time", "-v", *argv],
            stdout=err,
            stderr=subprocess.STDOUT,
            timeout=1800,
            check=False,
            env=env,
        ).returncode
    text = log.read_text(errors="replace")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    cpu = sum(float(m) for m in re.findall(r"(?:User|System) time \(seconds\): (\S+)", text))
    seconds = 0.0
    if wall:
        for part in wall.group(1).split(":"):
            seconds = seconds * 60 + float(part)
    return {
        "code": code,
        "wall": round(seconds, 2),
        "cpu": round(cpu, 2),
        "peak_mb": round(int(peak.group(1)) / 1024) if peak else -1,
    }


def _same(got: Path, ref: Path) -> str:
    if not got.exists() or not ref.exists():
        return "missing"
    with np.load(got) as a, np.load(ref) as b:
        if sorted(a.files) != sorted(b.files):
            return f"names differ: {sorted(a.files)} vs {sorted(b.files)}"
        for name in b.files:
            x, y = a[name], b[name]
            if x.dtype != y.dtype or x.shape != y.shape:
                return f"{name}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
            if x.tobytes() != y.tobytes():
                return f"{name}: max |diff| {float(np.max(np.abs(x.astype(np.float64) - y))):.3g}"
    return "identical"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--cases", default="")
    parser.add_argument("--rounds", type=int, default=1, help="rounds over the cases (medians reported)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = args.model.with_suffix(".out")
    out.mkdir(exist_ok=True)
    cases = _cases(args.model.resolve(), out.resolve())
    chosen = [c for c in args.cases.split(",") if c] or list(cases)
    runs: dict[str, list[dict[str, float | int]]] = {name: [] for name in chosen}
    outputs: dict[str, str] = {}
    for _ in range(args.rounds):
        for name in chosen:
            argv, produced = cases[name]
            row = _timed(argv, out / f"{name}.log")
            if produced is not None and name != "ort_1thread":
                outputs[name] = _same(produced, out / "ref.npz")
            runs[name].append(row)
            LOG.info("%s %s %s", name, json.dumps(row), outputs.get(name, ""))
    rows = {}
    for name, done in runs.items():
        rows[name] = {
            "codes": sorted({int(r["code"]) for r in done}),
            "wall": statistics.median(float(r["wall"]) for r in done),
            "walls": [r["wall"] for r in done],
            "cpu": statistics.median(float(r["cpu"]) for r in done),
            "peak_mb": statistics.median(int(r["peak_mb"]) for r in done),
            "outputs": outputs.get(name, ""),
        }
    base = rows.get("ort")
    for name, row in rows.items():
        if base:
            row["wall_ratio"] = round(row["wall"] / base["wall"], 2)
            row["cpu_ratio"] = round(row["cpu"] / base["cpu"], 2)
            row["peak_ratio"] = round(row["peak_mb"] / base["peak_mb"], 2)
        LOG.info(
            "| %s | %s | %.2f s | %.2f s | %s MB | %s | %s |",
            name,
            row["codes"],
            row["wall"],
            row["cpu"],
            row["peak_mb"],
            f"{row.get('wall_ratio', '')}x / {row.get('cpu_ratio', '')}x / {row.get('peak_ratio', '')}x",
            row["outputs"],
        )
    twice = rows.get("ort_twice")
    for name in ("validate", "validate_generated"):
        if twice and name in rows:
            LOG.info(
                "%s / ort_twice: wall %.2fx, cpu %.2fx, peak %.2fx",
                name,
                rows[name]["wall"] / twice["wall"],
                rows[name]["cpu"] / twice["cpu"],
                rows[name]["peak_mb"] / twice["peak_mb"],
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
