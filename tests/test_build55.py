"""Build-cost cuts of issue 36's eleventh pass: walks a build made for answers it rarely needs, now made
only when they can change the answer. Each test checks the answer against onnxruntime (its outputs, its
``get_outputs()``, its refusal) or onnx's own inference, and that the skipped walk is not made where the
answer cannot need it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import TooLargeError
from dmlshim.execute.plan import checks
from dmlshim.execute.proofs import gather_given
from dmlshim.execute.weights import model_source
from dmlshim.translate import shapes_info
from tests.oracle import ort_session

vi = helper.make_tensor_value_info
F = TensorProto.FLOAT
REAL = Path(__file__).resolve().parent.parent / "onnx_models" / "real"


def _model(
    nodes: list[onnx.NodeProto], inputs: list, outputs: list, inits: list | None = None
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    opsets = [helper.make_opsetid("", 17)]
    if any(node.domain == "com.microsoft" for node in nodes):
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _ints(values: list[int], name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _shape_only_model(big: int, folded: int) -> onnx.ModelProto:
    """``Shape(Expand(x, [big]))`` (a value only ``Shape`` reads: onnxruntime folds it, never allocating
    the Expand) beside ``ConstantOfShape([folded])`` (constants: onnxruntime computes it when it loads)."""
    nodes = [
        helper.make_node("Expand", ["x", "n"], ["wide"]),
        helper.make_node("Shape", ["wide"], ["s"]),
        helper.make_node("ConstantOfShape", ["m"], ["filled"]),
        helper.make_node("ReduceSum", ["filled"], ["total"], keepdims=0),
    ]
    return _model(
        nodes,
        [vi("x", F, [1])],
        [vi("s", TensorProto.INT64, [1]), vi("total", F, [])],
        [_ints([big], "n"), _ints([folded], "m")],
    )


def _no_walk(*_: object) -> set[str]:
    raise AssertionError("the values only Shape reads were looked for though no size is over the limit")


def test_shape_only_values_not_looked_for_below_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _shape_only_model(4, 8)
    monkeypatch.setattr(checks, "_shape_only", _no_walk)
    checks.refuse_static_sizes(model)  # nothing over the limit: no walk, no refusal
    session = dmlshim.InferenceSession(model.SerializeToString())
    feeds = {"x": np.array([2.5], np.float32)}
    ours, theirs = session.run(None, feeds), ort_session(model).run(None, feeds)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


def test_shape_only_value_spared_and_the_folded_one_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a 150 MB limit: the 40 GB Expand read by Shape alone is spared (onnxruntime never allocates
    it), the 400 MB ConstantOfShape of constants is refused, named, as before the walk was made lazy."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "150000000")
    looked: list[int] = []
    walk = checks._shape_only

    def counted(graph: onnx.GraphProto) -> set[str]:
        looked.append(1)
        return walk(graph)

    monkeypatch.setattr(checks, "_shape_only", counted)
    with pytest.raises(TooLargeError) as refused:
        checks.refuse_static_sizes(_shape_only_model(10**10, 10**8))
    assert refused.value.tensor == "filled" and looked == [1]
    looked.clear()
    checks.refuse_static_sizes(_shape_only_model(10**10, 8))  # the Expand alone: spared
    assert looked == [1]


def test_shape_output_clash_asked_once_per_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-model check's copy of the graph has the engine graph's names: one answer serves both
    (t5_dynamo's check fetches the shapes of its lean gathers' inputs). Outputs as onnxruntime's."""
    path = REAL / "t5_dynamo.onnx"
    asked: list[int] = []
    clash = gather_given.shape_outputs_clash

    def counted(graph: onnx.GraphProto) -> bool:
        asked.append(1)
        return clash(graph)

    monkeypatch.setattr(gather_given, "shape_outputs_clash", counted)
    from dmlshim.execute.engines import partitioned

    monkeypatch.setattr(partitioned, "shape_outputs_clash", counted)
    session = dmlshim.InferenceSession(str(path))
    assert asked == [1]
    feeds = dict(np.load(path.with_suffix(".npz")))
    for a, b in zip(session.run(None, feeds), ort_session(str(path)).run(None, feeds), strict=True):
        np.testing.assert_array_equal(a, b)


def _dims(outputs: list) -> list[list[object]]:
    return [list(o.shape) for o in outputs]


def test_declared_dim_names_read_only_for_made_up_looking_names(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    plain = _model(nodes, [vi("x", F, ["batch", 3])], [vi("y", F, None)])
    monkeypatch.setattr(model_source, "dim_params", _no_walk)
    assert _dims(dmlshim.InferenceSession(plain.SerializeToString()).get_outputs()) == _dims(
        ort_session(plain).get_outputs()
    )
    monkeypatch.undo()
    # the model's own ``unk__7`` is kept, as onnxruntime reports it
    own = _model(nodes, [vi("x", F, ["unk__7", 3])], [vi("y", F, None)])
    ours = _dims(dmlshim.InferenceSession(own.SerializeToString()).get_outputs())
    assert ours == _dims(ort_session(own).get_outputs()) == [["unk__7", 3]]


def test_rank_passes_skipped_only_where_every_output_is_ranked(monkeypatch: pytest.MonkeyPatch) -> None:
    ranked = _model(
        [helper.make_node("Reshape", ["x", "r"], ["y"])],
        [vi("x", F, [2, 3]), vi("r", TensorProto.INT64, [3])],
        [vi("y", F, None)],
    )
    monkeypatch.setattr(shapes_info, "_propagate_ranks", _no_walk)
    monkeypatch.setattr(shapes_info, "_add_ort_types", _no_walk)
    ours = shapes_info.infer_shapes(ranked)
    theirs = onnx.shape_inference.infer_shapes(ranked, data_prop=True)
    assert ours.graph.output[0].type == theirs.graph.output[0].type
    assert len(ours.graph.output[0].type.tensor_type.shape.dim) == 3
    # a node output onnx cannot type (com.microsoft's Gelu): the passes run, onnxruntime's rank given
    monkeypatch.undo()
    gelu = _model(
        [
            helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"),
            helper.make_node("Relu", ["g"], ["y"]),
        ],
        [vi("x", F, [2, 3])],
        [vi("y", F, None)],
    )
    inferred = shapes_info.infer_shapes(gelu)
    typed = {v.name: v.type for v in (*inferred.graph.value_info, *inferred.graph.output)}
    x = np.ones((2, 3), np.float32)
    for name, value in zip(("y",), ort_session(gelu).run(["y"], {"x": x}), strict=True):
        dims = [d.dim_value for d in typed[name].tensor_type.shape.dim]
        assert dims == list(value.shape)


def test_sequence_output_counts_as_lacking_a_rank() -> None:
    """A node output typed a sequence is no ranked tensor: the shortcut leaves the answer to the walk."""
    nodes = [helper.make_node("SequenceConstruct", ["x"], ["seq"]), helper.make_node("Relu", ["x"], ["y"])]
    model = _model(
        nodes,
        [vi("x", F, [2])],
        [helper.make_tensor_sequence_value_info("seq", F, [2]), vi("y", F, [2])],
    )
    assert shapes_info._may_lack_ranks(onnx.shape_inference.infer_shapes(model).graph)


def _range_reads(limit_nodes: list[onnx.NodeProto], limit: str) -> onnx.ModelProto:
    """``Range(0, limit, 1)`` read by an ``Unsqueeze`` (a data-propagating node) and by a ``Gather`` of
    ``x``, with ``Shape(x)`` feeding the Reshape that makes the model read propagated data."""
    nodes = [
        *limit_nodes,
        helper.make_node("Range", ["zero", limit, "step"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "axes0"], ["u"]),
        helper.make_node("Gather", ["x", "r"], ["g"], axis=1),
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Reshape", ["g", "sx"], ["back"]),
    ]
    return _model(
        nodes,
        [vi("x", F, ["batch", "seq"])],
        [vi("u", TensorProto.INT64, None), vi("back", F, None)],
        [_ints([1], "idx"), _ints(0, "one_axis"), _ints(0, "zero"), _ints(1, "step"), _ints([0], "axes0")],
    )


def test_range_cut_settled_without_a_cut_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cut Range output (its length unknown without data) is never revealed by propagation: onnx's own
    pass with data propagation is the answer, reached without the cut pass that used to prove it."""
    from dmlshim.model import data_prop, range_cuts

    from .inference_calls import count_inference_passes

    assert range_cuts.range_ignores_propagated_data()
    limit = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one_axis"], ["n"], axis=0),
    ]
    model = _range_reads(limit, "n")
    expected = onnx.shape_inference.infer_shapes(model, data_prop=True)
    calls = count_inference_passes(monkeypatch)
    ours = data_prop.infer_with_data_prop(model)
    assert ours.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    assert calls == [False, True]  # the pass without data (the model check's), then onnx's own
    # with the cut passes forced, the same answer after one more pass
    monkeypatch.setattr(data_prop, "cuts_settled", lambda *_: False)
    calls.clear()
    again = data_prop.infer_with_data_prop(model)
    assert again.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    assert calls == [False, True, True]


def test_cut_of_another_producer_keeps_the_cut_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cut value a ``ConstantOfShape`` makes can be revealed (its shape is propagated data): the cut
    pass runs, and the answer is onnx's own where nothing proved large."""
    from dmlshim.model import data_prop

    from .inference_calls import count_inference_passes

    limit = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "idx"], ["n1"], axis=0),
        helper.make_node("ConstantOfShape", ["n1"], ["filled"], value=_ints([1], "v")),
        helper.make_node("Cast", ["filled"], ["cast"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["cast"], ["n"], keepdims=0),
    ]
    model = _range_reads(limit, "n")
    calls = count_inference_passes(monkeypatch)
    ours = data_prop.infer_with_data_prop(model)
    expected = onnx.shape_inference.infer_shapes(model, data_prop=True)
    assert ours.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    assert len(calls) >= 3 and calls[0] is False  # at least one cut pass before onnx's own
