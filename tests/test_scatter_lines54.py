"""The proof that a ScatterElements writes no place twice, on indices expanded from one column (issue 36:
torchvision's RoI pooling scatters each pyramid level's rows with ``index.expand(k, 256, 7, 7)``, and
sorting every one of those 1.9M-12.5M lines cost 15% of a Faster R-CNN run): one comparison pass proves
every line equal to the first, then that line alone is proved distinct. The answers are checked against
the definition (a Python set per line along the axis) on expanded, nearly expanded and random layouts,
and a model's outputs against onnxruntime CPU's."""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.proofs.scatter_given import _lines_written_once
from tests.oracle import same_bits


def _written_once(axis: int, dim: int, indices: np.ndarray) -> bool:
    """The definition: every index in [0, dim) and, on each line along ``axis``, no value twice."""
    if indices.min() < 0 or indices.max() >= dim:
        return False
    moved = np.moveaxis(indices, axis, -1).reshape(-1, indices.shape[axis])
    return all(len(set(line)) == len(line) for line in moved.tolist())


def _expanded(column: list[int], axis: int, shape: tuple[int, ...]) -> np.ndarray:
    view = [1] * len(shape)
    view[axis] = len(column)
    return np.broadcast_to(np.array(column, np.int64).reshape(view), shape).copy()


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_expanded_and_other_layouts_answer_as_the_definition(axis: int) -> None:
    rng = np.random.default_rng(54)
    shape = [5, 6, 7]
    shape[axis] = 4
    dim = 9
    cases = [
        _expanded([3, 0, 8, 5], axis, tuple(shape)),  # distinct, expanded
        _expanded([3, 0, 3, 5], axis, tuple(shape)),  # a repeat, expanded
        _expanded([3, 0, 9, 5], axis, tuple(shape)),  # out of range
    ]
    middle = _expanded([3, 0, 8, 5], axis, tuple(shape))
    where = [1] * 3
    where[axis] = slice(None)
    middle[tuple(where)] = [3, 3, 8, 5]  # first and last lines agree, a middle one repeats
    cases.append(middle)
    other = middle.copy()
    other[tuple(where)] = [1, 2, 4, 6]  # a middle line differs but stays distinct
    cases.append(other)
    for _ in range(4):  # every line a random permutation prefix: distinct, not expanded
        lines = [rng.permutation(dim)[:4] for _ in itertools.repeat(None, int(np.prod(shape)) // 4)]
        cases.append(
            np.moveaxis(np.array(lines).reshape(*[s for i, s in enumerate(shape) if i != axis], 4), -1, axis)
        )
    for indices in cases:
        assert indices.size > 64  # past the small-writes path
        assert _lines_written_once(axis, dim, indices) == _written_once(axis, dim, indices)


def test_expanded_scatter_model_matches_onnxruntime() -> None:
    """Rows scattered by an expanded column, as torchvision exports MultiScaleRoIAlign's merge: every run
    bit for bit onnxruntime's, the scatter's output taken from onnxruntime on the proof."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Reshape", ["rows", "col_shape"], ["col"]),
        helper.make_node("Expand", ["col", "upd_shape"], ["idx"]),
        helper.make_node("ScatterElements", ["a", "idx", "upd"], ["s"], axis=0),
        helper.make_node("Sigmoid", ["s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "expanded",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 8, 3, 3]),
            helper.make_tensor_value_info("rows", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("upd", TensorProto.FLOAT, [4, 8, 3, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 8, 3, 3])],
        [
            helper.make_tensor("col_shape", TensorProto.INT64, [4], [4, 1, 1, 1]),
            helper.make_tensor("upd_shape", TensorProto.INT64, [4], [4, 8, 3, 3]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(7)
    for run in range(6):
        feeds = {
            "x": rng.standard_normal((16, 8, 3, 3)).astype(np.float32),
            "rows": rng.permutation(16)[:4].astype(np.int64),
            "upd": rng.standard_normal((4, 8, 3, 3)).astype(np.float32),
        }
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
        node = next(n for n in session.last_run_record.nodes if n.op_type == "ScatterElements")
        assert node.duplicate_indices == 0, run
