"""A gather of a transposed weight (onnxruntime-genai's tied embedding: ``Gather(Transpose(W), ids)``)
reads the weight through a view: the whole-model check fetches no copy of it from onnxruntime, and the
kernel reads it through its strides instead of copying it; outputs stay onnxruntime's, bit for bit."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.execute.weights.layout_views import layout_views
from tests.oracle import IR_VERSION, ort_run

HIDDEN, VOCAB = 64, 1024  # W is (HIDDEN, VOCAB) float32: 256 KiB, above SHARE_MIN_BYTES


def _model() -> onnx.ModelProto:
    """ids -> Gather(Transpose(W), ids) -> Relu -> Gather(columns) -> Tanh: two CPU segments around the
    emulated gathers, so the whole-model check runs."""
    weight = np.random.default_rng(36).standard_normal((HIDDEN, VOCAB)).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["W"], ["WT"], name="tie", perm=[1, 0]),
        helper.make_node("Gather", ["WT", "ids"], ["rows"], name="embed", axis=0),
        helper.make_node("Relu", ["rows"], ["r"], name="relu"),
        helper.make_node("Gather", ["r", "cols"], ["g"], name="pick", axis=1),
        helper.make_node("Tanh", ["g"], ["y"], name="tanh"),
    ]
    graph = helper.make_graph(
        nodes,
        "tied",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"]),
            helper.make_tensor_value_info("cols", TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


FEEDS = {"ids": np.array([3, 1023, 0, 511, 3], dtype=np.int64), "cols": np.array([0, 63, 7], dtype=np.int64)}
WEIGHT_BYTES = HIDDEN * VOCAB * 4


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external-data"])
def test_gather_of_transposed_weight_reads_a_view(tmp_path: Path, external: bool) -> None:
    model = _model()
    expected = ort_run(model, FEEDS)
    source: str | bytes = model.SerializeToString()
    if external:
        path = tmp_path / "tied.onnx"
        onnx.save_model(model, str(path), save_as_external_data=True, location="tied.data", size_threshold=0)
        source = str(path)
    session = dmlshim.InferenceSession(source)
    check = session._engine._check
    assert check is not None, "two CPU segments: the whole-model check answers the runs"
    # onnxruntime's session returns the model's outputs and the gathers' outputs, never the weight.
    assert "WT" not in check._fetch
    assert "rows" in check._fetch
    # external data: the view is of the file's map, whose pages each run lets go again
    assert len(session._engine._view_maps) == (1 if external else 0)
    for run in range(5):  # the gathers' proved runs, then the lean check's
        tracemalloc.start()
        got = session.run(None, FEEDS)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert got[0].dtype == expected[0].dtype and np.array_equal(got[0], expected[0]), run
        # a copy of the weight (the kernel's contiguous copy of a fetched transpose) would trace 256 KiB
        assert peak < WEIGHT_BYTES // 2, (run, peak)


def test_only_layout_ops_of_large_constant_initializers_become_views() -> None:
    weight = np.arange(HIDDEN * VOCAB, dtype=np.float32).reshape(HIDDEN, VOCAB)
    small = np.ones((4, 4), np.float32)
    inits = {
        "W": numpy_helper.from_array(weight, "W"),
        "S": numpy_helper.from_array(small, "S"),
        "F": numpy_helper.from_array(weight, "F"),
    }
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["W"], ["WT"], perm=[1, 0]),
            helper.make_node("Identity", ["W"], ["WI"]),
            helper.make_node("Transpose", ["S"], ["ST"]),
            helper.make_node("Neg", ["W"], ["WN"]),
            helper.make_node("Transpose", ["F"], ["FT"]),
        ],
        "g",
        [helper.make_tensor_value_info("F", TensorProto.FLOAT, [HIDDEN, VOCAB])],
        [],
        list(inits.values()),
    )
    views = layout_views(graph, {"WT", "WI", "ST", "WN", "FT"}, inits, {"F"}, numpy_helper.to_array)
    # small (ST), computed (WN) and fed (FT: a graph input the program may replace) are left out
    assert set(views) == {"WT", "WI"}
    assert np.array_equal(views["WT"], weight.T) and not views["WT"].flags.c_contiguous
    assert np.array_equal(views["WI"], weight)


def test_kernel_reads_a_read_only_transposed_input_through_its_strides() -> None:
    """The gather kernel over a read-only transposed weight shares its memory (no copy) and gives what
    numpy's take gives; a writable one (a program's array) is copied to a packed array, as before."""
    from dmlshim.translate.runner import _plain_binding

    weight = np.arange(HIDDEN * VOCAB, dtype=np.float32).reshape(HIDDEN, VOCAB)
    transposed = weight.T.view()
    transposed.flags.writeable = False
    bound = _plain_binding(transposed, (1, 1, VOCAB, HIDDEN), as_bytes=False)
    assert np.shares_memory(bound, weight) and not bound.flags.c_contiguous
    copied = _plain_binding(weight.T, (1, 1, VOCAB, HIDDEN), as_bytes=False)
    assert copied.flags.c_contiguous and not np.shares_memory(copied, weight)
    assert np.array_equal(bound, copied)
