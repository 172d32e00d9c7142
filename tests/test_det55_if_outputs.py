"""Issue 36 (det55): a model holding an ``If`` is typed by onnxruntime without a session of its own.

onnx's inference cannot be trusted to type the outputs of a model whose nodes hold subgraphs as
onnxruntime does, so onnxruntime is asked: the model is now loaded in onnxruntime (its graph resolved,
no session initialized) instead of an acceptance session being built beside the engine's. Expected
values are onnxruntime's own: its ``get_outputs()`` at ``ORT_DISABLE_ALL`` (dmlshim reports the first
resolve, docs/python-api.md), its run's outputs, its refusal's class.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import DmlShimError

F = TensorProto.FLOAT
vi = helper.make_tensor_value_info


def _if_model(op: str = "Sqrt", elem: int = F) -> onnx.ModelProto:
    """Two emulated Gathers between CPU nodes (several segments: the whole-model check's session is
    built), then an ``If`` on a fed flag whose branches give ``[2, 2]`` and ``[2, 3]``: onnxruntime types
    the output ``[2, None]`` from the branches' union."""
    then = helper.make_graph(
        [helper.make_node("Slice", ["h", "s0", "s2", "s1"], ["t"])],
        "then",
        [],
        [vi("t", elem, [2, 2])],
        initializer=[
            helper.make_tensor("s0", TensorProto.INT64, [1], [0]),
            helper.make_tensor("s2", TensorProto.INT64, [1], [2]),
            helper.make_tensor("s1", TensorProto.INT64, [1], [1]),
        ],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["h"], ["o"])], "else", [], [vi("o", elem, [2, 3])]
    )
    nodes = [
        helper.make_node("Neg", ["x"], ["n"]),
        helper.make_node("Gather", ["n", "i"], ["g"], axis=0),
        helper.make_node("Abs", ["g"], ["e"]),
        helper.make_node("Gather", ["e", "j"], ["h0"], axis=0),
        helper.make_node(op, ["h0"], ["h"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other),
    ]
    graph = helper.make_graph(
        nodes,
        "if_outputs",
        [
            vi("x", elem, [4, 3]),
            vi("i", TensorProto.INT64, [2]),
            vi("j", TensorProto.INT64, [2]),
            vi("flag", TensorProto.BOOL, []),
        ],
        [vi("y", elem, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _feeds(flag: bool, dtype: type = np.float32) -> dict[str, np.ndarray]:
    return {
        "x": (np.arange(12).reshape(4, 3) / 7).astype(dtype),
        "i": np.array([2, 0], np.int64),
        "j": np.array([1, 0], np.int64),
        "flag": np.array(flag),
    }


def _described(session: object) -> list[tuple[str, str, list[object]]]:
    return [(o.name, o.type, list(o.shape)) for o in session.get_outputs()]  # type: ignore[attr-defined]


def test_if_model_outputs_are_onnxruntimes_without_an_acceptance_session(
    tmp_path: Path, builds: list[int]
) -> None:
    path = str(tmp_path / "m.onnx")
    onnx.save(_if_model(), path)
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    reference = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    builds[0] = 0
    ours = dmlshim.InferenceSession(path)
    assert builds[0] == 1  # the whole-model check's session alone: it stands for onnxruntime's acceptance
    assert _described(ours) == _described(theirs)
    assert _described(ours)[0][2][0] == 2  # the branches' union, as onnxruntime resolves it
    for flag in (True, False):
        want = reference.run(None, _feeds(flag))
        got = ours.run(None, _feeds(flag))
        assert all(a.dtype == b.dtype and a.tobytes() == b.tobytes() for a, b in zip(want, got, strict=True))


def test_if_model_onnxruntime_refuses_when_it_initializes_is_still_refused(tmp_path: Path) -> None:
    """onnxruntime loads the model (no kernel is asked for then) but refuses it when it initializes a
    session (no double ``Acos``): the loading answers the outputs, and the refusal still comes, with
    onnxruntime's class."""
    path = str(tmp_path / "m.onnx")
    onnx.save(_if_model("Acos", TensorProto.DOUBLE), path)
    with pytest.raises(Exception) as theirs:
        onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    with pytest.raises(DmlShimError) as ours:
        dmlshim.InferenceSession(path)
    assert isinstance(ours.value, type(theirs.value))
    assert "Acos" in str(ours.value)
