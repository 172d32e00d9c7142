"""Issue 35 item 3 (round 54): string tensors count against ``DMLSHIM_MEMORY_LIMIT``.

A string element had no fixed size, so no check sized it: a string Gather of 20M fed indices reached
4.2 GB of RSS under a 300 MB limit, where a numeric gather of that size is refused before running. A
string element now costs at least :data:`dmlshim.limits.STRING_ELEMENT_BYTES` (onnxruntime's
``std::string`` plus the result's pointer; measured), so such a gather is refused with the numeric one's
error, before onnxruntime runs, in every engine, and a small string model still runs.
"""

from __future__ import annotations

import resource

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.oracle import IR_VERSION, ort_run

ENGINES = [None, "partitioned", "cpu", "customop"]
WORDS = np.array(["alpha", "", "a much longer string than fifteen bytes", "é"], dtype=object)


def _model(op_type: str, fed: bool) -> onnx.ModelProto:
    """y = op(data, idx) on a 4-string ``data`` (fed or an initializer), ``idx`` fed."""
    data_vi = helper.make_tensor_value_info("data", TensorProto.STRING, [4])
    inputs = [data_vi] if fed else []
    inits = [] if fed else [helper.make_tensor("data", TensorProto.STRING, [4], [w.encode() for w in WORDS])]
    if op_type == "ScatterElements":
        node = helper.make_node(op_type, ["data", "idx", "upd"], ["y"], name="n0")
        inputs += [
            helper.make_tensor_value_info("idx", TensorProto.INT64, ["k"]),
            helper.make_tensor_value_info("upd", TensorProto.STRING, ["k"]),
        ]
    else:
        attrs = {"batch_dims": 0} if op_type == "GatherND" else {}
        node = helper.make_node(op_type, ["data", "idx"], ["y"], name="n0", **attrs)
        shape = ["k", 1] if op_type == "GatherND" else ["k"]
        inputs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, shape))
    graph = helper.make_graph(
        [node], "strings", inputs, [helper.make_tensor_value_info("y", TensorProto.STRING, None)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = IR_VERSION
    return model


def _feeds(op_type: str, fed: bool, n: int) -> dict[str, np.ndarray]:
    idx = (np.arange(n, dtype=np.int64) * 7919) % 4
    feeds = {"idx": idx.reshape(n, 1) if op_type == "GatherND" else idx}
    if fed:
        feeds["data"] = WORDS.copy()
    if op_type == "ScatterElements":
        feeds["idx"] = np.array([3, 0], np.int64)
        feeds["upd"] = np.array(["x", "yy"], dtype=object)
    return feeds


def _session(model: onnx.ModelProto, engine: str | None):
    import dmlshim

    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    kwargs = {} if engine is None else {"engine": engine}
    return dmlshim.InferenceSession(model.SerializeToString(), **kwargs)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fed", [True, False])
@pytest.mark.parametrize("op_type", ["Gather", "GatherElements", "GatherND"])
def test_a_string_gather_past_the_limit_is_refused_before_running(
    monkeypatch: pytest.MonkeyPatch, engine: str | None, fed: bool, op_type: str
) -> None:
    """2M string elements under a 50 MB limit: >= 80 MB once run (int64 indices of that size: 16 MB)."""
    from dmlshim.errors import TooLargeError

    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "50000000")
    model = _model(op_type, fed)
    session = _session(model, engine)
    session.run(None, _feeds(op_type, fed, 10))  # libraries loaded and sessions built: not counted below
    feeds = _feeds(op_type, fed, 2_000_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TooLargeError, match=r"'y' of shape \[2000000\] and type string") as caught:
        session.run(None, feeds)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert "refusing before allocating" in str(caught.value)
    assert grown < 40_000_000, f"peak RSS grew by {grown} bytes: the gather ran"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fed", [True, False])
@pytest.mark.parametrize("op_type", ["Gather", "GatherElements", "GatherND", "ScatterElements"])
def test_a_small_string_model_under_the_limit_gives_onnxruntime_values(
    monkeypatch: pytest.MonkeyPatch, engine: str | None, fed: bool, op_type: str
) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "50000000")
    model = _model(op_type, fed)
    feeds = _feeds(op_type, fed, 1000)
    want = ort_run(model, feeds)[0]
    session = _session(model, engine)
    for _ in range(2):
        got = session.run(None, feeds)[0]
        assert got.shape == want.shape
        assert got.tolist() == want.tolist()


def test_the_per_element_cost_is_a_lower_bound() -> None:
    """No more than onnxruntime's ``std::string`` (32 bytes) plus the result's pointer; the same for an
    ONNX string type and a numpy object, str or bytes dtype; exactly at the limit still fits."""
    from dmlshim.errors import TooLargeError
    from dmlshim.limits import STRING_ELEMENT_BYTES, check_tensor

    assert 32 + np.dtype(object).itemsize >= STRING_ELEMENT_BYTES
    for dtype in (TensorProto.STRING, np.dtype(object), np.dtype("U3"), np.dtype("S3")):
        check_tensor([3, 5], dtype, limit=15 * STRING_ELEMENT_BYTES)
        with pytest.raises(TooLargeError, match="would need"):
            check_tensor([3, 5], dtype, limit=15 * STRING_ELEMENT_BYTES - 1)
