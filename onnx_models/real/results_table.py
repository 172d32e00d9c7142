"""Write ``docs/corpus.md``: dmlshim's results on every model of the real-architecture corpus.

Runs with dmlshim's own environment (onnx, onnxruntime, numpy; no torch). For every model in
``manifest.json`` it runs ``validate --inputs``, ``validate`` (random inputs) and ``inspect`` through the
CLI in-process (``corpus_results``) and tabulates exit codes, verdicts and SHAPE_UNKNOWN counts::

    PYTHONPATH=provider python onnx_models/real/results_table.py            # rewrites docs/corpus.md
    PYTHONPATH=provider python onnx_models/real/results_table.py --stdout   # prints it instead
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import corpus_results as cr

REPO = cr.HERE.parents[1]
DEFAULT_OUTPUT = REPO / "docs" / "corpus.md"

HEADER = """# The real-architecture corpus

`onnx_models/real/` holds {count} ONNX exports of {networks} real networks (transformers, torchvision and
two plain PyTorch modules; two of them also int8 after onnxruntime's dynamic quantization), written by
PyTorch's dynamo and legacy TorchScript exporters from tiny
configurations with random weights; `onnx_models/real/README.md` says what each one is and how to
regenerate it, `onnx_models/real/manifest.json` describes each file. They are models nobody on the team
wrote by hand: KV caches with `past_sequence_length + 1`, Shape→Gather chains, stale inferred shapes,
If/Loop, float16.

The table is dmlshim's result on each, at the default feature level (5_0), produced by
`onnx_models/real/results_table.py` (run it with `PYTHONPATH=provider` from the repository root to
refresh this page). Exit codes: 0 match / translated, 1 mismatch or not all nodes translated, 2 error.
`tests/test_real_corpus.py` asserts what issue 11 asks for on every model (a pair that fails on main
would be listed in its `PENDING` table, which is empty).

- **validate, file inputs**: `dmlshim validate M --inputs M.npz`; **random**: `dmlshim validate M`.
- **SHAPE_UNKNOWN**: nodes `dmlshim inspect M` leaves SHAPE_UNKNOWN / of them, those whose input ranks
  onnx's own shape inference knows (these should be 0).
- **placements agree**: every node's `ort_placement` is the same in `inspect --json` and
  `validate --json`.
"""


def _code(run: cr.CliRun) -> str:
    doc = run.doc
    if run.code == 0:
        return "0 match" if doc is not None and doc.get("match") else "0"
    if run.code == 1 and doc is not None and doc.get("match") is False:
        return "1 MISMATCH"
    return f"{run.code} error"


def _ops(entry: dict[str, Any]) -> str:
    parts = [f"{op} {n}" for op, n in entry["gather_scatter_ops"].items()]
    parts += [f"{op} {n}" for op, n in entry["control_flow_ops"].items()]
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    entries = cr.load_manifest()
    networks = {e["name"].rsplit("_", 1)[0] for e in entries if e["dtype"] == "float32"}
    lines = [HEADER.format(count=len(entries), networks=len(networks)).rstrip(), "", "## Results", ""]
    lines.append(
        "| model | architecture | exporter | KB | gather/scatter (If/Loop) nodes | validate, file inputs "
        "| validate, random | inspect exit | SHAPE_UNKNOWN (rank known) | placements agree |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    problems: list[tuple[str, str, str]] = []
    for entry in entries:
        r = cr.result(entry["name"])
        for label, run in (
            ("validate --inputs", r.validate_inputs),
            ("validate (random)", r.validate_random),
        ):
            if run.code != 0:
                problems.append((entry["name"], label, run.message))
        agree = "yes" if not r.placement_disagreements else f"no ({len(r.placement_disagreements)})"
        lines.append(
            f"| `{entry['name']}` | {entry['architecture']} ({entry['dtype']}) | {entry['exporter']} "
            f"| {entry['onnx_bytes'] // 1024} | {_ops(entry)} | {_code(r.validate_inputs)} "
            f"| {_code(r.validate_random)} | {r.inspect.code} "
            f"| {len(r.shape_unknown)} ({len(r.shape_unknown_rank_known)}) | {agree} |"
        )
    lines += ["", "## What validate said where it did not exit 0", ""]
    if not problems:
        lines.append("Nothing: every model validates with both its file inputs and random inputs.")
    for name, label, message in problems:
        lines.append(f"- `{name}`, {label}: {_cell(message[:400])}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdout", action="store_true", help="print the page instead of writing it")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="page to write")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    page = render()
    if args.stdout:
        sys.stdout.write(page)
        return 0
    from dmlshim.fileio import files

    files.write_text(args.output, page, overwrite=True)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
