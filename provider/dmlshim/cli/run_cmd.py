"""``dmlshim run MODEL --inputs FILE.npz``: run a model with gather/scatter executed through DirectML
descriptors, print what ran where, and write the outputs."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DmlShimError
from ..execute.feeds import load_npz
from ..execute.record import RunRecord
from ..fileio.array_files import write_arrays
from ..fileio.files import check_output_file
from ..inputs import GeneratedInputs, annotate_error, generate
from ..inputs.narrow_floats import narrow_feeds
from ..inputs.sizes import feed_shapes, refuse_sizes_at
from ..ort.ortvalues import strings_decoded
from ..ort.session import InferenceSession, load_model
from ..text import shape_text, table
from ..validate.value_kinds import describe, is_array, kind_text
from .options import (
    add_engine,
    add_feature_level,
    add_input_shape,
    input_shapes,
    model_path_arg,
    output_path_arg,
    path_arg,
    seed_type,
)

logger = logging.getLogger(__name__)

JSON_SCHEMA_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", type=model_path_arg, help="the .onnx file")
    parser.add_argument(
        "--inputs",
        metavar="FILE.npz",
        type=path_arg,
        help="the inputs, one array per graph input name (numpy.savez); pickled objects are refused; "
        "random inputs that onnxruntime CPU accepts when absent",
    )
    add_input_shape(parser)
    parser.add_argument(
        "--seed", type=seed_type, default=0, metavar="N", help="seed of random inputs (default 0)"
    )
    parser.add_argument(
        "--output",
        "-o",
        metavar="FILE.npz",
        type=output_path_arg,
        help="write the outputs here: numpy.savez format, or polygraphy's RunResults JSON for a .json name "
        "(as validate --save-outputs)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the --output file if it exists (refused otherwise)"
    )
    add_feature_level(parser, "emulated")
    add_engine(parser)
    parser.add_argument(
        "--clamp-indices",
        action="store_true",
        help="clamp out-of-range indices into range instead of failing (DirectML leaves them undefined)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    inputs = (args.model, args.inputs)
    # checked as typed: Path() would drop a trailing "/" that names a folder
    output_path = (
        check_output_file(args.output, overwrite=args.overwrite, inputs=inputs) if args.output else None
    )
    shapes = input_shapes(args)
    generated: GeneratedInputs | None = None
    generated_for = None  # the graph the inputs were generated for
    if args.inputs:
        if shapes:
            print("dmlshim run: note: --input-shape is ignored with --inputs", file=sys.stderr)
        # bfloat16 and float8 inputs: raw bits or float32 values (inputs/narrow_floats.py)
        proto = load_model(args.model, weightless=True, own_weights=False).proto
        feeds = narrow_feeds(proto.graph, load_npz(args.inputs))
        refuse_sizes_at(proto, feed_shapes(feeds), path=str(args.model))
    else:
        loaded = load_model(args.model, weightless=True, own_weights=False)
        generated = generate(loaded, input_shapes=shapes, seed=args.seed)
        generated_for = loaded.proto.graph
        feeds = generated.feeds
    session = InferenceSession(
        args.model,
        feature_level=args.feature_level,
        engine=args.engine,
        index_mode="clamp" if args.clamp_indices else "error",
    )
    names = [o.name for o in session.get_outputs()]
    try:
        # bfloat16, float8 and 4-bit outputs come back as OrtValues (run() refuses them, as onnxruntime's)
        outputs = strings_decoded(session._run_values(names, feeds, None))
    except DmlShimError as exc:
        if generated is not None:
            annotate_error(exc, generated, generated_for)
        if exc.path is None:  # as validate: the engines run parts of the model, which do not know the file
            exc.path = str(args.model)
        raise
    record = session.last_run_record
    assert record is not None  # set by every run
    outputs = [_string_tensor_as_text(o) for o in outputs]
    stored = [(n, o) for n, o in zip(names, outputs, strict=False) if is_array(o)]
    if output_path is not None:
        write_arrays(output_path, dict(stored), kind="outputs", overwrite=args.overwrite, inputs=inputs)
        logger.info("wrote %d outputs to %s", len(stored), output_path)
        left_out = [(n, o) for n, o in zip(names, outputs, strict=False) if not is_array(o)]
        if left_out:
            listed = "; ".join(f"{n!r} is {kind_text(o)}" for n, o in left_out)
            print(
                f"dmlshim run: note: the outputs file holds arrays only, so {output_path} leaves out "
                f"{len(left_out)} output(s): {listed} (--json describes them)",
                file=sys.stderr,
            )
    if args.json:
        doc = _summary_json(args.model, session, names, outputs, record, output_path)
        doc["inputs"] = generated.to_json() if generated else {"source": "file", "path": args.inputs}
        print(json.dumps(doc, indent=2))
    else:
        print(_summary_text(args.model, names, outputs, record, output_path, _inputs_line(args, generated)))
    return 0


def _summary_json(
    model: str,
    session: InferenceSession,
    names: list[str],
    outputs: list[np.ndarray],
    record: RunRecord,
    output_path: Path | None,
) -> dict[str, Any]:
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "model": model,
        "engine": record.engine,
        "feature_level": record.feature_level,
        "providers": session.get_providers(),
        "outputs": [_json_output(n, o, output_path) for n, o in zip(names, outputs, strict=False)],
        "record": record.to_json(),
        "output_file": str(output_path) if output_path is not None else None,
    }


def _string_tensor_as_text(value: Any) -> Any:
    """A tensor(string) output (onnxruntime gives an object array of ``str``) as a numpy text array, which
    an ``.npz`` holds without pickling (``--inputs`` reads one back as the string input it was). Left as
    it is when a string ends in NUL, which a numpy text array would drop."""
    if not isinstance(value, np.ndarray) or value.dtype != object:
        return value
    flat = value.reshape(-1).tolist()
    if not all(isinstance(v, str) and not v.endswith("\0") for v in flat):
        return value
    return np.array(flat, dtype=str).reshape(value.shape) if flat else np.zeros(value.shape, dtype="<U1")


def _json_output(name: str, value: Any, output_path: Path | None) -> dict[str, Any]:
    """An array's name, shape and dtype; a sequence, map or OrtValue also says what it is (``value``)
    and, with ``-o``, that the .npz left it out (``stored``)."""
    if is_array(value):
        return {"name": name, "shape": list(value.shape), "dtype": str(value.dtype)}
    out: dict[str, Any] = {"name": name, "shape": None, "dtype": kind_text(value), "value": describe(value)}
    if output_path is not None:
        out["stored"] = False
    return out


def _inputs_line(args: argparse.Namespace, generated: GeneratedInputs | None) -> str:
    if generated is None:
        return f"inputs: {args.inputs}"
    return f"inputs: generated (seed {generated.seed}): {generated.describe()}"


def _summary_text(
    model: str,
    names: list[str],
    outputs: list[np.ndarray],
    record: RunRecord,
    output_path: Path | None,
    inputs_line: str = "",
) -> str:
    emulated = len(record.emulated)
    lines = [
        f"model: {model}",
        *([inputs_line] if inputs_line else []),
        f"engine: {record.engine}, {record.feature_level}, "
        f"{record.cpu_partitions} onnxruntime CPU partition(s)",
        *([f"real DirectML: {dict(record.device).get('description', '')}"] if record.device else []),
        *(
            [f"nodes onnxruntime placed on its CPU provider: {dict(record.device).get('nodes_on_cpu', '?')}"]
            if record.device
            else []
        ),
        f"gather/scatter nodes: {len(record.nodes)} ({emulated} ran as DirectML operators, "
        f"{len(record.nodes) - emulated} on onnxruntime CPU)",
        "",
        "outputs:",
    ]
    lines += table(
        [
            ["name", "shape", "dtype"],
            *(
                [n, shape_text(o.shape), str(o.dtype)] if is_array(o) else [n, "-", kind_text(o)]
                for n, o in zip(names, outputs, strict=False)
            ),
        ],
    )
    if record.nodes:
        lines += ["", "nodes:"]
        rows = []
        for n in record.nodes:
            reason = (
                "; ".join(f"{code}: {message}" for code, message in n.reasons) if n.placement != "dml" else ""
            )
            notes = []
            if n.duplicate_indices:
                notes.append(f"{n.duplicate_indices} duplicate write(s)")
            if n.negative_indices:
                notes.append("negative indices")
            reason = "; ".join(x for x in [reason, *notes] if x)
            rows.append([n.name, n.op_type, n.placement, n.operator or "-", reason or "-"])
        lines += table([["node", "op", "placement", "DML operator", "reason"], *rows])
    if record.notes:
        lines += ["", *(f"note: {code}: {message}" for code, message in record.notes)]
    if output_path is not None:
        lines += ["", f"wrote {sum(is_array(o) for o in outputs)} output(s) to {output_path}"]
    return "\n".join(lines)
