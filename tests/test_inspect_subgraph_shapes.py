"""Shapes of gather/scatter nodes inside Loop bodies and If branches (inspect), against onnxruntime.

ONNX shape inference leaves a Loop's carried body inputs without a shape, so a Gather on one was
``SHAPE_UNKNOWN``. They now take the Loop's initial types (a dimension the body changes becomes a symbol);
each test runs the model on onnxruntime CPU and checks the shape inspect gives against the one the node
really sees there (the body hands it out as a scan output). Where the rank is not known before the run
(an If whose branches give different ranks), the reason names the If and both ranks, as ONNX's inference
of each branch gives them.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h

from dmlshim.translate import translate_model
from dmlshim.translate.shapes_info import infer_shapes, tensor_info

OPSET = [h.make_opsetid("", 17)]


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def loop_over_state(grow: bool) -> onnx.ModelProto:
    """Loop carrying ``state`` (initially ``data [n, 4]``): the body gathers rows ``idx`` of it and hands
    them out as a scan output; ``grow``: the body appends one row per iteration (the state's first dim
    changes), else it adds to it in place (the state keeps ``[n, 4]``)."""
    nodes = [h.make_node("Gather", ["state", "idx"], ["rows"], axis=0, name="gather_state")]
    if grow:
        nodes += [
            h.make_node("Slice", ["state", "zero", "one", "zero"], ["first"], name="first_row"),
            h.make_node("Concat", ["state", "first"], ["state_out"], axis=0, name="append"),
        ]
    else:
        nodes.append(h.make_node("Add", ["state", "state"], ["state_out"], name="double"))
    nodes.append(h.make_node("Identity", ["cond"], ["cond_out"], name="keep_going"))
    body = h.make_graph(
        nodes,
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
         h.make_tensor_value_info("state", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, None),
         h.make_tensor_value_info("state_out", T.FLOAT, None),
         h.make_tensor_value_info("rows", T.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"),
         onnx.numpy_helper.from_array(np.array([1], np.int64), "one")],
    )  # fmt: skip
    graph = h.make_graph(
        [h.make_node("Loop", ["trip", "", "data"], ["final", "scanned"], body=body, name="loop")],
        "m",
        [h.make_tensor_value_info("data", T.FLOAT, ["n", 4]), h.make_tensor_value_info("idx", T.INT64, [3]),
         h.make_tensor_value_info("trip", T.INT64, [])],
        [h.make_tensor_value_info("final", T.FLOAT, None),
         h.make_tensor_value_info("scanned", T.FLOAT, None)],
    )  # fmt: skip
    return h.make_model(graph, opset_imports=OPSET, ir_version=10)


def _feeds(n: int, trips: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "data": rng.standard_normal((n, 4)).astype(np.float32),
        "idx": np.array([0, n - 1, 1], np.int64),
        "trip": np.array(trips, np.int64),
    }


def test_gather_on_a_carried_state_gets_its_shape() -> None:
    model = loop_over_state(grow=False)
    _, scanned = _run(model, _feeds(5, 3))
    mt = translate_model(model, input_shapes={"data": [5, 4], "idx": [3], "trip": []})
    (node,) = mt.nodes
    assert node.name == "loop/body/gather_state" and node.ok, node.reasons
    assert node.output is not None
    assert node.output.onnx_shape == scanned.shape[1:] == (3, 4)  # what onnxruntime's Gather gave
    assert node.inputs[0].onnx_shape == (5, 4)
    # symbolic sizes: the rank and the known dims, not an unknown rank
    symbolic = translate_model(model)
    assert symbolic.nodes[0].ok and "SHAPE_UNKNOWN" not in symbolic.nodes[0].reason_codes


def test_a_dim_the_body_changes_becomes_a_symbol() -> None:
    """The state grows by a row per iteration: onnxruntime's Gather sees [5, 4], [6, 4], [7, 4]; inspect
    must not claim [5, 4] for every iteration, only rank 2 with a symbolic first dim and 4."""
    model = loop_over_state(grow=True)
    final, scanned = _run(model, _feeds(5, 3))
    assert final.shape == (8, 4) and scanned.shape == (3, 3, 4)  # the state did change size
    inferred = infer_shapes(model, {"data": [5, 4], "idx": [3], "trip": []})
    body = inferred.graph.node[0].attribute[0].g
    state = tensor_info(body.input[2])
    assert state is not None and state.shape is not None
    assert len(state.shape) == 2 and state.shape[1] == 4 and isinstance(state.shape[0], str)
    (node,) = translate_model(model, input_shapes={"data": [5, 4], "idx": [3], "trip": []}).nodes
    assert "SHAPE_UNKNOWN" not in node.reason_codes  # a symbolic size, translated from its rank


def if_with_ranks(then_rank: int, else_rank: int) -> onnx.ModelProto:
    """``x = If(c, then: Reshape(v, [-1] + [1]*(then_rank-1)), else: likewise with else_rank)``, then a
    Gather of ``x`` along axis 0 with ``idx``; inside the then branch another Gather reads the outer ``v``
    and ``idx`` (its shape is known: ONNX infers it from the outer scope)."""

    def branch(name: str, rank: int, extra: bool) -> onnx.GraphProto:
        shape = onnx.numpy_helper.from_array(np.array([-1] + [1] * (rank - 1), np.int64), f"{name}_shape")
        nodes = [h.make_node("Reshape", ["v", f"{name}_shape"], [f"{name}_out"], name=f"{name}_reshape")]
        outputs = [h.make_tensor_value_info(f"{name}_out", T.FLOAT, None)]
        if extra:
            nodes.append(h.make_node("Gather", ["v", "idx"], [f"{name}_g"], axis=0, name="inner_gather"))
            outputs.append(h.make_tensor_value_info(f"{name}_g", T.FLOAT, None))
        else:
            nodes.append(h.make_node("Gather", ["v", "idx"], [f"{name}_g"], axis=0, name="inner_gather2"))
            outputs.append(h.make_tensor_value_info(f"{name}_g", T.FLOAT, None))
        return h.make_graph(nodes, name, [], outputs, [shape])

    graph = h.make_graph(
        [
            h.make_node("If", ["c"], ["x", "g"], then_branch=branch("then", then_rank, True),
                        else_branch=branch("else", else_rank, False), name="choose"),
            h.make_node("Gather", ["x", "idx"], ["y"], axis=0, name="outer_gather"),
        ],
        "m",
        [h.make_tensor_value_info("c", T.BOOL, []), h.make_tensor_value_info("v", T.FLOAT, [6]),
         h.make_tensor_value_info("idx", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("g", T.FLOAT, None)],
    )  # fmt: skip
    return h.make_model(graph, opset_imports=OPSET, ir_version=10)


def test_if_branches_of_different_ranks_are_named() -> None:
    model = if_with_ranks(1, 2)
    feeds = {"v": np.arange(6, dtype=np.float32), "idx": np.array([0, 5], np.int64)}
    y_then, _ = _run(model, {**feeds, "c": np.array(True)})
    y_else, _ = _run(model, {**feeds, "c": np.array(False)})
    assert y_then.ndim == 1 and y_else.ndim == 2  # onnxruntime: the rank depends on the branch taken
    nodes = {n.name: n for n in translate_model(model).nodes}
    outer = nodes["outer_gather"]
    assert outer.reason_codes[0] == "SHAPE_UNKNOWN"
    message = outer.reasons[0].message
    assert "If 'choose'" in message and "then_branch gives rank 1" in message
    assert "else_branch gives rank 2" in message and "'c'" in message
    # the gathers inside the branches read outer-scope values of known shape: translated
    for inner in ("choose/then_branch/inner_gather", "choose/else_branch/inner_gather2"):
        assert nodes[inner].ok and nodes[inner].output is not None
        assert nodes[inner].output.onnx_shape == (2,)


def test_if_branches_of_one_rank_keep_it() -> None:
    model = if_with_ranks(2, 2)
    feeds = {"v": np.arange(6, dtype=np.float32), "idx": np.array([0, 5], np.int64), "c": np.array(True)}
    y, _ = _run(model, feeds)
    outer = {n.name: n for n in translate_model(model).nodes}["outer_gather"]
    assert outer.ok and outer.output is not None
    assert outer.output.onnx_shape == y.shape == (2, 1)


def if_on_rank(dims: list[int | str]) -> onnx.ModelProto:
    """TorchScript's ``if x.dim() == 0`` (``Equal(Size(Shape(x)), 0)``): the then branch flattens ``x`` to
    rank 1, the else branch passes it on; a Gather reads the If's output. The condition is known before the
    run from the rank alone, so the Gather gets the shape of the branch that runs."""
    then_shape = onnx.numpy_helper.from_array(np.array([-1], np.int64), "flat")
    then = h.make_graph(
        [h.make_node("Reshape", ["x", "flat"], ["t"], name="flatten")],
        "then_branch",
        [],
        [h.make_tensor_value_info("t", T.FLOAT, None)],
        [then_shape],
    )
    other = h.make_graph(
        [h.make_node("Identity", ["x"], ["e"], name="keep")],
        "else_branch",
        [],
        [h.make_tensor_value_info("e", T.FLOAT, None)],
    )
    graph = h.make_graph(
        [
            h.make_node("Shape", ["x"], ["shape"], name="shape"),
            h.make_node("Size", ["shape"], ["rank"], name="rank"),
            h.make_node("Equal", ["rank", "zero"], ["is_scalar"], name="is_scalar"),
            h.make_node("If", ["is_scalar"], ["chosen"], then_branch=then, else_branch=other,
                        name="if_scalar"),
            h.make_node("Gather", ["chosen", "idx"], ["y"], axis=1, name="gather_chosen"),
        ],
        "m",
        [h.make_tensor_value_info("x", T.FLOAT, dims), h.make_tensor_value_info("idx", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero")],
    )  # fmt: skip
    return h.make_model(graph, opset_imports=OPSET, ir_version=10)


def test_if_decided_by_a_rank_takes_the_branch_that_runs() -> None:
    model = if_on_rank([4, 3])
    (y,) = _run(model, {"x": np.ones((4, 3), np.float32), "idx": np.array([2, 0], np.int64)})
    # ONNX's own inference merges the branches (rank 1 and rank 2): no rank for the If's output
    merged = onnx.shape_inference.infer_shapes(model)
    ranked = [v.name for v in merged.graph.value_info if v.type.tensor_type.HasField("shape")]
    assert "chosen" not in ranked
    (node,) = translate_model(model).nodes
    assert node.ok, node.reasons
    assert node.output is not None and node.output.onnx_shape == y.shape == (4, 2)
    assert node.inputs[0].onnx_shape == (4, 3)
    # symbolic sizes: the rank is still decided (Size of a Shape is the rank)
    (symbolic,) = translate_model(if_on_rank(["n", 3])).nodes
    assert symbolic.ok and "SHAPE_UNKNOWN" not in symbolic.reason_codes


def test_the_reason_for_an_if_rank_does_not_promise_input_shapes_help() -> None:
    """The branches' ranks differ whatever the sizes (``c`` is a graph input): --input-shape cannot
    decide it, so the reason says to run the model."""
    outer = {n.name: n for n in translate_model(if_with_ranks(1, 2)).nodes}["outer_gather"]
    message = outer.reasons[0].message
    assert "run the model" in message and "give --input-shape for the symbolic" not in message
