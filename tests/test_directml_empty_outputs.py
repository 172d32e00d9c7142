"""onnxruntime-directml and empty outputs (docs/directml-linux.md, "Empty outputs"): a run that fetches an
empty DirectML-computed value reads back none of its DirectML outputs, and the directml engine fetches
the others again without it.

``Y = X + C``, ``Z = Y * C``, ``G = Gather(Y, I)``, every node on the DirectML provider. With ``I`` empty,
``G`` is ``[0, 3]``; fetched together with ``Y`` and ``Z`` in one run, ``Y`` and ``Z`` come back with their
shapes but not their values (what the CPU buffers held: zeros, tiny denormals). This is what spoiled
Keypoint R-CNN's attribution run (an empty FPN level of its RoI pooler). Runs DirectML itself (skipped
without the stack); expected values from onnxruntime CPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import InferenceSession
from dmlshim.directml.stack import stack_available
from tests.oracle import IR_VERSION, ort_run

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)

X = (np.arange(12, dtype=np.float32).reshape(4, 3) + 1) / 7


def _model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["X", "C"], ["Y"]),
        helper.make_node("Gather", ["Y", "I"], ["G"], axis=0),
        helper.make_node("Mul", ["Y", "C"], ["Z"]),
    ]
    graph = helper.make_graph(
        nodes, "empty_output",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("I", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("G", TensorProto.FLOAT, ["n", 3]),
         helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 3])],
        [numpy_helper.from_array(np.array(1000.5, np.float32), "C")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def _feeds(indices: list[int]) -> dict[str, np.ndarray]:
    return {"X": X, "I": np.array(indices, np.int64)}


@real
def test_one_fetch_with_an_empty_output_loses_the_others(tmp_path: Path) -> None:
    from dmlshim.directml.host import shared_host

    model = _model()
    path = tmp_path / "empty_output.onnx"
    onnx.save_model(model, str(path))
    host = shared_host()
    session = host.load(path)  # a fresh session: its CPU buffers never held the right values
    try:
        feeds = _feeds([])
        got = host.run(session, feeds, ["Z", "G", "Y"])
    finally:
        host.release(session)
    want = ort_run(model, feeds)
    assert [g.shape for g in got] == [w.shape for w in want] == [(4, 3), (0, 3), (4, 3)]
    # the shapes are right, the non-empty values are not what DirectML computed
    assert not np.allclose(got[0], want[0], rtol=1e-5) or not np.allclose(got[2], want[2], rtol=1e-5)


@real
@pytest.mark.parametrize("indices", [[], [3, 0]])
@pytest.mark.parametrize("order", [None, ["G", "Y", "Z"]])
def test_engine_returns_every_output_right(indices: list[int], order: list[str] | None) -> None:
    model = _model()
    feeds = _feeds(indices)
    session = InferenceSession(model.SerializeToString(), engine="directml")
    got = session.run(order, feeds)
    want = dict(zip(["Z", "G", "Y"], ort_run(model, feeds), strict=True))
    for name, value in zip(order or ["Z", "G", "Y"], got, strict=True):
        assert value.shape == want[name].shape, name
        np.testing.assert_allclose(value, want[name], rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("indices", [[], [1]])
def test_fetch_around_empty_against_the_fault_on_onnxruntime_cpu(indices: list[int]) -> None:
    """Without DirectML: onnxruntime CPU's session, wrapped to spoil every value of a run that fetches
    an empty one (as onnxruntime-directml does), gives onnxruntime CPU's values through the helper."""
    from dmlshim.directml.empty_fetch import fetch_around_empty
    from tests.oracle import ort_session

    model = _model()
    feeds = _feeds(indices)
    session = ort_session(model)
    runs: list[list[str]] = []

    def faulty(names: list[str]) -> list[np.ndarray]:
        runs.append(names)
        values = session.run(names, feeds)
        if any(v.size == 0 for v in values):
            return [np.full_like(v, np.nan) for v in values]
        return values

    got = fetch_around_empty(faulty, ["Z", "G", "Y", "Z"])
    want = dict(zip(["Z", "G", "Y"], ort_run(model, feeds), strict=True))
    for name, value in zip(["Z", "G", "Y", "Z"], got, strict=True):
        np.testing.assert_array_equal(value, want[name], err_msg=name)
    assert runs == ([["Z", "G", "Y", "Z"], ["Z", "Y", "Z"]] if not indices else [["Z", "G", "Y", "Z"]])
