"""Models holding a ScatterND with empty index tuples where dmlshim's first rewrite did not reach: inside
If/Loop/Scan bodies (nested), with indices of unknown rank, and in a file whose weights are external.

Each builder returns the model and a list of feed sets; the expected values come from ONNX's reference
implementation (``tests.oracle.onnx_reference_run``) and, where it runs the node, onnxruntime 1.32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .oracle import IR_VERSION

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])


def _out(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, F, None)


def if_branches() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """If(c): then ScatterND(x, i, u) then Neg; else ScatterND(x, i, u, add). ``i`` [2, 0] is fed."""
    then = helper.make_graph(
        [helper.make_node("ScatterND", ["x", "i", "u"], ["t"]), helper.make_node("Neg", ["t"], ["tn"])],
        "then",
        [],
        [_out("tn")],
    )
    else_ = helper.make_graph(
        [helper.make_node("ScatterND", ["x", "i", "u"], ["e"], reduction="add")], "else", [], [_out("e")]
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=else_)],
        "if_branches",
        [
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("x", F, [3]),
            helper.make_tensor_value_info("i", I64, [2, 0]),
            helper.make_tensor_value_info("u", F, [2, 3]),
        ],
        [_out("y")],
    )
    base = {
        "x": np.array([1, -2, 4], np.float32),
        "i": np.zeros((2, 0), np.int64),
        "u": np.array([[5, 6, 7], [-1, 0.5, 3]], np.float32),
    }
    return _model(graph), [{**base, "c": np.array(True)}, {**base, "c": np.array(False)}]


def loop_with_nested_if() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """Loop(trip, c) carrying ``acc``; its body holds If(c) (``c`` an outer graph input) whose then branch is
    ScatterND(acc, i, u, add) with ``i`` an outer graph input of unknown rank (no shape): 0 at run time
    in the first feed set, 1 in the second."""
    then = helper.make_graph(
        [helper.make_node("ScatterND", ["acc", "i", "u"], ["s"], reduction="add")], "then", [], [_out("s")]
    )
    else_ = helper.make_graph([helper.make_node("Identity", ["acc"], ["a"])], "else", [], [_out("a")])
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("If", ["c"], ["acc_out"], then_branch=then, else_branch=else_),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", I64, []),
            helper.make_tensor_value_info("cond", B, []),
            helper.make_tensor_value_info("acc", F, [2]),
        ],
        [helper.make_tensor_value_info("cond_out", B, []), _out("acc_out")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", "c", "x"], ["y"], body=body)],
        "loop_with_nested_if",
        [
            helper.make_tensor_value_info("trip", I64, []),
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("x", F, [2]),
            helper.make_tensor_value_info("i", I64, None),
            helper.make_tensor_value_info("u", F, None),
        ],
        [_out("y")],
    )
    x, trip, c = np.array([1, -2], np.float32), np.array(2, np.int64), np.array(True)
    return _model(graph), [
        {
            "trip": trip,
            "c": c,
            "x": x,
            "i": np.zeros((3, 0), np.int64),
            "u": np.arange(6, dtype=np.float32).reshape(3, 2),
        },
        {"trip": trip, "c": c, "x": x, "i": np.array([[1]], np.int64), "u": np.array([5], np.float32)},
    ]


def scan_body() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """Scan over the rows of ``u`` [3, 2], state ``s`` [2]: s = ScatterND(s, k, [row], mul) with ``k`` a
    [1, 0] constant of the body (onnx 1.17's reference Scan sees no outer value); each state is a scan
    output too."""
    body = helper.make_graph(
        [
            helper.make_node(
                "Constant", [], ["k"], value=numpy_helper.from_array(np.zeros((1, 0), np.int64))
            ),
            helper.make_node(
                "Constant", [], ["axis0"], value=numpy_helper.from_array(np.array([0], np.int64))
            ),
            helper.make_node("Unsqueeze", ["row", "axis0"], ["row1"]),
            helper.make_node("ScatterND", ["s", "k", "row1"], ["s_out"], reduction="mul"),
            helper.make_node("Identity", ["s_out"], ["each"]),
        ],
        "body",
        [helper.make_tensor_value_info("s", F, [2]), helper.make_tensor_value_info("row", F, [2])],
        [helper.make_tensor_value_info("s_out", F, [2]), _out("each")],
    )
    graph = helper.make_graph(
        [helper.make_node("Scan", ["x", "u"], ["y", "states"], body=body, num_scan_inputs=1)],
        "scan_body",
        [helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("u", F, [3, 2])],
        [_out("y"), _out("states")],
    )
    return _model(graph), [
        {"x": np.array([2, -3], np.float32), "u": np.array([[1, 2], [-1, 0.5], [3, 3]], np.float32)}
    ]


def unknown_rank(reduction: str) -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """ScatterND(x, i, u) -> Neg with ``i`` and ``u`` graph inputs of no shape: the indices' last
    dimension (and rank) is known only at run time: [2, 1, 0], [3, 0], then [1, 1]."""
    graph = helper.make_graph(
        [
            helper.make_node("ScatterND", ["x", "i", "u"], ["s"], reduction=reduction),
            helper.make_node("Neg", ["s"], ["y"]),
        ],
        "unknown_rank",
        [
            helper.make_tensor_value_info("x", F, [2]),
            helper.make_tensor_value_info("i", I64, None),
            helper.make_tensor_value_info("u", F, None),
        ],
        [_out("y")],
    )
    x = np.array([1, -2], np.float32)
    return _model(graph), [
        {"x": x, "i": np.zeros((2, 1, 0), np.int64), "u": np.array([[[3, 4]], [[-5, 6]]], np.float32)},
        {"x": x, "i": np.zeros((3, 0), np.int64), "u": np.arange(6, dtype=np.float32).reshape(3, 2)},
        {"x": x, "i": np.array([[1]], np.int64), "u": np.array([9], np.float32)},
    ]


def external_weights(folder: Path) -> tuple[str, onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """A model file in ``folder`` whose weight ``w`` lives in ``weights.bin`` beside it: ScatterND with
    indices [2, 0] (an initializer, kept in the .onnx file) then Add(w). Returns the file's path, the model
    with its weights loaded (for the reference), and the feeds."""
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32) / 8, "w")
    k = numpy_helper.from_array(np.zeros((2, 0), np.int64), "k")
    graph = helper.make_graph(
        [
            helper.make_node("ScatterND", ["x", "k", "u"], ["s"], name="scatter"),
            helper.make_node("Add", ["s", "w"], ["y"]),
        ],
        "external_weights",
        [helper.make_tensor_value_info("x", F, [64]), helper.make_tensor_value_info("u", F, [2, 64])],
        [_out("y")],
        [w, k],
    )
    model = _model(graph)
    path = folder / "model.onnx"
    on_disk = onnx.ModelProto()
    on_disk.CopyFrom(model)
    onnx.save(on_disk, str(path), save_as_external_data=True, location="weights.bin", size_threshold=128)
    feeds = {"x": np.full(64, 7, np.float32), "u": np.arange(128, dtype=np.float32).reshape(2, 64) % 5}
    return str(path), model, [feeds]


def opset_13_empty_data() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """Opset 13 (Reshape reads a 0 in its target as "copy"): ScatterND of data [2, 0] and of data [2, 3],
    indices [2, 0] fed."""
    graph = helper.make_graph(
        [
            helper.make_node("ScatterND", ["e", "i", "ue"], ["ye"]),
            helper.make_node("ScatterND", ["x", "i", "ux"], ["yx"]),
        ],
        "opset_13_empty_data",
        [
            helper.make_tensor_value_info("e", F, [2, 0]),
            helper.make_tensor_value_info("x", F, [2, 3]),
            helper.make_tensor_value_info("i", I64, [2, 0]),
            helper.make_tensor_value_info("ue", F, [2, 2, 0]),
            helper.make_tensor_value_info("ux", F, [2, 2, 3]),
        ],
        [_out("ye"), _out("yx")],
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 13)])
    return model, [
        {
            "e": np.zeros((2, 0), np.float32),
            "x": np.ones((2, 3), np.float32),
            "i": np.zeros((2, 0), np.int64),
            "ue": np.zeros((2, 2, 0), np.float32),
            "ux": np.arange(12, dtype=np.float32).reshape(2, 2, 3),
        }
    ]
