"""Generated inputs for a multi-index flattened into one (torch advanced indexing ``x[i, j]``).

The TorchScript exporter writes ``x[i, j]`` on ``x [4, 5, 2]`` as ``Gather(Flatten(x, 2), j + i * 5)``
with the 5 read by ``Gather(Shape(x), 1)``. Each of ``i`` and ``j`` alone reaches the Gather's indices,
and a bound of 20 for each lets ``i * 5 + j`` run past the end; ``i`` must stay in ``[0, 4)`` and ``j`` in
``[0, 5)``. Expected values come from the model's meaning: onnxruntime CPU runs the generated inputs, and
the index the Gather reads is inside its 20 rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.cli.main import main
from dmlshim.inputs import generate


def flat_index(swapped: bool = False) -> onnx.ModelProto:
    """``y = Flatten(x, 2)[j + i * x.shape[1]]`` (``swapped``: ``x.shape[1] * i + j``, Add operands
    reversed); ``used`` is the flattened index itself."""
    mul = ["dim1", "i"] if swapped else ["i", "dim1"]
    add = ["prod", "j"] if swapped else ["j", "prod"]
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["x"], ["flat"], axis=2),
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "one"], ["dim1"], axis=0),
            helper.make_node("Mul", mul, ["prod"]),
            helper.make_node("Add", add, ["used"]),
            helper.make_node("Gather", ["flat", "used"], ["y"], axis=0),
        ],
        "flat_index",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5, 2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2, 2]),
         helper.make_tensor_value_info("j", TensorProto.INT64, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("used", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.array(1, np.int64), "one")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


@pytest.mark.parametrize("swapped", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_flattened_multi_index_stays_inside(seed: int, swapped: bool) -> None:
    model = flat_index(swapped)
    generated = generate(model, seed=seed, negative_indices=True)
    i, j = generated.feeds["i"], generated.feeds["j"]
    assert i.min() >= 0 and i.max() < 4 and j.min() >= 0 and j.max() < 5
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    _, used = session.run(None, generated.feeds)
    assert used.min() >= 0 and used.max() < 20


def test_validate_generates_them(tmp_path: Path) -> None:
    path = tmp_path / "flat.onnx"
    onnx.save(flat_index(), str(path))
    assert main(["validate", str(path)]) == 0
