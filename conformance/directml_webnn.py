"""The WebNN conformance cases (conformance/README.md) replayed on DirectML.dll, against WebNN's values.

    python conformance/directml_webnn.py [--out DIR] [--stack stack.json]

Each case's DirectML descriptor (`dmlshim.conformance.webnn.build_descriptor`, built as the DML EP builds
it) is written as a DxDispatch folder whose expected output is WebNN's own expected value, replayed on
DirectML.dll (docs/replay.md) and compared exactly. WebNN expects clamped indices where an index is out of
range (the cases with a note): DirectML leaves that undefined, so those are reported, never failing.
Exit status: 0 when every other case equals WebNN's value, 1 otherwise, 2 when DirectML is not set up.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="keep the case folders here (new or empty); default: temporary")
    parser.add_argument("--stack", help="the stack.json to use (default: the one in dmlshim's cache folder)")
    parser.add_argument("--skip-if-missing", action="store_true", help="exit 0 if DirectML is not set up")
    args = parser.parse_args(argv)

    from dmlshim.conformance.webnn.cases import load_cases
    from dmlshim.conformance.webnn.descriptors import build_descriptor
    from dmlshim.dxdispatch import single_operator_model
    from dmlshim.dxdispatch.compare import compare_export
    from dmlshim.dxdispatch.export import DML_OUTPUT_FILE, EXPECTED_OUTPUT_FILE, INDEX_FILE, MODEL_FILE
    from dmlshim.dxdispatch.host_stack import StackMissingError, load_stack
    from dmlshim.dxdispatch.real_replay import replay_folders
    from dmlshim.fileio.files import write_json, write_npy

    try:
        stack = load_stack(args.stack)
    except StackMissingError as exc:
        print(f"directml_webnn: skipped: {exc.message} ({exc.path})")
        return 0 if args.skip_if_missing else 2
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dmlshim-webnn-") as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        entries, observe = [], set()
        for i, case in enumerate(load_cases()):
            desc = build_descriptor(case)
            tensors = desc.tensors()
            arrays = {"InputTensor": case.input, "IndicesTensor": case.indices, "UpdatesTensor": case.updates}
            inputs = {f: arrays[f].array().reshape(tensors[f].sizes) for f in desc.INPUT_TENSOR_FIELDS}  # type: ignore[union-attr]
            folder = f"{i:03d}_{case.op}"
            (out / folder).mkdir()
            single_operator_model(desc, inputs, dispatchable="op", output_file=DML_OUTPUT_FILE).save(
                out / folder / MODEL_FILE
            )
            expected = case.expected.array().reshape(tensors["OutputTensor"].sizes)
            write_npy(out / folder / EXPECTED_OUTPUT_FILE, expected)
            entries.append({"folder": folder, "node": case.name, "op_type": case.op})
            if case.note:
                observe.add(folder)
        write_json(out / INDEX_FILE, {"exported": entries})
        replay = replay_folders([out / e["folder"] for e in entries], stack=stack)
        report = compare_export(out)
    print(f"real DirectML: {replay.device.describe()}")
    failed = [n for n in report.nodes if n.status != "match" and n.folder not in observe]
    observed = [n for n in report.nodes if n.status != "match" and n.folder in observe]
    for n in observed:
        print(f"  observed  {n.node} ({n.op_type}, out-of-range index): {n.detail}")
    for n in failed:
        print(f"  FAIL      {n.node} ({n.op_type}): {n.status}: {n.detail}")
    passed = len(report.nodes) - len(failed) - len(observed)
    print(
        f"{passed} passed, {len(failed)} failed, {len(observed)} observed of {len(report.nodes)} "
        f"WebNN case(s) ({time.monotonic() - start:.0f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
