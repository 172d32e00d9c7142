"""``external_tensors`` finds exactly the tensors onnx's own helper says keep their data outside, whether
its serialized-bytes shortcut applies or not (issue 35: the search replaces a walk only where no tensor
is external)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import _get_all_tensors, set_external_data, uses_external_data

from dmlshim.fileio import external_data


def _model(external_in_branch: bool, external_initializer: bool) -> onnx.ModelProto:
    const = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    if external_in_branch:
        set_external_data(const, "weights.bin", offset=0, length=24)
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["b"], value=const)],
        "branch",
        [],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
    )
    init = numpy_helper.from_array(np.zeros((2, 3), dtype=np.float32), "w")
    if external_initializer:
        set_external_data(init, "weights.bin", offset=64, length=24)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["w", "i"], ["g"], axis=0),
            helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch),
        ],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 3])],
        initializer=[init],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("in_branch", [False, True])
@pytest.mark.parametrize("in_init", [False, True])
def test_external_tensors_match_onnx(
    monkeypatch: pytest.MonkeyPatch, small: bool, in_branch: bool, in_init: bool
) -> None:
    if not small:  # every graph counts as too large to search: the walk alone answers
        monkeypatch.setattr(external_data, "_SCAN_MAX_BYTES", 0)
    model = _model(in_branch, in_init)
    expected = [t.name for t in _get_all_tensors(model) if uses_external_data(t)]
    found = external_data.external_tensors(model.graph)
    assert sorted(t.name for t in found) == sorted(expected)
    assert len(found) == in_branch * 2 + in_init  # both branches hold the Constant
