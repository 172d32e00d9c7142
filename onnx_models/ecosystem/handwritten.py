"""Hand-written forms that exporters write and onnx.checker dislikes, but onnxruntime runs.

Each builder uses onnx.helper only and sets ``ir_version`` explicitly.
"""

from __future__ import annotations

import numpy as np
import onnx
from eco_common import Built, Spec
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(graph: onnx.GraphProto, opset: int, ir: int, extra: dict[str, int] | None = None) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (extra or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="dmlshim-ecosystem-handwritten")
    model.ir_version = ir
    return model


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def noshape_inputs() -> Built:
    """Graph inputs carrying an element type and no shape at all (onnx.checker refuses, onnxruntime runs)."""
    rng = _rng(1)
    table = rng.standard_normal((10, 6)).astype(np.float32)
    ids = np.array([[3, -1, 0], [9, 4, 4]], dtype=np.int64)
    data_in = onnx.ValueInfoProto(name="data")
    data_in.type.tensor_type.elem_type = F
    ids_in = onnx.ValueInfoProto(name="ids")
    ids_in.type.tensor_type.elem_type = I64
    nodes = [
        helper.make_node("Gather", ["data", "ids"], ["rows"], name="gather_rows", axis=0),
        helper.make_node("ReduceSum", ["rows", "axes"], ["out"], name="sum", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "noshape", [data_in, ids_in], [onnx.ValueInfoProto(name="out")],
        initializer=[numpy_helper.from_array(np.array([-1], np.int64), "axes")],
    )
    return Built(_model(graph, 18, 10), {"data": table, "ids": ids})


def unsorted_nodes() -> Built:
    """Nodes listed in reverse of their data order (onnxruntime sorts them; onnx.checker refuses)."""
    rng = _rng(2)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    idx = np.array([[4, 0, 1], [2, 2, 3], [0, 1, 4], [3, 3, 3]], dtype=np.int64)
    pos = np.array([[0, 2, 1], [1, 0, 2], [2, 1, 0], [0, 1, 2]], dtype=np.int64)
    nodes = [
        helper.make_node("ScatterElements", ["x", "pos", "picked2"], ["out"], name="scatter", axis=1),
        helper.make_node("Mul", ["picked", "picked"], ["picked2"], name="square"),
        helper.make_node("GatherElements", ["x", "idx"], ["picked"], name="gather_elements", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "unsorted",
        [helper.make_tensor_value_info("x", F, [4, 5]), helper.make_tensor_value_info("idx", I64, [4, 3]),
         helper.make_tensor_value_info("pos", I64, [4, 3])],
        [helper.make_tensor_value_info("out", F, [4, 5])],
    )
    return Built(_model(graph, 18, 10), {"x": x, "idx": idx, "pos": pos})


def bfloat16_casts() -> Built:
    """float32 -> bfloat16 -> Gather -> float32: the gathered values are bfloat16 between two Casts."""
    rng = _rng(3)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    ids = np.array([5, 0, -2, 3], dtype=np.int64)
    nodes = [
        helper.make_node("Cast", ["x"], ["x_bf16"], name="to_bf16", to=TensorProto.BFLOAT16),
        helper.make_node("Gather", ["x_bf16", "ids"], ["rows_bf16"], name="gather_bf16", axis=0),
        helper.make_node("Cast", ["rows_bf16"], ["rows"], name="to_f32", to=F),
        helper.make_node("Relu", ["rows"], ["out"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "bf16",
        [helper.make_tensor_value_info("x", F, [6, 8]), helper.make_tensor_value_info("ids", I64, [4])],
        [helper.make_tensor_value_info("out", F, [4, 8])],
    )
    return Built(_model(graph, 18, 10), {"x": x, "ids": ids})


def external_data() -> Built:
    """An embedding table (128 KiB, above the 64 KiB that tends to trip writers) and a small bias kept
    in a .bin file beside the model."""
    rng = _rng(4)
    table = rng.standard_normal((256, 128)).astype(np.float32)
    bias = rng.standard_normal((128,)).astype(np.float32)
    ids = np.array([[1, 255, 7], [0, 128, -1]], dtype=np.int64)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], name="embedding", axis=0),
        helper.make_node("Add", ["emb", "bias"], ["out"], name="add_bias"),
    ]
    graph = helper.make_graph(
        nodes, "external",
        [helper.make_tensor_value_info("ids", I64, ["batch", 3])],
        [helper.make_tensor_value_info("out", F, ["batch", 3, 128])],
        initializer=[numpy_helper.from_array(table, "table"), numpy_helper.from_array(bias, "bias")],
    )
    return Built(_model(graph, 18, 10), {"ids": ids}, external_data="hw_external_data.bin")


def _new_opset_graph(name: str) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    rng = _rng(5)
    data = rng.standard_normal((2, 3, 4)).astype(np.float32)
    nd_idx = np.array([[[0, 2], [1, -1]], [[2, 0], [0, 3]]], dtype=np.int64)
    upd_idx = np.array([[1, 0], [0, 2]], dtype=np.int64)
    updates = rng.standard_normal((2, 4)).astype(np.float32)
    nodes = [
        helper.make_node("GatherND", ["data", "nd_idx"], ["g"], name="gather_nd", batch_dims=1),
        helper.make_node("ScatterND", ["data", "upd_idx", "updates"], ["s"], name="scatter_nd"),
        helper.make_node("ScatterElements", ["s", "se_idx", "se_upd"], ["s2"], name="scatter_el", axis=2,
                         reduction="max"),
        helper.make_node("Gather", ["s2", "g_idx"], ["out2"], name="gather", axis=-1),
    ]
    se_idx = np.array([[[3, 0, 3, 1]] * 3] * 2, dtype=np.int64)
    se_upd = rng.standard_normal((2, 3, 4)).astype(np.float32)
    g_idx = np.array([3, -4, 1], dtype=np.int64)
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("data", F, [2, 3, 4]),
         helper.make_tensor_value_info("nd_idx", I64, [2, 2, 2]),
         helper.make_tensor_value_info("upd_idx", I64, [2, 2]),
         helper.make_tensor_value_info("updates", F, [2, 4]),
         helper.make_tensor_value_info("se_idx", I64, [2, 3, 4]),
         helper.make_tensor_value_info("se_upd", F, [2, 3, 4]),
         helper.make_tensor_value_info("g_idx", I64, [3])],
        [helper.make_tensor_value_info("g", F, None), helper.make_tensor_value_info("out2", F, None)],
    )
    feeds = {"data": data, "nd_idx": nd_idx, "upd_idx": upd_idx, "updates": updates, "se_idx": se_idx,
             "se_upd": se_upd, "g_idx": g_idx}
    return graph, feeds


def opset(version: int) -> Spec:
    def build() -> Built:
        graph, feeds = _new_opset_graph(f"opset{version}")
        return Built(_model(graph, version, 10), feeds)

    return Spec(f"hw_opset{version}_ir10", "handwritten",
                f"GatherND batch_dims 1, ScatterND, ScatterElements max, Gather axis -1 at opset {version}, IR 10",
                build)


def sparse_initializer() -> Built:
    """A Gather whose table is a sparse_initializer (COO values + indices)."""
    dense = np.zeros((8, 5), dtype=np.float32)
    dense[1, 2], dense[3, 0], dense[6, 4], dense[7, 1] = 1.5, -2.0, 3.25, 0.5
    flat = np.flatnonzero(dense)
    values = numpy_helper.from_array(dense.reshape(-1)[flat], "table")
    sparse = helper.make_sparse_tensor(values, numpy_helper.from_array(flat.astype(np.int64), "table_idx"),
                                       [8, 5])
    ids = np.array([[3, 6], [7, -7]], dtype=np.int64)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["out"], name="gather_sparse", axis=0)],
        "sparse",
        [helper.make_tensor_value_info("ids", I64, [2, 2])],
        [helper.make_tensor_value_info("out", F, [2, 2, 5])],
        sparse_initializer=[sparse],
    )
    return Built(_model(graph, 18, 10), {"ids": ids})


def ir3_initializers() -> Built:
    """IR 3 / opset 8 with initializers that are not listed as graph inputs (onnx.checker: 'in initializer
    but not in graph input'; onnxruntime runs it, as its own mul_1.onnx test model)."""
    rng = _rng(6)
    table = rng.standard_normal((7, 3)).astype(np.float32)
    scale = np.array([2.0, -1.0, 0.5], dtype=np.float32)
    ids = np.array([6, 0, 2, 2], dtype=np.int64)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], name="gather", axis=0),
         helper.make_node("Mul", ["rows", "scale"], ["out"], name="scale")],
        "ir3",
        [helper.make_tensor_value_info("ids", I64, [4])],
        [helper.make_tensor_value_info("out", F, [4, 3])],
        initializer=[numpy_helper.from_array(table, "table"), numpy_helper.from_array(scale, "scale")],
    )
    return Built(_model(graph, 8, 3), {"ids": ids})


def scatternd_empty_index() -> Built:
    """ScatterND whose indices have last dimension 0: every update replaces the whole data tensor."""
    rng = _rng(7)
    data = rng.standard_normal((3, 4)).astype(np.float32)
    updates = rng.standard_normal((1, 3, 4)).astype(np.float32)
    idx = np.zeros((1, 0), dtype=np.int64)
    graph = helper.make_graph(
        [helper.make_node("ScatterND", ["data", "idx", "updates"], ["s"], name="scatter_nd_whole"),
         helper.make_node("Add", ["s", "data"], ["out"], name="add")],
        "scatternd_empty",
        [helper.make_tensor_value_info("data", F, [3, 4]), helper.make_tensor_value_info("updates", F, [1, 3, 4])],
        [helper.make_tensor_value_info("out", F, [3, 4])],
        initializer=[numpy_helper.from_array(idx, "idx")],
    )
    return Built(_model(graph, 18, 10), {"data": data, "updates": updates})


def ms_gathernd() -> Built:
    """com.microsoft GatherND (onnxruntime's contrib op, kept for old exports) beside an ai.onnx Gather."""
    rng = _rng(8)
    data = rng.standard_normal((3, 4, 2)).astype(np.float32)
    idx = np.array([[0, 3], [2, 1], [1, 0]], dtype=np.int64)
    graph = helper.make_graph(
        [helper.make_node("GatherND", ["data", "idx"], ["g"], name="ms_gather_nd", domain="com.microsoft"),
         helper.make_node("Gather", ["g", "col"], ["out"], name="gather_col", axis=1)],
        "ms_gathernd",
        [helper.make_tensor_value_info("data", F, [3, 4, 2]), helper.make_tensor_value_info("idx", I64, [3, 2])],
        [helper.make_tensor_value_info("out", F, None)],
        initializer=[numpy_helper.from_array(np.array(1, np.int64), "col")],
    )
    return Built(_model(graph, 13, 7, {"com.microsoft": 1}), {"data": data, "idx": idx})


def bare_value_info() -> Built:
    """Intermediate and output value-infos that carry an element type and no shape (a "bare" annotation:
    unknown rank, not rank 0; onnxruntime warns about nothing and runs)."""
    rng = _rng(9)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    idx = np.array([[4, 0], [1, 1], [-1, 2]], dtype=np.int64)
    nodes = [
        helper.make_node("Tanh", ["x"], ["t"], name="tanh"),
        helper.make_node("GatherElements", ["t", "idx"], ["g"], name="gather_elements", axis=1),
        helper.make_node("Gather", ["g", "col"], ["out"], name="gather_col", axis=1),
    ]
    bare_t, bare_out = onnx.ValueInfoProto(name="t"), onnx.ValueInfoProto(name="out")
    bare_t.type.tensor_type.elem_type = F
    bare_out.type.tensor_type.elem_type = F
    graph = helper.make_graph(
        nodes, "bare_value_info",
        [helper.make_tensor_value_info("x", F, [3, 5]), helper.make_tensor_value_info("idx", I64, [3, 2])],
        [bare_out],
        initializer=[numpy_helper.from_array(np.array([1, 0, 1], np.int64), "col")],
        value_info=[bare_t],
    )
    return Built(_model(graph, 18, 10), {"x": x, "idx": idx})


SPECS: list[Spec] = [
    Spec("hw_bare_value_info", "handwritten", "GatherElements/Gather on values annotated with a type and no "
         "shape", bare_value_info),
    Spec("hw_noshape_inputs", "handwritten", "Gather on graph inputs with an element type and no shape",
         noshape_inputs),
    Spec("hw_unsorted_nodes", "handwritten", "GatherElements -> Mul -> ScatterElements listed in reverse order",
         unsorted_nodes),
    Spec("hw_bfloat16_casts", "handwritten", "Cast to bfloat16, Gather, Cast back to float32", bfloat16_casts),
    Spec("hw_external_data", "handwritten", "embedding Gather whose 128 KiB table is external data (.bin)",
         external_data),
    opset(21),
    opset(22),
    opset(23),
    Spec("hw_sparse_initializer", "handwritten", "Gather from a sparse_initializer table", sparse_initializer),
    Spec("hw_ir3_initializers", "handwritten", "IR 3 / opset 8, initializers not in the graph inputs",
         ir3_initializers),
    Spec("hw_scatternd_empty_index", "handwritten", "ScatterND with indices of last dimension 0",
         scatternd_empty_index),
    Spec("hw_ms_gathernd", "handwritten", "com.microsoft GatherND feeding an ai.onnx Gather", ms_gathernd),
]
