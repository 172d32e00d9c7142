"""GatherND with batch_dims below FL 3_0: the batch folded into the index tuples, run as GATHER_ND (FL 2_1).

Expected values come from the ONNX backend cases (built in memory by onnx, or read from its case folders
before onnx 1.23) and from onnxruntime CPU.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim import InferenceSession
from dmlshim.cli.main import main
from dmlshim.dml.enums import FeatureLevel as FL
from dmlshim.dml.enums import OperatorType
from dmlshim.errors import IndexOutOfRangeError
from dmlshim.translate import Status, TensorInfo, translate_node
from dmlshim.translate.plan import HostStepKind
from dmlshim.translate.runner import run_translation
from tests.oracle import ort_node


def _gathernd_node(batch_dims: int) -> onnx.NodeProto:
    return helper.make_node("GatherND", ["data", "indices"], ["output"], name="gnd", batch_dims=batch_dims)


def _backend_batch_cases() -> list[tuple[str, onnx.ModelProto, list[np.ndarray], list[np.ndarray]]]:
    # The conformance suite's discovery: onnx's in-memory cases, or (before onnx 1.23) its case folders.
    from dmlshim.conformance.backend_suite import discover_cases

    found = []
    for case in discover_cases():
        model = case.model
        if [n.op_type for n in model.graph.node] != ["GatherND"]:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}
        if attrs.get("batch_dims"):
            found.append((case.name, model, list(case.inputs), list(case.outputs)))
    return found


BACKEND_CASES = _backend_batch_cases()


def test_the_backend_suite_has_batch_dims_cases() -> None:
    assert {name for name, *_ in BACKEND_CASES} >= {"test_gathernd_example_int32_batch_dim1"}


@pytest.mark.parametrize("case", BACKEND_CASES, ids=lambda c: c[0])
def test_backend_case_runs_as_gather_nd_at_2_1(
    case: tuple[str, onnx.ModelProto, list[np.ndarray], list[np.ndarray]],
) -> None:
    _, model, inputs, outputs = case
    session = InferenceSession(model, feature_level="2_1")
    feeds = {v.name: arr for v, arr in zip(model.graph.input, inputs, strict=True)}
    got = session.run(None, feeds)
    record = session.last_run_record
    assert record is not None
    (node,) = record.nodes
    assert (node.placement, node.status, node.operator) == ("dml", "dml", "DML_OPERATOR_GATHER_ND")
    for g, e in zip(got, outputs, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g, e)


def _random_case(rng: np.random.Generator, batch_dims: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    r = int(rng.integers(batch_dims + 1, min(batch_dims + 4, 7) + 1))
    data_shape = tuple(int(d) for d in rng.integers(1, 4, r))
    k = int(rng.integers(1, r - batch_dims + 1))
    lead = tuple(int(d) for d in rng.integers(1, 4, int(rng.integers(0, 3))))
    idx_shape = (*data_shape[:batch_dims], *lead, k)
    if dtype is np.bool_:
        data = rng.integers(0, 2, data_shape).astype(np.bool_)
    elif np.issubdtype(dtype, np.floating):
        data = rng.standard_normal(data_shape).astype(dtype)
    else:
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, data_shape, dtype=dtype, endpoint=True)
    bounds = data_shape[batch_dims : batch_dims + k]
    columns = [rng.integers(-b, b, idx_shape[:-1]) for b in bounds]
    indices = np.stack(columns, axis=-1).astype(np.int64)  # GatherND takes int64 indices only
    return data, indices


DTYPES = (np.float32, np.float16, np.int32, np.int8, np.uint8, np.bool_, np.int64, np.uint64, np.float64)


@pytest.mark.parametrize("batch_dims", [1, 2, 3])
def test_random_cases_equal_onnxruntime_cpu(batch_dims: int) -> None:
    rng = np.random.default_rng(1500 + batch_dims)
    ran = 0
    for i in range(60):
        dtype = DTYPES[i % len(DTYPES)]
        data, indices = _random_case(rng, batch_dims, dtype)
        infos = [
            TensorInfo(data.shape, helper.np_dtype_to_tensor_dtype(data.dtype)),
            TensorInfo(indices.shape, helper.np_dtype_to_tensor_dtype(indices.dtype)),
        ]
        t = translate_node(_gathernd_node(batch_dims), 13, infos, FL.FL_2_1)
        if t.status is not Status.DML:
            # Only where the same gather without batch dimensions does not fit GATHER_ND's 4 dimensions
            # either: data with its batch and first addressed dimension read as one, the same tuples.
            assert [r.code for r in t.reasons] == ["DIMENSION_COUNT_UNSUPPORTED"], t.reasons
            b = batch_dims
            plain = [
                TensorInfo((int(np.prod(data.shape[: b + 1])), *data.shape[b + 1 :]), infos[0].elem_type),
                TensorInfo((int(np.prod(indices.shape[:b])), *indices.shape[b:]), TensorProto.INT64),
            ]
            same = translate_node(_gathernd_node(0), 13, plain, FL.FL_2_1)
            assert [r.code for r in same.reasons] == ["DIMENSION_COUNT_UNSUPPORTED"], same.reasons
            continue
        assert t.operator is not None and t.operator.operator_type is OperatorType.GATHER_ND
        result = run_translation(t, [data, indices])
        assert HostStepKind.FOLD_BATCH_INTO_INDICES in result.host_steps_applied
        expected = ort_node("GatherND", {"data": data, "indices": indices}, {"batch_dims": batch_dims})
        assert result.output.dtype == expected.dtype and result.output.shape == expected.shape
        # Bits, not values: NaN-free data, but -0.0 and the 64-bit halves must come through as they are.
        assert result.output.tobytes() == expected.tobytes(), (data.shape, indices.shape, dtype)
        ran += 1
    assert ran >= 45


def test_descriptor_at_2_1_reads_the_batch_and_the_first_addressed_dim_as_one() -> None:
    # data [2, 3, 4], indices [2, 5, 1], batch_dims 1: GATHER_ND sees data [6, 4] and tuples p * 3 + i.
    infos = [TensorInfo((2, 3, 4), TensorProto.FLOAT), TensorInfo((2, 5, 1), TensorProto.INT64)]
    t = translate_node(_gathernd_node(1), 13, infos, FL.FL_2_1)
    assert t.operator is not None
    assert t.operator.uints() == {"InputDimensionCount": 2, "IndicesDimensionCount": 3}
    sizes = {name: tensor.sizes for name, tensor in t.operator.tensors().items()}
    assert sizes == {"InputTensor": (1, 1, 6, 4), "IndicesTensor": (1, 2, 5, 1), "OutputTensor": (1, 2, 5, 4)}
    step = t.host_steps[-1]
    assert step.kind is HostStepKind.FOLD_BATCH_INTO_INDICES and step.bounds == (2, 3)
    # From 3_0 on the descriptor is the DirectML provider's own GATHER_ND1, without the host step.
    nd1 = translate_node(_gathernd_node(1), 13, infos, FL.FL_3_0)
    assert nd1.operator is not None and nd1.operator.operator_type is OperatorType.GATHER_ND1
    assert not nd1.host_steps


def test_an_out_of_range_index_names_its_onnx_position() -> None:
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    indices = np.array([[[1], [-3]], [[0], [3]]], dtype=np.int64)  # 3 is outside [-3, 2]
    infos = [TensorInfo(data.shape, TensorProto.FLOAT), TensorInfo(indices.shape, TensorProto.INT64)]
    t = translate_node(_gathernd_node(1), 13, infos, FL.FL_2_1)
    with pytest.raises(IndexOutOfRangeError, match=r"index 3 at position \[1, 1, 0\]"):
        run_translation(t, [data, indices])


def test_inspect_reports_the_host_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "onnx_models/gathernd_batch_dims2.onnx", "--feature-level", "2_1"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("gathernd "))
    assert "GATHER_ND" in row and "GATHER_ND1" not in row and " dml " in row
    assert "fold_batch_into_indices" in out and "[2, 3] flattened to 6" in out


@pytest.mark.parametrize("name", ["gathernd_batch_dims1", "gathernd_batch_dims2", "gathernd_batch_dims3"])
def test_shipped_models_at_2_1_equal_onnxruntime(name: str) -> None:
    from tests.oracle import ort_run

    model = onnx.load(f"onnx_models/{name}.onnx")
    feeds = dict(np.load(f"onnx_models/{name}.npz"))
    session = InferenceSession(model, feature_level="2_1")
    got = session.run(None, feeds)
    record = session.last_run_record
    assert record is not None and [n.operator for n in record.nodes] == ["DML_OPERATOR_GATHER_ND"]
    for g, e in zip(got, ort_run(model, feeds), strict=True):
        assert g.tobytes() == e.tobytes() and g.shape == e.shape
