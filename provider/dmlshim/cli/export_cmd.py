"""``dmlshim export MODEL -o DIR``: write each translated gather/scatter node as a DxDispatch model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..text import printable
from .options import (
    add_feature_level,
    add_input_shape,
    input_shapes,
    model_path_arg,
    output_path_arg,
    path_arg,
    seed_type,
)
from .progress import status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the export command's arguments."""
    parser.add_argument("model", metavar="MODEL", type=model_path_arg, help="the .onnx file")
    out = parser.add_mutually_exclusive_group(required=True)
    out.add_argument(
        "-o", "--output", dest="output_dir", metavar="DIR", type=output_path_arg, help="the export folder"
    )
    out.add_argument(
        "--output-dir", dest="output_dir", type=output_path_arg, help=argparse.SUPPRESS
    )  # the old spelling
    parser.add_argument(
        "--inputs",
        metavar="FILE.npz",
        type=path_arg,
        help="the model inputs, one array per graph input (numpy.savez); random valid inputs if omitted",
    )
    add_feature_level(parser, "target")
    add_input_shape(parser)
    parser.add_argument(
        "--seed", type=seed_type, default=0, metavar="N", help="seed of generated inputs (default 0)"
    )
    parser.add_argument(
        "--iteration",
        type=int,
        default=0,
        metavar="N",
        help="capture nodes inside Loop/Scan bodies in iteration N (default 0, the first)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty DIR, replacing the node folders a previous export listed",
    )
    parser.add_argument("--json", action="store_true", help="print the export summary as JSON")


def run(args: argparse.Namespace) -> int:
    """Export the nodes and print what was written; returns the exit code."""
    from ..dxdispatch.export import export_model
    from ..execute.feeds import load_npz

    shapes = input_shapes(args)
    feeds = None
    if args.inputs:
        if shapes:  # as run, validate and inspect say
            print("dmlshim export: note: --input-shape is ignored with --inputs", file=sys.stderr)
        from ..inputs.narrow_floats import narrow_feeds
        from ..ort.session import load_model

        # bfloat16 and float8 inputs: raw bits or float32 values (inputs/narrow_floats.py)
        feeds = narrow_feeds(
            load_model(args.model, weightless=True, own_weights=False).proto.graph, load_npz(args.inputs)
        )
    with status(args, f"export: running {args.model} and writing a folder per node"):
        result = export_model(
            args.model,
            args.output_dir,
            inputs=feeds,
            feature_level=args.feature_level,
            input_shapes=shapes or None,
            overwrite=args.overwrite,
            seed=args.seed,
            iteration=args.iteration,
            reads=[args.inputs] if args.inputs else [],
        )
    if args.json:
        doc: dict[str, Any] = {
            "schema_version": 1,
            "model": str(args.model),
            "directory": str(result.directory),
            "feature_level": result.feature_level.dml_name,
            "exported": [e.to_json() for e in result.exported],
            "skipped": [s.to_json() for s in result.skipped],
        }
        print(json.dumps(doc, indent=2, allow_nan=False))
        return _exit_code(result)
    print(f"model: {args.model}")
    print(f"feature level: {result.feature_level.dml_name}")
    if args.inputs is None:
        print(f"inputs: generated (seed {args.seed})")
    print(f"exported {len(result.exported)} node(s) to {result.directory}, skipped {len(result.skipped)}")
    # The operator column is as wide as its longest name, so the notes after it line up.
    width = max((len(e.operator) for e in result.exported), default=0)
    for e in result.exported:
        note = "" if e.matches_onnxruntime else "  (dmlshim differs from onnxruntime on this node)"
        for owner, it in e.iterations:
            note += f"  (branch taken by {owner})" if it is None else f"  (iteration {it} of {owner})"
        if e.duplicate_indices:
            note += f"  ({e.duplicate_indices} duplicate scatter write(s): DirectML picks any winner)"
        print(f"  {e.folder:<40} {e.op_type:<16} {e.operator:<{width}}{note}".rstrip())
    for s in result.skipped:
        print(f"  skipped {printable(s.node)} ({s.op_type}): {s.code}: {s.reason}")
    if result.exported:
        print()
        print("next, on Windows, in each node folder:  dxdispatch.exe model.json --output_path .")
        print(f"then, anywhere:                         dmlshim compare {result.directory}")
        print(
            f"or, on Linux, DirectML.dll under Wine:  dmlshim compare {result.directory} --run-directml"
            "  (after dmlshim directml setup)"
        )
    return _exit_code(result)


def _exit_code(result: Any) -> int:
    """0, or 2 (an error) when no node was exported and a node's files could not be written
    (``EXPORT_FAILED``, e.g. a full disk): nothing usable was made, so the run is no success."""
    failed = [s for s in result.skipped if s.code == "EXPORT_FAILED"]
    if result.exported or not failed:
        return 0
    print(
        f"dmlshim export: error: no node was exported: the files of {len(failed)} node(s) could not be "
        f"written (first: {printable(failed[0].node)} ({failed[0].op_type}): {failed[0].reason})",
        file=sys.stderr,
    )
    return 2
