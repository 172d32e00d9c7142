"""CPU and wall time of ``dmlshim inspect -q`` against onnxruntime's session creation on the 20,000-node
chains (issue 35): least CPU seconds and least wall seconds of N runs each, every run in its own process,
interleaved, so a loaded machine's noise hits both alike.

Usage::

    python bench/inspect_cost.py [--runs 3] [--provider OTHER/provider ...] [--no-bytecode] [--extra M.onnx]

``--provider``: also time another checkout's dmlshim (the code before a change), in the same rounds.
``--no-bytecode``: keep ``PYTHONDONTWRITEBYTECODE`` as the environment has it (every run then compiles
dmlshim's sources, about 1 s of CPU); by default it is unset and one warm-up run writes the bytecode, as
an installed package has it. ``--extra``: more model files (a realistic model) after the two chains.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.inference_memory import cast_chain_model, gather_chain_model
from bench.peak import ORT_SESSION, REPO, dmlshim, measure, python

MODELS = {"gather_chain_20k": gather_chain_model, "cast_chain_1024": cast_chain_model}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--provider", action="append", default=[])
    parser.add_argument("--no-bytecode", action="store_true")
    parser.add_argument("--extra", nargs="*", default=[], type=Path)
    args = parser.parse_args()
    if not args.no_bytecode:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    providers = [str(REPO / "provider"), *args.provider]
    with tempfile.TemporaryDirectory() as tmp:
        builds = {**MODELS, **{m.stem: (lambda _tmp, m=m: m) for m in args.extra}}
        for name, build in builds.items():
            path = str(build(Path(tmp)))
            best: dict[str, float] = {}
            wall: dict[str, float] = {}
            for round_ in range(args.runs + (0 if args.no_bytecode else 1)):
                warm_up = not args.no_bytecode and round_ == 0
                ort = measure(python(ORT_SESSION, path))
                if not warm_up:
                    best["onnxruntime"] = min(best.get("onnxruntime", 1e9), ort.cpu)
                    wall["onnxruntime"] = min(wall.get("onnxruntime", 1e9), ort.wall)
                for provider in providers:
                    run = measure(dmlshim("inspect", "-q", path), {"PYTHONPATH": provider})
                    if run.code not in (0, 1):
                        raise SystemExit(f"{provider}: inspect exited {run.code}: {run.err}")
                    if not warm_up:
                        best[provider] = min(best.get(provider, 1e9), run.cpu)
                        wall[provider] = min(wall.get(provider, 1e9), run.wall)
            ort_cpu, ort_wall = best["onnxruntime"], wall["onnxruntime"]
            print(f"{name}: onnxruntime session {ort_cpu:.2f} s CPU, {ort_wall:.2f} s wall")
            for provider in providers:
                print(
                    f"  inspect ({provider}): {best[provider]:.2f} s CPU, {best[provider] / ort_cpu:.2f}x; "
                    f"{wall[provider]:.2f} s wall, {wall[provider] / ort_wall:.2f}x"
                )


if __name__ == "__main__":
    main()
