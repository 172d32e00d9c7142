"""Hostile QDQ-quantized models and constant-index gathers against the whole-model check's lean gathers
(dmlshim.execute.proofs.gather_given ``lean_gathers`` / ``feed_shapes``): dmlshim's outputs must be
onnxruntime CPU's bit for bit at every optimization level, and it must refuse exactly the runs
onnxruntime refuses.
Expected values and refusals come from onnxruntime CPU (one intra-op thread) on the same model."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.execute.proofs.gather_given import NOTE_GATHER_GIVEN, SHAPE_SUFFIX, FeedShapes
from tests.oracle import IR_VERSION

LEVELS = {
    "default": None,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
}
CHANNELS = 8


def _options(level: str) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    if LEVELS[level] is not None:
        so.graph_optimization_level = LEVELS[level]
    return so


def _run_both(model: onnx.ModelProto, level: str, runs: list[dict[str, np.ndarray]]) -> list[Any]:
    """Each run's (onnxruntime's, dmlshim's) outputs or exceptions, dmlshim's last_run_record too."""
    try:
        ref = ort.InferenceSession(
            model.SerializeToString(), _options(level), providers=["CPUExecutionProvider"]
        )
    except Exception:
        with pytest.raises(Exception, match=r"(?i)gathernd|type|invalid"):
            dmlshim.InferenceSession(model, sess_options=_options(level))
        return []
    ours = dmlshim.InferenceSession(model, sess_options=_options(level))
    results = []
    for feeds in runs:
        pair: list[Any] = []
        for session in (ref, ours):
            try:
                pair.append(session.run(None, feeds))
            except Exception as exc:
                pair.append(exc)
        results.append((*pair, ours.last_run_record))
    return results


def _assert_same(model: onnx.ModelProto, level: str, runs: list[dict[str, np.ndarray]]) -> list[Any]:
    records = []
    for k, (theirs, ours, record) in enumerate(_run_both(model, level, runs)):
        if isinstance(theirs, Exception) or isinstance(ours, Exception):
            assert isinstance(theirs, Exception) and isinstance(ours, Exception), (level, k, theirs, ours)
            records.append(None)
            continue
        for a, b in zip(theirs, ours, strict=True):
            a, b = np.asarray(a), np.asarray(b)
            assert (a.dtype, a.shape) == (b.dtype, b.shape) and a.tobytes() == b.tobytes(), (level, k)
        records.append(record)
    return records


def _t(name: str, value: Any, dtype: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _qdq(
    value: str, scale: float, zero: int, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]
) -> str:
    """A Q/DQ pair on ``value`` (int8, per tensor), as quantize_static writes for an activation."""
    inits += [_t(f"{value}_s", scale, np.float32), _t(f"{value}_z", zero, np.int8)]
    nodes.append(helper.make_node("QuantizeLinear", [value, f"{value}_s", f"{value}_z"], [f"{value}_q"]))
    nodes.append(
        helper.make_node("DequantizeLinear", [f"{value}_q", f"{value}_s", f"{value}_z"], [f"{value}_dq"])
    )
    return f"{value}_dq"


def _weight(name: str, w: np.ndarray, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> str:
    """An int8 weight (symmetric, per tensor) and its DequantizeLinear."""
    scale = float(np.abs(w).max() / 127)
    inits += [
        _t(f"{name}_w", np.round(w / scale).clip(-127, 127), np.int8),
        _t(f"{name}_ws", scale, np.float32),
        _t(f"{name}_wz", 0, np.int8),
    ]
    nodes.append(
        helper.make_node("DequantizeLinear", [f"{name}_w", f"{name}_ws", f"{name}_wz"], [f"{name}_dq"])
    )
    return f"{name}_dq"


def _pool_model(op: str, fed: bool, index: np.ndarray | None = None) -> onnx.ModelProto:
    """The shape quantize_static(QDQ, int8) gives Conv -> AveragePool -> a gather -> MaxPool -> Relu -> Conv:
    every activation in a Q/DQ pair, the gather reading the pooled DequantizeLinear output and feeding a
    QuantizeLinear. onnxruntime fuses DQ -> AveragePool -> Q (QLinearAveragePool) at extended/all; one
    added reader of any value in that group (a Shape node for the check, say) stops the fusion and moves
    the outputs by a quantization step. ``fed``: the indices are a graph input, else an initializer."""
    rng = np.random.default_rng(7)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x = _qdq("x", 0.03, 0, nodes, inits)
    w1 = _weight("c1", rng.standard_normal((CHANNELS, 3, 3, 3)) * 0.3, nodes, inits)
    nodes.append(helper.make_node("Conv", [x, w1], ["c"], pads=[1, 1, 1, 1]))
    c = _qdq("c", 0.02, -3, nodes, inits)
    nodes.append(helper.make_node("AveragePool", [c], ["p"], kernel_shape=[2, 2], strides=[2, 2]))
    p = _qdq("p", 0.02, -3, nodes, inits)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 8, 8])]
    if op == "Gather":
        shape, attrs = [4], {"axis": 2}
        default = np.array([3, 1, 0, 2], np.int64)
    elif op == "GatherElements":
        shape, attrs = [1, CHANNELS, 4, 4], {"axis": 3}
        default = rng.integers(0, 4, shape).astype(np.int64)
    else:  # GatherND of whole images of the batch
        shape, attrs = [2, 1], {}
        default = np.array([[1], [0]], np.int64)
    if fed:
        inputs.append(helper.make_tensor_value_info("i", TensorProto.INT64, shape))
    else:
        inits.append(_t("i", default if index is None else index, np.int64))
    nodes.append(helper.make_node(op, [p, "i"], ["g"], **attrs))
    g = _qdq("g", 0.02, -3, nodes, inits)
    nodes.append(helper.make_node("MaxPool", [g], ["m"], kernel_shape=[2, 2], strides=[1, 1]))
    nodes.append(helper.make_node("Relu", ["m"], ["r"]))
    r = _qdq("r", 0.01, -128, nodes, inits)
    w2 = _weight("c2", rng.standard_normal((4, CHANNELS, 1, 1)), nodes, inits)
    nodes.append(helper.make_node("Conv", [r, w2], ["o"]))
    o = _qdq("o", 0.05, 0, nodes, inits)
    nodes.append(helper.make_node("Identity", [o], ["y"]))
    graph = helper.make_graph(
        nodes, "qdq_pool", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def _x(batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("op", ["Gather", "GatherElements", "GatherND"])
def test_a_constant_index_gather_inside_qdq_groups_equals_onnxruntime(op: str, level: str) -> None:
    # Before: the check fetched the DequantizeLinear output's shape through an added Shape node, which
    # stopped the DQ -> AveragePool -> Q fusion: the Gather and GatherElements outputs were 0.1 apart at
    # default/all/extended. The shape now comes from the feed's (b, 8, 4, 4): nothing inside the group.
    model = _pool_model(op, fed=False)
    batches = (1, 1, 1) if op == "GatherElements" else (2, 3, 2)
    runs = [{"x": _x(b, seed)} for seed, b in enumerate(batches)]
    for record in _assert_same(model, level, runs)[:1]:
        assert record.path == "whole-model check"
        assert [c for c, _ in record.nodes[0].notes] == [NOTE_GATHER_GIVEN]


@pytest.mark.parametrize("level", ["default", "extended"])
@pytest.mark.parametrize("op", ["Gather", "GatherElements"])
def test_fed_indices_inside_qdq_groups_are_proved_per_run(op: str, level: str) -> None:
    # Indices that are a graph input prove nothing from the graph; between Q/DQ nodes the check now proves
    # the fed values in range on each run instead of fetching the gather's data (which stopped the fusion:
    # outputs 0.04-0.11 apart). A negative index goes to the partitioned run, one past the axis is refused.
    model = _pool_model(op, fed=True)
    rng = np.random.default_rng(3)
    if op == "Gather":
        good, negative, past = ([3, 1, 0, 2], [-1, 1, 0, 2], [4, 0, 0, 0])
    else:
        good = rng.integers(0, 4, (1, CHANNELS, 4, 4))
        negative, past = good.copy(), good.copy()
        negative[0, 0, 0, 0], past[0, 0, 0, 0] = -2, 4
    runs = [{"x": _x(1, k), "i": np.asarray(v, np.int64)} for k, v in enumerate((good, negative, past, good))]
    records = _assert_same(model, level, runs)
    assert records[2] is None  # both refused the index past the axis
    for k in (0, 3):
        assert records[k].path == "whole-model check"
        assert [c for c, _ in records[k].nodes[0].notes] == [NOTE_GATHER_GIVEN]


def test_fed_indices_as_an_ortvalue_are_still_proved_per_run() -> None:
    model = _pool_model("Gather", fed=True)
    session = dmlshim.InferenceSession(model, sess_options=_options("basic"))
    ref = ort.InferenceSession(
        model.SerializeToString(), _options("basic"), providers=["CPUExecutionProvider"]
    )
    x = _x(2, 9)
    for index, lean in (([3, 1, 0, 2], True), ([-1, -2, 0, 2], False), ([3, 1, 0, 2], True)):
        i = np.asarray(index, np.int64)
        ours = session.run(None, {"x": x, "i": ort.OrtValue.ortvalue_from_numpy(i)})[0]
        assert ours.tobytes() == ref.run(None, {"x": x, "i": i})[0].tobytes()
        node = session.last_run_record.nodes[0]
        assert ([c for c, _ in node.notes] == [NOTE_GATHER_GIVEN]) == lean and node.negative_indices != lean


def test_feed_shapes_resolve_symbols_from_the_feeds() -> None:
    shapes = FeedShapes({"p": ("b", 8, 4, 4)}, {"b": ("x", 0)})
    assert shapes.resolve("p", {"x": np.zeros((5, 3, 8, 8))}) == (5, 8, 4, 4)
    assert shapes.resolve("p", {}) is None


def test_the_check_adds_no_shape_node_inside_a_qdq_group() -> None:
    from dmlshim.execute.engines.whole_model import captured_names
    from dmlshim.execute.proofs.gather_given import feed_shapes, lean_gathers
    from dmlshim.translate.shapes_info import tensor_infos

    model = _pool_model("Gather", fed=False)
    inferred = onnx.shape_inference.infer_shapes(model)
    io = [type("IO", (), {"op_type": "Gather", "inputs": ("p_dq", "i"), "output": "g"})()]
    constants = {t.name: t for t in model.graph.initializer}
    infos = tensor_infos(inferred.graph)
    lean = lean_gathers(io, infos, model.graph, constants)
    assert set(lean) == {"g"}
    shaped = feed_shapes(io, lean, infos, model)
    assert shaped.dims == {"p_dq": ("b", CHANNELS, 4, 4), "i": (4,)}
    names = captured_names(io, {"x"} | set(constants), ["y"], frozenset(lean), frozenset(shaped.dims))
    assert not [n for n in names if n.endswith(SHAPE_SUFFIX)]


# quantize_static itself (needs onnxruntime.quantization, whose imports need ml_dtypes).
def _float_pool(op: str) -> tuple[onnx.ModelProto, Callable[[int], dict[str, np.ndarray]]]:
    rng = np.random.default_rng(11)
    init = [
        _t("w1", rng.standard_normal((CHANNELS, 3, 3, 3)) * 0.3, np.float32),
        _t("w2", rng.standard_normal((4, CHANNELS, 1, 1)), np.float32),
    ]
    if op == "Gather":
        init.append(_t("i", [3, 1, 0, 2], np.int64))
    else:
        init.append(_t("i", rng.integers(0, 4, (1, CHANNELS, 4, 4)), np.int64))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node(op, ["p", "i"], ["g"], axis=2 if op == "Gather" else 3),
        helper.make_node("MaxPool", ["g"], ["m"], kernel_shape=[2, 2], strides=[1, 1]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "float_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    batch = 1 if op == "GatherElements" else 2
    return model, lambda seed: {"x": _x(batch, 100 + seed)}


@pytest.mark.parametrize(
    ("op", "per_channel"), [("Gather", False), ("Gather", True), ("GatherElements", True)]
)
def test_quantize_static_pooling_around_a_constant_gather(op: str, per_channel: bool, tmp_path: Any) -> None:
    quantization = pytest.importorskip("onnxruntime.quantization")

    model, feeds = _float_pool(op)

    class Reader(quantization.CalibrationDataReader):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self.batches = iter([feeds(k) for k in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    quantization.quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=per_channel,
        activation_type=quantization.QuantType.QInt8,
        weight_type=quantization.QuantType.QInt8,
    )
    quantized = onnx.load(str(dst))
    quantized.ir_version = IR_VERSION
    for level in ("default", "extended"):
        _assert_same(quantized, level, [feeds(10 + k) for k in range(3)])


# Constant indices: in range, at the axis' last element, one past it, negative; int32 and int64; Constant
# nodes and initializers; the data's rows shrinking between runs so a constant goes out of range.
def _constant_model(
    op: str, index: Any, dtype: Any, as_node: bool, opset: int, attrs: dict[str, int]
) -> onnx.ModelProto:
    nodes = [helper.make_node("Neg", ["x"], ["nx"])]
    inits = []
    tensor = numpy_helper.from_array(np.asarray(index, dtype))
    if as_node:
        nodes.append(helper.make_node("Constant", [], ["i"], value=tensor))
    else:
        tensor.name = "i"
        inits.append(tensor)
    nodes += [helper.make_node(op, ["nx", "i"], ["g"], **attrs), helper.make_node("Abs", ["g"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "constant_index",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


CONSTANT_CASES = [
    *(("Gather", idx, {"axis": axis}) for axis in (0, 1, -2) for idx in (2, [2], [[0, 2]], -1, [-3], 3, [3])),
    *(("GatherND", idx, {}) for idx in ([[2]], [[2, 2]], [[1, 2, 3]], [[-1]], [[3]])),
    ("GatherND", [[2], [0], [1]], {"batch_dims": 1}),
    ("GatherND", [[[1], [0], [2]], [[0], [0], [0]], [[2], [2], [2]]], {"batch_dims": 2}),
    ("GatherElements", np.full((3, 3, 4), 2), {"axis": 1}),
]


@pytest.mark.parametrize(
    ("opset", "dtype", "as_node"), list(itertools.product((11, 13), (np.int32, np.int64), (False, True)))
)
def test_constant_indices_accepted_and_refused_as_onnxruntime_does(
    opset: int, dtype: Any, as_node: bool
) -> None:
    rng = np.random.default_rng(opset)
    runs = [{"x": rng.standard_normal(s).astype(np.float32)} for s in ((3, 3, 4), (2, 2, 4), (3, 3, 4))]
    for op, index, attrs in CONSTANT_CASES:
        if op == "GatherND" and attrs and opset < 12:
            continue
        _assert_same(_constant_model(op, index, dtype, as_node, opset, attrs), "default", runs)


@pytest.mark.parametrize("level", ["default", "extended", "basic"])
@pytest.mark.parametrize("op", ["Gather", "GatherElements", "GatherND"])
def test_qdq_gather_with_symbolic_spatial_dims_equals_onnxruntime(op: str, level: str) -> None:
    # With symbolic spatial dims, the pooled DequantizeLinear output is (b, 8, unk, unk) to static
    # inference: before, the check added a Shape node on it (outputs 0.05-0.1 apart); its shape now comes
    # from onnx's shape inference at the run's input shapes, once per distinct input shapes.
    model = _pool_model(op, fed=False)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "h", "w"
    batch = 1 if op == "GatherElements" else 2
    rng = np.random.default_rng(5)
    sizes = [(8, 8), (10, 12), (8, 8)] if op != "GatherElements" else [(8, 8), (8, 9), (8, 8)]
    runs = [{"x": rng.standard_normal((batch, 3, h, w)).astype(np.float32)} for h, w in sizes]
    for record in _assert_same(model, level, runs)[:1]:
        assert record.path == "whole-model check"
        assert [c for c, _ in record.nodes[0].notes] == [NOTE_GATHER_GIVEN]


@pytest.mark.parametrize("level", ["default", "all"])
def test_computed_indices_inside_qdq_groups_are_fetched_and_proved_per_run(level: str) -> None:
    # Indices computed from a graph input (Mul by one) prove nothing from the graph: before, the check
    # fetched the gather's DequantizeLinear input and the outputs were 0.05 apart; now only the indices are
    # fetched (no QDQ group holds them) and proved in range on each run.
    model = _pool_model("Gather", fed=True)
    gather = next(n for n in model.graph.node if n.op_type == "Gather")
    gather.input[1] = "i1"
    model.graph.initializer.append(_t("one", 1, np.int64))
    model.graph.node.insert(0, helper.make_node("Mul", ["i", "one"], ["i1"]))
    runs = [{"x": _x(2, k), "i": np.asarray(v, np.int64)} for k, v in enumerate(([3, 1, 0, 2], [2, 2, 3, 3]))]
    for record in _assert_same(model, level, runs):
        assert record.path == "whole-model check"
        assert [c for c, _ in record.nodes[0].notes] == [NOTE_GATHER_GIVEN]
    _assert_same(model, level, [{"x": _x(2, 5), "i": np.asarray([0, 4, 0, 0], np.int64)}])  # both refuse


@pytest.mark.parametrize("level", ["default", "all"])
def test_proved_computed_indices_inside_qdq_groups_are_not_fetched(level: str) -> None:
    # Indices a Range makes (non-negative by construction) need no values: the check fetches only their
    # shape. Fetching them broke onnxruntime 1.24, which folds such a Range to a constant and then cannot
    # return it as an output (the check's session failed to build; ortq_qdq_transformer's positions).
    from dmlshim.execute.proofs.gather_given import feed_shapes, lean_gathers
    from dmlshim.translate.shapes_info import tensor_infos

    model = _pool_model("Gather", fed=False)
    gather = next(n for n in model.graph.node if n.op_type == "Gather")
    gather.input[1] = "positions"
    bounds = [_t("start", 0, np.int64), _t("limit", 4, np.int64), _t("step", 1, np.int64)]
    model.graph.initializer.extend(bounds)
    model.graph.node.insert(0, helper.make_node("Range", ["start", "limit", "step"], ["positions"]))
    constants = {t.name: t for t in model.graph.initializer}
    infos = tensor_infos(onnx.shape_inference.infer_shapes(model).graph)
    io = [type("IO", (), {"op_type": "Gather", "inputs": (gather.input[0], "positions"), "output": "g"})()]
    lean = lean_gathers(io, infos, model.graph, constants)
    assert set(lean) == {"g"}
    assert feed_shapes(io, lean, infos, model, constants).indices == frozenset()
    runs = [{"x": _x(2, k)} for k in range(2)]
    for record in _assert_same(model, level, runs):
        assert record.path == "whole-model check"
        assert [c for c, _ in record.nodes[0].notes] == [NOTE_GATHER_GIVEN]
