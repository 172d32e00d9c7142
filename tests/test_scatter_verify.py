"""The scatter kernels' verify mode (dmlshim.kernels.scatter_verify): the whole-model check's way to accept
onnxruntime's scatter output without computing it. Expected arrays come from onnxruntime CPU (one
intra-op thread) or, where onnxruntime refuses the inputs (clamped indices), from the kernels' normal
path; every verdict must be exactly "equal to what the kernel would output, bit for bit"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.dml.enums import FeatureLevel
from dmlshim.errors import IndexOutOfRangeError, InvalidDescriptorError
from dmlshim.execute.engines import whole_model
from dmlshim.execute.plan import steps
from dmlshim.kernels import KernelOptions, can_verify, scatter_verify, verify
from dmlshim.kernels.indices import sorted_unique, unique_slots
from dmlshim.kernels.options import IndexMode
from dmlshim.translate import translate_node
from dmlshim.translate.plan import NodeTranslation, Status, TensorInfo
from dmlshim.translate.runner import run_translation, verify_translation
from tests.oracle import IR_VERSION, make_node_model, ort_run
from tests.test_session_models import make_model

OPSETS = {"ScatterND": 13, "ScatterElements": 13, "Scatter": 10}


def _translation(
    op: str, arrays: Sequence[np.ndarray], attrs: Mapping[str, Any] | None = None
) -> NodeTranslation:
    node = helper.make_node(op, ["data", "indices", "updates"], ["out"], name="n", **dict(attrs or {}))
    infos = [TensorInfo(a.shape, helper.np_dtype_to_tensor_dtype(a.dtype)) for a in arrays]
    t = translate_node(node, OPSETS[op], infos, FeatureLevel.FL_5_0, name="n")
    assert t.status is Status.DML, t.reasons
    return t


def _ort(op: str, arrays: Sequence[np.ndarray], attrs: Mapping[str, Any] | None = None) -> np.ndarray:
    inputs = dict(zip(("data", "indices", "updates"), arrays, strict=True))
    return ort_run(make_node_model(op, inputs, attrs, OPSETS[op]), inputs)[0]


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    return rng.integers(-100 if dt.kind == "i" else 0, 100, shape).astype(dt)


def _case(
    op: str, dtype: Any, seed: int = 0, sparse: bool = False
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Distinct written targets, some indices negative: data (6, 5, 4), or with ``sparse`` a larger
    tensor written in few places (the verify then compares the gaps between the written targets)."""
    rng = np.random.default_rng(seed)
    if op == "ScatterND":
        data = _data(rng, (40 if sparse else 6, 5, 4), dtype)
        count = 3 if sparse else 7
        rows = rng.choice(data.shape[0] * 5, size=count, replace=False)
        indices = np.stack([rows // 5, rows % 5], axis=-1).astype(np.int64)
        indices[::3, 0] -= data.shape[0]  # negative: counted from the end
        updates = _data(rng, (count, 4), dtype)
        return [data, indices, updates], {}
    data = _data(rng, (6, 5, 4), dtype)
    # Along axis 1: each (i, k) line writes distinct positions.
    picks = np.argsort(rng.random((6, 5, 4)), axis=1)[:, :3, :]
    if sparse:
        data = _data(rng, (6, 33, 4), dtype)
        picks = picks[:, :1, :] * 6 + 1  # one write per line of 33
    indices = np.where(rng.random(picks.shape) < 0.3, picks - data.shape[1], picks).astype(np.int64)
    updates = _data(rng, indices.shape, dtype)
    return [data, indices, updates], {"axis": 1}


def _written(op: str, arrays: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    """A mask of the elements a scatter writes (numpy, from the indices)."""
    data, indices = arrays[0], arrays[1]
    mask = np.zeros(data.shape, dtype=bool)
    if op == "ScatterND":
        for tup in indices.reshape(-1, indices.shape[-1]):
            mask[tuple(int(v) for v in tup)] = True
        return mask
    axis = attrs["axis"]
    for pos in np.ndindex(indices.shape):
        target = list(pos)
        target[axis] = int(indices[pos])
        mask[tuple(target)] = True
    return mask


def _flip(a: np.ndarray, flat_position: int) -> np.ndarray:
    """A copy of ``a`` with the lowest bit of one element changed."""
    out = a.copy()
    raw = out.reshape(-1).view(np.dtype(f"u{a.dtype.itemsize}"))
    raw[flat_position] ^= raw.dtype.type(1)  # numpy 1.x: uint64 ^ a Python int is float64
    return out


def _agrees(t: NodeTranslation, arrays: Sequence[np.ndarray], theirs: Any) -> bool:
    verdict = verify_translation(t, arrays, theirs)
    assert verdict is not None, "scatters are verified"
    return verdict.agrees


OPS = ("ScatterND", "ScatterElements", "Scatter")
DTYPES = (np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint16, np.bool_)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", OPS)
def test_onnxruntime_output_agrees_and_every_tampered_element_disagrees(
    op: str, dtype: Any, sparse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sparse:
        monkeypatch.setattr(scatter_verify, "WORDS_PER_GAP", 1)  # compare gap by gap even when small
    arrays, attrs = _case(op, dtype, sparse=sparse)
    t = _translation(op, arrays, attrs)
    theirs = _ort(op, arrays, attrs)
    verdict = verify_translation(t, arrays, theirs)
    assert verdict is not None and verdict.agrees and verdict.duplicate_indices == 0
    written = _written(op, arrays, attrs).reshape(-1)
    # Every single element changed, written or not, must be caught (this covers words that hold a
    # written and an untouched element, the bit-for-bit comparison of each, and the first and last).
    for position in range(theirs.size):
        tampered = _flip(theirs, position)
        got = verify_translation(t, arrays, tampered)
        assert got is not None and not got.agrees, (position, bool(written[position]))


@pytest.mark.parametrize("op", OPS)
def test_record_values_equal_the_normal_path(op: str) -> None:
    arrays, attrs = _case(op, np.float32, seed=3)
    t = _translation(op, arrays, attrs)
    ran = run_translation(t, arrays)
    verdict = verify_translation(t, arrays, ran.output)
    assert verdict is not None and verdict.agrees
    assert verdict.duplicate_indices == ran.duplicate_indices == 0


def _duplicates_case(op: str) -> tuple[list[np.ndarray], dict[str, Any]]:
    rng = np.random.default_rng(5)
    data = rng.standard_normal((5, 8)).astype(np.float32)
    if op == "ScatterND":
        indices = np.array([[1], [3], [1], [-4], [0], [3]], dtype=np.int64)  # rows 1 and 3 three times
        return [data, indices, rng.standard_normal((6, 8)).astype(np.float32)], {}
    indices = np.array([[0, 2, 0, 2, 4, 0]] * 5, dtype=np.int64)
    return [data, indices, rng.standard_normal((5, 6)).astype(np.float32)], {"axis": 1}


@pytest.mark.parametrize("op", OPS)
def test_duplicate_writes_the_last_wins_and_are_counted(op: str) -> None:
    arrays, attrs = _duplicates_case(op)
    t = _translation(op, arrays, attrs)
    theirs = _ort(op, arrays, attrs)  # one thread: onnxruntime writes in order too
    ran = run_translation(t, arrays)
    np.testing.assert_array_equal(ran.output, theirs)
    verdict = verify_translation(t, arrays, theirs)
    assert verdict is not None and verdict.agrees
    assert verdict.duplicate_indices == ran.duplicate_indices == (3 if op == "ScatterND" else 15)
    # The first write winning instead (reversed order of the duplicated writes) is another output.
    data, indices, updates = arrays
    if op == "ScatterND":
        first_wins = data.copy()
        for row, upd in reversed(list(zip(indices[:, 0], updates, strict=True))):
            first_wins[row] = upd
    else:
        first_wins = data.copy()
        for i in range(5):
            for j in reversed(range(6)):
                first_wins[i, indices[i, j]] = updates[i, j]
    assert not np.array_equal(first_wins, theirs)
    got = verify_translation(t, arrays, first_wins)
    assert got is not None and not got.agrees
    assert got.duplicate_indices == verdict.duplicate_indices


@pytest.mark.parametrize("op", OPS)
def test_out_of_range_index_raises_what_the_run_raises(op: str) -> None:
    arrays, attrs = _case(op, np.float32)
    arrays[1] = arrays[1].copy()
    arrays[1].reshape(-1)[4] = 11
    t = _translation(op, arrays, attrs)
    with pytest.raises(IndexOutOfRangeError) as ran:
        run_translation(t, arrays)
    with pytest.raises(IndexOutOfRangeError) as verified:
        verify_translation(t, arrays, arrays[0].copy())
    assert str(verified.value) == str(ran.value)


@pytest.mark.parametrize("op", OPS)
def test_clamped_indices_agree_with_the_clamping_kernel(op: str) -> None:
    arrays, attrs = _case(op, np.float32, seed=9)
    arrays[1] = arrays[1].copy()
    arrays[1].reshape(-1)[:2] = [40, -40]  # clamped onto existing targets: duplicates
    t = _translation(op, arrays, attrs)
    ran = run_translation(t, arrays, index_mode=IndexMode.CLAMP)
    verdict = verify_translation(t, arrays, ran.output, index_mode=IndexMode.CLAMP)
    assert verdict is not None and verdict.agrees
    assert verdict.duplicate_indices == ran.duplicate_indices
    unclamped = verify_translation(t, arrays, _flip(ran.output, 0), index_mode=IndexMode.CLAMP)
    assert unclamped is not None and not unclamped.agrees


def test_nan_payloads_and_signed_zeros_count() -> None:
    data = np.zeros((4, 16), dtype=np.float32)
    data[2, 3] = np.float32("nan")
    indices = np.array([[0]], dtype=np.int64)
    updates = np.full((1, 16), -0.0, dtype=np.float32)
    arrays = [data, indices, updates]
    t = _translation("ScatterND", arrays)
    theirs = _ort("ScatterND", arrays)
    assert _agrees(t, arrays, theirs)
    plus_zero = theirs.copy()
    plus_zero[0, 5] = 0.0  # == -0.0 as a float, not as bits
    other_nan = theirs.copy()
    other_nan.view(np.uint32)[2, 3] ^= 1  # another NaN payload at an untouched element
    assert np.isnan(other_nan[2, 3])
    for tampered in (plus_zero, other_nan):
        assert not _agrees(t, arrays, tampered)


def test_another_shape_or_dtype_never_agrees() -> None:
    arrays, attrs = _case("ScatterND", np.float32)
    t = _translation("ScatterND", arrays, attrs)
    theirs = _ort("ScatterND", arrays, attrs)
    for other in (theirs.reshape(30, 4), theirs.astype(np.float64), theirs.view(np.int32)):
        assert not _agrees(t, arrays, other)


@pytest.mark.parametrize("rows", [3, 400])
def test_few_and_many_written_rows(rows: int) -> None:
    """Few writes into a large tensor (the written rows sorted) and many (a table of every row)."""
    rng = np.random.default_rng(rows)
    data = rng.standard_normal((512, 2, 3)).astype(np.float32)  # 6-element runs: 24 bytes, 3 words
    picked = rng.choice(512, size=rows, replace=False)
    indices = picked.reshape(-1, 1).astype(np.int64)
    updates = rng.standard_normal((rows, 2, 3)).astype(np.float32)
    arrays = [data, indices, updates]
    t = _translation("ScatterND", arrays)
    theirs = _ort("ScatterND", arrays)
    assert _agrees(t, arrays, theirs)
    untouched = int(np.setdiff1d(np.arange(512), picked)[0])
    for position in (int(picked[0]) * 6 + 5, untouched * 6, data.size - 1):
        assert not _agrees(t, arrays, _flip(theirs, position))


def test_gathers_have_no_verify() -> None:
    node = helper.make_node("Gather", ["data", "indices"], ["out"], name="g", axis=0)
    infos = [TensorInfo((4, 3), TensorProto.FLOAT), TensorInfo((2,), TensorProto.INT64)]
    t = translate_node(node, 13, infos, FeatureLevel.FL_5_0, name="g")
    arrays = [np.zeros((4, 3), np.float32), np.array([0, 1], np.int64)]
    assert verify_translation(t, arrays, np.zeros((2, 3), np.float32)) is None
    assert t.operator is not None and not can_verify(t.operator)
    with pytest.raises(InvalidDescriptorError, match="no verify"):
        verify(
            t.operator, {"InputTensor": arrays[0], "IndicesTensor": arrays[1]}, np.zeros(6), KernelOptions()
        )


# --- through the engine: the whole-model check ------------------------------------------------------


def _kv_model(op: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Relu -> scatter (512 KiB output) -> Neg: two CPU segments around the scatter."""
    rng = np.random.default_rng(11)
    data = rng.standard_normal((4, 512, 64)).astype(np.float32)
    if op == "ScatterND":
        indices = np.array([[[0, 7]], [[1, -1]], [[3, 7]], [[1, -1]]], dtype=np.int64)  # one duplicate
        updates = rng.standard_normal((4, 1, 64)).astype(np.float32)
        attrs: dict[str, Any] = {}
    else:
        indices = np.array([[[9] * 64]] * 4, dtype=np.int64)
        indices[2, 0, :5] = -3
        updates = rng.standard_normal((4, 1, 64)).astype(np.float32)
        attrs = {"axis": 1}
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(op, ["r", "idx", "upd"], ["s"], name="scatter", **attrs),
        helper.make_node("Neg", ["s"], ["y"], name="neg"),
    ]
    opset = 13 if op != "Scatter" else 10
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, data.shape), "idx": (TensorProto.INT64, indices.shape),
         "upd": (TensorProto.FLOAT, updates.shape)},
        ["y", "s"],
        opset=opset,
    )  # fmt: skip
    assert model.ir_version == IR_VERSION
    return model, {"x": data, "idx": indices, "upd": updates}


def _one_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # onnxruntime writes duplicates in order
    return so


class _Tampering:
    """Wraps the check's onnxruntime session: changes one element of one fetched output."""

    def __init__(self, session: Any, position: int, flat: int) -> None:
        self.session, self.position, self.flat = session, position, flat

    def run(self, names: Any, feeds: Any, options: Any = None) -> list[Any]:
        fetched = list(self.session.run(names, feeds, options))
        fetched[self.position] = _flip(fetched[self.position], self.flat)
        return fetched


@pytest.mark.parametrize("op", OPS)
def test_the_check_verifies_scatters_and_records_them_as_the_partitions_do(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, feeds = _kv_model(op)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    verdicts: list[bool] = []
    real = steps.verify_translation

    def spy(*args: Any, **kwargs: Any) -> Any:
        verdict = real(*args, **kwargs)
        verdicts.append(verdict.agrees)
        return verdict

    monkeypatch.setattr(steps, "verify_translation", spy)
    got = session.run(None, feeds)
    assert session.last_run_record.path == "whole-model check"
    assert verdicts == [True], "the 512 KiB scatter output was verified, not computed"
    expected = ort_run(model, feeds)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.tobytes() == e.tobytes()
    checked = session.last_run_record.nodes
    names = [o.name for o in model.graph.output]
    _, traced, _ = session.engine.run_traced(names, feeds)
    assert checked == traced.nodes
    (node,) = checked
    assert node.placement == "dml" and node.negative_indices
    assert node.duplicate_indices == (1 if op == "ScatterND" else 0)


@pytest.mark.parametrize("where", ["written", "untouched"])
@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
def test_a_tampered_onnxruntime_output_hands_the_run_to_the_partitions(op: str, where: str) -> None:
    model, feeds = _kv_model(op)
    expected = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    check = session.engine._check
    assert check is not None
    # (0, 7, *) / (*, 9, *) are written; (0, 0, 0) is not.
    flat = 7 * 64 + 3 if op == "ScatterND" else 9 * 64 + 3
    flat = flat if where == "written" else 0
    check._session = _Tampering(check._session, check._position["s"], flat)
    got = session.run(None, feeds)
    assert (check.agreements, check.disagreements) == (0, 1)
    assert session.last_run_record.path == "partitioned"
    for g, e in zip(got, expected, strict=True):
        assert g.tobytes() == e.tobytes()


def test_small_outputs_are_computed_and_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _kv_model("ScatterND")
    monkeypatch.setattr(steps, "VERIFY_MIN_BYTES", 1 << 40)
    compared: list[bool] = []
    real = whole_model.identical

    def spy(ours: Any, theirs: Any) -> bool:
        compared.append(real(ours, theirs))
        return compared[-1]

    monkeypatch.setattr(whole_model, "identical", spy)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    got = session.run(None, feeds)
    assert session.last_run_record.path == "whole-model check" and compared == [True]
    for g, e in zip(got, ort_run(model, feeds), strict=True):
        assert g.tobytes() == e.tobytes()


@pytest.mark.parametrize("size", [0, 1, 2, 50])
def test_unique_helpers_match_numpy(size: int) -> None:
    values = np.random.default_rng(size).integers(-5, 6, size)
    distinct, slots = unique_slots(values)
    want, inverse = np.unique(values, return_inverse=True)
    np.testing.assert_array_equal(distinct, want)
    np.testing.assert_array_equal(slots, inverse.reshape(-1))
    np.testing.assert_array_equal(sorted_unique(values), want)


def _session_after_proofs(op: str) -> tuple[Any, dict[str, np.ndarray], list[np.ndarray]]:
    model, feeds = _kv_model(op)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    expected = ort_run(model, feeds)
    for _ in range(steps.PROVE_RUNS):
        got = session.run(None, feeds)
        (node,) = session.last_run_record.nodes
        assert node.notes == () and session.last_run_record.path == "whole-model check"
    for g, e in zip(got, expected, strict=True):
        assert g.tobytes() == e.tobytes()
    return session, feeds, expected


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
def test_untouched_elements_are_proved_on_the_first_runs_then_noted(op: str) -> None:
    session, feeds, expected = _session_after_proofs(op)
    got = session.run(None, feeds)
    (node,) = session.last_run_record.nodes
    assert [code for code, _ in node.notes] == [steps.NOTE_UNTOUCHED_GIVEN]
    assert "DMLSHIM_FULL_CHECK=1" in node.notes[0][1]
    for g, e in zip(got, expected, strict=True):
        assert g.tobytes() == e.tobytes()
    # The written elements are still proved on every run: a wrong one hands the run to the partitions.
    check = session.engine._check
    flat = 7 * 64 + 3 if op == "ScatterND" else 9 * 64 + 3
    check._session = _Tampering(check._session, check._position["s"], flat)
    got = session.run(None, feeds)
    assert session.last_run_record.path == "partitioned"
    for g, e in zip(got, expected, strict=True):
        assert g.tobytes() == e.tobytes()


def test_full_check_proves_untouched_elements_on_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_FULL_CHECK", "1")
    session, feeds, expected = _session_after_proofs("ScatterND")
    check = session.engine._check
    check._session = _Tampering(check._session, check._position["s"], 0)  # (0, 0, 0): never written
    got = session.run(None, feeds)
    assert session.last_run_record.path == "partitioned"
    assert all(n.notes == () for n in session.last_run_record.nodes)
    for g, e in zip(got, expected, strict=True):
        assert g.tobytes() == e.tobytes()
