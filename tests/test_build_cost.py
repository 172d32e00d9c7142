"""Issue 36: the session build does less work twice (onnxruntime's copy of the options when first asked
for, onnxruntime's acceptance session built while the session is, one shape inference for the plan), and
says the same as before: onnxruntime's refusals first, onnxruntime's options, the same records."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.dml.enums import DEFAULT_FEATURE_LEVEL
from dmlshim.errors import DmlShimError
from dmlshim.translate import shapes_info

ECOSYSTEM = Path(__file__).resolve().parents[1] / "onnx_models" / "ecosystem"

_OPTION_FIELDS = (
    "intra_op_num_threads",
    "inter_op_num_threads",
    "graph_optimization_level",
    "execution_mode",
    "enable_cpu_mem_arena",
    "enable_mem_pattern",
    "log_severity_level",
)


def _save(tmp_path: Path, model: onnx.ModelProto, name: str = "m.onnx") -> str:
    path = tmp_path / name
    onnx.save(model, str(path))
    return str(path)


def _raised(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except Exception as exc:  # the answer is whatever was raised
        return exc
    raise AssertionError("no error raised")


def _same_refusal(got: BaseException, want: BaseException) -> None:
    """onnxruntime's class and its reason (a file's refusal says "Load model from PATH failed:" first)."""
    assert isinstance(got, DmlShimError) and type(want) in type(got).__mro__
    reason = str(want).split(" failed:", 1)[-1].strip()
    assert "Type Error" in reason and reason in str(got)


def _gather_model(extra: list[onnx.NodeProto] | None = None) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=0), helper.make_node("Neg", ["g"], ["y"])]
    graph = helper.make_graph(nodes + (extra or []), "build_cost", [x, i], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_default_options_copy_answers_as_onnxruntimes(tmp_path: Path) -> None:
    path = _save(tmp_path, _gather_model())
    theirs = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(path)
    want, got = theirs.get_session_options(), ours.get_session_options()
    for field in _OPTION_FIELDS:
        assert getattr(got, field) == getattr(want, field), field
    # the same object on every call, and for a copy.copy of the session (which shares the session)
    assert (theirs.get_session_options() is want) == (ours.get_session_options() is got)
    assert (copy.copy(theirs).get_session_options() is want) == (copy.copy(ours).get_session_options() is got)
    # made when first asked, also for a copy made before that
    fresh = dmlshim.InferenceSession(path)
    clone = copy.copy(fresh)
    assert (copy.copy(theirs).get_session_options() is want) == (
        clone.get_session_options() is fresh.get_session_options()
    )
    cpu = "CPUExecutionProvider"
    assert ours.get_provider_options()[cpu] == theirs.get_provider_options()[cpu]


def test_a_callers_options_are_copied_when_the_session_is_built(tmp_path: Path) -> None:
    path = _save(tmp_path, _gather_model())
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    theirs = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(path, so)
    so.intra_op_num_threads = 2  # changed afterwards: neither session's copy sees it
    assert (
        ours.get_session_options().intra_op_num_threads == theirs.get_session_options().intra_op_num_threads
    )
    assert theirs.get_session_options().intra_op_num_threads == 1


def test_a_refused_model_file_gives_onnxruntimes_refusal(tmp_path: Path) -> None:
    # Add(float, int64): onnxruntime's type inference refuses the graph; dmlshim's own steps after the load
    # (shape inference, the plan of the Gather) must not answer first.
    w = helper.make_tensor("w", TensorProto.INT64, [3], [1, 2, 3])
    model = _gather_model([helper.make_node("Add", ["g", "w"], ["z"])])
    model.graph.initializer.append(w)
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    path = _save(tmp_path, model)
    want = _raised(lambda: onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]))
    got = _raised(lambda: dmlshim.InferenceSession(path))
    _same_refusal(got, want)


def test_a_refused_model_with_large_weights_gives_onnxruntimes_refusal(tmp_path: Path) -> None:
    # large weights are copied for the session while onnxruntime decides
    table = helper.make_tensor(
        "t", TensorProto.FLOAT, [4096, 64], np.ones((4096, 64), np.float32).tobytes(), raw=True
    )
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Gather", ["t", "x"], ["g"]), helper.make_node("Add", ["g", "x"], ["y"])]
    graph = helper.make_graph(nodes, "refused", [x], [y], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = _save(tmp_path, model)
    want = _raised(lambda: onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]))
    got = _raised(lambda: dmlshim.InferenceSession(path))
    _same_refusal(got, want)


def _if_model() -> onnx.ModelProto:
    """A Gather inside an If branch (placed by onnxruntime, not emulated) and one at the top level."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    then_out = helper.make_tensor_value_info("t", TensorProto.FLOAT, None)
    else_out = helper.make_tensor_value_info("e", TensorProto.FLOAT, None)
    then_graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["t"], axis=1)], "then", [], [then_out]
    )
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [else_out])
    nodes = [
        helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Gather", ["x", "i"], ["z"], axis=0),
    ]
    graph = helper.make_graph(nodes, "if_gather", [x, i, c], [y, z])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_shape_inference_runs_once_for_a_gather_inside_control_flow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _save(tmp_path, _if_model())
    feeds = {
        "x": np.arange(12, dtype=np.float32).reshape(4, 3),
        "i": np.array([2, 0], np.int64),
        "c": np.array(True),
    }
    calls: list[int] = []
    original = shapes_info.infer_shapes

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(shapes_info, "infer_shapes", counted)
    import dmlshim.execute.engines.partitioned as partitioned
    import dmlshim.translate.model_translation as model_translation

    monkeypatch.setattr(partitioned, "infer_shapes", counted)
    monkeypatch.setattr(model_translation, "infer_shapes", counted)
    ours = dmlshim.InferenceSession(path)
    assert len(calls) == 1
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ours.run(None, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    # the nested Gather's record says where onnxruntime-directml places it, as a translation of the
    # model on its own (its own shape inference) says
    from dmlshim.translate.model_placements import model_placements

    placements = model_placements(onnx.load(path), DEFAULT_FEATURE_LEVEL)
    record = ours.last_run_record
    assert record is not None
    nested = [r for r in record.nodes if r.name == "If_0/then_branch/Gather_0"]
    assert len(nested) == 1 and nested[0].status == "not_emulated"
    assert nested[0].ort_placement == placements["If_0/then_branch/Gather_0"] == "DmlExecutionProvider"


def test_a_gather_proved_by_shapes_rebuilds_nothing_on_later_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The corpus's Mixtral step: its Gather/GatherND nodes are answered by the whole-model check from
    # their inputs' shapes. A later run with the same shapes reuses the first run's records.
    model = str(Path(__file__).resolve().parents[1] / "onnx_models" / "real" / "mixtral_moe_dynamo.onnx")
    with np.load(model.replace(".onnx", ".npz")) as data:
        feeds = {k: data[k] for k in data.files}
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    ours = dmlshim.InferenceSession(model)
    first = ours.run(None, feeds)
    first_record = ours.last_run_record
    assert first_record is not None
    lean = [r for r in first_record.nodes if r.notes and r.notes[-1][0] == "output_from_onnxruntime"]
    assert lean, "no gather answered from the check"
    import dmlshim.execute.plan.steps as steps

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("stand-ins rebuilt on a later run")

    monkeypatch.setattr(steps.np, "broadcast_to", refused)
    later = ours.run(None, feeds)
    record = ours.last_run_record
    assert record is not None
    assert record.nodes == first_record.nodes and record.path == first_record.path
    for got in (first, later):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


_NESTED_MODELS = (
    "loop_scatternd.onnx",
    "ecosystem/vc_loop_scatternd_opset19.onnx",
    "ecosystem/os_if_in_function.onnx",
    "real/fasterrcnn_torchscript.onnx",
)


@pytest.mark.parametrize("name", _NESTED_MODELS)
def test_nested_placements_are_the_whole_translations(name: str) -> None:
    # The session places the gather/scatter nodes inside control flow without translating the whole model
    # again: each placement is the one a translation of the whole model gives that node.
    from dmlshim.execute.plan.partition import nested_gather_scatter
    from dmlshim.graph import display_names
    from dmlshim.model.prepare import prepare_model
    from dmlshim.model.weightless import without_weights
    from dmlshim.translate import model_translation

    path = Path(__file__).resolve().parents[1] / "onnx_models" / name
    model = prepare_model(onnx.load(str(path), load_external_data=False))
    nodes = list(model.graph.node)
    nested = {n.path for n in nested_gather_scatter(nodes, display_names(nodes))}
    assert nested
    whole = model_translation.translate_model(model, DEFAULT_FEATURE_LEVEL)
    want = {t.name: t.ort_placement for t in whole.nodes if t.name in nested}
    inferred = shapes_info.infer_shapes(without_weights(model))
    from dmlshim.translate.model_placements import nested_placements

    got = nested_placements(model, DEFAULT_FEATURE_LEVEL, inferred)
    assert got == want and set(got) == nested


def test_a_session_does_not_translate_the_whole_model_to_place_nested_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dmlshim.translate.model_placements as model_placements
    import dmlshim.translate.model_translation as model_translation

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("translate_model called while building a session")

    path = _save(tmp_path, _if_model())
    _ = dmlshim.InferenceSession  # imported before translate_model is replaced
    monkeypatch.setattr(model_translation, "translate_model", refused)
    monkeypatch.setattr(model_placements, "translate_model", refused)
    ours = dmlshim.InferenceSession(path)
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "i": np.array([2, 0], np.int64),
             "c": np.array(True)}  # fmt: skip
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(ours.run(None, feeds), want, strict=True):
        np.testing.assert_array_equal(g, w)
    record = ours.last_run_record
    assert record is not None
    nested = [r for r in record.nodes if r.name == "If_0/then_branch/Gather_0"]
    assert len(nested) == 1 and nested[0].ort_placement == "DmlExecutionProvider"


def test_onnxruntimes_view_of_types_comes_from_a_loaded_session_not_an_initialized_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # onnxruntime infers the types when it loads the model: its view (every node output listed as a graph
    # output) is what an initialized session lists, and no session is initialized for it.
    from dmlshim.model import ort_view

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"),  # ONNX's inference cannot type it
        helper.make_node("Gather", ["g", "i"], ["y"], axis=1),
    ]
    i = helper.make_tensor("i", TensorProto.INT64, [2], [0, 3])
    graph = helper.make_graph(nodes, "view", [x], [y], initializer=[i])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    listed = onnx.ModelProto()
    listed.CopyFrom(model)
    listed.graph.output.add().name = "g"
    session = onnxruntime.InferenceSession(listed.SerializeToString(), providers=["CPUExecutionProvider"])
    want = {a.name: (a.type, a.shape) for a in session.get_outputs()}

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a session initialized for onnxruntime's view of the types")

    monkeypatch.setattr(onnxruntime.capi._pybind_state.InferenceSession, "initialize_session", refused)
    got = ort_view.ort_value_types(model)
    assert want == {"y": ("tensor(float)", ["n", 2]), "g": ("tensor(float)", ["n", 8])}
    for name, (elem, shape) in want.items():
        tp = got[name]
        assert tp.tensor_type.elem_type == TensorProto.FLOAT and elem == "tensor(float)"
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tp.tensor_type.shape.dim]
        assert dims == shape


@pytest.mark.parametrize(
    "name", ["hw_ms_gathernd", "mlt_lgbm_regressor_split", "skl_knn_zipmap", "hw_noshape_inputs"]
)
def test_onnxruntimes_view_of_the_missing_values_only_is_its_view_among_all(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shape inference asks onnxruntime only for the values ONNX's inference leaves untyped; each gets the
    # type an initialized onnxruntime session lists for it when every node output is listed.
    from dmlshim.model import ort_view
    from dmlshim.model.weightless import without_weights

    model = without_weights(shapes_info.load_model(ECOSYSTEM / f"{name}.onnx"))
    asked: list[list[str]] = []
    real = ort_view.ort_value_types

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(list(kwargs["names"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(shapes_info, "ort_value_types", spy)
    shapes_info.infer_shapes(model)
    assert len(asked) == 1 and asked[0]
    listed = onnx.ModelProto()
    listed.CopyFrom(model)
    outputs = {o.name for o in listed.graph.output}
    for node in listed.graph.node:
        listed.graph.output.extend(
            helper.make_value_info(o, onnx.TypeProto()) for o in node.output if o and o not in outputs
        )
        outputs.update(node.output)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(
        listed.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    theirs = {a.name: (a.type, a.shape) for a in session.get_outputs()}
    mine = real(model, names=asked[0])
    assert set(mine) <= set(asked[0]) and mine == {n: tp for n, tp in real(model).items() if n in asked[0]}
    for value in asked[0]:
        elem, shape = theirs[value]
        assert ort_view.type_from_ort(elem) is not None
        tp = mine[value]
        assert tp.WhichOneof("value") == ort_view.type_from_ort(elem).WhichOneof("value")
        if tp.HasField("tensor_type") and tp.tensor_type.HasField("shape"):
            dims = tp.tensor_type.shape.dim
            assert [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in dims] == shape
