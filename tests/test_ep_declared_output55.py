"""onnxruntime-directml's failure on a graph output whose declared shape a run contradicts
(``EP_FAILS_OUTPUT_CONTRADICTING_DECLARED_SHAPE``; docs/directml-linux.md, found on
``ecosystem/mlt_lgbm_classifier.onnx``), narrowed to one node.

One node (Relu, Cast, Gather, ...) whose output ``y`` is a graph output declared with a shape; fed a value
the declaration does not fit. Real DirectML fails the first run at that node when onnx's inference leaves
the declaration standing (``x`` declared ``[n, 2]`` and ``y`` ``[1, 2]``; ``x`` without a shape and ``y``
``[6]``), and runs when inference contradicts it (``x`` ``[n, 2]``, ``y`` ``[1, 5]``: onnxruntime's lenient
merge drops the dimensions) or the node runs on CPU (ScatterND at opset 18, ai.onnx.ml Scaler) or has no
inferred shape (NonZero). dmlshim notes the failing forms on every run's record, ``validate`` warns, and
``directml sweep`` predicts them. The shapes come from onnxruntime CPU, which runs every form; the real
DirectML tests are skipped without the stack.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import InferenceSession
from dmlshim.directml.stack import stack_available
from dmlshim.errors import DmlShimError
from dmlshim.translate.ep_declared_shapes import EP_DECLARED_SHAPE_REFUSAL
from dmlshim.validate import validate_model
from tests.directml_sweeps import sweep_built
from tests.oracle import IR_VERSION, ort_run

CODE = EP_DECLARED_SHAPE_REFUSAL.code
F, I64 = TensorProto.FLOAT, TensorProto.INT64
X = np.array([[1, -2], [3, -4], [-5, 6]], dtype=np.float32)  # 3 rows

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)


def _model(
    node: onnx.NodeProto,
    inputs: list[tuple[str, int, list[int | str] | None]],
    declared: list[int | str],
    *,
    out_type: int = F,
    opset: int = 18,
    initializers: tuple[onnx.TensorProto, ...] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "declared_output",
        [helper.make_tensor_value_info(n, t, dims) for n, t, dims in inputs],
        [helper.make_tensor_value_info("y", out_type, declared)], list(initializers),
    )  # fmt: skip
    opsets = [helper.make_opsetid("", opset)]
    if node.domain:
        opsets.append(helper.make_opsetid(node.domain, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def _relu(
    declared: list[int | str], x_dims: list[int | str] | None = None, unshaped: bool = False
) -> onnx.ModelProto:
    x_dims = None if unshaped else (x_dims or ["n", 2])
    return _model(helper.make_node("Relu", ["x"], ["y"], name="relu"), [("x", F, x_dims)], declared)


_ONE_ROW = numpy_helper.from_array(np.array([[0]], np.int64), "idx")
_UPDATE = numpy_helper.from_array(np.array([[9, 9]], np.float32), "upd")
_TABLE = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2), "table")


def _scatter_nd(opset: int) -> onnx.ModelProto:
    node = helper.make_node("ScatterND", ["x", "idx", "upd"], ["y"], name="scatter")
    return _model(node, [("x", F, ["n", 2])], [1, 2], opset=opset, initializers=(_ONE_ROW, _UPDATE))


def _one_input(
    node: onnx.NodeProto, x_type: int = F, declared: list[int | str] | None = None
) -> onnx.ModelProto:
    out_type = I64 if node.op_type == "NonZero" else F
    return _model(node, [("x", x_type, ["n", 2])], declared or [1, 2], out_type=out_type)


_CAST = helper.make_node("Cast", ["x"], ["y"], name="cast", to=F)
_GATHER = helper.make_node("Gather", ["table", "i"], ["y"], name="gather")
_SCALER = helper.make_node(
    "Scaler", ["x"], ["y"], name="scaler", domain="ai.onnx.ml", offset=[0.0, 0.0], scale=[2.0, 2.0]
)
_NONZERO = helper.make_node("NonZero", ["x"], ["y"], name="nonzero")


def _relu_neg(t_declared: list[int | str] | None) -> onnx.ModelProto:
    """x -> Relu -> t -> Neg -> y declared [1, 2], t declared in value_info when given."""
    nodes = [
        helper.make_node("Relu", ["x"], ["t"], name="relu"),
        helper.make_node("Neg", ["t"], ["y"], name="neg"),
    ]
    model = _model(nodes[1], [("x", F, ["n", 2])], [1, 2])
    model.graph.node.insert(0, nodes[0])
    if t_declared is not None:
        model.graph.value_info.append(helper.make_tensor_value_info("t", F, t_declared))
    return model


# name -> (model, feeds, real DirectML fails the run)
FORMS: dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray], bool]] = {
    "relu_1_2": (_relu([1, 2]), {"x": X}, True),
    "relu_fed_1_row": (_relu([1, 2]), {"x": X[:1]}, False),
    "relu_symbolic": (_relu(["m", 2]), {"x": X}, False),
    "relu_1_m": (_relu([1, "m"]), {"x": X}, True),
    "relu_3_m": (_relu([3, "m"]), {"x": X}, False),
    "relu_same_size_2_3": (_relu([2, 3], ["n", "k"]), {"x": X}, True),
    "relu_inference_contradicts_1_5": (_relu([1, 5]), {"x": X}, False),
    "relu_rank_of_unshaped_x": (_relu([6], unshaped=True), {"x": X}, True),
    "relu_right_rank_of_unshaped_x": (_relu([3, 2], unshaped=True), {"x": X}, False),
    "cast": (_one_input(_CAST, I64), {"x": X.astype(np.int64)}, True),
    "gather": (
        _model(_GATHER, [("i", I64, ["n"])], [1, 2], initializers=(_TABLE,)),
        {"i": np.array([3, 0, 1], np.int64)},
        True,
    ),
    "scatternd_opset13": (_scatter_nd(13), {"x": X}, True),
    "scatternd_opset18_on_cpu": (_scatter_nd(18), {"x": X}, False),
    "ml_scaler_on_cpu": (_one_input(_SCALER), {"x": X}, False),
    "nonzero": (_one_input(_NONZERO, declared=[2, 1]), {"x": X}, False),
    "two_nodes": (_relu_neg(None), {"x": X}, True),
    # t's declared [3, 2] makes onnxruntime infer y [3, 2], which overrules y's [1, 2]
    "two_nodes_intermediate_declared": (_relu_neg([3, 2]), {"x": X}, False),
}


def _notes(model: onnx.ModelProto, feeds: dict[str, np.ndarray], engine: str) -> list[tuple[str, str]]:
    session = InferenceSession(model.SerializeToString(), engine=engine)
    session.run(None, feeds)
    record = session.last_run_record
    assert record is not None
    return [(c, m) for c, m in record.notes if c == CODE]


@pytest.mark.parametrize("form", list(FORMS))
def test_run_record_notes_exactly_the_failing_forms(form: str) -> None:
    model, feeds, fails = FORMS[form]
    reference = ort_run(model, feeds)[0]  # onnxruntime CPU runs every form
    declared = [d.dim_value or d.dim_param for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert (
        list(reference.shape) != declared
        or form == "relu_fed_1_row"
        or form == "relu_right_rank_of_unshaped_x"
    )
    notes = _notes(model, feeds, "partitioned")
    assert len(notes) == (1 if fails else 0), notes
    if fails:
        node = model.graph.node[-1]  # the node computing y
        message = notes[0][1]
        assert f"graph output 'y' of node {node.name!r} ({node.op_type})" in message
        assert f"this run gives {list(reference.shape)}" in message
        assert "2844" in message if len(declared) != reference.ndim else "2853" in message


def test_the_cpu_engine_notes_it_too_and_a_matching_run_does_not() -> None:
    model, feeds, _ = FORMS["relu_1_2"]
    assert len(_notes(model, feeds, "cpu")) == 1
    assert _notes(model, {"x": X[:1]}, "cpu") == []  # the same session's shapes decide, run by run


def test_validate_warns_naming_output_node_shapes_and_code(tmp_path: Path) -> None:
    model, feeds, _ = FORMS["cast"]
    path = tmp_path / "cast.onnx"
    onnx.save(model, str(path))
    report = validate_model(str(path), inputs=feeds)
    assert report.match  # the values equal onnxruntime CPU's: the warning is the only sign
    found = [w for w in report.warnings if w.code == "ORT_DML_EP_FAILS_THIS_RUN"]
    assert len(found) == 1 and found[0].node == "cast"
    assert "declared [1, 2] but this run gives [3, 2]" in found[0].message and CODE in found[0].message
    ok, ok_feeds, _ = FORMS["relu_symbolic"]
    onnx.save(ok, str(tmp_path / "ok.onnx"))
    quiet = validate_model(str(tmp_path / "ok.onnx"), inputs=ok_feeds)
    assert not [w for w in quiet.warnings if w.code == "ORT_DML_EP_FAILS_THIS_RUN"]


@real
@pytest.mark.parametrize("form", list(FORMS))
def test_real_directml_fails_exactly_where_predicted(form: str, tmp_path: Path) -> None:
    model, feeds, fails = FORMS[form]
    result = sweep_built(model, feeds, tmp_path, form)
    assert result.outcome == ("failed" if fails else "ran"), result.message
    assert (CODE in result.predicted_refusal) == fails
    if fails:
        assert "80070057" in result.message and f"Name:'{model.graph.node[-1].name}'" in result.message
    else:
        assert result.vs_cpu is not None and result.vs_cpu.equal


@real
def test_directml_engine_error_on_the_failing_form() -> None:
    model, feeds, _ = FORMS["relu_1_2"]
    session = InferenceSession(model.SerializeToString(), engine="directml")
    with pytest.raises(DmlShimError, match=r"MLOperatorAuthorImpl\.cpp\(2853\).*80070057") as info:
        session.run(None, feeds)
    # the error says why, from onnxruntime CPU's run of the same feeds and onnxruntime's placement log
    assert "graph output 'y' of node 'relu' (Relu) is declared [1, 2] but this run gives [3, 2]" in str(
        info.value
    )
    assert "it runs on DmlExecutionProvider" in str(info.value) and CODE in str(info.value)


@real
def test_the_shipped_lgbm_classifier_fails_as_predicted() -> None:
    from dmlshim.directml.sweep import sweep_one

    path = Path(__file__).parent.parent / "onnx_models" / "ecosystem" / "mlt_lgbm_classifier.onnx"
    reference = ort_run(onnx.load(str(path)), dict(np.load(path.with_suffix(".npz"))))
    label = [o.name for o in onnx.load(str(path)).graph.output].index("label")
    assert reference[label].shape == (7,)  # onnxruntime CPU: 7 rows where `label` is declared [1]
    result = sweep_one(path)
    assert result.outcome == "failed" and "Name:'Cast'" in result.message
    assert result.predicted_refusal == (CODE,)


def test_several_outputs_after_a_partly_declared_one_are_each_held_to_their_own() -> None:
    """A partly declared output (``[n, 2, 2]``) before others: each output is read at its own position
    (the per-run check once reused its position counter for the axes, and the run raised IndexError)."""
    x = helper.make_tensor_value_info("x", F, ["n", 2, 2])
    outputs = [
        helper.make_tensor_value_info("a", F, ["n", 2, 2]),
        helper.make_tensor_value_info("b", F, [1, 2, 2]),  # the run gives [3, 2, 2]: contradicted
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Neg", ["x"], ["b"], name="neg"),
        ],
        "g",
        [x],
        outputs,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = IR_VERSION
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 2, 2)}
    session = InferenceSession(model.SerializeToString())
    got = session.run(None, feeds)
    for a, b in zip(got, ort_run(model, feeds), strict=True):
        np.testing.assert_array_equal(a, b)
    record = session.last_run_record
    assert record is not None
    notes = [m for c, m in record.notes if c == CODE]
    assert len(notes) == 1 and "graph output 'b' of node 'neg' (Neg)" in notes[0], notes
