"""translate_model: shape inference, --input-shape overrides, If/Loop/Scan subgraphs named by path."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.errors import BadInputError
from dmlshim.translate import Status, run_translation, translate_model
from tests.oracle import IR_VERSION

F32, I64 = T.FLOAT, T.INT64


def _subgraph_model() -> onnx.ModelProto:
    then_g = helper.make_graph(
        [helper.make_node("Gather", ["x", "gi"], ["t_out"], axis=1, name="gather_then")],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", F32, ["N", 2])],
        initializer=[helper.make_tensor("gi", I64, [2], [0, 2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("GatherElements", ["x", "ei"], ["e_out"], axis=1, name="gather_else")],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", F32, ["N", 2])],
    )
    loop_body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("ScatterND", ["acc", "li", "lu"], ["acc_out"], name="scatter_1"),
        ],
        "body",
        [
            helper.make_tensor_value_info("it", I64, []),
            helper.make_tensor_value_info("c_in", T.BOOL, []),
            helper.make_tensor_value_info("acc", F32, [4]),
        ],
        [
            helper.make_tensor_value_info("c_out", T.BOOL, []),
            helper.make_tensor_value_info("acc_out", F32, [4]),
        ],
        initializer=[helper.make_tensor("li", I64, [1, 1], [2]), helper.make_tensor("lu", F32, [1], [5.0])],
    )
    scan_body = helper.make_graph(
        [helper.make_node("Gather", ["row", "si"], ["picked"], axis=0, name="pick")],
        "scan_body",
        [helper.make_tensor_value_info("row", F32, [3])],
        [helper.make_tensor_value_info("picked", F32, [2])],
        initializer=[helper.make_tensor("si", I64, [2], [2, 0])],
    )
    nodes = [
        helper.make_node("If", ["cond"], ["branch"], then_branch=then_g, else_branch=else_g, name="if_node"),
        helper.make_node("Loop", ["trip", "", "buf"], ["loop_out"], body=loop_body, name="loop_node"),
        helper.make_node("Scan", ["x"], ["scan_out"], body=scan_body, num_scan_inputs=1, name="scan_node"),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [
            helper.make_tensor_value_info("x", F32, ["N", 3]),
            helper.make_tensor_value_info("cond", T.BOOL, []),
            helper.make_tensor_value_info("ei", I64, ["N", 2]),
            helper.make_tensor_value_info("buf", F32, [4]),
        ],
        [
            helper.make_tensor_value_info("branch", F32, None),
            helper.make_tensor_value_info("loop_out", F32, [4]),
            helper.make_tensor_value_info("scan_out", F32, None),
        ],
        initializer=[helper.make_tensor("trip", I64, [], [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def test_subgraph_nodes_are_listed_with_their_path() -> None:
    mt = translate_model(_subgraph_model())
    names = [n.name for n in mt.nodes]
    assert names == [
        "if_node/else_branch/gather_else",  # attribute order (make_node sorts them by name)
        "if_node/then_branch/gather_then",
        "loop_node/body/scatter_1",
        "scan_node/body/pick",
    ]
    by_name = {n.name: n for n in mt.nodes}
    assert by_name["loop_node/body/scatter_1"].status is Status.DML
    assert by_name["scan_node/body/pick"].status is Status.DML
    # x is [N, 3]: the If branches are described from ranks, with N as a name.
    then = by_name["if_node/then_branch/gather_then"]
    assert then.status is Status.DML and "SIZES_SYMBOLIC" in then.reason_codes
    assert mt.total_nodes == 3 + 1 + 1 + 2 + 1
    summary = mt.summary
    assert summary["dml"] == 4 and summary["error"] == 0 and summary["notes"] == {"SIZES_SYMBOLIC": 2}
    assert summary["all_dml"]
    # Without symbolic translation they stay SHAPE_UNKNOWN (what the engines see before a run).
    strict = translate_model(_subgraph_model(), symbolic=False).summary
    assert strict["error"] == 2 and strict["reasons"] == {"SHAPE_UNKNOWN": 2}


def test_input_shapes_resolve_symbolic_dims() -> None:
    mt = translate_model(_subgraph_model(), input_shapes={"x": (5, 3), "ei": (5, 2)})
    assert all(n.status is Status.DML for n in mt.nodes), [n.reasons for n in mt.nodes]
    then = mt.nodes[1]
    assert then.operator is not None
    assert then.operator.tensors()["InputTensor"].sizes == (5, 3)
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    out = run_translation(then, [data, np.array([0, 2], np.int64)]).output
    np.testing.assert_array_equal(out, data[:, [0, 2]])
    doc = mt.to_json()
    assert doc["schema_version"] == 1 and len(doc["nodes"]) == 4


@pytest.mark.parametrize("shapes", [{"nope": (1,)}, {"x": (5,)}])
def test_bad_input_shapes_are_usage_errors(shapes: dict[str, tuple[int, ...]]) -> None:
    with pytest.raises(BadInputError):
        translate_model(_subgraph_model(), input_shapes=shapes)


def test_model_without_gather_scatter() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F32, [2])],
        [helper.make_tensor_value_info("y", F32, [2])],
    )
    mt = translate_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10))
    assert mt.nodes == () and mt.total_nodes == 1 and mt.summary["all_dml"]


def test_shape_inference_copies_no_weights() -> None:
    from dmlshim.translate import infer_shapes

    table = np.zeros((200, 100), dtype=np.float32)  # 80 KB: a weight
    node = helper.make_node("Gather", ["w", "ids"], ["y"], axis=0, name="emb")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("ids", I64, ["b"])],
        [onnx.ValueInfoProto(name="y")],
        initializer=[numpy_helper.from_array(table, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    inferred = infer_shapes(model)
    assert [t.name for t in inferred.graph.initializer] == []
    (t,) = translate_model(model).nodes
    assert t.operator is not None and t.operator.input_tensor.sizes == (200, 100)
