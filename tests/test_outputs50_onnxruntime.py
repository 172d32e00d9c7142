"""Round 50: a session's get_outputs() is onnxruntime's own answer where onnx's inference cannot give it.

A declared type inference contradicts (an intermediate ``value_info``'s too), onnxruntime's contrib
operators, model-local functions and nodes holding subgraphs are typed as onnxruntime types them: its
acceptance session (graph optimizations off) is asked. Each case is compared with onnxruntime CPU's
``get_outputs()`` for the same model at ``ORT_DISABLE_ALL`` (dmlshim reports the first resolve,
docs/python-api.md), for a model given as bytes and as a file (whose acceptance session is otherwise left
to the engine's own), with every engine that runs on this machine; and with free-dimension overrides,
which onnxruntime applies even with graph optimizations off, resolving the graph again.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.model.modelcheck import check_model
from tests import test_hostile49c_outputs as h49c

F = TensorProto.FLOAT
vi = helper.make_tensor_value_info


def _relu(a: str, b: str) -> onnx.NodeProto:
    return helper.make_node("Relu", [a], [b])


def _loop() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Relu", ["x"], ["v"])],
        "body",
        [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, [])],
        [vi("c_out", TensorProto.BOOL, []), vi("v", F, [2, 4])],
    )
    node = helper.make_node("Loop", ["n", ""], ["y"], body=body)
    return h49c._model([node], [vi("n", TensorProto.INT64, []), vi("x", F, [2, 4])], [vi("y", F, [3, 2, 3])])


CASES: dict[str, onnx.ModelProto] = {
    **{f"value_info, {k}": m for k, m in h49c.VALUE_INFO.items()},
    **h49c.CASES,
    **h49c.UNOPTIMIZED,
    "contrib op": h49c._contrib(),
    "local function": h49c._local_function(),
    "loop output": _loop(),
    # a com.microsoft node's output read by an output declared without a shape (onnx infers nothing)
    "contrib op read, output untyped": h49c._model(
        [helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"), _relu("g", "y")],
        [vi("x", F, [2, 4])],
        [vi("y", F, None)],
        extra=[helper.make_opsetid("com.microsoft", 1)],
    ),
}


def _batch_free(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its first input's first dimension named ``N``."""
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    dim.Clear()
    dim.dim_param = "N"
    return model


OVERRIDDEN: dict[str, onnx.ModelProto] = {
    "contrib op": _batch_free(h49c._contrib()),
    "local function": _batch_free(h49c._local_function()),
    "output conflicting": h49c._model([_relu("x", "y")], [vi("x", F, ["N", 4])], [vi("y", F, [2, 3])]),
    "rank one": h49c._model([_relu("x", "y")], [vi("x", F, ["N"])], [vi("y", F, [3])]),
    "outputs chained": h49c._model(
        [_relu("x", "y"), _relu("y", "z")],
        [vi("x", F, ["N", 4])],
        [vi("y", F, [2, 3]), vi("z", F, [2, 3])],
    ),
    "value_info conflicting": h49c._model(
        [_relu("x", "y"), _relu("y", "z")],
        [vi("x", F, ["N", 4])],
        [vi("z", F, [2, 3])],
        value_info=[vi("y", F, [2, 3])],
    ),
    "output untyped": h49c._model([_relu("x", "y")], [vi("x", F, ["N", 4])], [vi("y", F, None)]),
}

ENGINES = ["partitioned", "cpu", "customop"]


def _options(overrides: bool, optimized: bool = False) -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    if not optimized:
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    if overrides:
        so.add_free_dimension_override_by_name("N", 2)
    return so


def _described(session: object) -> list[tuple[str, str, list[object]]]:
    return [(o.name, o.type, o.shape) for o in session.get_outputs()]  # type: ignore[attr-defined]


def _theirs(model: onnx.ModelProto, overrides: bool = False) -> list[tuple[str, str, list[object]]]:
    data = model.SerializeToString()
    so = _options(overrides)
    return _described(onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"]))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_from_a_file(case: str, engine: str, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(CASES[case], str(path))
    assert _described(dmlshim.InferenceSession(str(path), engine=engine)) == _theirs(CASES[case])


@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_from_bytes(case: str) -> None:
    data = CASES[case].SerializeToString()
    assert _described(dmlshim.InferenceSession(data)) == _theirs(CASES[case])


@pytest.mark.parametrize("optimized", [False, True], ids=["unoptimized", "default"])
@pytest.mark.parametrize("case", sorted(OVERRIDDEN))
def test_outputs_with_free_dimension_overrides(case: str, optimized: bool) -> None:
    data = OVERRIDDEN[case].SerializeToString()
    ours = dmlshim.InferenceSession(data, _options(True, optimized))
    # the override's second resolve is onnxruntime's at every level for these graphs (nothing to rewrite)
    assert _described(ours) == _theirs(OVERRIDDEN[case], overrides=True)
    theirs = onnxruntime.InferenceSession(data, _options(True), providers=["CPUExecutionProvider"])
    assert [(a.name, a.shape) for a in ours.get_inputs()] == [(a.name, a.shape) for a in theirs.get_inputs()]


@pytest.mark.parametrize("case", ["output conflicting", "outputs chained", "output untyped"])
def test_outputs_with_overrides_by_denotation(case: str) -> None:
    """An override by denotation is not asked of onnxruntime: dmlshim resolves twice itself."""
    model = onnx.ModelProto()
    model.CopyFrom(OVERRIDDEN[case])
    model.graph.input[0].type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    data = model.SerializeToString()
    so = _options(False)
    so.add_free_dimension_override_by_denotation("DATA_BATCH", 2)
    theirs = onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    assert _described(dmlshim.InferenceSession(data, so)) == _described(theirs)
    assert next(iter(theirs.get_inputs())).shape == [2, 4]


@pytest.mark.parametrize(
    ("case", "asked", "built"),
    [
        ("agreeing", False, 0),
        ("chain of outputs", True, 0),
        ("contrib op", True, 0),
        ("if, branches differ", True, 0),
        ("loop output", True, 0),
        ("local function", True, 1),
    ],
)
def test_acceptance_session_only_where_onnx_cannot_answer(
    case: str, asked: bool, built: int, tmp_path: Path, builds: list[int]
) -> None:
    """A model file with onnxruntime's defaults: the acceptance session is left to the engine's own (one
    onnxruntime session per model). Where onnx's inference cannot type the outputs as onnxruntime does
    (an output inference contradicts, a contrib op, a node holding subgraphs) onnxruntime is asked by
    loading the model without initializing a session (issue 36, det55); a model with local functions,
    which onnxruntime inlines only when it initializes a session, gets the acceptance session, never
    witnessed. Either way the answer is onnxruntime's own session's at ``ORT_DISABLE_ALL``."""
    path = tmp_path / "m.onnx"
    given = CASES.get(case) or h49c._model([_relu("x", "y")], [vi("x", F, [2, 4])], [vi("y", F, [2, 4])])
    onnx.save(given, str(path))
    model = onnx.load(str(path))
    verdict = check_model(model, str(path), defer_onnxruntime=True)
    verdict.witnessed(model)  # type: ignore[attr-defined]
    verdict()
    assert builds[0] == built
    answer = verdict.outputs  # type: ignore[attr-defined]
    if asked:
        assert [(o.name, o.type, list(o.shape)) for o in answer.outputs] == _theirs(given)
    else:
        assert answer is None
