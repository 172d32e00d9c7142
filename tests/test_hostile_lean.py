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


def _same(ours: list[object], theirs: list[object]) -> bool:
    for a, b in zip(ours, theirs, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            return False
    return True


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
    assert not _same(approximated, expected)  # the change does change onnxruntime's bits
    for run in range(1, 11):
        assert _same(session.run(None, feeds), expected), f"run {run}"
    assert list(tmp_path.iterdir()) == []  # no session of ours wrote the file the options name now
