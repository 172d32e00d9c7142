"""Translator rules: fallbacks, errors, EP placement, feature-level plans, host steps, caching."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from dmlshim.dml.enums import DataType, FeatureLevel, OperatorType
from dmlshim.errors import IndexOutOfRangeError, UnsupportedNodeError
from dmlshim.translate import (
    CPU_PROVIDER,
    DML_PROVIDER,
    SUPPORT_TABLE,
    HostStepKind,
    Layout,
    Reinterpret,
    Status,
    TensorInfo,
    render_markdown,
    run_translation,
    translate_node,
)
from tests.oracle import ort_node

FL = FeatureLevel
F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def node(op: str, n_inputs: int = 2, **attrs: object) -> object:
    names = ["data", "indices", "updates"][:n_inputs]
    return helper.make_node(op, names, ["out"], name=f"{op.lower()}_0", **attrs)


def info(shape: tuple[object, ...] | None, elem: int = F32) -> TensorInfo:
    return TensorInfo(shape, elem)  # type: ignore[arg-type]


def test_scatter_elements_16_reduction_falls_back_and_ep_uses_cpu() -> None:
    n = node("ScatterElements", 3, axis=0, reduction="mul")
    t = translate_node(n, 16, [info((4, 3)), info((2, 3), I64), info((2, 3))])
    assert t.status is Status.FALLBACK
    assert t.reasons[0].code == "SCATTER_REDUCTION_UNSUPPORTED"
    assert t.reasons[0].value == "mul"
    assert t.ort_placement == CPU_PROVIDER
    assert t.operator is None and t.min_feature_level is None


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_opset_18_reduction_none_is_dml_but_ep_runs_it_on_cpu(op: str) -> None:
    shapes = [info((4, 3)), info((2, 3) if op == "ScatterElements" else (2, 1), I64), info((2, 3))]
    t = translate_node(node(op, 3), 18, shapes)
    assert t.status is Status.DML
    assert t.ort_placement == CPU_PROVIDER
    assert "EP_NOT_REGISTERED" in t.reason_codes
    t16 = translate_node(node(op, 3), 16, shapes)
    assert t16.status is Status.DML and t16.ort_placement == DML_PROVIDER and not t16.reasons


@pytest.mark.parametrize(
    "elem", [TensorProto.BFLOAT16, TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.FLOAT8E4M3FN]
)
def test_types_directml_cannot_hold_fall_back(elem: int) -> None:
    t = translate_node(node("Gather", axis=0), 13, [info((4, 3), elem), info((2,), I64)])
    assert t.status is Status.FALLBACK
    assert t.reasons[0].code == "DATA_TYPE_UNSUPPORTED"
    assert t.ort_placement == CPU_PROVIDER
    assert "EP_TYPE_ON_CPU" in t.reason_codes


def test_empty_tensor_falls_back() -> None:
    t = translate_node(node("GatherElements", axis=1), 13, [info((4, 3)), info((4, 0), I64)])
    assert t.status is Status.FALLBACK and t.reasons[0].code == "EMPTY_TENSOR"
    assert t.reasons[0].value == [4, 0]


def test_rank_above_8_falls_back_and_the_ep_rejects_it() -> None:
    t = translate_node(node("GatherElements", axis=0), 13, [info((1,) * 9), info((1,) * 9, I64)])
    assert t.status is Status.FALLBACK and t.reasons[0].code == "RANK_TOO_LARGE"
    assert t.ort_placement is None
    # Gather output rank r + q - 1 = 10 > 8: the EP's DimensionCount rule gives 10.
    t = translate_node(node("Gather", axis=0), 13, [info((2,) * 5), info((2,) * 6, I64)])
    assert t.status is Status.FALLBACK and t.reasons[0].code == "RANK_TOO_LARGE" and t.reasons[0].value == 10


def test_unknown_shape_is_an_error_naming_the_option() -> None:
    t = translate_node(node("Gather"), 13, [info(("N", 3)), info((2,), I64)])
    assert t.status is Status.ERROR
    assert t.reasons[0].code == "SHAPE_UNKNOWN"
    assert "--input-shape" in t.reasons[0].message
    assert t.ort_placement == DML_PROVIDER
    t = translate_node(node("Gather"), 13, [None, info((2,), I64)])
    assert t.reasons[0].code == "SHAPE_UNKNOWN"


def test_unknown_op_and_opset_below_every_converter_are_flagged() -> None:
    t = translate_node(helper.make_node("Relu", ["x"], ["y"]), 13, [info((2,))])
    assert t.status is Status.ERROR and t.reasons[0].code == "OP_UNSUPPORTED"
    t = translate_node(node("GatherElements"), 10, [info((2,)), info((2,), I64)])
    assert t.status is Status.ERROR and t.reasons[0].code == "OPSET_UNSUPPORTED"
    t = translate_node(helper.make_node("Gather", ["d", "i"], ["o"], domain="com.example"), 1, [])
    assert t.reasons[0].code == "OP_UNSUPPORTED"


def test_model_opset_resolves_to_since_version() -> None:
    t = translate_node(node("Gather", axis=-1), 10, [info((4, 3)), info((2,), I64)])
    assert t.since_version == 1 and t.status is Status.DML
    t = translate_node(node("ScatterND", 3), 17, [info((4,)), info((1, 1), I64), info((1,))])
    assert t.since_version == 16


@pytest.mark.parametrize(
    ("n", "shapes", "code"),
    [
        (node("Gather", axis=2), [info((4, 3)), info((2,), I64)], "AXIS_OUT_OF_RANGE"),
        (node("Gather"), [info((4, 3)), info((2,), F32)], "INDEX_TYPE_INVALID"),
        (node("GatherND"), [info((4, 3)), info((2,), TensorProto.INT32)], "INDEX_TYPE_INVALID"),
        (node("GatherND", batch_dims=2), [info((4, 3)), info((4, 1), I64)], "ATTRIBUTE_INVALID"),
        (node("GatherND"), [info((4, 3)), info((2, 3), I64)], "INDICES_SHAPE_INVALID"),
        (node("GatherElements"), [info((4, 3)), info((4,), I64)], "INDICES_SHAPE_INVALID"),
        (
            node("ScatterElements", 3),
            [info((4, 3)), info((2, 3), I64), info((2, 2))],
            "UPDATES_SHAPE_INVALID",
        ),
        (node("ScatterND", 3), [info((4, 3)), info((2, 1), I64), info((2, 4))], "UPDATES_SHAPE_INVALID"),
        (node("Gather", 1), [info((4, 3))], "INPUT_MISSING"),
    ],
)
def test_malformed_nodes_are_errors(n: object, shapes: list[TensorInfo], code: str) -> None:
    t = translate_node(n, 13, shapes)  # type: ignore[arg-type]
    assert t.status is Status.ERROR, t.reasons
    assert t.reasons[0].code == code
    assert t.ort_placement is None


@pytest.mark.parametrize(
    ("n", "shapes", "expected"),
    [
        (node("Gather"), [info((4, 3)), info((2,), I64)], FL.FL_1_0),
        (node("Gather"), [info((4, 3), TensorProto.INT32), info((2,), I64)], FL.FL_2_1),
        (node("Gather"), [info((4, 3), TensorProto.INT64), info((2,), I64)], FL.FL_2_1),  # UINT32 pairs
        (node("Gather"), [info((4, 3), TensorProto.BOOL), info((2,), I64)], FL.FL_2_1),
        (node("GatherElements"), [info((4, 3)), info((2, 3), I64)], FL.FL_2_1),
        (node("GatherND", batch_dims=1), [info((2, 3)), info((2, 1), I64)], FL.FL_2_1),  # batch folded
        (node("ScatterND", 3), [info((4, 3)), info((2, 1), I64), info((2, 3))], FL.FL_2_1),
        (node("ScatterElements", 3), [info((4, 3)), info((2, 3), I64), info((2, 3))], FL.FL_1_0),
    ],
)
def test_min_feature_level(n: object, shapes: list[TensorInfo], expected: FeatureLevel) -> None:
    t = translate_node(n, 13, shapes)  # type: ignore[arg-type]
    assert t.min_feature_level is expected
    low = translate_node(n, 13, shapes, FL.FL_1_0)  # type: ignore[arg-type]
    assert (low.status is Status.DML) == (expected is FL.FL_1_0)
    assert low.min_feature_level is expected


def test_batch_dims_below_3_0_fold_into_gather_nd() -> None:
    t = translate_node(node("GatherND", batch_dims=1), 13, [info((2, 3)), info((2, 1), I64)], FL.FL_2_1)
    assert t.status is Status.DML and t.operator is not None
    assert t.operator.operator_type is OperatorType.GATHER_ND
    kinds = [s.kind.value for s in t.host_steps]
    assert kinds == ["normalize_indices", "fold_batch_into_indices"]
    # GatherND-1.0 has no GATHER_ND at all: still a fallback there.
    low = translate_node(node("GatherND", batch_dims=1), 13, [info((2, 3)), info((2, 1), I64)], FL.FL_1_0)
    assert low.status is Status.FALLBACK and low.reasons[0].code == "OPERATOR_UNAVAILABLE"


def test_lower_levels_merge_to_four_dims_with_uint32_indices() -> None:
    data = np.arange(2 * 3 * 2 * 2 * 3, dtype=np.float32).reshape(2, 3, 2, 2, 3)
    idx = np.array([[-1, 0], [1, -2]], dtype=np.int64)
    n = node("Gather", axis=2)
    t = translate_node(n, 13, [info(data.shape), info(idx.shape, I64)], FL.FL_1_0)
    assert t.status is Status.DML and t.layout is Layout.MERGED
    assert t.operator is not None
    tensors = t.operator.tensors()
    assert tensors["InputTensor"].sizes == (1, 6, 2, 6)
    assert tensors["IndicesTensor"].sizes == (1, 1, 1, 4)
    assert tensors["IndicesTensor"].data_type is DataType.UINT32
    assert t.operator.uints() == {"Axis": 2, "IndexDimensions": 1}
    assert [s.kind for s in t.host_steps] == [HostStepKind.NORMALIZE_INDICES]
    result = run_translation(t, [data, idx])
    assert result.host_steps_applied == (HostStepKind.NORMALIZE_INDICES,)
    expected = ort_node("Gather", {"data": data, "indices": idx}, {"axis": 2})
    np.testing.assert_array_equal(result.output, expected)


def test_out_of_range_index_raises_at_every_level() -> None:
    data = np.zeros((4, 3), np.float32)
    idx = np.array([0, 4], dtype=np.int64)
    for fl in (FL.FL_1_0, FL.FL_5_0):
        t = translate_node(node("Gather"), 13, [info(data.shape), info(idx.shape, I64)], fl)
        with pytest.raises(IndexOutOfRangeError) as err:
            run_translation(t, [data, idx])
        assert err.value.node == "gather_0"


def test_int64_data_below_4_1_uses_uint32_pairs() -> None:
    rng = np.random.default_rng(3)
    data = rng.integers(-(2**62), 2**62, (3, 4)).astype(np.int64)
    idx = np.array([[2, 0, 1, 1]], dtype=np.int64)
    upd = rng.integers(-(2**62), 2**62, (1, 4)).astype(np.int64)
    n = node("ScatterElements", 3, axis=0)
    shapes = [info(data.shape, I64), info(idx.shape, I64), info(upd.shape, I64)]
    for fl in (FL.FL_2_1, FL.FL_3_0):
        t = translate_node(n, 13, shapes, fl)
        assert t.status is Status.DML
        assert t.inputs[0].reinterpret is Reinterpret.UINT32_PAIRS
        assert HostStepKind.DUPLICATE_FOR_PAIRS in [s.kind for s in t.host_steps]
        assert t.operator is not None and t.operator.tensors()["InputTensor"].data_type is DataType.UINT32
        expected = ort_node("ScatterElements", {"data": data, "indices": idx, "updates": upd}, {"axis": 0})
        np.testing.assert_array_equal(run_translation(t, [data, idx, upd]).output, expected)
    assert translate_node(n, 13, shapes, FL.FL_4_1).inputs[0].reinterpret is Reinterpret.NONE


def test_indices_smaller_than_data_use_a_strided_window() -> None:
    data = np.arange(20, dtype=np.float32).reshape(4, 5)
    idx = np.array([[3, 0, 1], [1, 2, 3]], dtype=np.int64)  # 2x3 < 4x5 on the non-axis dim
    upd = -np.arange(6, dtype=np.float32).reshape(2, 3)
    g = translate_node(node("GatherElements", axis=0), 13, [info(data.shape), info(idx.shape, I64)])
    assert g.status is Status.DML and "STRIDED_WINDOW" in g.reason_codes
    assert g.operator is not None
    window = g.operator.tensors()["InputTensor"]
    assert window.sizes == (4, 3) and window.strides == (5, 1)
    expected = ort_node("GatherElements", {"data": data, "indices": idx}, {"axis": 0})
    np.testing.assert_array_equal(run_translation(g, [data, idx]).output, expected)

    s = translate_node(
        node("ScatterElements", 3, axis=0), 13, [info(data.shape), info(idx.shape, I64), info(upd.shape)]
    )
    assert s.status is Status.DML
    assert s.output is not None and s.output.host_steps[0].kind is HostStepKind.WRITE_BACK_WINDOW
    expected = ort_node("ScatterElements", {"data": data, "indices": idx, "updates": upd}, {"axis": 0})
    np.testing.assert_array_equal(run_translation(s, [data, idx, upd]).output, expected)


def test_run_translation_refuses_a_fallback() -> None:
    t = translate_node(node("ScatterND", 3, reduction="add"), 16, [info((4,)), info((1, 1), I64), info((1,))])
    with pytest.raises(UnsupportedNodeError):
        run_translation(t, [np.zeros(4, np.float32), np.zeros((1, 1), np.int64), np.zeros(1, np.float32)])


def test_deprecated_scatter_11_and_gather_nd_scalar_output() -> None:
    t = translate_node(node("Scatter", 3), 11, [info((4,)), info((2,), I64), info((2,))])
    assert t.status is Status.DML and t.since_version == 11
    assert t.operator is not None and t.operator.tensors()["InputTensor"].sizes == (1, 1, 1, 4)
    t = translate_node(node("GatherND"), 13, [info((4,)), info((1,), I64)])
    assert t.status is Status.DML and t.ort_placement is None and "EP_REJECTS" in t.reason_codes


def test_translate_node_is_cached_and_named() -> None:
    shapes = [info((4, 3)), info((2,), I64)]
    a = translate_node(node("Gather"), 13, shapes)
    b = translate_node(node("Gather"), 13, shapes, name="outer/body/gather")
    assert a.operator == b.operator and b.name == "outer/body/gather" and a.name == "gather_0"


def test_support_table_renders_every_row() -> None:
    text = render_markdown()
    assert len(text.strip().splitlines()) == len(SUPPORT_TABLE) + 2
    for row in SUPPORT_TABLE:
        assert f"| {row.op_type} | {row.since_version} |" in text
    assert "DML_OPERATOR_GATHER_ND1" in text and "CPU (not registered)" in text


@pytest.mark.parametrize("op", ["GatherND", "ScatterND"])
def test_uint32_pairs_beyond_8_dims_merge_at_3_0(op: str) -> None:
    rng = np.random.default_rng(5)
    data = rng.integers(-(2**60), 2**60, (2, 3, 2, 2, 1, 2, 2, 2)).astype(np.int64)
    if op == "GatherND":
        idx = np.stack([rng.integers(0, 2, (2, 3, 4)), rng.integers(-2, 2, (2, 3, 4))], -1).astype(np.int64)
        inputs = {"data": data, "indices": idx}
        attrs: dict[str, object] = {"batch_dims": 2}
    else:
        idx = np.array([[1, 2, 0], [0, -1, 1]], dtype=np.int64)
        inputs = {
            "data": data,
            "indices": idx,
            "updates": rng.integers(0, 9, (2, 2, 1, 2, 2, 2)).astype(np.int64),
        }
        attrs = {}
    n = helper.make_node(op, list(inputs), ["out"], **attrs)
    infos = [info(a.shape, I64) for a in inputs.values()]
    t = translate_node(n, 13, infos, FL.FL_3_0)
    assert t.status is Status.DML and t.layout is Layout.MERGED
    assert t.inputs[0].reinterpret is Reinterpret.UINT32_PAIRS
    expected = ort_node(op, inputs, attrs)
    np.testing.assert_array_equal(run_translation(t, list(inputs.values())).output, expected)
