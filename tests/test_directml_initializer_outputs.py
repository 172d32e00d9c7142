"""onnxruntime-directml and initializers made graph outputs (docs/directml-linux.md, "Initializers as graph
outputs"): why ``validate --engine directml``'s attribution never fetches an initializer or a Constant.

``X -> Conv(W) -> Y``; ``Gather(Y, Constant)``; every node fused into one DirectML partition. The
node-computed values come back equal to onnxruntime CPU's (within float32's tolerance); the weight ``W`` or a
Constant's output asked for as an output kills the host (a null read inside onnxruntime). Runs DirectML
itself (skipped without the stack); expected values from onnxruntime CPU.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import InferenceSession
from dmlshim.directml.stack import stack_available
from dmlshim.errors import DmlShimError
from tests.oracle import IR_VERSION, ort_run

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)

RNG = np.random.default_rng(0)
FEEDS = {"X": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}


def _model(extra: list[str]) -> onnx.ModelProto:
    weight = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")
    nodes = [
        helper.make_node("Conv", ["X", "W"], ["Y"], pads=[1, 1, 1, 1]),
        helper.make_node("Constant", [], ["idx"], value_ints=[0, 3, 1]),
        helper.make_node("Gather", ["Y", "idx"], ["G"], axis=1),
        helper.make_node("ReduceSum", ["G"], ["out"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "init_out", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [])], [weight],
    )  # fmt: skip
    graph.output.extend(onnx.ValueInfoProto(name=name) for name in extra)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def _directml(model: onnx.ModelProto) -> list[np.ndarray]:
    session = InferenceSession(model.SerializeToString(), engine="directml")
    return [np.asarray(v) for v in session.run(None, FEEDS)]


@real
def test_node_computed_values_come_back() -> None:
    model = _model(["Y", "G"])
    for got, want in zip(_directml(model), ort_run(model, FEEDS), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@real
@pytest.mark.parametrize("name", ["W", "idx"])
def test_an_initializer_or_constant_as_an_output_does_not_come_back(name: str) -> None:
    model = _model([name])
    assert ort_run(model, FEEDS)[1].shape  # onnxruntime CPU gives it
    with pytest.raises(DmlShimError, match="host exited"):
        _directml(model)
