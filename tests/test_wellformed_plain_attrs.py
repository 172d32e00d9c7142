"""The well-formedness walk checks each distinct plain attribute (a number, a string, their lists) once, by
its bytes and whether its node is a gather/scatter: a later attribute of the same bytes on another kind of
node, of another type, or carrying a tensor or graph field is still checked and refused where it should be."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.errors import BadModelError
from dmlshim.model.wellformed import check_well_formed


def _model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [4, 3])],
        [helper.make_tensor_value_info(n.output[0], T.FLOAT, None) for n in nodes[-1:]],
        initializer=[numpy_helper.from_array(np.array([0, 1], dtype=np.int64), "i")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _gathers(count: int) -> list[onnx.NodeProto]:
    return [
        helper.make_node("Gather", ["x" if k == 0 else f"g{k - 1}", "i"], [f"g{k}"], name=f"n{k}", axis=0)
        for k in range(count)
    ]


def test_a_chain_of_equal_attributes_passes() -> None:
    check_well_formed(_model(_gathers(200)))


def test_a_float_axis_passes_on_a_custom_op_and_is_refused_on_a_gather() -> None:
    axis = helper.make_attribute("axis", 0.0)  # FLOAT
    custom = helper.make_node("Foo", ["x"], ["f"], name="custom", domain="custom")
    custom.attribute.append(axis)
    gather = helper.make_node("Gather", ["f", "i"], ["y"], name="the_gather")
    gather.attribute.append(axis)
    with pytest.raises(BadModelError) as caught:
        check_well_formed(_model([custom, gather]))
    assert caught.value.node == "the_gather"


def test_an_undefined_type_after_many_ints_is_refused() -> None:
    nodes = _gathers(50)
    bad = nodes[-1]
    bad.attribute[0].type = onnx.AttributeProto.UNDEFINED
    with pytest.raises(BadModelError) as caught:
        check_well_formed(_model(nodes))
    assert caught.value.node == bad.name


def test_an_int_attribute_holding_a_damaged_tensor_is_refused_after_plain_ones() -> None:
    nodes = _gathers(20)
    damaged = onnx.TensorProto(name="t", data_type=T.FLOAT, dims=[4], raw_data=b"\x00" * 3)
    nodes[-1].attribute[0].t.CopyFrom(damaged)  # still of type INT, same name and value
    with pytest.raises(BadModelError, match="damaged"):
        check_well_formed(_model(nodes))
