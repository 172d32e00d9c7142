"""Hostile round 49c: gathers of tables stored as external data in the .onnx file itself, by dtype.

float16, bfloat16 (gathered, then cast to float: onnxruntime's ``run`` returns no bfloat16 array), int8
and bool tables, past the protobuf in the model's own file, gathered by fed indices (negative ones
included) with Gather (both axes) and GatherND, in every engine; then the weights zeroed in place, which
onnxruntime's mapped file shows in the next run. Expected values: onnxruntime's session of the same file,
asked after each change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from tests.oracle import assert_same_bits
from tests.test_file_changes_after_load import ENGINES, _ort_session
from tests.test_shape49_data_in_model_file import save_in_itself

vi = helper.make_tensor_value_info
RNG = np.random.default_rng(4949)


def _table(kind: str) -> onnx.TensorProto:
    if kind == "bfloat16":
        values = RNG.standard_normal((64, 32)).astype(np.float32)
        bits = (values.view(np.uint32) >> 16).astype(np.uint16)
        tensor = helper.make_tensor("t", TensorProto.BFLOAT16, [64, 32], bits.tobytes(), raw=True)
        return tensor
    if kind == "float16":
        return numpy_helper.from_array(RNG.standard_normal((64, 32)).astype(np.float16), "t")
    if kind == "int8":
        return numpy_helper.from_array(RNG.integers(-128, 128, (64, 32)).astype(np.int8), "t")
    return numpy_helper.from_array(RNG.random((64, 32)) > 0.5, "t")


def _model(kind: str, op: str) -> onnx.ModelProto:
    table = _table(kind)
    if op == "GatherND":
        nodes = [helper.make_node("GatherND", ["t", "i"], ["g"])]
        inputs = [vi("i", TensorProto.INT64, ["n", 2])]
    else:
        nodes = [helper.make_node("Gather", ["t", "i"], ["g"], axis=1 if op == "Gather1" else 0)]
        inputs = [vi("i", TensorProto.INT64, ["n"])]
    if kind == "bfloat16":
        nodes.append(helper.make_node("Cast", ["g"], ["y"], to=TensorProto.FLOAT))
        out = vi("y", TensorProto.FLOAT, None)
    else:
        nodes.append(helper.make_node("Identity", ["g"], ["y"]))
        out = vi("y", table.data_type, None)
    graph = helper.make_graph(nodes, "g", inputs, [out], [table])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(op: str) -> dict[str, np.ndarray]:
    if op == "GatherND":
        return {"i": np.stack([RNG.integers(-64, 64, 40), RNG.integers(-32, 32, 40)], 1)}
    return {"i": RNG.integers(-32, 32, 40)}


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("op", ["Gather0", "Gather1", "GatherND"])
@pytest.mark.parametrize("kind", ["float16", "bfloat16", "int8", "bool"])
def test_gather_of_data_in_the_model_file(tmp_path: Path, kind: str, op: str, engine: str) -> None:
    path = tmp_path / "model.onnx"
    where = save_in_itself(_model(kind, op), path)
    assert "t" in where
    feeds = _feeds(op)
    ours = dmlshim.InferenceSession(str(path), **ENGINES[engine])
    assert_same_bits(ours.run(None, feeds), _ort_session(path).run(None, feeds))
    theirs = _ort_session(path)
    offset, length = where["t"]
    with open(path, "r+b") as f:  # the weights zeroed in place: both sessions map the file
        f.seek(offset)
        f.write(b"\0" * length)
    assert_same_bits(ours.run(None, feeds), theirs.run(None, feeds))
