"""Hostile cases for the given scatters, session side: every schema, feature levels and index modes, runs
alternating between clean, repeated and negative indices, full check, validate, other engines, IO binding
(see test_scatter_given_hostile_h47.py for what every case checks)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.plan import steps
from dmlshim.execute.plan.steps import NOTE_UNTOUCHED_GIVEN
from dmlshim.execute.proofs.gather_given import NOTE_GATHER_GIVEN
from tests.oracle import (
    IR_VERSION,
    ort_run,
)
from tests.scatter_given_cases import (
    D,
    H,
    L,
    cache_feeds,
    index_array,
    note_codes,
    one_thread,
    run_pair,
    same_bits_as,
    scatter_model,
    scatter_node,
    session_pair,
    untaken,
)


@pytest.mark.parametrize(
    ("op", "opset"),
    [
        ("Scatter", 9),
        ("Scatter", 10),
        ("ScatterElements", 11),
        ("ScatterElements", 13),
        ("ScatterElements", 16),
        ("ScatterND", 11),
        ("ScatterND", 13),
        ("ScatterND", 16),
    ],
)
def test_every_schema(op: str, opset: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opset 9/10 Scatter and each ScatterElements/ScatterND schema: taken when distinct, verified (and
    the repeats counted) when not, taken again after."""
    rng = np.random.default_rng(opset)
    data = rng.standard_normal((H, L, D)).astype(np.float32)
    if op == "ScatterND":
        model = scatter_model(op, TensorProto.FLOAT, ([H, L, D], [4, 2], [4, D]), opset=opset)
        distinct = {
            "data": data,
            "idx": np.array([[0, 1], [1, 1], [2, 5], [3, 7]], np.int64),
            "upd": rng.standard_normal((4, D)).astype(np.float32),
        }
        repeated = dict(distinct, idx=np.array([[0, 1], [0, 1], [2, 5], [3, 7]], np.int64))
        repeats = 1
    else:
        model = scatter_model(
            op, TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1}, opset=opset
        )
        distinct = {
            "data": data,
            "idx": index_array([17, 3]),
            "upd": rng.standard_normal((H, 2, D)).astype(np.float32),
        }
        repeated = dict(distinct, idx=index_array([3, 3]))
        repeats = H * D
    pair = session_pair(model, monkeypatch)
    assert note_codes(run_pair(pair, model, distinct)) == [NOTE_GATHER_GIVEN]
    node = run_pair(pair, model, repeated)
    assert NOTE_GATHER_GIVEN not in note_codes(node) and node.duplicate_indices == repeats
    assert note_codes(run_pair(pair, model, distinct)) == [NOTE_GATHER_GIVEN]


# --- sessions: consumers, feature levels, index modes, run sequences ----------------------------------


def test_output_read_by_gathers_and_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scatter's output is a graph output and read by a GatherElements and a Gather (emulated too),
    one of them read on by onnxruntime."""
    extra = [
        helper.make_node("GatherElements", ["present", "gidx"], ["g1"], name="gather_elements", axis=1),
        helper.make_node("Gather", ["present", "g0"], ["g2"], name="gather", axis=1),
        helper.make_node("Neg", ["g1"], ["g1n"], name="neg_after"),
    ]
    inputs = [
        helper.make_tensor_value_info("gidx", TensorProto.INT64, [H, L, D]),
        helper.make_tensor_value_info("g0", TensorProto.INT64, [L]),
    ]
    model = scatter_model(
        "ScatterElements",
        TensorProto.FLOAT,
        ([H, L, D], [H, 2, D], [H, 2, D]),
        {"axis": 1},
        extra=extra,
        extra_inputs=inputs,
        outputs=("present", "total", "g1n", "g2"),
    )
    pair = session_pair(model, monkeypatch)
    for seed, positions in enumerate([[3, 4]] * 5 + [[4, 4], [1, 2]]):
        rng = np.random.default_rng(seed)
        feeds = dict(
            cache_feeds(positions, seed), gidx=rng.integers(0, L, (H, L, D)), g0=rng.integers(0, L, L)
        )
        node = run_pair(pair, model, feeds)
        assert (NOTE_GATHER_GIVEN in note_codes(node)) == (positions[0] != positions[1])


@pytest.mark.parametrize("feature_level", ["1_0", "2_1", "3_0", "6_4"])
@pytest.mark.parametrize("index_mode", ["error", "clamp"])
def test_feature_levels_and_index_modes(
    feature_level: str, index_mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where DirectML lacks negative indices (before 3.0) and with clamping: distinct non-negative runs
    taken; negative and repeated runs verified, and recorded as the full check records them."""
    kwargs = {"feature_level": feature_level, "index_mode": index_mode}
    rng = np.random.default_rng(15)
    for index_elem in (TensorProto.INT32, TensorProto.INT64):
        dtype = helper.tensor_dtype_to_np_dtype(index_elem)
        model = scatter_model(
            "ScatterElements",
            TensorProto.FLOAT,
            ([H, L, D], [H, 2, D], [H, 2, D]),
            {"axis": 1},
            index_elem=index_elem,
        )
        pair = session_pair(model, monkeypatch, **kwargs)
        for positions in ([3, 4], [-1, 4], [4, 4], [-252, 4], [3, 4]):
            feeds = dict(cache_feeds(positions, 1), idx=index_array(positions, dtype))
            node = run_pair(pair, model, feeds)
            clean = min(positions) >= 0 and len(set(positions)) == 2
            assert (NOTE_GATHER_GIVEN in note_codes(node)) == clean
            assert node.negative_indices == (min(positions) < 0)
    nd = scatter_model("ScatterND", TensorProto.FLOAT, ([H, L, D], [4, 2], [4, D]))
    pair = session_pair(nd, monkeypatch, **kwargs)
    for tuples in (
        [[0, 1], [1, 1], [2, 1], [3, 1]],
        [[0, -1], [1, 1], [2, 1], [3, 1]],
        [[0, 1], [0, 1], [2, 1], [3, 1]],
        [[0, 1], [1, 1], [2, 1], [3, 1]],
    ):
        feeds = {
            "data": rng.standard_normal((H, L, D)).astype(np.float32),
            "idx": np.array(tuples, np.int64),
            "upd": rng.standard_normal((4, D)).astype(np.float32),
        }
        node = run_pair(pair, nd, feeds)
        if node.placement == "dml":
            assert (NOTE_GATHER_GIVEN in note_codes(node)) == (tuples[0] == [0, 1] and tuples[1] == [1, 1])


def test_runs_alternating_between_clean_repeated_negative_and_new_shapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Distinct then repeated then negative then distinct, more repeated runs than the proof runs, new
    cache lengths with wrapped repeats, and a run under the verified size: every run's record the full
    check's, and the untouched elements taken only after the proof runs of the same shapes."""
    model = scatter_model(
        "ScatterElements", TensorProto.FLOAT, ([H, "len", D], [H, "t", D], [H, "t", D]), {"axis": 1}
    )
    pair = session_pair(model, monkeypatch)
    runs: list[tuple[list[int], int, list[str]]] = [
        ([1, 2], L, [NOTE_GATHER_GIVEN]),
        ([5, 5], L, []),
        ([-1, 3], L, []),
        ([7, 8], L, [NOTE_GATHER_GIVEN]),
        ([5, 5], L, []),
        ([5, 5], L, [NOTE_UNTOUCHED_GIVEN]),  # the 3 proof runs of these shapes are done
        ([6, 6], L, [NOTE_UNTOUCHED_GIVEN]),
        ([9, 10], 300, [NOTE_GATHER_GIVEN]),
        ([-300, 0], 300, []),  # a repeat through a negative index: new shapes prove again
        ([4, 4], 300, []),
        ([299, 0], 300, [NOTE_GATHER_GIVEN]),
        ([0], 100, []),  # 200 KiB: computed and compared
    ]
    for seed, (positions, length, notes) in enumerate(runs):
        node = run_pair(pair, model, cache_feeds(positions, seed, length))
        assert note_codes(node) == notes, (positions, length)
        assert node.duplicate_indices == (
            H * D if len(set(np.array(positions) % length)) < len(positions) else 0
        )


def test_full_check_never_takes_and_always_runs_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = steps.verify_translation

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(steps, "verify_translation", counting)
    model = scatter_model(
        "ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 1, D], [H, 1, D]), {"axis": 1}
    )
    default, full = session_pair(model, monkeypatch)
    for seed in range(steps.PROVE_RUNS + 2):
        feeds = cache_feeds([seed + 1], seed)
        want = ort_run(model, feeds)
        before = len(calls)
        same_bits_as(default.run(None, dict(feeds)), want)
        assert len(calls) == before and note_codes(scatter_node(default)) == [NOTE_GATHER_GIVEN]
        same_bits_as(full.run(None, dict(feeds)), want)
        assert len(calls) == before + 1 and scatter_node(full).notes == ()
        assert full.last_run_record.path == "whole-model check"


def test_validate_verifies_with_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    from dmlshim.validate.verdict import validate_model

    taken: list[bool] = []
    verified: list[int] = []
    real_given, real_verify = steps.scatter_output_is_given, steps.verify_translation

    def given(*args: Any) -> bool:
        taken.append(real_given(*args))
        return taken[-1]

    def verify(*args: Any, **kwargs: Any) -> Any:
        verified.append(1)
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(steps, "scatter_output_is_given", given)
    monkeypatch.setattr(steps, "verify_translation", verify)
    model = scatter_model(
        "ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1}
    )
    report = validate_model(model, inputs=cache_feeds([3, 4], 0))
    assert report.match
    assert verified and not any(taken)


@pytest.mark.parametrize("engine", ["cpu", "customop"])
def test_other_engines_are_unaffected(engine: str) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model = scatter_model(
        "ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1}
    )
    session = dmlshim.InferenceSession(model, sess_options=one_thread(), engine=engine)
    for seed in range(steps.PROVE_RUNS + 1):
        feeds = cache_feeds([seed, seed + 1], seed)
        same_bits_as(session.run(None, dict(feeds)), ort_run(model, feeds))
        node = scatter_node(session)
        assert session.last_run_record.path != "whole-model check" and node.notes == ()
        assert node.placement == ("onnxruntime-cpu" if engine == "cpu" else "dml")


def test_runs_alternating_with_the_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without onnxruntime's fusions a session alternates between the partitioned steps and the check on
    its first runs, then keeps the faster (for the full check, which proves every run, that can be the
    partitions): whichever answers, each run's node records are the full check's."""
    so = one_thread()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = scatter_model(
        "ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1}
    )
    default = dmlshim.InferenceSession(model, sess_options=so)
    with monkeypatch.context() as m:
        m.setenv("DMLSHIM_FULL_CHECK", "1")
        full = dmlshim.InferenceSession(model, sess_options=so)
    paths = set()
    for seed in range(10):
        positions = [5, 5] if seed % 3 == 0 else [3, 4]
        feeds = cache_feeds(positions, seed)
        want = ort_run(model, feeds)
        for session in (default, full):
            same_bits_as(session.run(None, dict(feeds)), want)
        paths.add(default.last_run_record.path)
        assert untaken(default.last_run_record).nodes == untaken(full.last_run_record).nodes
        node = scatter_node(default)
        taken = NOTE_GATHER_GIVEN in note_codes(node)
        assert taken == (positions == [3, 4] and default.last_run_record.path == "whole-model check")
    assert paths == {"partitioned", "whole-model check"}


def test_io_binding_with_an_ortvalue_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Indices bound as an OrtValue and outputs bound to CPU memory: taken when distinct, as with run."""
    model = scatter_model(
        "ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1}
    )
    session = dmlshim.InferenceSession(model, sess_options=one_thread())
    for seed, positions in enumerate([[6, 6], [3, 4], [6, 6], [3, 4]]):
        feeds = cache_feeds(positions, seed)
        binding = session.io_binding()
        binding.bind_cpu_input("data", feeds["data"])
        binding.bind_ortvalue_input("idx", ort.OrtValue.ortvalue_from_numpy(feeds["idx"]))
        binding.bind_cpu_input("upd", feeds["upd"])
        binding.bind_output("present")
        binding.bind_output("total")
        session.run_with_iobinding(binding)
        same_bits_as(binding.copy_outputs_to_cpu(), ort_run(model, feeds))
        node = scatter_node(session)
        assert session.last_run_record.path == "whole-model check"
        assert (NOTE_GATHER_GIVEN in note_codes(node)) == (positions == [3, 4])
        assert node.duplicate_indices == (H * D if positions == [6, 6] else 0)


def test_indices_made_by_an_emulated_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scatter's indices are a Gather's output (a constant, non-negative gather index): each line along
    the axis a permutation, taken; one repeat planted in one line, verified and counted."""
    nodes = [
        helper.make_node("Neg", ["data"], ["past"], name="before"),
        helper.make_node("Gather", ["choices", "which"], ["idx"], name="pick", axis=0),
        helper.make_node("ScatterElements", ["past", "idx", "upd"], ["present"], name="update", axis=1),
        helper.make_node("Identity", ["present"], ["total"], name="after"),
    ]
    graph = helper.make_graph(
        nodes,
        "picked",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [H, L, D]),
            helper.make_tensor_value_info("choices", TensorProto.INT64, [2, H, L, D]),
            helper.make_tensor_value_info("upd", TensorProto.FLOAT, [H, L, D]),
        ],
        [onnx.ValueInfoProto(name="present"), onnx.ValueInfoProto(name="total")],
        initializer=[onnx.numpy_helper.from_array(np.array(1, np.int64), "which")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    pair = session_pair(model, monkeypatch)
    for seed, repeat in enumerate([False, True, False, False, True, False]):
        rng = np.random.default_rng(seed)
        lines = np.stack([rng.permutation(L) for _ in range(H * D)]).reshape(H, D, L).transpose(0, 2, 1)
        choices = np.stack([np.zeros_like(lines), lines]).astype(np.int64)
        if repeat:
            choices[1, 2, 1, 9] = choices[1, 2, 0, 9]
        feeds = {
            "data": rng.standard_normal((H, L, D)).astype(np.float32),
            "choices": choices,
            "upd": rng.standard_normal((H, L, D)).astype(np.float32),
        }
        node = run_pair(pair, model, feeds)
        assert (NOTE_GATHER_GIVEN in note_codes(node)) == (not repeat)
        assert node.duplicate_indices == int(repeat)


def test_bool_bytes_other_than_one_are_copied_as_onnxruntime_copies_them() -> None:
    """A bool feed whose bytes are not 0/1 (a uint8 array viewed as bool): onnxruntime copies the bytes,
    and so does DirectML, which moves bool as UINT8 (found by h47: the kernels' output was converted back
    with astype(bool), which writes 1)."""
    model = scatter_model("ScatterElements", TensorProto.BOOL, ([64, 64], [64, 2], [64, 2]), {"axis": 1})
    rng = np.random.default_rng(16)
    feeds = {
        "data": rng.integers(0, 3, (64, 64)).astype(np.uint8).view(np.bool_),
        "idx": np.tile(np.array([3, 9], np.int64), (64, 1)),
        "upd": np.full((64, 2), 2, np.uint8).view(np.bool_),
    }
    session = dmlshim.InferenceSession(model, sess_options=one_thread())
    same_bits_as(session.run(None, dict(feeds)), ort_run(model, feeds))


@pytest.mark.parametrize(
    ("op", "index_elem", "opset"),
    [
        ("ScatterElements", TensorProto.UINT32, 18),
        ("ScatterElements", TensorProto.UINT64, 13),
        ("Scatter", TensorProto.UINT64, 10),
        ("ScatterND", TensorProto.INT32, 18),
    ],
)
def test_index_types_onnx_refuses_are_refused(op: str, index_elem: int, opset: int) -> None:
    """Unsigned indices (and int32 for ScatterND) are not ONNX: onnxruntime refuses the model, so does
    dmlshim, naming the node and the type, before any run could take an output."""
    nd = op == "ScatterND"
    shapes = ([H, L, D], [4, 2] if nd else [H, 2, D], [4, D] if nd else [H, 2, D])
    model = scatter_model(
        op, TensorProto.FLOAT, shapes, {} if nd else {"axis": 1}, opset=opset, index_elem=index_elem
    )
    with pytest.raises(Exception, match="INVALID_GRAPH"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(
        dmlshim.BadModelError,
        # onnxruntime's refusal first, then dmlshim's reading of it naming the node, op and index type
        match=f"INVALID_GRAPH.*tensor\\({helper.tensor_dtype_to_string(index_elem).split('.')[-1].lower()}\\)"
        f".*node 'update'; op {op};",
    ):
        dmlshim.InferenceSession(model)
