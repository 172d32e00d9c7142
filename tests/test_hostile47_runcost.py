"""Hostile cases against the cheaper per-run checks (issue 36, run cost): small gathers whose indices the
graph proves non-negative taken by shapes after their proved runs (``lean_after_proof``), scatter proofs
made once per shapes (a set, marks or a sort), a few indices proved as Python lists, outputs returned
without copies. Expected values and errors come from onnxruntime's CPU session (one thread) of the same
model; records from a DMLSHIM_FULL_CHECK=1 session."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from tests.oracle import IR_VERSION, ort_run, same_bits
from tests.scatter_given_cases import session_pair, untaken

RUNS_BEFORE = 8  # the proved runs (3), the lean check, then the steady lane


def _one_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return so


def _reference(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), _one_thread(), providers=["CPUExecutionProvider"])


def _topk_gather(
    op: str, data_shape: Sequence[int | str], *, k: int = 2, cast: int | None = None
) -> onnx.ModelProto:
    """``y = Neg(op(Neg(d), TopK(x, k).indices))`` along axis 1, the TopK over ``x`` (1, 8) while ``d``'s axis
    1 has ``data_shape[1]`` elements: indices past ``d``'s axis whenever x's largest sit past it."""
    nodes = [
        helper.make_node("Neg", ["d"], ["nd"]),
        helper.make_node("TopK", ["x", "k"], ["top", "topi"], axis=-1),
    ]
    idx = "topi"
    if cast is not None:
        nodes.append(helper.make_node("Cast", ["topi"], ["ci"], to=cast))
        idx = "ci"
    if op == "GatherND":
        nodes.append(helper.make_node("Unsqueeze", [idx, "last"], ["ui"]))
        nodes.append(helper.make_node(op, ["nd", "ui"], ["g"], batch_dims=1))
    else:
        nodes.append(helper.make_node(op, ["nd", idx], ["g"], axis=1))
    nodes.append(helper.make_node("Neg", ["g"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "topk_of_another",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("d", TensorProto.FLOAT, list(data_shape)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array([k], np.int64), "k"),
            numpy_helper.from_array(np.array([-1], np.int64), "last"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def _x(rng: np.random.Generator, past: int | None = None) -> np.ndarray:
    """Scores whose two largest sit in the first four places, or one at ``past``."""
    x = np.zeros((1, 8), np.float32)
    x[0, :4] = rng.permutation(4).astype(np.float32) + 1
    if past is not None:
        x[0, past] = 10
    return x


def _same_as_onnxruntime(session: Any, reference: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> None:
    try:
        want = reference.run(None, feeds)
    except Exception:  # onnxruntime refuses it: so must dmlshim
        with pytest.raises(Exception):  # noqa: B017
            session.run(None, feeds)
        return
    assert same_bits(session.run(None, feeds), want)


@pytest.mark.parametrize("op", ["Gather", "GatherElements", "GatherND"])
def test_topk_indices_of_a_longer_tensor_are_refused_after_the_proved_runs(op: str) -> None:
    """Indices proved non-negative but from a TopK over another, longer tensor: past the data's axis on
    some runs after the lean check took over; onnxruntime refuses them, and so must dmlshim."""
    model = _topk_gather(op, [1, 4])
    session, reference = dmlshim.InferenceSession(model.SerializeToString()), _reference(model)
    rng = np.random.default_rng(0)
    for _ in range(RUNS_BEFORE):
        _same_as_onnxruntime(session, reference, {"x": _x(rng), "d": rng.random((1, 4), np.float32)})
    check = session._engine._check
    assert check is not None and check.lean_runs > 0
    for past in (6, None, 4, None, 7, None):
        feeds = {"x": _x(rng, past), "d": rng.random((1, 4), np.float32)}
        _same_as_onnxruntime(session, reference, feeds)


def test_data_axis_shrinking_after_the_proved_runs() -> None:
    """The gathered data's axis changes length between runs after the proved ones (a symbolic dim)."""
    model = _topk_gather("Gather", [1, "n"])
    session, reference = dmlshim.InferenceSession(model.SerializeToString()), _reference(model)
    rng = np.random.default_rng(1)
    for _ in range(RUNS_BEFORE):
        _same_as_onnxruntime(session, reference, {"x": _x(rng), "d": rng.random((1, 8), np.float32)})
    for n, past in ((2, None), (8, 7), (4, 5), (3, None), (8, 6), (1, None), (5, 4), (6, 5)):
        _same_as_onnxruntime(session, reference, {"x": _x(rng, past), "d": rng.random((1, n), np.float32)})


@pytest.mark.parametrize("to", [TensorProto.INT32])
def test_topk_indices_cast_down(to: int) -> None:
    """TopK's indices cast to int32 (not proved by the graph: a Cast may wrap; int8/int16 indices are
    refused by onnxruntime's Gather)."""
    model = _topk_gather("Gather", [1, 8], cast=to)
    session, reference = dmlshim.InferenceSession(model.SerializeToString()), _reference(model)
    rng = np.random.default_rng(2)
    for past in (None, None, None, None, 7, None, 5, None):
        _same_as_onnxruntime(session, reference, {"x": _x(rng, past), "d": rng.random((1, 8), np.float32)})


def _argmax_model() -> onnx.ModelProto:
    """ArgMax (negative axis, select_last_index) indices gathering a feed; two more outputs: the feed
    itself and an Identity of the gather (the outputs-without-copies case)."""
    nodes = [
        helper.make_node("Neg", ["d"], ["nd"]),
        helper.make_node("ArgMax", ["x"], ["a"], axis=-1, keepdims=0, select_last_index=1),
        helper.make_node("Gather", ["nd", "a"], ["g"], axis=0),
        helper.make_node("Neg", ["g"], ["y"]),
        helper.make_node("Identity", ["g"], ["gi"]),
    ]
    graph = helper.make_graph(
        nodes,
        "argmax_gather",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6]),
            helper.make_tensor_value_info("d", TensorProto.FLOAT, ["n", 2]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "d", "gi", "nd")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def test_returned_outputs_mutated_in_place_change_nothing_else() -> None:
    """Every returned output overwritten between runs: the feeds, the next runs' outputs and other
    outputs of the same run stay onnxruntime's."""
    model = _argmax_model()
    session, reference = dmlshim.InferenceSession(model.SerializeToString()), _reference(model)
    rng = np.random.default_rng(3)
    for run in range(12):
        x = np.zeros((3, 6), np.float32)
        x[:, : 4 if run != 9 else 6] = 1  # ties: the last index wins
        feeds = {"x": x, "d": rng.random((5, 2), np.float32)}
        kept = {n: v.copy() for n, v in feeds.items()}
        if run == 9:  # index 5 past d's 5 rows
            _same_as_onnxruntime(session, reference, feeds)
            continue
        want = reference.run(None, kept)
        got = session.run(None, feeds)
        assert same_bits(got, want), run
        for a in got:
            a[...] = -7.0
        assert all(np.array_equal(feeds[n], kept[n]) for n in feeds), run
    assert session._engine._check is not None and session._engine._check.lean_runs > 0


def test_threads_on_one_session_with_other_shapes_and_bad_runs() -> None:
    """Threads run one session at once, the data axis changing and some TopK indices past it."""
    model = _topk_gather("GatherElements", [1, "n"])
    session, reference = dmlshim.InferenceSession(model.SerializeToString()), _reference(model)
    rng = np.random.default_rng(4)
    for _ in range(RUNS_BEFORE):
        _same_as_onnxruntime(session, reference, {"x": _x(rng), "d": rng.random((1, 8), np.float32)})
    failures: list[str] = []

    def worker(seed: int) -> None:
        local = np.random.default_rng(seed)
        for i in range(40):
            n = int(local.integers(4, 9))
            past = int(local.integers(4, 8)) if i % 3 == 0 else None
            feeds = {"x": _x(local, past), "d": local.random((1, n), np.float32)}
            try:
                want: list[Any] | None = ort_run(model, feeds)
            except Exception:
                want = None
            try:
                got: list[Any] | None = session.run(None, feeds)
            except Exception:
                got = None
            if (want is None) != (got is None) or (want is not None and not same_bits(got or [], want)):
                failures.append(f"seed {seed} run {i}: n={n} past={past}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_one_symbol_two_lengths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two graph inputs declare the same symbolic dim ``n`` (the first one, ``z``, names it for the shapes
    that follow from the feeds), fed with other lengths after the proved runs: onnxruntime accepts that;
    the gathered data's real axis decides, in values, errors and node records."""
    nodes = [
        helper.make_node("Neg", ["d"], ["nd"]),
        helper.make_node("TopK", ["x", "k"], ["top", "topi"], axis=-1),
        helper.make_node("GatherElements", ["nd", "topi"], ["g"], axis=1),
        helper.make_node("Neg", ["g"], ["y"]),
        helper.make_node("Neg", ["z"], ["nz"]),
    ]
    graph = helper.make_graph(
        nodes,
        "one_symbol",
        [
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, "n"]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, "n"]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "nz")],
        [numpy_helper.from_array(np.array([2], np.int64), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    default, full = session_pair(model, monkeypatch)
    reference = _reference(model)
    rng = np.random.default_rng(6)
    plan = [(8, 8)] * RUNS_BEFORE + [(8, 4), (8, 4), (4, 8), (4, 8), (8, 3), (8, 3), (8, 1), (8, 2)]
    for nz, nd in plan:
        x = np.zeros((1, 8), np.float32)
        x[0, :2] = (2, 1) if nd != 1 else (1, 2)
        feeds = {"z": np.ones((1, nz), np.float32), "x": x, "d": rng.random((1, nd), np.float32)}
        for session in (default, full):
            _same_as_onnxruntime(session, reference, feeds)
        if default.last_run_record is not None and full.last_run_record is not None:
            assert untaken(default.last_run_record).nodes == untaken(full.last_run_record).nodes


def test_constant_and_initializer_outputs_mutated_in_place() -> None:
    """Outputs that are an initializer, its Identity, a ConstantOfShape, a Constant and a gather of
    constants, each overwritten by the caller between runs: every next run gives onnxruntime's again."""
    w = np.random.default_rng(7).standard_normal((8, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Neg", ["x"], ["nx"]),
        helper.make_node("ArgMax", ["nx"], ["a"], axis=1, keepdims=0),
        helper.make_node("Gather", ["W", "a"], ["g"], axis=0),
        helper.make_node("Neg", ["g"], ["y"]),
        helper.make_node("Identity", ["W"], ["wi"]),
        helper.make_node(
            "ConstantOfShape", ["shp"], ["cz"], value=numpy_helper.from_array(np.array([2.5], np.float32))
        ),
        helper.make_node(
            "Constant", [], ["kc"], value=numpy_helper.from_array(np.arange(4, dtype=np.float32))
        ),
        helper.make_node("Gather", ["W", "ci"], ["gc"], axis=0),
    ]
    outs = ("y", "W", "wi", "cz", "kc", "gc", "g", "a")
    graph = helper.make_graph(
        nodes,
        "constant_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [
            helper.make_tensor_value_info(n, TensorProto.INT64 if n == "a" else TensorProto.FLOAT, None)
            for n in outs
        ],
        [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(np.array([2, 3], np.int64), "shp"),
            numpy_helper.from_array(np.array([1, 7], np.int64), "ci"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    session, reference = dmlshim.InferenceSession(model.SerializeToString()), _reference(model)
    rng = np.random.default_rng(8)
    for run in range(14):
        feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
        got = session.run(None, feeds)
        assert same_bits(got, reference.run(None, feeds)), run
        for a in got:
            a[...] = 77
        subset = ["gc", "W", "W", "cz"]
        got = session.run(subset, feeds)
        assert same_bits(got, reference.run(subset, feeds)), run
        for a in got:
            a[...] = 78
    assert session._engine._steady is not None


def test_range_from_an_argmax_start_past_the_axis_in_the_steady_lane() -> None:
    """Gather indices ``Range(s, s + 3, 1)`` with ``s`` an ArgMax (proved non-negative, always three long,
    so no new shape announces a bad run): onnxruntime CPU's default level turns Range -> Gather into a
    Slice that clips; with optimizations off it refuses the indices, as ONNX does, and so does dmlshim
    (docs/semantics.md, "A Gather of a Range") in the steady lane too."""
    nodes = [
        helper.make_node("ArgMax", ["x"], ["s"], axis=0, keepdims=0),
        helper.make_node("Add", ["s", "three"], ["lim"]),
        helper.make_node("Range", ["s", "lim", "one"], ["r"]),
        helper.make_node("Neg", ["d"], ["nd"]),
        helper.make_node("Gather", ["nd", "r"], ["g"], axis=1),
        helper.make_node("Neg", ["g"], ["y"]),
        helper.make_node("Gather", ["W", "fi"], ["g2"], axis=0),
        helper.make_node("Neg", ["g2"], ["y2"]),
    ]
    graph = helper.make_graph(
        nodes,
        "range_of_argmax",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [8]),
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 5]),
            helper.make_tensor_value_info("fi", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y2")],
        [
            numpy_helper.from_array(np.array(3, np.int64), "three"),
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.ones((4, 3), np.float32), "W"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    so = _one_thread()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    onnx_like = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(model.SerializeToString())
    d = np.arange(10, dtype=np.float32).reshape(2, 5)

    def feeds(at: int) -> dict[str, np.ndarray]:
        x = np.zeros(8, np.float32)
        x[at] = 1
        return {"x": x, "d": d, "fi": np.array([0, 3])}

    for run in range(10):
        assert same_bits(session.run(None, feeds(run % 3)), onnx_like.run(None, feeds(run % 3))), run
    assert session._engine._steady is not None
    for at in (4, 1, 3, 6, 0, 2):
        if at >= 3:  # s + 2 past the axis of 5
            with pytest.raises(dmlshim.IndexOutOfRangeError):
                session.run(None, feeds(at))
        _same_as_onnxruntime(session, onnx_like, feeds(at))


@pytest.mark.parametrize("op", ["Gather", "GatherElements", "GatherND"])
def test_ortvalues_and_io_binding_after_the_proved_runs(op: str) -> None:
    """The same bad and good runs through run_with_ort_values, an IOBinding and run, after the steady
    lane was made from plain runs: onnxruntime's values and refusals on every one."""
    model = _topk_gather(op, [1, "n"])
    session, reference = dmlshim.InferenceSession(model.SerializeToString()), _reference(model)
    rng = np.random.default_rng(9)
    for _ in range(RUNS_BEFORE):
        _same_as_onnxruntime(session, reference, {"x": _x(rng), "d": rng.random((1, 8), np.float32)})
    for n, past in ((8, None), (4, 6), (8, 7), (4, None), (3, None), (8, 5)):
        feeds = {"x": _x(rng, past), "d": rng.random((1, n), np.float32)}
        try:
            want: list[Any] | None = reference.run(None, feeds)
        except Exception:
            want = None
        values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
        binding = session.io_binding()
        for k, v in feeds.items():
            binding.bind_cpu_input(k, v)
        binding.bind_output("y")
        for how in ("ort_values", "io_binding", "run"):
            if want is None:
                with pytest.raises(Exception):  # noqa: B017
                    _run_by(session, how, feeds, values, binding)
            else:
                assert same_bits(_run_by(session, how, feeds, values, binding), want), (n, past, how)


def _run_by(
    session: Any, how: str, feeds: dict[str, np.ndarray], values: dict[str, Any], binding: Any
) -> list[Any]:
    if how == "ort_values":
        return [o.numpy() for o in session.run_with_ort_values(None, values)]
    if how == "io_binding":
        session.run_with_iobinding(binding)
        return list(binding.copy_outputs_to_cpu())
    return list(session.run(None, feeds))


def test_empty_outer_dim_with_indices_past_the_axis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gather along axis 1 of a (0, 4) data after the proved runs: nothing is selected, yet onnxruntime
    still refuses a TopK index of 6 or 7; so do the default and the full-check sessions."""
    model = _topk_gather("Gather", ["b", 4])
    default, full = session_pair(model, monkeypatch)
    reference = _reference(model)
    rng = np.random.default_rng(10)
    for _ in range(RUNS_BEFORE):
        feeds = {"x": _x(rng), "d": rng.random((2, 4), np.float32)}
        for session in (default, full):
            _same_as_onnxruntime(session, reference, feeds)
    for b, past in ((0, 6), (0, None), (2, 6), (0, 7), (3, None)):
        feeds = {"x": _x(rng, past), "d": rng.random((b, 4), np.float32)}
        for session in (default, full):
            _same_as_onnxruntime(session, reference, feeds)
