"""The wide and strided sets of the real-DirectML fidelity sweep, and what DirectML.dll gave on them.

Without the real-DirectML stack the generators and dmlshim's side are checked against onnxruntime CPU
(the authority) and against dmlshim's own packed runs; with it (``dmlshim directml setup``; skipped
otherwise, as tests/test_directml_real.py is) samples are replayed on DirectML.dll. The inline bit
patterns below were captured from DirectML 1.15.4 on lavapipe (the stack of docs/directml-linux.md) by
running the two cases through ``run_sweep(..., out)`` and reading each folder's ``dml_output.npy``.
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from dmlshim.dml.enums import FeatureLevel
from dmlshim.dxdispatch.directml_sweep import FAIL, OBSERVED, PASS, _ort_output, run_sweep
from dmlshim.dxdispatch.host_stack import StackMissingError, load_stack
from dmlshim.dxdispatch.sweep_cases import CHECK, DUPLICATES, SweepCase, sweep_cases
from dmlshim.dxdispatch.sweep_strided import run_strided, same_bits, strided_cases
from dmlshim.dxdispatch.sweep_wide import float_specials, scatter_nd, wide_cases, wide_sweep
from dmlshim.errors import BadInputError
from dmlshim.kernels import compiled, execute
from dmlshim.translate import Status, TensorInfo, run_translation, translate_node

try:
    STACK = load_stack()
    _WHY = ""
except (StackMissingError, BadInputError) as exc:
    STACK = None
    _WHY = f"real DirectML is not set up here ({exc.message}; run `dmlshim directml setup`)"

real = pytest.mark.skipif(STACK is None, reason=_WHY)

# --- two cases whose DirectML output was captured bit for bit --------------------------------------

F16_DATA = [0x7E00, 0x7E15, 0x7C01, 0xFC2A, 0x7C00, 0xFC00, 0x8000, 0x0001, 0x83FF, 0x3C00]
F16_DATA += [0x0200, 0x7BFF, 0xC000, 0x0400, 0x7D55]
F16_INDICES = [[0, -1, 2, 1, -3], [2, 2, 0, -2, 1]]
# DirectML's GatherElements output (float16 bits): signalling NaN 0x7C01 and subnormals kept
F16_DIRECTML = [0x7E00, 0x7BFF, 0xC000, 0x83FF, 0x7C00, 0x0200, 0x7BFF, 0x7C01, 0x83FF, 0x3C00]

F64_DATA = [0x7FF8000000000000, 0x7FF0000000000001, 0xFFF000000000002A, 0x1, 0x800FFFFFFFFFFFFF, 1 << 63]
F64_UPDATES = [0x7FF4000000000123, 0x0008000000000000]
# DirectML's SCATTER_ND output at 2_1 (float64 as UINT32 pairs, low word first)
F64_DIRECTML_WORDS = [0x0, 0x7FF80000, 0x123, 0x7FF40000, 0x2A, 0xFFF00000, 0x1, 0x0, 0x0, 0x80000, 0x0]
F64_DIRECTML_WORDS += [0x80000000]


def _captured_cases() -> list[SweepCase]:
    h16 = np.array(F16_DATA, np.uint16).view(np.float16).reshape(3, 5)
    h64 = np.array(F64_DATA, np.uint64).view(np.float64)
    upd = np.array(F64_UPDATES, np.uint64).view(np.float64)
    return [
        SweepCase(
            "bits_ge_f16_fl6_4",
            "GatherElements",
            13,
            (h16, np.array(F16_INDICES, np.int64)),
            {"axis": 0},
            FeatureLevel.FL_6_4,
        ),
        SweepCase(
            "bits_snd_f64_fl2_1",
            "ScatterND",
            16,
            (h64, np.array([[1], [-2]], np.int64), upd),
            {},
            FeatureLevel.FL_2_1,
        ),
    ]


def _translate(case: SweepCase):  # type: ignore[no-untyped-def]
    names = [f"x{i}" for i in range(len(case.inputs))]
    node = helper.make_node(case.op_type, names, ["y"], name=case.name, **case.attrs)
    infos = [TensorInfo(tuple(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype)) for a in case.inputs]
    return translate_node(node, case.opset, infos, case.feature_level, name=case.name)


def test_dmlshim_gives_the_bits_directml_gave() -> None:
    ge, snd = _captured_cases()
    out = run_translation(_translate(ge), list(ge.inputs)).output
    assert out.view(np.uint16).reshape(-1).tolist() == F16_DIRECTML
    out = run_translation(_translate(snd), list(snd.inputs)).output
    assert out.view(np.uint32).reshape(-1).tolist() == F64_DIRECTML_WORDS


# --- the generators ---------------------------------------------------------------------------------


def test_wide_set_is_seeded_bounded_and_leaves_the_default_cases_alone() -> None:
    first, again = wide_cases(2024), wide_cases(2024)
    assert [c.name for c in first] == [c.name for c in again]
    assert all(
        all(same_bits(a, b) for a, b in zip(x.inputs, y.inputs, strict=True))
        for x, y in zip(first, again, strict=True)
    )
    assert len({c.name for c in first}) == len(first)
    assert 400 <= len(first) <= 700  # bounded: ~30 s more on the reference machine
    assert len(wide_cases(7)) == len(first)  # the same count for every seed
    default = sweep_cases(2024)
    combined = wide_sweep(2024)
    assert [c.name for c in combined[: len(default)]] == [c.name for c in default]
    ops = collections.Counter(c.op_type for c in first)
    assert set(ops) == {"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "Scatter"}
    # ranks up to 8, every data type, the low levels, the observations
    assert max(c.inputs[0].ndim for c in first) == 8
    assert {str(c.inputs[0].dtype) for c in first} >= {"float16", "int8", "uint16", "uint64", "bool"}
    assert {c.feature_level for c in first} >= {FeatureLevel.FL_2_1, FeatureLevel.FL_3_0}
    assert any(c.kind == DUPLICATES for c in first)
    assert max(c.inputs[0].size for c in first) >= 1 << 20


def _ort_sample() -> list[SweepCase]:
    cases = [c for c in wide_cases(2024) if c.kind == CHECK and c.inputs[0].size < 100_000]
    return cases[::5]


@pytest.mark.parametrize("case", _ort_sample(), ids=lambda c: c.name)
def test_wide_case_translation_equals_onnxruntime_cpu(case: SweepCase) -> None:
    t = _translate(case)
    if t.status is not Status.DML:
        pytest.skip(f"not a DirectML operator here: {[r.code for r in t.reasons]}")
    expected = _ort_output(case)
    assert expected is not None, "onnxruntime CPU refused a valid node"
    assert same_bits(run_translation(t, list(case.inputs)).output, expected)


@pytest.mark.parametrize("case", float_specials(2024), ids=lambda c: c.name)
def test_nan_payloads_and_subnormals_move_bit_for_bit(case: SweepCase) -> None:
    t = _translate(case)
    expected = _ort_output(case)
    assert expected is not None
    assert same_bits(run_translation(t, list(case.inputs)).output, expected)


def test_strided_descriptors_give_the_packed_answer() -> None:
    cases = strided_cases(2024, every=4)
    assert len(cases) >= 100
    assert all(c.strided for c in cases), [c.name for c in cases if not c.strided]
    layouts = [c.desc.input_tensor.strides for c in cases if c.desc.input_tensor.strides]
    assert any(0 in s for s in layouts)  # broadcasts are drawn
    index_types = {c.desc.indices_tensor.data_type.name for c in cases}
    assert index_types >= {"INT32", "INT64", "UINT32", "UINT64"}


@pytest.mark.skipif(not compiled.installed(), reason="numba is not installed (the `fast` extra)")
def test_large_wide_cases_compiled_kernels_equal_numpy() -> None:
    large = [c for c in wide_cases(2024) if c.name.startswith("w_large_")][::3]
    assert large
    for case in large:
        t = _translate(case)
        assert t.status is Status.DML, case.name
        bound = {b.binding: b for b in t.inputs}
        from dmlshim.dxdispatch.export_node import prepare_input

        arrays = {name: prepare_input(b, case.inputs[b.onnx_index]).array for name, b in bound.items()}
        a = execute(t.operator, arrays, kernels="numpy").output  # type: ignore[arg-type]
        b = execute(t.operator, arrays, kernels="compiled").output  # type: ignore[arg-type]
        assert same_bits(a, b), case.name


# --- real DirectML ----------------------------------------------------------------------------------


@real
def test_directml_gives_the_captured_bits(tmp_path: Path) -> None:
    cases = _captured_cases()
    report = run_sweep(cases, tmp_path / "sweep", stack=STACK)
    assert [o.verdict for o in report.outcomes] == [PASS, PASS], report.outcomes
    ge = np.load(tmp_path / "sweep" / cases[0].name / "dml_output.npy")
    assert ge.view(np.uint16).reshape(-1).tolist() == F16_DIRECTML
    snd = np.load(tmp_path / "sweep" / cases[1].name / "dml_output.npy")
    assert snd.reshape(-1).tolist() == F64_DIRECTML_WORDS


@real
def test_wide_sample_on_directml(tmp_path: Path) -> None:
    cases = [c for c in wide_cases(2024) if c.inputs[0].size < 100_000][::12]
    cases += float_specials(2024)[::4]
    report = run_sweep(cases, tmp_path / "sweep", stack=STACK, with_ort=False)
    failed = [f"{o.case}: {o.detail}" for o in report.outcomes if o.verdict == FAIL]
    assert not failed, failed
    assert report.counts()[PASS] >= len(cases) * 3 // 4


@real
def test_strided_sample_on_directml(tmp_path: Path) -> None:
    outcomes = run_strided(strided_cases(2024, every=12), tmp_path / "strided", stack=STACK)
    assert outcomes
    assert all(o.verdict == "pass" for o in outcomes), [o for o in outcomes if o.verdict != "pass"]


@real
def test_duplicate_writes_spread_over_workgroups_keep_one_of_their_writes(tmp_path: Path) -> None:
    # 40 000 tuples into 256x256, half of them repeats: DirectML does not say which write wins. On
    # lavapipe the last one in index order usually does, but not always once the writers sit in
    # different thread groups (seen: 2592 elements kept an earlier write, seed 2024). Each element
    # must still hold one of its own writes, and every element written once must be right.
    rng = np.random.default_rng(2024)
    case = scatter_nd(
        "dup_large", (256, 256), 20_000, 2, "float32", FeatureLevel.FL_6_4, rng, duplicates=20_000
    )
    report = run_sweep([case], tmp_path / "sweep", stack=STACK, with_ort=False)
    assert report.outcomes[0].verdict in (PASS, OBSERVED), report.outcomes[0]
    got = np.load(tmp_path / "sweep" / case.name / "dml_output.npy").reshape(-1)
    data, idx, upd = case.inputs
    flat = (idx[:, 0] % 256) * 256 + idx[:, 1] % 256
    writers: dict[int, list[float]] = collections.defaultdict(list)
    for position, value in zip(flat.tolist(), upd.tolist(), strict=True):
        writers[position].append(value)
    for position in range(got.size):
        allowed = writers.get(position) or [float(data.reshape(-1)[position])]
        assert float(got[position]) in allowed, position


# --- int64 indices beyond 32 bits (out of range: ONNX refuses them, DirectML reads the low word) -------

HIGH_DATA = np.arange(12, dtype=np.float32).reshape(4, 3) + 100
HIGH_INDICES = [2**32 + 1, 2**32 - 1, 2**31, -(2**31) - 1, -(2**32) + 1, 2**40 + 2, 1]
HIGH_INDICES += [-(2**32) - 2, 2**33 + 3, 2**32 - 2, -(2**32) - 4, -(2**32) - 3, -(2**63), 2**63 - 1]
# the row of HIGH_DATA DirectML's Gather(axis=0) returned for each index ("last": the buffer's last
# element, 111, in every position of the row: the documented clamp of a read past the buffer)
HIGH_ROWS_DIRECTML = [1, "last", "last", "last", "last", 2, 1, 2, 3, "last", 0, 1, "last", "last"]


def _low_word_model(index: int, size: int) -> int | str:
    """DirectML's reading, as measured: the size added once to a negative int64, then its low 32 bits
    (unsigned) address the dimension; past the buffer the read is the buffer's last element."""
    low = (index + (size if index < 0 else 0)) & 0xFFFFFFFF
    return low if low < size else "last"


def test_high_index_model_matches_the_capture_and_onnx_refuses_them() -> None:
    assert [_low_word_model(i, 4) for i in HIGH_INDICES] == HIGH_ROWS_DIRECTML
    case = SweepCase("high", "Gather", 13, (HIGH_DATA, np.array(HIGH_INDICES, np.int64)), {"axis": 0})
    assert _ort_output(case) is None  # onnxruntime CPU refuses them
    from dmlshim.errors import IndexOutOfRangeError

    with pytest.raises(IndexOutOfRangeError):
        run_translation(_translate(case), list(case.inputs))


@real
def test_directml_reads_the_low_word_of_int64_indices(tmp_path: Path) -> None:
    from dmlshim.dxdispatch.sweep_cases import OUT_OF_RANGE

    indices = np.array(HIGH_INDICES, np.int64)
    case = SweepCase("high", "Gather", 13, (HIGH_DATA, indices), {"axis": 0}, kind=OUT_OF_RANGE)
    run_sweep([case], tmp_path / "sweep", stack=STACK, with_ort=False)
    got = np.load(tmp_path / "sweep" / "high" / "dml_output.npy").reshape(len(HIGH_INDICES), 3)
    for index, row, values in zip(HIGH_INDICES, HIGH_ROWS_DIRECTML, got, strict=True):
        wanted = HIGH_DATA[row] if row != "last" else np.full(3, HIGH_DATA.reshape(-1)[-1])
        np.testing.assert_array_equal(values, wanted, err_msg=f"index {index}")


# --- the same nodes through onnxruntime-directml (the `directml` engine: the provider's own descriptors) --


def _batch_model(cases: list[SweepCase], opset: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """One model holding every case as an independent node (feeds as graph inputs: nothing folded)."""
    import onnx

    nodes, inputs, outputs, feeds = [], [], [], {}
    for j, case in enumerate(cases):
        names = [f"c{j}_x{i}" for i in range(len(case.inputs))]
        nodes.append(helper.make_node(case.op_type, names, [f"c{j}_y"], name=case.name, **case.attrs))
        for name, array in zip(names, case.inputs, strict=True):
            elem = helper.np_dtype_to_tensor_dtype(array.dtype)
            inputs.append(helper.make_tensor_value_info(name, elem, array.shape))
            feeds[name] = array
        outputs.append(onnx.ValueInfoProto(name=f"c{j}_y"))
    graph = helper.make_graph(nodes, "batch", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return model.SerializeToString(), feeds


def _ep_sample() -> list[SweepCase]:
    """Wide check cases onnxruntime-directml runs (no windows: its descriptor for them is refused)."""
    out = []
    for case in wide_cases(2024):
        if case.kind != CHECK or case.opset not in (13, 16) or case.inputs[0].size > 10_000:
            continue
        t = _translate(dataclasses.replace(case, feature_level=FeatureLevel.FL_5_0))
        if t.ort_placement == "DmlExecutionProvider" and not any(
            r.code == "STRIDED_WINDOW" for r in t.reasons
        ):
            out.append(case)
    return out[::4]


@real
def test_wide_sample_through_onnxruntime_directml_equals_dmlshim_and_onnxruntime_cpu() -> None:
    import onnxruntime as ort

    import dmlshim

    sample = _ep_sample()
    assert len(sample) >= 60
    for opset in (13, 16):
        cases = [c for c in sample if c.opset == opset]
        model, feeds = _batch_model(cases, opset)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        cpu = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"]).run(None, feeds)
        ours = dmlshim.InferenceSession(model).run(None, feeds)
        directml = dmlshim.InferenceSession(model, engine="directml").run(None, feeds)
        for case, c, o, d in zip(cases, cpu, ours, directml, strict=True):
            assert same_bits(np.asarray(o), np.asarray(c)), case.name
            assert same_bits(np.asarray(d), np.asarray(c)), case.name
