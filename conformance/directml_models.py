"""Every node `dmlshim export` writes for a set of models, replayed on DirectML.dll and compared.

    python conformance/directml_models.py [MODEL.onnx ...] [--feature-levels 5_0,3_0,2_1] [--out DIR]

Default models: onnx_models/*.onnx (each with its .npz inputs when there is one). Each model is exported
at each feature level (`dmlshim export`), every node folder of every export is replayed in one replay-host
process (docs/replay.md), and each export is compared exactly (`dmlshim compare`). Exit status: 0 when
every node matches, 1 otherwise, 2 when real DirectML is not set up (0 with --skip-if-missing).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="ONNX models (default: onnx_models/*.onnx)")
    parser.add_argument(
        "--backend", action="store_true", help="also the ONNX backend node tests for the six ops (in memory)"
    )
    parser.add_argument("--feature-levels", default="5_0", help="comma-separated (default 5_0)")
    parser.add_argument("--out", help="keep the exports here (new or empty); default: temporary")
    parser.add_argument("--stack", help="the stack.json to use (default: the one in dmlshim's cache folder)")
    parser.add_argument("--skip-if-missing", action="store_true", help="exit 0 if DirectML is not set up")
    args = parser.parse_args(argv)

    from dmlshim.dml.enums import FeatureLevel
    from dmlshim.dxdispatch.compare import compare_export
    from dmlshim.dxdispatch.export import export_model
    from dmlshim.dxdispatch.host_stack import StackMissingError, load_stack
    from dmlshim.dxdispatch.real_replay import replay_folders
    from dmlshim.errors import DmlShimError
    from dmlshim.fileio.npz import load_npz

    try:
        stack = load_stack(args.stack)
    except StackMissingError as exc:
        print(f"directml_models: skipped: {exc.message} ({exc.path})")
        return 0 if args.skip_if_missing else 2
    models: list[tuple[str, Any, Any]] = []
    for path in [Path(m) for m in args.models] or sorted((REPO / "onnx_models").glob("*.onnx")):
        npz = path.with_suffix(".npz")
        models.append((path.stem, path, load_npz(npz) if npz.is_file() else None))
    if args.backend:
        from dmlshim.conformance.backend_suite import discover_cases

        for case in discover_cases():
            if case.in_scope:
                names = [i.name for i in case.model.graph.input]
                models.append((case.name, case.model, dict(zip(names, case.inputs, strict=True))))
    levels = [FeatureLevel.parse(f) for f in args.feature_levels.split(",") if f]

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dmlshim-models-") as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        exports: list[tuple[str, Path]] = []
        failed_exports: list[str] = []
        for stem, model, inputs in models:
            for fl in levels:
                label = f"{stem}@{fl.short}"
                target = out / f"{stem}_fl{fl.short}"
                try:
                    export_model(model, target, inputs=inputs, feature_level=fl)
                except DmlShimError as exc:
                    failed_exports.append(f"{label}: {exc.message}")
                    continue
                exports.append((label, target))
        exported = time.monotonic() - start
        folders = [f for _, d in exports for f in sorted(p for p in d.iterdir() if p.is_dir())]
        replay = replay_folders(folders, stack=stack) if folders else None
        replayed = time.monotonic() - start - exported
        if replay is not None:
            print(f"real DirectML: {replay.device.describe()}")
        total = {"match": 0, "mismatch": 0, "missing": 0, "error": 0}
        bad: list[str] = []
        for label, directory in exports:
            report = compare_export(directory)
            counts = report.counts()
            for key in total:
                total[key] += counts.get(key, 0)
            print(f"{label:48} " + " ".join(f"{k} {counts.get(k, 0)}" for k in total))
            bad += [
                f"{label} {n.node} ({n.op_type}): {n.status}: {n.detail}"
                for n in report.nodes
                if n.status != "match"
            ]
    for line in failed_exports:
        print(f"  export failed: {line}")
    for line in bad:
        print(f"  {line}")
    nodes = sum(total.values())
    seconds = time.monotonic() - start
    print(
        f"{total['match']} passed, {nodes - total['match']} failed of {nodes} node(s) in {len(exports)} "
        f"export(s) ({seconds:.0f} s: export {exported:.0f} s, DirectML and compare {replayed:.0f} s)"
    )
    return 0 if not bad and not failed_exports else 1


if __name__ == "__main__":
    sys.exit(main())
