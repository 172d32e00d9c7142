"""A new user's optimum merged decoder (newuser-49): sibling If branches that share value names.

optimum-onnx's ``decoder_model_merged.onnx`` holds two exports of one decoder as the two branches of an
If, so hundreds of values have one name in both. onnx's shape inference with data propagation keeps
propagated data by name across graphs: a branch then reads the other branch's data. In MarianMT's merged
decoder the no-past branch's ScatterND was SHAPE_UNKNOWN (inspect exit 1) and four Gathers had no static
sizes; in the model below, onnx gives the else branch's ``ConstantOfShape(Shape(b))`` the then branch's
shape ``[n, 4]`` for ``[4]``, and the Gather after it ``[2, 4]`` for ``[2]``: a descriptor of the wrong
rank. dmlshim now infers with the subgraphs' names made unique and gives the names back. Expected shapes
come from onnxruntime running the branch alone; expected values from onnxruntime CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.model.data_prop import infer_with_data_prop
from dmlshim.model.subgraph_names import give_back, unshared

F32 = TensorProto.FLOAT


def _branch(tag: str, source: str) -> onnx.GraphProto:
    nodes = [
        helper.make_node("Shape", [source], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["c"], value=helper.make_tensor("v", F32, [1], [1.0])),
        helper.make_node("Gather", ["c", "idx"], ["g"], name=f"gather_{tag}", axis=0),
        helper.make_node("ReduceSum", ["g"], [f"y_{tag}"], keepdims=0),
    ]
    return helper.make_graph(nodes, tag, [], [helper.make_tensor_value_info(f"y_{tag}", F32, None)])


def _model() -> onnx.ModelProto:
    node = helper.make_node(
        "If", ["cond"], ["y"], name="if", then_branch=_branch("t", "a"), else_branch=_branch("e", "b")
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a", F32, ["n", 4]),
            helper.make_tensor_value_info("b", F32, [4]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", F32, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _branch_shapes_from_onnxruntime() -> dict[str, list[int]]:
    """The else branch run alone by onnxruntime: the shapes its values really have."""
    body = _branch("e", "b")
    graph = helper.make_graph(
        list(body.node),
        "alone",
        [
            helper.make_tensor_value_info("b", F32, [4]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info(n, F32, None) for n in ("c", "g")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    c, g = sess.run(None, {"b": np.zeros(4, np.float32), "idx": np.array([0, 3], np.int64)})
    return {"c": list(c.shape), "g": list(g.shape)}


def _dims(tp: onnx.TypeProto) -> list[object]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tp.tensor_type.shape.dim]


def test_each_branch_gets_its_own_shapes() -> None:
    inferred = infer_with_data_prop(_model())
    branches = {a.name: a.g for a in inferred.graph.node[0].attribute}
    found = {v.name: _dims(v.type) for v in branches["else_branch"].value_info}
    truth = _branch_shapes_from_onnxruntime()
    assert found["c"] == truth["c"] == [4]
    assert found["g"] == truth["g"] == [2]
    then = {v.name: _dims(v.type) for v in branches["then_branch"].value_info}
    assert then["c"] == ["n", 4] and then["g"] == [2, 4]


def test_names_are_given_back_exactly() -> None:
    model = _model()
    copy, back = unshared(model) or pytest.fail("the branches share names")
    names = {o for n in copy.graph.node[0].attribute[0].g.node for o in n.output}
    assert "s" not in names  # renamed in the copy
    restored = give_back(copy, back)
    for a, b in zip(model.graph.node[0].attribute, restored.graph.node[0].attribute, strict=True):
        assert [(list(n.input), list(n.output)) for n in a.g.node] == [
            (list(n.input), list(n.output)) for n in b.g.node
        ]
        assert [o.name for o in a.g.output] == [o.name for o in b.g.output]


def test_inspect_translates_the_else_gather_at_its_real_rank(tmp_path: Path) -> None:
    path = tmp_path / "branches.onnx"
    onnx.save(_model(), str(path))
    proc = subprocess.run(
        [sys.executable, "-m", "dmlshim", "inspect", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    nodes = {n["name"]: n for n in json.loads(proc.stdout)["nodes"]}
    truth = _branch_shapes_from_onnxruntime()
    gather = nodes["if/else_branch/gather_e"]
    assert gather["plan"]["inputs"][0]["onnx_shape"] == truth["c"]


@pytest.mark.parametrize("engine", ["partitioned", "customop"])
@pytest.mark.parametrize("cond", [True, False])
def test_runs_give_onnxruntime_values(engine: str, cond: bool) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model = _model().SerializeToString()
    feeds = {
        "cond": np.array(cond),
        "a": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.ones(4, np.float32),
        "idx": np.array([0, -1], np.int64),
    }
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = dmlshim.InferenceSession(model, engine=engine)
    for _ in range(4):
        got = sess.run(None, feeds)
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
