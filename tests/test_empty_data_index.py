"""An index into empty data (issue 35, part 5): onnxruntime says the index is out of range, and so does
every engine (the custom-op engine answered BadInputError); no index at all gives onnxruntime's empty
output."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import IndexOutOfRangeError
from tests.oracle import IR_VERSION, ort_run

CASES = {
    "Gather": ({"axis": 0}, [2], [0, 0]),
    "GatherElements": ({"axis": 0}, [1, 4], [[0, 0, 0, 0]]),
    "GatherND": ({}, [1, 1], [[0]]),
}
ENGINES: dict[str, dict[str, Any]] = {
    "partitioned": {},
    "customop": {"engine": "customop"},
    "cpu": {"providers": ["CPUExecutionProvider"]},
}


def _model(op: str) -> onnx.ModelProto:
    attrs, ishape, _ = CASES[op]
    graph = helper.make_graph(
        [helper.make_node(op, ["d", "i"], ["y"], name="g", **attrs)],
        "empty",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["k", *ishape[1:]]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("op", sorted(CASES))
def test_an_index_into_empty_data_is_out_of_range_everywhere(op: str, engine: str) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model = _model(op)
    feeds = {"d": np.zeros((0, 4), np.float32), "i": np.array(CASES[op][2], np.int64)}
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(model, **ENGINES[engine])
    try:
        expected = theirs.run(None, feeds)
    except Exception as exc:  # onnxruntime: the index is out of range
        assert re.search(r"out of (data )?bounds|[Oo]ut of range|invalid index", str(exc)), exc
        with pytest.raises(IndexOutOfRangeError, match="out of range") as caught:
            session.run(None, feeds)
        assert caught.value.op_type == op
    else:  # onnxruntime 1.24's GatherND answers an index into empty data: so does dmlshim
        for got, want in zip(session.run(None, feeds), expected, strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
    # no index at all: onnxruntime's empty output
    empty = {"d": feeds["d"], "i": np.zeros((0, *np.asarray(CASES[op][2]).shape[1:]), np.int64)}
    for got, want in zip(session.run(None, empty), ort_run(model, empty), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
