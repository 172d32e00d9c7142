"""A gather of a per-tensor DequantizeLinear (a QDQ embedding): the custom-op engine gathers the quantized
values and dequantizes only the gathered ones (execute/lowering/dequantized.py, issue 36). Every output is
compared bit for bit with onnxruntime CPU on the source model, in each engine."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime_extensions")

import dmlshim
from dmlshim.execute.lowering.emitter import ALIAS_DOC
from dmlshim.execute.lowering.lower import CUSTOM_DOMAIN, lower_model
from tests.oracle import ort_run

VOCAB, DIM = 257, 33  # odd sizes: no row or vector length a multiple of a SIMD width


def qdq_embedding(
    *,
    op: str = "Gather",
    qtype: int = TensorProto.INT8,
    zero_point: bool = True,
    per_axis: bool = False,
    requantize: bool = False,
    dq_also_output: bool = False,
    seed: int = 0,
) -> onnx.ModelProto:
    """DequantizeLinear(table, scale, zero_point) -> ``op``(indices) -> (Quantize/Dequantize) -> output."""
    rng = np.random.default_rng(seed)
    np_q = helper.tensor_dtype_to_np_dtype(qtype)
    info = np.iinfo(np_q)
    table = rng.integers(info.min, int(info.max) + 1, size=(VOCAB, DIM)).astype(np_q)
    scale = (
        rng.uniform(1e-3, 0.1, size=(DIM,)).astype(np.float32)
        if per_axis
        else np.array(0.0123457, np.float32)
    )
    zp = rng.integers(info.min, int(info.max) + 1, size=scale.shape).astype(np_q)
    inits = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(scale, "scale"),
        numpy_helper.from_array(zp, "zp"),
    ]
    dq_inputs = ["table", "scale", "zp"] if zero_point else ["table", "scale"]
    nodes = [helper.make_node("DequantizeLinear", dq_inputs, ["table_f"], name="dq", axis=1)]
    if op == "Gather":
        idx = helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])
        nodes.append(helper.make_node("Gather", ["table_f", "ids"], ["emb"], name="embed", axis=0))
    elif op == "GatherElements":
        idx = helper.make_tensor_value_info("ids", TensorProto.INT64, [4, DIM])
        nodes.append(helper.make_node("GatherElements", ["table_f", "ids"], ["emb"], name="embed", axis=0))
    else:
        idx = helper.make_tensor_value_info("ids", TensorProto.INT64, [3, 1])
        nodes.append(helper.make_node("GatherND", ["table_f", "ids"], ["emb"], name="embed"))
    out = "emb"
    if requantize:  # as onnxruntime's quantize_static writes it: Q -> DQ after the gather
        nodes += [
            helper.make_node("QuantizeLinear", ["emb", "scale", "zp"], ["emb_q"], name="q_out", axis=1),
            helper.make_node("DequantizeLinear", ["emb_q", "scale", "zp"], ["emb_dq"], name="dq_out", axis=1),
        ]
        out = "emb_dq"
    nodes.append(helper.make_node("Mul", [out, out], ["y"], name="square"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if dq_also_output:
        outputs.append(helper.make_tensor_value_info("table_f", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "qdq_embedding", [idx], outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def feeds_for(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    ids = rng.integers(-VOCAB, VOCAB, size=shape).astype(np.int64)  # negative ids too: ONNX allows them
    return {"ids": ids}


def assert_bitwise(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g.view(np.uint32), w.view(np.uint32))


CASES = {
    "gather_int8": {},
    "gather_uint8_no_zero_point": {"qtype": TensorProto.UINT8, "zero_point": False},
    "gather_requantized": {"requantize": True},
    "gather_elements": {"op": "GatherElements"},
    "gather_nd": {"op": "GatherND", "qtype": TensorProto.UINT8},
    "dq_also_read": {"dq_also_output": True},
    "per_axis_kept": {"per_axis": True},
}


@pytest.mark.parametrize("engine", ["customop", "partitioned"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_equal_onnxruntime(case: str, engine: str) -> None:
    model = qdq_embedding(**CASES[case])  # type: ignore[arg-type]
    feeds = feeds_for(model)
    want = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
    for _ in range(2):
        assert_bitwise(session.run(None, feeds), want)


def _source(graph: onnx.GraphProto, name: str) -> str:
    """The value ``name`` reshapes or casts (through an initializer aliasing another one's bytes too)."""
    for node in graph.node:
        if name in node.output and node.op_type in ("Reshape", "Cast"):
            return _source(graph, node.input[0])
    alias = next((t for t in graph.initializer if t.name == name), None)
    if alias is not None and alias.doc_string.startswith(ALIAS_DOC):
        return alias.doc_string[len(ALIAS_DOC) :]
    return name


@pytest.mark.parametrize("case", ["gather_int8", "gather_requantized", "gather_elements", "gather_nd"])
def test_quantized_values_cross_and_whole_table_not_dequantized(case: str) -> None:
    lowered = lower_model(qdq_embedding(**CASES[case])).model  # type: ignore[arg-type]
    custom = [n for n in lowered.graph.node if n.domain == CUSTOM_DOMAIN]
    assert len(custom) == 1 and _source(lowered.graph, custom[0].input[0]) == "table"
    after = [n for n in lowered.graph.node if custom[0].output[0] in n.input]
    assert [n.op_type for n in after] == ["DequantizeLinear"] and list(after[0].input[1:]) == ["scale", "zp"]
    assert "table_f" not in {o for n in lowered.graph.node for o in n.output}  # the table's DQ is gone


def test_dequantize_kept_when_read_elsewhere() -> None:
    lowered = lower_model(qdq_embedding(dq_also_output=True)).model
    assert any(n.name == "dq" for n in lowered.graph.node)


def test_per_axis_scale_not_rewritten() -> None:
    lowered = lower_model(qdq_embedding(per_axis=True)).model
    custom = [n for n in lowered.graph.node if n.domain == CUSTOM_DOMAIN]
    assert len(custom) == 1 and _source(lowered.graph, custom[0].input[0]) == "table_f"
