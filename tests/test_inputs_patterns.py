"""Generated inputs through the index normalisations exporters write (issue 19, item 5).

jax2onnx wraps every index as ``Where(idx < 0, idx + n, idx)``; other exporters clip, take a modulo,
cast, or index inside function, Loop and If bodies. For each hand-built pattern, ``dmlshim validate MODEL``
(generated inputs) exits 0, and the generated indices, run through onnxruntime CPU, are valid: onnxruntime
itself computes the model on them without an out-of-range error, and the index the gather finally uses
lies inside the data dimension.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.cli.main import main
from dmlshim.inputs import generate

N = 5  # rows of data: every valid index is in [-5, 5) before normalisation, [0, 5) after
DATA = helper.make_tensor_value_info("data", TensorProto.FLOAT, [N, 4])
OUT = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
USED = helper.make_tensor_value_info("used", TensorProto.INT64, None)


def c(name: str, value: int, dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def make(
    nodes: list[onnx.NodeProto],
    idx_type: int = TensorProto.INT64,
    inits: tuple[onnx.TensorProto, ...] = (),
    functions: tuple[onnx.FunctionProto, ...] = (),
    extra_inputs: tuple[onnx.ValueInfoProto, ...] = (),
) -> onnx.ModelProto:
    """``used`` is the index the gather finally reads (an extra output, to check it is in range)."""
    graph = helper.make_graph(
        nodes,
        "pattern",
        [DATA, helper.make_tensor_value_info("idx", idx_type, [3]), *extra_inputs],
        [OUT, USED],
        list(inits),
    )
    opsets = [helper.make_opsetid("", 17)]
    if functions:
        opsets.append(helper.make_opsetid("local", 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=10, functions=list(functions))


def used(name: str) -> onnx.NodeProto:
    return helper.make_node("Cast", [name], ["used"], to=TensorProto.INT64)


def where_norm() -> onnx.ModelProto:
    return make(
        [
            helper.make_node("Less", ["idx", "zero"], ["neg"]),
            helper.make_node("Add", ["idx", "n"], ["wrapped"]),
            helper.make_node("Where", ["neg", "wrapped", "idx"], ["i2"]),
            helper.make_node("Gather", ["data", "i2"], ["y"], axis=0, name="gather"),
            used("i2"),
        ],
        TensorProto.INT32,
        (c("zero", 0, np.int32), c("n", N, np.int32)),
    )


def where_norm_swapped_with_casts() -> onnx.ModelProto:
    """Where(idx >= 0, idx, idx + n) on the index cast to int64 first (jax's int32 indices)."""
    return make(
        [
            helper.make_node("Cast", ["idx"], ["i64"], to=TensorProto.INT64),
            helper.make_node("GreaterOrEqual", ["i64", "zero"], ["pos"]),
            helper.make_node("Add", ["n", "i64"], ["wrapped"]),
            helper.make_node("Where", ["pos", "i64", "wrapped"], ["i2"]),
            helper.make_node("Gather", ["data", "i2"], ["y"], axis=0, name="gather"),
            used("i2"),
        ],
        TensorProto.INT32,
        (c("zero", 0), c("n", N)),
    )


def where_norm_shape_derived() -> onnx.ModelProto:
    """The wrap adds the data dimension read from Shape (no constant n)."""
    return make(
        [
            helper.make_node("Shape", ["data"], ["shape"]),
            helper.make_node("Gather", ["shape", "zero"], ["dim"], axis=0, name="dim"),
            helper.make_node("Less", ["idx", "zero"], ["neg"]),
            helper.make_node("Add", ["idx", "dim"], ["wrapped"]),
            helper.make_node("Where", ["neg", "wrapped", "idx"], ["i2"]),
            helper.make_node("Gather", ["data", "i2"], ["y"], axis=0, name="gather"),
            used("i2"),
        ],
        inits=(c("zero", 0),),
    )


def clip_then_gather() -> onnx.ModelProto:
    return make(
        [
            helper.make_node("Clip", ["idx", "lo", "hi"], ["i2"]),
            helper.make_node("Gather", ["data", "i2"], ["y"], axis=0, name="gather"),
            used("i2"),
        ],
        inits=(c("lo", 0), c("hi", N - 1)),
    )


def clip_min_only() -> onnx.ModelProto:
    """torch.clamp(idx, min=0) (TorchScript writes Clip with an empty max): values above 0 pass unchanged,
    so the generated index must still stay below N (it used to be drawn from 0..7)."""
    return make(
        [
            helper.make_node("Clip", ["idx", "lo", ""], ["i2"]),
            helper.make_node("Gather", ["data", "i2"], ["y"], axis=0, name="gather"),
            used("i2"),
        ],
        inits=(c("lo", 0),),
    )


def clip_max_only() -> onnx.ModelProto:
    """Clip with only a max (N + 2): values below it pass unchanged."""
    return make(
        [
            helper.make_node("Clip", ["idx", "", "hi"], ["i2"]),
            helper.make_node("Gather", ["data", "i2"], ["y"], axis=0, name="gather"),
            used("i2"),
        ],
        inits=(c("hi", N + 2),),
    )


def mod_then_gather() -> onnx.ModelProto:
    return make(
        [
            helper.make_node("Mod", ["idx", "n"], ["i2"]),
            helper.make_node("Gather", ["data", "i2"], ["y"], axis=0, name="gather"),
            used("i2"),
        ],
        inits=(c("n", N),),
    )


def function_body() -> onnx.ModelProto:
    """The Where normalisation and the Gather live in a model-local function."""
    fn = helper.make_function(
        "local",
        "Take",
        ["d", "i"],
        ["out", "idx_used"],
        [
            helper.make_node("Constant", [], ["zero"], value=c("zero", 0)),
            helper.make_node("Constant", [], ["n"], value=c("n", N)),
            helper.make_node("Less", ["i", "zero"], ["neg"]),
            helper.make_node("Add", ["i", "n"], ["wrapped"]),
            helper.make_node("Where", ["neg", "wrapped", "i"], ["i2"]),
            helper.make_node("Gather", ["d", "i2"], ["out"], axis=0, name="gather"),
            helper.make_node("Identity", ["i2"], ["idx_used"]),
        ],
        opset_imports=[helper.make_opsetid("", 17)],
    )
    return make(
        [helper.make_node("Take", ["data", "idx"], ["y", "i2"], domain="local", name="take"), used("i2")],
        functions=(fn,),
    )


def if_body() -> onnx.ModelProto:
    then = helper.make_graph(
        [
            helper.make_node("Less", ["idx", "zero"], ["neg"]),
            helper.make_node("Add", ["idx", "n"], ["wrapped"]),
            helper.make_node("Where", ["neg", "wrapped", "idx"], ["t_i"]),
            helper.make_node("Gather", ["data", "t_i"], ["t_y"], axis=0, name="gather_then"),
        ],
        "then",
        [],
        [
            helper.make_tensor_value_info("t_y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("t_i", TensorProto.INT64, None),
        ],
    )
    other = helper.make_graph(
        [
            helper.make_node("Gather", ["data", "idx"], ["e_y"], axis=0, name="gather_else"),
            helper.make_node("Identity", ["idx"], ["e_i"]),
        ],
        "else",
        [],
        [
            helper.make_tensor_value_info("e_y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("e_i", TensorProto.INT64, None),
        ],
    )
    return make(
        [
            helper.make_node("If", ["flag"], ["y", "i2"], then_branch=then, else_branch=other, name="if"),
            used("i2"),
        ],
        inits=(c("zero", 0), c("n", N)),
        extra_inputs=(helper.make_tensor_value_info("flag", TensorProto.BOOL, []),),
    )


def loop_body() -> onnx.ModelProto:
    """A Loop reading the graph input idx from its body (outer scope), normalised there."""
    body = helper.make_graph(
        [
            helper.make_node("Less", ["idx", "zero"], ["neg"]),
            helper.make_node("Add", ["idx", "n"], ["wrapped"]),
            helper.make_node("Where", ["neg", "wrapped", "idx"], ["b_i"]),
            helper.make_node("Gather", ["data", "b_i"], ["b_y"], axis=0, name="gather_body"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("b_y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("b_i", TensorProto.INT64, None),
        ],
    )
    return make(
        [
            helper.make_node("Loop", ["trip", "cond"], ["y", "i_all"], body=body, name="loop"),
            helper.make_node("ReduceMax", ["i_all"], ["used"], keepdims=0),
        ],
        inits=(c("zero", 0), c("n", N), c("trip", 2), numpy_helper.from_array(np.array(True), "cond")),
    )


PATTERNS = {
    "where_norm": where_norm,
    "where_norm_swapped_with_casts": where_norm_swapped_with_casts,
    "where_norm_shape_derived": where_norm_shape_derived,
    "clip": clip_then_gather,
    "clip_min_only": clip_min_only,
    "clip_max_only": clip_max_only,
    "mod": mod_then_gather,
    "function_body": function_body,
    "if_body": if_body,
    "loop_body": loop_body,
}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_generated_inputs_are_valid_indices(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = PATTERNS[name]()
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    for seed in range(5):
        feeds = generate(model, seed=seed).feeds
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        results = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
        chosen = np.asarray(results["used"])
        assert chosen.size and np.all((chosen >= 0) & (chosen < N)), (seed, feeds["idx"], chosen)
    assert main(["validate", str(path)]) == 0, capsys.readouterr()
    assert "no value is a valid index" not in capsys.readouterr().err


def test_where_normalisation_is_one_use_of_the_index() -> None:
    """Both branches of the Where used to count as uses: [0, 5) and [-5, 0) left no valid value."""
    from dmlshim.inputs.constraints import plan_inputs

    (_, spec) = plan_inputs(where_norm())
    assert spec.name == "idx" and spec.bounds == (0, N)


def test_two_real_uses_still_intersect() -> None:
    """A Where selecting between two different index sources is not a normalisation: both count."""
    from dmlshim.inputs.constraints import plan_inputs

    model = make(
        [
            helper.make_node("Less", ["idx", "zero"], ["neg"]),
            helper.make_node("Add", ["idx", "two"], ["shifted"]),
            helper.make_node("Where", ["flag", "shifted", "idx"], ["i2"]),
            helper.make_node("Gather", ["data", "i2"], ["y"], axis=0, name="gather"),
            used("i2"),
        ],
        inits=(c("zero", 0), c("two", 2)),
        extra_inputs=(helper.make_tensor_value_info("flag", TensorProto.BOOL, [3]),),
    )
    idx = next(s for s in plan_inputs(model) if s.name == "idx")
    assert idx.bounds == (0, N - 2)


# --------------------------------------------------------------------------------------------------
# Index tuples assembled from separate inputs (tf2onnx's unsorted_segment_sum: Concat of Unsqueezes)


def _tuple_model(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], data: list[int]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        [*nodes, helper.make_node("GatherND", ["data", "tuples"], ["y"], name="gather_nd")],
        "tuples",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, data), *inputs],
        [OUT, helper.make_tensor_value_info("tuples", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.array([-1], dtype=np.int64), "last1")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _check_tuples(model: onnx.ModelProto, tmp_path: Path, bounds: dict[str, tuple[int, int]]) -> None:
    """The planned bounds are the data dims each input's components address (ONNX's GatherND rule), and
    onnxruntime computes the model on generated inputs with every tuple inside the data."""
    from dmlshim.inputs.constraints import plan_inputs

    specs = {s.name: s for s in plan_inputs(model)}
    assert {n: specs[n].bounds for n in bounds} == bounds
    path = tmp_path / "tuples.onnx"
    onnx.save(model, str(path))
    data_shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for seed in range(5):
        feeds = generate(model, seed=seed).feeds
        tuples = session.run(["tuples"], feeds)[0]
        k = tuples.shape[-1]
        assert np.all((tuples >= 0) & (tuples < np.array(data_shape[:k]))), (seed, tuples)


def test_unsqueezed_ids_bound_by_the_dimension_of_their_component(tmp_path: Path) -> None:
    """rows reaches component 0 (data dim 2), cols component 1 (data dim 7): each its own bound, not the
    smaller dim for both."""
    model = _tuple_model(
        [
            helper.make_node("Unsqueeze", ["rows", "last1"], ["r1"]),
            helper.make_node("Cast", ["cols"], ["cols64"], to=TensorProto.INT64),
            helper.make_node("Unsqueeze", ["cols64", "last1"], ["c1"]),
            helper.make_node("Concat", ["r1", "c1"], ["tuples"], axis=-1),
        ],
        [
            helper.make_tensor_value_info("rows", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("cols", TensorProto.INT32, [4]),
        ],
        [2, 7, 3],
    )
    _check_tuples(model, tmp_path, {"rows": (0, 2), "cols": (0, 7)})


def test_a_wider_part_and_a_reshaped_part_of_one_tuple(tmp_path: Path) -> None:
    """Concat([a (n,1) reshaped from (n,), b (n,2)], axis 1) over data [3, 6, 4]: a is component 0 (3),
    b components 1-2 (the smaller of 6 and 4)."""
    model = _tuple_model(
        [
            helper.make_node("Reshape", ["a", "shape"], ["a2"]),
            helper.make_node("Concat", ["a2", "b"], ["tuples"], axis=1),
        ],
        [
            helper.make_tensor_value_info("a", TensorProto.INT64, [5]),
            helper.make_tensor_value_info("b", TensorProto.INT64, [5, 2]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [3, 6, 4],
    )
    model.graph.input.pop()  # the shape is a constant
    model.graph.initializer.append(numpy_helper.from_array(np.array([5, 1], dtype=np.int64), "shape"))
    _check_tuples(model, tmp_path, {"a": (0, 3), "b": (0, 4)})
