"""``get_session_options()`` reports the execution mode onnxruntime's session reports for the same options
(found by a parity harness running one client on onnxruntime and on dmlshim): ``ORT_PARALLEL`` stays
parallel unless ``inter_op_num_threads`` is 1, where onnxruntime makes it sequential. dmlshim's probe of
the options, built with one inter-op thread, reported sequential for every parallel session."""

from __future__ import annotations

import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim


def _model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=1, name="g0")],
        "modes",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(
        graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)]
    ).SerializeToString()


@pytest.mark.parametrize("mode", ["ORT_PARALLEL", "ORT_SEQUENTIAL"])
@pytest.mark.parametrize("inter", [0, 1, 2])
@pytest.mark.parametrize("providers", [None, ["CPUExecutionProvider"]])
def test_execution_mode_reported_as_onnxruntime(mode: str, inter: int, providers: list[str] | None) -> None:
    so = onnxruntime.SessionOptions()
    so.execution_mode = getattr(onnxruntime.ExecutionMode, mode)
    so.inter_op_num_threads = inter
    so.log_severity_level = 4
    theirs = onnxruntime.InferenceSession(
        _model(), so, providers=["CPUExecutionProvider"]
    ).get_session_options()
    ours = dmlshim.InferenceSession(_model(), so, providers=providers).get_session_options()
    assert ours.execution_mode == theirs.execution_mode
    assert (ours.inter_op_num_threads, ours.intra_op_num_threads) == (
        theirs.inter_op_num_threads,
        theirs.intra_op_num_threads,
    )
    assert so.execution_mode == getattr(onnxruntime.ExecutionMode, mode)  # the caller's object unchanged
