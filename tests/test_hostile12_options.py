"""Hostile round 12: a program changes its SessionOptions object after building a dmlshim session from
it, where a copy of the options cannot carry what they hold (an override by denotation, a provider the
options name), so that the engine builds its onnxruntime sessions from the program's own object.

onnxruntime reads the options once, when its session is built; the CPU segments' sessions (built on
first use) and the one-node sessions (built at run time per kind of input) read the object as the program
changed it since: the Gelu approximation reached the segments, and a load cancellation flag set for the
next session cancelled a run. Expected values: onnxruntime's CPU session built from the same object before
it changed.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import dmlshim
from tests.oracle import IR_VERSION, same_bits
from tests.test_hostile_lean import _gelu_feeds, _gelu_model


def _unsharable_options(how: str) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if how == "denotation":
        so.add_free_dimension_override_by_denotation("DATA_BATCH", 8)
    else:
        so.add_provider("CPUExecutionProvider", {})
    return so


@pytest.mark.parametrize("how", ["denotation", "provider"])
def test_a_change_after_construction_reaches_no_segment(how: str) -> None:
    model = onnx.load_from_string(_gelu_model())
    model.graph.input[0].type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    data, feeds = model.SerializeToString(), _gelu_feeds()
    so = _unsharable_options(how)
    reference = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(data, so, index_mode="clamp")
    so.add_session_config_entry("optimization.enable_gelu_approximation", "1")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    expected = reference.run(None, feeds)
    # index 70 clamped to 7: onnxruntime refuses the check's run, the partitioned steps answer
    ours = session.run(None, dict(feeds, gidx=np.array([1, 3, 5, 70], dtype=np.int64)))
    assert session.last_run_record.path == "partitioned"
    assert same_bits(ours, expected)
    for _ in range(6):
        assert same_bits(session.run(None, feeds), expected)


def test_a_cancellation_flag_set_after_construction_cancels_no_run() -> None:
    """A string Gather runs alone in onnxruntime, its session built when a kind of input first comes."""
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["s", "i"], ["g"], axis=0),
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Gather", ["r", "i"], ["y"], axis=0),
        ],
        "strings",
        [
            helper.make_tensor_value_info("s", T.STRING, ["n"]),
            helper.make_tensor_value_info("i", T.INT64, ["k"]),
            helper.make_tensor_value_info("x", T.FLOAT, ["n", 3]),
        ],
        [
            helper.make_tensor_value_info("g", T.STRING, None),
            helper.make_tensor_value_info("y", T.FLOAT, None),
        ],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    data = data.SerializeToString()
    so = _unsharable_options("provider")
    reference = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(data, so)
    so.set_load_cancellation_flag(True)  # meant for the program's next session
    x = np.arange(9, dtype=np.float32).reshape(3, 3) - 4
    feeds = {"s": np.array(["a", "b", "c"], dtype=object), "i": np.array([2, 0, -1]), "x": x}
    for run in range(3):
        ours, expected = session.run(None, feeds), reference.run(None, feeds)
        assert list(ours[0]) == list(expected[0]), run
        assert same_bits(ours[1], expected[1]), run


_SET_BEFORE = {
    "gelu_approximation": lambda so: so.add_session_config_entry(
        "optimization.enable_gelu_approximation", "1"
    ),
    "disabled_optimizer": lambda so: so.add_session_config_entry(
        "optimization.disable_specified_optimizers", "GeluApproximation"
    ),
    "denormal_as_zero": lambda so: so.add_session_config_entry("session.set_denormal_as_zero", "1"),
    "parallel": lambda so: setattr(so, "execution_mode", ort.ExecutionMode.ORT_PARALLEL),
    "override_by_name": lambda so: so.add_free_dimension_override_by_name("n", 8),
}


@pytest.mark.parametrize("setting", sorted(_SET_BEFORE))
def test_settings_made_before_construction_reach_the_lean_session(
    setting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's private copy of the options, read by the lean session built runs later (one onnxruntime
    session at a time, so the full one is built again too): every run as onnxruntime's session with the
    same options, denormals and repeated indices included."""
    from dmlshim.execute.engines import partitioned

    monkeypatch.setattr(partitioned, "KEEP_FULL_MAX_BYTES", -1)
    data, feeds = _gelu_model(), _gelu_feeds()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    _SET_BEFORE[setting](so)
    reference = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(data, so)
    for run in range(14):
        given = dict(feeds, x=feeds["x"] * (1 + run))
        given["x"][0, 0] = 1e-40
        if run >= 8 and run % 2:
            given["gidx"] = np.array([3, 3, -1], dtype=np.int64)
        assert same_bits(session.run(None, given), reference.run(None, given)), run
    assert session.engine._check.lean_runs > 0


def test_a_change_after_construction_reaches_no_segment_of_a_custom_op_model() -> None:
    """Options that registered a custom-op library (a copy cannot carry it): the program turns on the Gelu
    approximation for its next session; this session's partitioned run must not take it."""
    extensions = pytest.importorskip("onnxruntime_extensions")
    nodes = [
        helper.make_node("StringUpper", ["s"], ["su"], domain="ai.onnx.contrib"),
        *onnx.load_from_string(_gelu_model()).graph.node,
    ]
    gelu = onnx.load_from_string(_gelu_model()).graph
    graph = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("s", T.STRING, [2]), *gelu.input],
        [helper.make_tensor_value_info("su", T.STRING, None), *gelu.output],
    )
    opsets = [helper.make_opsetid(d, v) for d, v in (("", 17), ("com.microsoft", 1), ("ai.onnx.contrib", 1))]
    data = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION).SerializeToString()
    feeds = {"s": np.array(["ab", "Cd"], dtype=object), **_gelu_feeds()}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.register_custom_ops_library(extensions.get_library_path())
    reference = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(data, so, index_mode="clamp")
    so.add_session_config_entry("optimization.enable_gelu_approximation", "1")
    expected = reference.run(None, feeds)
    ours = session.run(None, dict(feeds, gidx=np.array([1, 3, 5, 70], dtype=np.int64)))
    assert session.last_run_record.path == "partitioned"
    assert list(ours[0]) == list(expected[0]) == ["AB", "CD"]
    assert same_bits(ours[1:], expected[1:])
