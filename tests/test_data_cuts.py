"""``data_cuts.restore`` clears the cut dimension name wherever the inferred graph still spells it, and
its shortcut (no scrub when the graph's bytes do not contain the name) leaves every other dimension as
onnx gave it (issue 35)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from dmlshim.model import data_cuts


def _inferred(dim_param: str) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [5000])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [dim_param])],
        value_info=[helper.make_tensor_value_info("v", TensorProto.FLOAT, [dim_param, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def _dims(value: onnx.ValueInfoProto) -> list[tuple[str, int | None]]:
    return [
        ("value", d.dim_value)
        if d.HasField("dim_value")
        else ("param", d.dim_param)
        if d.dim_param
        else ("none", None)
        for d in value.type.tensor_type.shape.dim
    ]


def _site() -> data_cuts.Site:
    return data_cuts.Site((), 0, 0, "x", False, False)


def test_cut_dimension_cleared_where_spelled() -> None:
    model = _inferred(data_cuts.CUT_DIM)
    fresh = model.graph.input.add()
    fresh.name = "x__dmlshim_cut"
    model.graph.node[0].input[0] = fresh.name
    data_cuts.restore(model, [()], {_site(): (data_cuts.BIG, b"")}, {fresh.name: "x"})
    assert list(model.graph.node[0].input) == ["x"]
    assert [v.name for v in model.graph.input] == ["x"]
    assert _dims(model.graph.output[0]) == [("none", None)]
    assert _dims(model.graph.value_info[0]) == [("none", None), ("value", 3)]


def test_other_dimension_names_kept() -> None:
    model = _inferred("N")
    data_cuts.restore(model, [()], {_site(): (data_cuts.BIG, b"")}, {})
    assert _dims(model.graph.output[0]) == [("param", "N")]
    assert _dims(model.graph.value_info[0]) == [("param", "N"), ("value", 3)]
