"""The lean check attacked as a hostile caller would (issue 36, item 2): every output compared with
onnxruntime's CPU session of the unmodified model, bit for bit, over enough runs that the lean check is
reached.

Expected values come from onnxruntime's own CPU sessions (built, like the dmlshim session, before the
caller changes its options object).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.engines import partitioned
from tests.oracle import same_bits


def _gelu_model() -> bytes:
    """Relu -> Gather(fed) -> com.microsoft Gelu -> Gather(fed) -> Neg: onnxruntime's Gelu becomes its
    tanh approximation (other bits) when the options ask for it at the session's build."""
    f, i = TensorProto.FLOAT, TensorProto.INT64
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Gather", ["a", "gidx"], ["g"], axis=0),
        helper.make_node("Gelu", ["g"], ["h"], domain="com.microsoft"),
        helper.make_node("Gather", ["h", "gidx2"], ["g2"], axis=0),
        helper.make_node("Neg", ["g2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [
            helper.make_tensor_value_info("x", f, ["n", 64]),
            helper.make_tensor_value_info("gidx", i, ["m"]),
            helper.make_tensor_value_info("gidx2", i, ["k"]),
        ],
        [helper.make_tensor_value_info("y", f, None), helper.make_tensor_value_info("h", f, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10
    return model.SerializeToString()


def _gelu_feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": (rng.standard_normal((8, 64)) * 3).astype(np.float32),
        "gidx": np.array([1, 3, 5, 7], dtype=np.int64),
        "gidx2": np.array([0, 2], dtype=np.int64),
    }


@pytest.mark.parametrize("keep_full", [True, False])
def test_options_changed_after_construction_reach_no_later_session(
    keep_full: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """onnxruntime reads a SessionOptions object when the session is built; a program that goes on to
    change the object (for its next session, say) does not change the sessions it built. The lean
    session (and the full one built again) are built runs later: they must not read the changes."""
    if not keep_full:
        monkeypatch.setattr(partitioned, "KEEP_FULL_MAX_BYTES", -1)
    data, feeds = _gelu_model(), _gelu_feeds()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    reference = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(data, so)
    # the program reuses its options object for another session
    so.add_session_config_entry("optimization.enable_gelu_approximation", "1")
    so.optimized_model_filepath = str(tmp_path / "next_session.onnx")
    approximated = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    (tmp_path / "next_session.onnx").unlink()
    expected = reference.run(None, feeds)
    assert not same_bits(approximated, expected)  # the change does change onnxruntime's bits
    for run in range(1, 11):
        assert same_bits(session.run(None, feeds), expected), f"run {run}"
    assert list(tmp_path.iterdir()) == []  # no session of ours wrote the file the options name now


def test_options_changed_after_construction_reach_no_partition() -> None:
    data, feeds = _gelu_model(), _gelu_feeds()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    reference = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(data, so, index_mode="clamp")
    so.add_session_config_entry("optimization.enable_gelu_approximation", "1")
    # index 70 clamped to 7: onnxruntime refuses the check's run, the partitioned steps answer
    clamped = dict(feeds, gidx=np.array([1, 3, 5, 70], dtype=np.int64))
    ours = session.run(None, clamped)
    assert session.last_run_record.path == "partitioned"
    assert same_bits(ours, reference.run(None, feeds))


def _shape_model(weights: np.ndarray) -> bytes:
    """An embedding Gather on computed indices (also a graph output), a Gather whose index comes from the
    indices' Shape, a ScatterND on fed indices, around CPU segments; an initializer and the gathered rows
    among the outputs too."""
    f, i = TensorProto.FLOAT, TensorProto.INT64
    nodes = [
        helper.make_node("Sub", ["ids", "one"], ["idx"]),
        helper.make_node("Gather", ["W", "idx"], ["e"], axis=0),
        helper.make_node("Relu", ["e"], ["r"]),
        helper.make_node("Shape", ["ids"], ["sh"]),
        helper.make_node("Gather", ["sh", "zero"], ["b0"], axis=0),
        helper.make_node("Sub", ["b0", "one"], ["bi"]),
        helper.make_node("Unsqueeze", ["bi", "ax0"], ["bi1"]),
        helper.make_node("Gather", ["r", "bi1"], ["g2"], axis=0),
        helper.make_node("Sigmoid", ["g2"], ["s2"]),
        helper.make_node("ScatterND", ["s2", "sidx", "upd"], ["sc"]),
        helper.make_node("Tanh", ["sc"], ["y"]),
    ]
    initializers = [
        onnx.numpy_helper.from_array(weights, "W"),
        onnx.numpy_helper.from_array(np.array(1, np.int64), "one"),
        onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
        onnx.numpy_helper.from_array(np.array([0], np.int64), "ax0"),
    ]
    graph = helper.make_graph(
        nodes,
        "hostile",
        [
            helper.make_tensor_value_info("ids", i, ["b", "t"]),
            helper.make_tensor_value_info("sidx", i, ["k", 1]),
            helper.make_tensor_value_info("upd", f, ["k", "t", weights.shape[1]]),
        ],
        [
            helper.make_tensor_value_info(name, dtype, None)
            for name, dtype in (("y", f), ("idx", i), ("e", f), ("one", i))
        ],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model.SerializeToString()


def _shape_feeds(run: int, rows: int, bad: str | None = None, t: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(run)
    ids = rng.integers(1, rows + 1, size=(2, t)).astype(np.int64)
    sidx = np.array([[0]], dtype=np.int64)
    if bad == "negative":
        ids[0, 0] = -3  # index -4: onnxruntime counts from the end, the proof does not hold
    elif bad == "duplicate":
        sidx = np.array([[0], [0]], dtype=np.int64)  # the same slice written twice
    return {
        "ids": ids,
        "sidx": sidx,
        "upd": rng.standard_normal((sidx.shape[0], t, 4)).astype(np.float32),
    }


@pytest.mark.parametrize("keep_full", [True, False])
def test_indices_invalid_on_runs_7_9_11_and_output_subsets(
    keep_full: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not keep_full:
        monkeypatch.setattr(partitioned, "KEEP_FULL_MAX_BYTES", -1)
    rows = 50
    data = _shape_model(np.random.default_rng(0).standard_normal((rows, 4)).astype(np.float32))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the duplicate ScatterND: one thread decides the winner
    options.log_severity_level = 3
    reference = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(data)
    check = session._engine._check
    subsets: list[list[str] | None] = [None, ["idx"], ["one"], ["e"], ["y", "y"], ["idx", "e", "idx"]]
    for run in range(1, 19):
        bad = {7: "negative", 9: "duplicate", 11: "negative"}.get(run)
        feeds = _shape_feeds(run, rows, bad, t=6 if run == 13 else 5)
        names = subsets[run % len(subsets)]
        ours = session.run(names, feeds)
        assert same_bits(ours, reference.run(names, feeds)), f"run {run}"
        if run == 6:
            assert check.lean_runs == 2  # given on run 4, lean on runs 5 and 6
    # heavy: on the full check for good from run 7; light: lean again once a full run has every node given
    # (after the new shapes of runs 9 and 13 are proved again)
    if keep_full:
        assert check.lean_runs > 2
    else:
        assert check.lean_runs == 2
