"""Build the ecosystem corpus: ONNX files written by producers other than PyTorch, with sample inputs.

Each producer lives in its own module (``producers_sklearn``, ``producers_onnxscript``,
``producers_ort``, ``producers_jax``, ``handwritten``); a producer whose package is not installed is
skipped with a message, the others still run. For every model the script writes ``<name>.onnx`` (and,
for external data, the ``.bin`` beside it) and ``<name>.npz`` (one array per graph input, keyed by the
input name, no pickles, fixed zip timestamps), checks that onnxruntime CPU runs the saved file on the
sample, and records the entry in ``manifest.json``.

    python onnx_models/ecosystem/build_ecosystem.py            # every producer that is installed
    python onnx_models/ecosystem/build_ecosystem.py --only skl2onnx --only hw_opset21_ir10
    python onnx_models/ecosystem/build_ecosystem.py --list

Seeds are fixed, so a re-run with the same package versions writes the same files.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eco_common import HERE, MAX_BYTES, Spec, gather_scatter_counts, ort_outputs, save_npz  # noqa: E402

MANIFEST = HERE / "manifest.json"
MODULES = (
    "producers_sklearn",
    "producers_onnxscript",
    "producers_ort",
    "producers_jax",
    "producers_tf",
    "producers_spox",
    "producers_paddle",
    "producers_onnxmltools",
    "producers_tflite",
    "producers_fp16",
    "producers_genai",
    "producers_ortopt",
    "producers_slim",
    "handwritten",
)
BASE_PACKAGES = ("onnx", "onnxruntime", "numpy")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def all_specs() -> list[Spec]:
    specs: list[Spec] = []
    for module_name in MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            print(f"skip {module_name}: {exc}", file=sys.stderr)
            continue
        specs.extend(module.SPECS)
    return specs


def _selected(spec: Spec, only: list[str]) -> bool:
    return not only or any(word in spec.name or word == spec.producer for word in only)


def _save(spec: Spec) -> dict[str, Any]:
    built = spec.build()
    model = built.model
    path = HERE / f"{spec.name}.onnx"
    if built.external_data:
        (HERE / built.external_data).unlink(missing_ok=True)  # onnx appends to an existing file
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=built.external_data, size_threshold=0)
    else:
        path.write_bytes(model.SerializeToString())
    npz = HERE / f"{spec.name}.npz"
    save_npz(npz, built.feeds)
    outputs = ort_outputs(path, built.feeds)
    reloaded = onnx.load(str(path), load_external_data=False)
    size = path.stat().st_size + ((HERE / built.external_data).stat().st_size if built.external_data else 0)
    if size >= MAX_BYTES:
        raise ValueError(f"{spec.name}: {size} bytes, the corpus takes files under {MAX_BYTES}")
    packages = {p: _version(p) for p in (*BASE_PACKAGES, *spec.packages)}
    return {
        "name": spec.name,
        "file": path.name,
        "inputs_file": npz.name,
        "external_data": built.external_data,
        "producer": spec.producer,
        "description": spec.description,
        "notes": built.notes,
        "ir_version": reloaded.ir_version,
        "opsets": dict(sorted((o.domain or "ai.onnx", o.version) for o in reloaded.opset_import)),
        "bytes": size,
        "nodes": len(reloaded.graph.node),
        "functions": len(reloaded.functions),
        "gather_scatter_ops": dict(sorted(gather_scatter_counts(reloaded).items())),
        "inputs": {k: [list(np.shape(v)), str(np.asarray(v).dtype)] for k, v in built.feeds.items()},
        "outputs": len(outputs),
        "packages": packages,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="name part or producer (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--traceback", action="store_true", help="print why a model failed")
    args = parser.parse_args(argv)
    specs = [s for s in all_specs() if _selected(s, args.only)]
    if args.list:
        for spec in specs:
            print(f"{spec.name:40s} {spec.producer:24s} {spec.description}")
        return 0
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"models": []}
    entries = {e["name"]: e for e in manifest["models"]}
    failed = 0
    for spec in specs:
        try:
            entries[spec.name] = _save(spec)
            print(f"ok   {spec.name}: {entries[spec.name]['gather_scatter_ops']}")
        except Exception as exc:  # a producer's failure is a finding, recorded and skipped
            failed += 1
            print(f"FAIL {spec.name}: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
            if args.traceback:
                traceback.print_exc()
    manifest["models"] = sorted(entries.values(), key=lambda e: (e["producer"], e["name"]))
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
