"""Round 55b: two sizes the memory limit missed before any engine ran (a new-user pass).

- A ``Pad`` whose ``pads`` the graph computes from the feeds as torch's exporter writes ``F.pad``
  (``Concat`` of ``Unsqueeze``d ``Shape`` arithmetic, ``ConstantOfShape`` of the missing count, ``Reshape``
  to ``[-1, 2]``, ``Slice`` with step -1, ``Transpose``, ``Reshape`` to ``[-1]``, ``Cast``): the
  ``ConstantOfShape`` and ``Transpose`` were not followed, so the pads stayed unknown.
- A ``Resize`` by fed ``scales`` was reported missed too; with ``sizes`` left out it was and is refused
  (kept here as a guard). With ``sizes`` an empty initializer beside fed scales, onnxruntime (1.24.4 and
  1.32) fails the run itself ("Only one of scales or sizes") before allocating: its error stands.

The Pad is refused now, naming node, op and value; under a generous limit the values are onnxruntime CPU's.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import TooLargeError

from .oracle import ort_session

LIMIT = "60000000"
V = helper.make_tensor_value_info


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def torch_pad_model(factor: int) -> bytes:
    """``F.pad(x, (p, p, p, p))`` with ``p = x.shape[2] * factor``, as torch's legacy exporter writes it."""
    nodes = [
        _const("two", np.array(2, np.int64)),
        _const("k", np.array(factor, np.int64)),
        _const("ax0", np.array([0], np.int64)),
        _const("eight", np.array(8, np.int64)),
        _const("zero", np.array(0, np.int64)),
        _const("pair", np.array([-1, 2], np.int64)),
        _const("flat", np.array([-1], np.int64)),
        _const("s_start", np.array([-1], np.int64)),
        _const("s_end", np.array([-(2**63) + 1], np.int64)),
        _const("s_step", np.array([-1], np.int64)),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["h"], axis=0),
        helper.make_node("Mul", ["h", "k"], ["p"]),
        helper.make_node("Unsqueeze", ["p", "ax0"], ["p1"]),
        helper.make_node("Concat", ["p1", "p1", "p1", "p1"], ["four"], axis=0),
        helper.make_node("Shape", ["four"], ["four_shape"]),
        helper.make_node("Gather", ["four_shape", "zero"], ["count"], axis=0),
        helper.make_node("Sub", ["eight", "count"], ["missing"]),
        helper.make_node("Cast", ["four"], ["four64"], to=TensorProto.INT64),
        helper.make_node("Unsqueeze", ["missing", "ax0"], ["missing1"]),
        helper.make_node(
            "ConstantOfShape", ["missing1"], ["zeros"], value=helper.make_tensor("v", 7, [1], [0])
        ),
        helper.make_node("Concat", ["four64", "zeros"], ["eight_pads"], axis=0),
        helper.make_node("Reshape", ["eight_pads", "pair"], ["pairs"]),
        helper.make_node("Slice", ["pairs", "s_start", "s_end", "ax0", "s_step"], ["reversed"]),
        helper.make_node("Transpose", ["reversed"], ["turned"], perm=[1, 0]),
        helper.make_node("Reshape", ["turned", "flat"], ["pads_flat"]),
        helper.make_node("Cast", ["pads_flat"], ["pads"], to=TensorProto.INT64),
        helper.make_node("Pad", ["x", "pads", ""], ["y"], name="pad", mode="constant"),
    ]
    graph = helper.make_graph(
        nodes,
        "torch_pad",
        [V("x", TensorProto.FLOAT, ["n", 1, "h", "w"])],
        [V("y", TensorProto.FLOAT, [None, None, None, None])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(m)
    return m.SerializeToString()


def resize_model(sizes: str) -> bytes:
    """``Resize(x, roi, scales, sizes)`` with ``scales`` fed and ``sizes`` an empty initializer
    (``sizes="empty"``) or not named (``sizes=""``, the fourth input left out)."""
    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi")]
    inputs = ["x", "roi", "scales"]
    if sizes == "empty":
        inits.append(numpy_helper.from_array(np.zeros(0, np.int64), "sizes"))
        inputs.append("sizes")
    else:
        inputs.append("")
    graph = helper.make_graph(
        [helper.make_node("Resize", inputs, ["y"], name="resize", mode="nearest")],
        "resize_scales",
        [V("x", TensorProto.FLOAT, [1, 1, 4, 4]), V("scales", TensorProto.FLOAT, [4])],
        [V("y", TensorProto.FLOAT, [None, None, None, None])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
    onnx.checker.check_model(m)
    return m.SerializeToString()


def _x(h: int) -> np.ndarray:
    return np.arange(h * 3, dtype=np.float32).reshape(1, 1, h, 3)


X4 = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)


@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
def test_torch_pad_of_computed_pads_is_refused(monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    """x [1, 1, 4, 3] padded by 4 * 2000 on each side: [1, 1, 16004, 16003] float32, 1 GB."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    session = dmlshim.InferenceSession(torch_pad_model(2000), engine=engine)
    with pytest.raises(TooLargeError, match=r"'y' of shape \[1, 1, 16004, 16003\]") as caught:
        session.run(None, {"x": _x(4)})
    assert caught.value.node == "pad" and caught.value.op_type == "Pad"


@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
def test_resize_by_fed_scales_is_refused(monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    session = dmlshim.InferenceSession(resize_model(""), engine=engine)
    scales = np.array([1, 1, 2000, 2000], np.float32)
    with pytest.raises(TooLargeError, match=r"'y' of shape \[1, 1, 8000, 8000\]") as caught:
        session.run(None, {"x": X4, "scales": scales})
    assert caught.value.node == "resize" and caught.value.op_type == "Resize"


@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
def test_small_computed_pads_run_as_onnxruntime(monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    """Under the same limit small pads are not refused; under a generous one large pads are not either."""
    for limit, factor, h in ((LIMIT, 3, 4), (LIMIT, 1, 2), ("2000000000", 300, 5)):
        monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", limit)
        model = torch_pad_model(factor)
        want = ort_session(model).run(None, {"x": _x(h)})[0]
        got = dmlshim.InferenceSession(model, engine=engine).run(None, {"x": _x(h)})[0]
        assert got.shape == want.shape == (1, 1, h + 2 * factor * h, 3 + 2 * factor * h)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
def test_resize_by_fed_scales_beside_empty_sizes_fails_as_onnxruntime(
    monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """onnxruntime fails this run before allocating anything: its error, not a size refusal."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    model = resize_model("empty")
    feeds = {"x": X4, "scales": np.array([1, 1, 2000, 2000], np.float32)}
    with pytest.raises(Exception, match="Only one of scales or sizes") as want:
        ort_session(model).run(None, feeds)
    with pytest.raises(Exception, match="Only one of scales or sizes") as got:
        dmlshim.InferenceSession(model, engine=engine).run(None, feeds)
    assert not isinstance(got.value, TooLargeError) and not isinstance(want.value, TooLargeError)


@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
def test_small_fed_scales_run_as_onnxruntime(monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    for limit, scale in ((LIMIT, 3.0), (LIMIT, 0.5), ("2000000000", 300.0)):
        monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", limit)
        model = resize_model("")
        feeds = {"x": X4, "scales": np.array([1, 1, scale, scale], np.float32)}
        want = ort_session(model).run(None, feeds)[0]
        got = dmlshim.InferenceSession(model, engine=engine).run(None, feeds)[0]
        assert got.shape == want.shape == (1, 1, int(4 * scale), int(4 * scale))
        np.testing.assert_array_equal(got, want)
