"""Models with gather/scatter nodes inside If, Loop and Scan bodies whose shapes only a run knows (for
``tests/test_inspect_body_shapes.py``), built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper as nh


def _c(name: str, value: object, dtype: type = np.int64) -> onnx.NodeProto:
    return oh.make_node("Constant", [], [name], value=nh.from_array(np.array(value, dtype=dtype), name))


def _model(graph: onnx.GraphProto, opset: int = 17) -> onnx.ModelProto:
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def _depth_nodes(params: str, ids: str, out: str, tag: str) -> list[onnx.NodeProto]:
    """TensorFlow's batch gather as exported: GatherND (batch_dims=1) whose index depth is
    ``Max(rank(params) - 2, 1)``, which ONNX's data propagation does not follow."""
    return [
        _c(f"{tag}_two", 2),
        _c(f"{tag}_one", 1),
        _c(f"{tag}_axis0", [0]),
        oh.make_node("Shape", [params], [f"{tag}_pshape"]),
        oh.make_node("Size", [f"{tag}_pshape"], [f"{tag}_rank"]),
        oh.make_node("Sub", [f"{tag}_rank", f"{tag}_two"], [f"{tag}_r2"]),
        oh.make_node("Max", [f"{tag}_r2", f"{tag}_one"], [f"{tag}_depth"]),
        oh.make_node("Unsqueeze", [f"{tag}_depth", f"{tag}_axis0"], [f"{tag}_depth1"]),
        oh.make_node("Shape", [ids], [f"{tag}_ishape"]),
        oh.make_node("Concat", [f"{tag}_ishape", f"{tag}_depth1"], [f"{tag}_newshape"], axis=0),
        oh.make_node("Reshape", [ids, f"{tag}_newshape"], [f"{tag}_indices"]),
        oh.make_node("GatherND", [params, f"{tag}_indices"], [out], batch_dims=1, name=f"{tag}/GatherNd"),
    ]


def if_model() -> onnx.ModelProto:
    """``flag`` picks the branch: then a TF batch GatherND of computed index depth, else a GatherElements
    whose indices are reshaped to ``target`` (a graph input, so their rank is unknown statically)."""
    then = oh.make_graph(
        _depth_nodes("params", "ids", "t_out", "then"),
        "then",
        [],
        [oh.make_tensor_value_info("t_out", T.FLOAT, None)],
    )
    other = oh.make_graph(
        [
            oh.make_node("Reshape", ["eids", "target"], ["e_idx"]),
            oh.make_node("GatherElements", ["params", "e_idx"], ["e_out"], axis=1, name="pick"),
        ],
        "else",
        [],
        [oh.make_tensor_value_info("e_out", T.FLOAT, None)],
    )
    graph = oh.make_graph(
        [oh.make_node("If", ["flag"], ["out"], then_branch=then, else_branch=other, name="choose")],
        "if_bodies",
        [
            oh.make_tensor_value_info("flag", T.BOOL, []),
            oh.make_tensor_value_info("params", T.FLOAT, ["batch", 5, 3]),
            oh.make_tensor_value_info("ids", T.INT64, ["batch", "n"]),
            oh.make_tensor_value_info("eids", T.INT64, ["m"]),
            oh.make_tensor_value_info("target", T.INT64, ["r"]),
        ],
        [oh.make_tensor_value_info("out", T.FLOAT, None)],
    )
    return _model(graph)


def loop_model() -> onnx.ModelProto:
    """A Loop whose carried ``x`` gains a leading axis each iteration (rank 1, 2, 3, ...: ONNX gives it no
    rank); the body reads it with GatherND (index ``[0]``), writes row 0 with ScatterND and runs a TF batch
    GatherND of computed depth on ``params`` (an outer value)."""
    body = oh.make_graph(
        [
            _c("zero_idx", [0]),
            oh.make_node("GatherND", ["x_in", "zero_idx"], ["row"], name="read"),
            oh.make_node("ScatterND", ["x_in", "zero_idx", "row"], ["x_same"], name="write"),
            _c("axes", [0]),
            oh.make_node("Unsqueeze", ["x_same", "axes"], ["x_out"]),
            *_depth_nodes("params", "ids", "g", "inner"),
            oh.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            oh.make_tensor_value_info("i", T.INT64, []),
            oh.make_tensor_value_info("cond_in", T.BOOL, []),
            oh.make_tensor_value_info("x_in", T.FLOAT, None),
        ],
        [
            oh.make_tensor_value_info("cond_out", T.BOOL, []),
            oh.make_tensor_value_info("x_out", T.FLOAT, None),
            oh.make_tensor_value_info("g", T.FLOAT, None),
        ],
    )
    graph = oh.make_graph(
        [oh.make_node("Loop", ["trips", "", "x0"], ["x_final", "gs"], body=body, name="grow")],
        "loop_bodies",
        [
            oh.make_tensor_value_info("trips", T.INT64, []),
            oh.make_tensor_value_info("x0", T.FLOAT, ["n"]),
            oh.make_tensor_value_info("params", T.FLOAT, ["batch", 5, 3]),
            oh.make_tensor_value_info("ids", T.INT64, ["batch", "k"]),
        ],
        [
            oh.make_tensor_value_info("x_final", T.FLOAT, None),
            oh.make_tensor_value_info("gs", T.FLOAT, None),
        ],
    )
    return _model(graph)


def scan_model() -> onnx.ModelProto:
    """A Scan over ``seq`` [T, B, C] with state [B, C]: each step reshapes the step's indices to
    ``target`` (a graph input: rank unknown statically) and gathers the state with GatherElements."""
    body = oh.make_graph(
        [
            oh.make_node("Reshape", ["step_idx", "target"], ["idx"]),
            oh.make_node("GatherElements", ["state_in", "idx"], ["picked"], axis=1, name="take"),
            oh.make_node("Add", ["picked", "step"], ["state_out"]),
            oh.make_node("Identity", ["state_out"], ["y"]),
        ],
        "body",
        [
            oh.make_tensor_value_info("state_in", T.FLOAT, ["b", "c"]),
            oh.make_tensor_value_info("step", T.FLOAT, ["b", "c"]),
            oh.make_tensor_value_info("step_idx", T.INT64, ["b", "c"]),
        ],
        [
            oh.make_tensor_value_info("state_out", T.FLOAT, ["b", "c"]),
            oh.make_tensor_value_info("y", T.FLOAT, ["b", "c"]),
        ],
    )
    graph = oh.make_graph(
        [
            oh.make_node(
                "Scan",
                ["s0", "seq", "seq_idx"],
                ["s_final", "ys"],
                body=body,
                num_scan_inputs=2,
                name="steps",
            )
        ],
        "scan_bodies",
        [
            oh.make_tensor_value_info("s0", T.FLOAT, ["B", "C"]),
            oh.make_tensor_value_info("seq", T.FLOAT, ["T", "B", "C"]),
            oh.make_tensor_value_info("seq_idx", T.INT64, ["T", "B", "C"]),
            oh.make_tensor_value_info("target", T.INT64, ["r"]),
        ],
        [
            oh.make_tensor_value_info("s_final", T.FLOAT, ["B", "C"]),
            oh.make_tensor_value_info("ys", T.FLOAT, ["T", "B", "C"]),
        ],
    )
    return _model(graph)


def nested_model() -> onnx.ModelProto:
    """An outer Loop whose body holds an If (even iterations: a GatherElements on the carried ``x``, which
    gains a leading axis each iteration) and an inner Loop of ``inner`` trips that gathers rows of ``x``
    with GatherND: the records of the inner Loop have any length (the carried-record path)."""
    then = oh.make_graph(
        [
            oh.make_node("Shape", ["x_in"], ["xs"]),
            oh.make_node("ConstantOfShape", ["xs"], ["zeros"], value=nh.from_array(np.array([0], np.int64))),
            oh.make_node("GatherElements", ["x_in", "zeros"], ["t_out"], axis=0, name="even_pick"),
        ],
        "then",
        [],
        [oh.make_tensor_value_info("t_out", T.FLOAT, None)],
    )
    other = oh.make_graph(
        [oh.make_node("Identity", ["x_in"], ["e_out"])],
        "else",
        [],
        [oh.make_tensor_value_info("e_out", T.FLOAT, None)],
    )
    inner = oh.make_graph(
        [
            _c("row0", [0]),
            oh.make_node("GatherND", ["x_in", "row0"], ["r"], name="inner_read"),
            oh.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "inner_body",
        [
            oh.make_tensor_value_info("j", T.INT64, []),
            oh.make_tensor_value_info("c_in", T.BOOL, []),
        ],
        [oh.make_tensor_value_info("c_out", T.BOOL, []), oh.make_tensor_value_info("r", T.FLOAT, None)],
    )
    body = oh.make_graph(
        [
            _c("two", 2),
            oh.make_node("Mod", ["i", "two"], ["parity"]),
            _c("zero", 0),
            oh.make_node("Equal", ["parity", "zero"], ["even"]),
            oh.make_node("If", ["even"], ["picked"], then_branch=then, else_branch=other, name="parity_if"),
            oh.make_node("Loop", ["inner", ""], ["rows"], body=inner, name="rows_loop"),
            _c("axes", [0]),
            oh.make_node("Unsqueeze", ["picked", "axes"], ["x_out"]),
            oh.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            oh.make_tensor_value_info("i", T.INT64, []),
            oh.make_tensor_value_info("cond_in", T.BOOL, []),
            oh.make_tensor_value_info("x_in", T.FLOAT, None),
        ],
        [
            oh.make_tensor_value_info("cond_out", T.BOOL, []),
            oh.make_tensor_value_info("x_out", T.FLOAT, None),
        ],
    )
    graph = oh.make_graph(
        [oh.make_node("Loop", ["trips", "", "x0"], ["x_final"], body=body, name="outer")],
        "nested_bodies",
        [
            oh.make_tensor_value_info("trips", T.INT64, []),
            oh.make_tensor_value_info("inner", T.INT64, []),
            oh.make_tensor_value_info("x0", T.FLOAT, ["n"]),
        ],
        [oh.make_tensor_value_info("x_final", T.FLOAT, None)],
    )
    return _model(graph)
