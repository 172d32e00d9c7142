"""The custom-op engine inside If bodies: a lowered gather's output must keep the shape onnxruntime infers
for it in the source, or onnxruntime's fusions downstream change and so do the last bits of the results.

Found on optimum's merged T5 decoder at t5-small's real configuration (232 MB, random weights): under
``python -m dmlshim.ort --engine customop`` ``ORTModelForSeq2SeqLM``'s logits came out 3.3e-6 from
onnxruntime's (``validate --engine customop --optimization-level extended``: MISMATCH). In the If body the
embedding Gather became a custom op whose output onnxruntime could not shape, so ``MatMulScaleFusion``
left ``Mul(x, d_model**-0.5) -> lm_head MatMul`` unfused where onnxruntime fuses it into a ``FusedMatMul``.
The top-level graph was already declared so; the bodies now are too. Expected values: onnxruntime CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from dmlshim.execute.lowering.lower import lower_model
from tests.oracle import IR_VERSION

LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def _branch(name: str, scale: float) -> onnx.GraphProto:
    """Gather(table, ids) * scale -> MatMul(w): the outer scope's table, ids and w."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], [f"{name}_g"], name=f"{name}_gather", axis=0),
        helper.make_node(
            "Constant", [], [f"{name}_s"], value=numpy_helper.from_array(np.array(scale, np.float32))
        ),
        helper.make_node("Mul", [f"{name}_g", f"{name}_s"], [f"{name}_m"], name=f"{name}_scale"),
        helper.make_node("MatMul", [f"{name}_m", "w"], [f"{name}_y"], name=f"{name}_matmul"),
    ]
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", T.FLOAT, None)])


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    table = numpy_helper.from_array(rng.standard_normal((50, 32)).astype(np.float32), "table")
    w = numpy_helper.from_array(rng.standard_normal((32, 40)).astype(np.float32), "w")
    node = helper.make_node(
        "If",
        ["flag"],
        ["y"],
        name="branch",
        then_branch=_branch("then", 512**-0.5),
        else_branch=_branch("else", 0.125),
    )
    graph = helper.make_graph(
        [node],
        "scaled_if",
        [
            helper.make_tensor_value_info("flag", T.BOOL, []),
            helper.make_tensor_value_info("ids", T.INT64, ["b", "s"]),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [table, w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("body_shapes") / "scaled_if.onnx"
    onnx.save(_model(), path)
    return path


def _options(level: str) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.intra_op_num_threads = 1
    return so


@pytest.mark.parametrize("flag", [True, False])
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_customop_engine_gives_onnxruntimes_bits(model_path: Path, level: str, flag: bool) -> None:
    feeds = {"flag": np.array(flag), "ids": np.random.default_rng(8).integers(0, 50, (3, 7))}
    want = ort.InferenceSession(str(model_path), _options(level), providers=["CPUExecutionProvider"])
    (expected,) = want.run(None, feeds)
    sess = dmlshim.InferenceSession(str(model_path), _options(level), engine="customop")
    (got,) = sess.run(None, feeds)
    assert got.dtype == expected.dtype and got.shape == expected.shape == (3, 7, 40)
    assert np.array_equal(got, expected), f"max |diff| {np.abs(got - expected).max()}"
    assert {n.name: n.placement for n in sess.last_run_record.nodes} == {
        "branch/then_branch/then_gather": "dml",
        "branch/else_branch/else_gather": "dml",
    }


def test_the_body_declares_the_gathers_output(model_path: Path) -> None:
    lowered = lower_model(onnx.load(str(model_path)))
    (if_node,) = lowered.model.graph.node
    for attr in if_node.attribute:
        body = attr.g
        declared = {v.name: v for v in body.value_info}
        name = f"{body.name}_g"
        assert name in declared, name
        dims = [d.dim_param or d.dim_value for d in declared[name].type.tensor_type.shape.dim]
        assert dims == ["b", "s", 32]
