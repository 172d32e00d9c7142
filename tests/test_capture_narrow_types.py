"""Capturing node inputs of element types numpy cannot hold (bfloat16): onnxruntime's ``run``
refuses to return them, so export captured nothing for a model with a bfloat16 Cast before its Gather.

The captured bfloat16 values are checked bit for bit against onnxruntime's own (its Cast of the same value
to float32 is exact); a Loop carrying a bfloat16 state feeds it back into the body.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim.dxdispatch.capture import capture_nodes
from dmlshim.dxdispatch.export import export_model

from .oracle import IR_VERSION, ort_run

# onnx maps bfloat16 to ml_dtypes' type only from 1.18 (older onnx: float32, and no ml_dtypes installed);
# dmlshim then says capturing needs that onnx.
ml_dtypes = pytest.importorskip(
    "ml_dtypes", reason=f"capturing bfloat16 needs onnx 1.18+ (ml_dtypes); onnx {onnx.__version__} installed"
)

_X = np.linspace(-3.1, 7.7, 48, dtype=np.float32).reshape(6, 8)
_IDS = np.array([4, 0, 5, 1], dtype=np.int64)


def _model(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[str]
) -> onnx.ModelProto:
    # Output types are left for onnxruntime to infer.
    graph = helper.make_graph(nodes, "g", inputs, [onnx.ValueInfoProto(name=o) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=IR_VERSION)


def _ort_bf16_as_float(x: np.ndarray) -> np.ndarray:
    """onnxruntime's rounding of ``x`` to bfloat16, widened back to float32 by onnxruntime (exact)."""
    model = _model(
        [
            helper.make_node("Cast", ["x"], ["n"], to=TensorProto.BFLOAT16),
            helper.make_node("Cast", ["n"], ["y"], to=1),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        ["y"],
    )
    return ort_run(model, {"x": x})[0]


def _gather_model() -> onnx.ModelProto:
    return _model(
        [
            helper.make_node("Cast", ["x"], ["x_n"], to=TensorProto.BFLOAT16),
            helper.make_node("Gather", ["x_n", "ids"], ["rows_n"], name="gather_n", axis=0),
            helper.make_node("Cast", ["rows_n"], ["rows"], to=1),
            helper.make_node("Gather", ["rows", "ids"], ["out"], name="gather_f", axis=1),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 8]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [4]),
        ],
        ["out"],
    )


def test_bfloat16_node_inputs_are_captured_bit_for_bit() -> None:
    capture = capture_nodes(_gather_model(), {"x": _X, "ids": _IDS})
    assert capture.missed == ()
    by_name = {c.name: c for c in capture.nodes}
    data, ids = by_name["gather_n"].arrays
    assert data is not None and ids is not None and by_name["gather_n"].output is not None
    assert data.dtype == np.dtype(ml_dtypes.bfloat16) and data.shape == (6, 8)
    expected = _ort_bf16_as_float(_X)
    assert np.array_equal(data.astype(np.float32), expected)
    assert np.array_equal(by_name["gather_n"].output.astype(np.float32), expected[_IDS])
    assert np.array_equal(ids, _IDS)
    rows = by_name["gather_f"].arrays[0]
    assert rows is not None and rows.dtype == np.float32 and np.array_equal(rows, expected[_IDS])


def test_export_skips_the_bfloat16_gather_and_exports_the_float_one(tmp_path: Path) -> None:
    result = export_model(_gather_model(), tmp_path / "out", inputs={"x": _X, "ids": _IDS})
    assert [e.node for e in result.exported] == ["gather_f"]
    assert [(s.node, s.code) for s in result.skipped] == [("gather_n", "NOT_DML")]
    assert "bfloat16" in result.skipped[0].reason


def test_a_loop_carried_bfloat16_state_is_fed_back_into_the_body() -> None:
    # Each iteration gathers row `i` of the bfloat16 state and rolls the state up by one row.
    def const(name: str, value: int) -> onnx.NodeProto:
        return helper.make_node(
            "Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [1], [value])
        )

    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Gather", ["state", "i"], ["row"], name="gather_row", axis=0),
            const("zero", 0),
            const("one", 1),
            const("end", 6),
            helper.make_node("Slice", ["state", "one", "end"], ["tail"]),
            helper.make_node("Slice", ["state", "zero", "one"], ["head"]),
            helper.make_node("Concat", ["tail", "head"], ["state_out"], axis=0),
            helper.make_node("Cast", ["row"], ["row_f"], to=1),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state", TensorProto.BFLOAT16, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_out", TensorProto.BFLOAT16, None),
            helper.make_tensor_value_info("row_f", TensorProto.FLOAT, None),
        ],
    )
    model = _model(
        [
            helper.make_node("Cast", ["x"], ["x_bf16"], to=TensorProto.BFLOAT16),
            helper.make_node("Loop", ["trip", "cond", "x_bf16"], ["final", "rows"], name="loop", body=body),
            helper.make_node("Cast", ["final"], ["final_f"], to=1),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 8]),
            helper.make_tensor_value_info("trip", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        ["final_f", "rows"],
    )
    feeds = {"x": _X, "trip": np.array(3, dtype=np.int64), "cond": np.array(True)}
    rows = ort_run(model, feeds)[1]
    capture = capture_nodes(model, feeds, iteration=2)
    (node,) = capture.nodes
    assert node.name == "loop/body/gather_row" and node.iterations == (("loop", 2),)
    state, index = node.arrays
    assert state is not None and index is not None and node.output is not None
    assert state.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.array_equal(state.astype(np.float32), np.roll(_ort_bf16_as_float(_X), -2, axis=0))
    assert int(index) == 2
    assert np.array_equal(node.output.astype(np.float32), rows[2])
