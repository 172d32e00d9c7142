"""hostile9: the whole-model check's given and lean gathers (execute/proofs/gather_given.py) against what a
hostile caller builds and feeds. Every run's outputs (or its refusal) must be onnxruntime CPU's (one
intra-op thread) bit for bit, on every emulating engine."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.test_hostile8_given_gathers import _agree, _model

vi = helper.make_tensor_value_info
RNG = np.random.default_rng(9)


@pytest.mark.parametrize("level", ["2_1", "5_0"])
def test_a_lean_gathernd_whose_constant_indices_have_no_column(level: str) -> None:
    """Constant GatherND indices of shape (2, 0) select the whole data twice; the range proof of the lean
    path reshaped them to (-1, 0), which numpy cannot, and the run died in a bare ValueError."""
    nodes = [helper.make_node("GatherND", ["x", "idx"], ["g"]), helper.make_node("Neg", ["g"], ["y"])]
    idx = numpy_helper.from_array(np.zeros((2, 0), np.int64), "idx")
    model = _model(nodes, [vi("x", T.FLOAT, ["N", 40000])], ["y"], [idx])
    x = RNG.standard_normal((3, 40000)).astype(np.float32)
    _agree(model, [{"x": x}] * 5 + [{"x": x[:1]}], feature_level=level)
