"""Issue 36: one onnxruntime session per model. The session of the whole model that the engine builds
anyway (the whole-model check's, or the one session of a model with nothing to emulate) stands for
onnxruntime's acceptance of the model; the acceptance's own session is built only when no such session
comes, and a model onnxruntime refuses is still refused with its class and words."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import DmlShimError
from dmlshim.model.modelcheck import check_model
from dmlshim.model.ort_witness import same_nodes


def _model(nodes: list[onnx.NodeProto], outputs: list[str]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph(nodes, "one_session", [x, i], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _two_gathers() -> onnx.ModelProto:
    """Two emulated Gathers between CPU nodes: several segments, so the whole-model check is built."""
    nodes = [
        helper.make_node("Neg", ["x"], ["n"]),
        helper.make_node("Gather", ["n", "i"], ["g"], axis=0),
        helper.make_node("Exp", ["g"], ["e"]),
        helper.make_node("Gather", ["e", "i"], ["h"], axis=1),
        helper.make_node("Sqrt", ["h"], ["y"]),
    ]
    return _model(nodes, ["y"])


def _feeds() -> dict[str, np.ndarray]:
    return {
        "x": np.arange(12, dtype=np.float32).reshape(4, 3) / 7,
        "i": np.array([2, 0], np.int64),
    }


def _ort_outputs(path: str) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, _feeds())


@pytest.mark.parametrize(
    ("model", "path"),
    [
        (_two_gathers(), "check"),
        (_model([helper.make_node("Neg", ["x"], ["y"])], ["y"]), "whole"),
    ],
    ids=["whole-model check", "nothing emulated"],
)
@pytest.mark.parametrize("engine", [None, "cpu"])
def test_one_onnxruntime_session_per_model(
    tmp_path: Path, builds: list[int], model: onnx.ModelProto, path: str, engine: str | None
) -> None:
    file = str(tmp_path / "m.onnx")
    onnx.save(model, file)
    want = _ort_outputs(file)
    builds[0] = 0
    session = dmlshim.InferenceSession(file, engine=engine)
    assert builds[0] == 1  # the engine's session; no acceptance session of its own
    got = session.run(None, _feeds())
    assert all(a.dtype == b.dtype and a.tobytes() == b.tobytes() for a, b in zip(want, got, strict=True))
    if path == "check" and engine is None:
        record = session.last_run_record
        assert record is not None and record.path == "whole-model check"
        assert sorted(r.op_type for r in record.nodes) == ["Gather", "Gather"]


def _refused() -> onnx.ModelProto:
    w = helper.make_tensor("w", TensorProto.INT64, [3], [1, 2, 3])
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"]), helper.make_node("Add", ["g", "w"], ["y"])]
    model = _model(nodes, ["y"])
    model.graph.initializer.append(w)
    return model


def test_a_session_of_another_graph_accepts_nothing(tmp_path: Path) -> None:
    # onnxruntime refuses Add(float, int64); a session built of a different graph must not stand for it
    model = _refused()
    file = str(tmp_path / "m.onnx")
    onnx.save(model, file)
    with pytest.raises(Exception) as theirs:
        onnxruntime.InferenceSession(file, providers=["CPUExecutionProvider"])
    verdict = check_model(onnx.load(file), file, defer_onnxruntime=True)
    other = _model([helper.make_node("Neg", ["x"], ["y"])], ["y"])
    verdict.witnessed(other)  # type: ignore[attr-defined]
    with pytest.raises(DmlShimError) as ours:
        verdict()
    assert type(ours.value.__cause__) is type(theirs.value)  # the session maps it to onnxruntime's class
    reason = str(theirs.value).split(" failed:", 1)[-1].strip()
    assert "Type Error" in reason and reason in str(ours.value)


def test_a_witnessed_model_builds_no_acceptance_session(tmp_path: Path, builds: list[int]) -> None:
    model = _two_gathers()
    file = str(tmp_path / "m.onnx")
    onnx.save(model, file)
    builds[0] = 0
    verdict = check_model(onnx.load(file), file, defer_onnxruntime=True)
    assert builds[0] == 0  # not started before the engine says whether a session of the model comes
    with_outputs = onnx.load(file)
    with_outputs.graph.output.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, None))
    verdict.witnessed(with_outputs)  # type: ignore[attr-defined]
    verdict()
    assert builds[0] == 0


def test_same_nodes_wants_the_checked_graph() -> None:
    model = _two_gathers()
    assert same_nodes(model, model)
    reordered = onnx.ModelProto()
    reordered.CopyFrom(model)
    reordered.graph.node[0].op_type = "Abs"
    assert not same_nodes(model, reordered)
    fewer_outputs = onnx.ModelProto()
    fewer_outputs.CopyFrom(model)
    del fewer_outputs.graph.output[:]
    assert not same_nodes(model, fewer_outputs)
