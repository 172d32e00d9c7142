"""Hostile round 12: the lean check (issue 36, item 2) fed as a hostile program feeds it.

Runs alternate between feeds every per-run proof takes and feeds that fail them (negative, repeated,
empty indices, other shapes), given as views, non-contiguous, read-only, Fortran-ordered, zero-stride,
big-endian arrays, arrays changed in place between runs, OrtValues bound through io_binding with bound
outputs fed back; from several threads on a session that holds one onnxruntime session at a time. Every
output is compared bit for bit with onnxruntime's CPU session of the same model on the same feeds.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import dmlshim
from dmlshim.execute.engines import partitioned
from tests.oracle import IR_VERSION


def _model() -> bytes:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Gather", ["a", "gidx"], ["g"], axis=0),
        helper.make_node("Sigmoid", ["g"], ["h"]),
        helper.make_node("Gather", ["h", "gidx2"], ["g2"], axis=1),
        helper.make_node("Neg", ["x"], ["nx"]),
        helper.make_node("ScatterND", ["nx", "sidx", "upd"], ["s"]),
        helper.make_node("Add", ["g2", "one"], ["y"]),
        helper.make_node("Exp", ["s"], ["es"]),
        helper.make_node("Shape", ["h"], ["hs"]),
        helper.make_node("Gather", ["w", "hs"], ["wg"], axis=0),
    ]
    inputs = [
        helper.make_tensor_value_info("x", T.FLOAT, ["n", 64]),
        helper.make_tensor_value_info("gidx", T.INT64, ["m"]),
        helper.make_tensor_value_info("gidx2", T.INT64, ["k"]),
        helper.make_tensor_value_info("sidx", T.INT64, ["p", 1]),
        helper.make_tensor_value_info("upd", T.FLOAT, ["p", 64]),
    ]
    outputs = [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "es", "h", "wg")]
    inits = [
        helper.make_tensor("one", T.FLOAT, [], [1.0]),
        helper.make_tensor("w", T.FLOAT, [100, 3], np.arange(300, dtype=np.float32).tolist()),
    ]
    graph = helper.make_graph(nodes, "lean_hostile", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    return model.SerializeToString()


def _reference(data: bytes) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _layout(a: np.ndarray, kind: int) -> np.ndarray:
    if kind == 1:
        b = a.copy()
        b.setflags(write=False)
        return b
    if kind == 2:  # every other row of a larger array
        big = np.zeros((a.shape[0] * 2, *a.shape[1:]), a.dtype)
        big[::2] = a
        return big[::2]
    if kind == 3:
        return np.asfortranarray(a)
    if kind == 4:
        return a[::-1][::-1]
    return a


def _feeds(rng: np.random.Generator, run: int) -> dict[str, np.ndarray]:
    proved = run < 8 or run % 2 == 1
    x = (rng.standard_normal((8, 64)) * 3).astype(np.float32)
    gidx = [np.array([1, 3, 5, 7]), np.array([-1, 3, -8]), np.array([3, 3, 3]), np.zeros(0, np.int64)]
    sidx = np.array([[1], [4]]) if proved or rng.random() < 0.5 else np.array([[-1], [2], [5]])
    if not proved and rng.random() < 0.5:
        x = x[: int(rng.integers(6, 8))]
    return {
        "x": x,
        "gidx": gidx[0 if proved else int(rng.integers(0, 4))].astype(np.int64),
        "gidx2": np.array([0, 63, 5]) if proved or rng.random() < 0.5 else np.array([-1, -64, 5, 5]),
        "sidx": sidx.astype(np.int64),
        "upd": rng.standard_normal((sidx.shape[0], 64)).astype(np.float32),
    }


def _same(ours: list[Any], expected: list[Any]) -> bool:
    return all(
        a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        for a, b in zip(ours, expected, strict=True)
    )


@pytest.mark.parametrize("keep_full", [True, False])
def test_runs_alternating_proved_and_refused_feeds_in_hostile_layouts(
    keep_full: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not keep_full:
        monkeypatch.setattr(partitioned, "KEEP_FULL_MAX_BYTES", -1)
    data = _model()
    reference, session = _reference(data), dmlshim.InferenceSession(data)
    rng = np.random.default_rng(1)
    for run in range(30):
        kind = 0 if run < 8 else int(rng.integers(0, 5))
        feeds = {k: _layout(v, kind) for k, v in _feeds(rng, run).items()}
        names = None if run % 4 else ["es", "y"]
        try:
            expected = reference.run(names, feeds)
        except Exception as refused:
            with pytest.raises(type(refused)):
                session.run(names, feeds)
            continue
        assert _same(session.run(names, feeds), expected), run
    assert session.engine._check.lean_runs > 0


def test_big_endian_feeds_are_read_as_onnxruntime_reads_them() -> None:
    """onnxruntime takes a big-endian float32 array for a float input and reads its bytes in the machine's
    order (1.0 becomes 4.6e-41); dmlshim refused it, on the full and on the lean check alike."""
    data = _model()
    reference, session = _reference(data), dmlshim.InferenceSession(data)
    rng = np.random.default_rng(2)
    feeds = _feeds(rng, 0)
    for run in range(12):
        given = dict(feeds)
        if run >= 8:
            name = ("x", "upd")[run % 2]
            given[name] = feeds[name].astype(">f4")
        assert _same(session.run(None, given), reference.run(None, given)), run
    assert session.engine._check.lean_runs > 0


def test_arrays_changed_in_place_and_aliasing_each_other() -> None:
    data = _model()
    reference, session = _reference(data), dmlshim.InferenceSession(data)
    rng = np.random.default_rng(5)
    feeds = _feeds(rng, 0)
    for run in range(24):
        if run >= 8:
            feeds["gidx"][:] = [[7, 6, 5, 4], [-1, -2, 0, 1], [2, 2, 2, 2], [1, 3, 5, 7]][run % 4]
            feeds["sidx"][:] = [[4], [4]] if run % 3 == 0 else [[1], [4]]
            feeds["x"][:] = rng.standard_normal((8, 64)).astype(np.float32)
        assert _same(session.run(None, feeds), reference.run(None, feeds)), run
        if run % 2 == 0:
            shared = np.array([1, 3, 5, 7]) if run % 4 else np.array([3, 1, 4, 0])
            aliased = dict(feeds, gidx=shared, gidx2=shared[:3], sidx=shared[:2].reshape(2, 1))
            assert _same(session.run(None, aliased), reference.run(None, aliased)), run


def _bound_runs(session: Any, x: np.ndarray, feeds: dict[str, np.ndarray]) -> list[list[np.ndarray]]:
    """Runs through io_binding with bound outputs, each run's 'h' (an OrtValue) fed as the next 'x'."""
    results, previous = [], None
    for run in range(6):
        binding = session.io_binding()
        given = previous if previous is not None else ort.OrtValue.ortvalue_from_numpy(x)
        if run % 2 == 0:
            binding.bind_ortvalue_input("x", given)
        else:
            binding.bind_cpu_input("x", given.numpy())
        for name in ("gidx", "gidx2", "sidx", "upd"):
            binding.bind_cpu_input(name, feeds[name])
        if run % 3 == 0:
            binding.bind_output("h", "cpu")
        else:
            binding.bind_ortvalue_output("h", ort.OrtValue.ortvalue_from_shape_and_type([4, 64], np.float32))
        binding.bind_output("y")
        binding.bind_output("es")
        session.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        results.append([o.numpy().copy() for o in outputs])
        previous = outputs[0]
        feeds = dict(feeds, gidx=np.array([1, 3, 0, 2]), sidx=np.array([[1], [2]]))
    return results


def test_bound_outputs_fed_back_as_inputs() -> None:
    data = _model()
    reference, session = _reference(data), dmlshim.InferenceSession(data)
    rng = np.random.default_rng(2)
    feeds = _feeds(rng, 0)
    for _ in range(8):
        session.run(None, feeds)
    ours, expected = _bound_runs(session, feeds["x"], feeds), _bound_runs(reference, feeds["x"], feeds)
    for run, (a, b) in enumerate(zip(ours, expected, strict=True)):
        assert _same(a, b), run


def test_threads_on_a_session_holding_one_onnxruntime_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitioned, "KEEP_FULL_MAX_BYTES", -1)
    data = _model()
    reference, session = _reference(data), dmlshim.InferenceSession(data)
    rng = np.random.default_rng(3)
    feeds = [_feeds(rng, run if run < 8 else 8 + (run % 3 != 0)) for run in range(88)]
    expected = []
    for f in feeds:
        try:
            expected.append(reference.run(None, f))
        except Exception:
            expected.append(None)
    for f in feeds[:8]:
        session.run(None, f)
    wrong: list[int] = []

    def worker(first: int) -> None:
        for j in range(8 + first, len(feeds), 4):
            try:
                ours = session.run(None, feeds[j])
            except Exception:
                ours = None
            if (ours is None) != (expected[j] is None) or (ours is not None and not _same(ours, expected[j])):
                wrong.append(j)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def _elements_model() -> bytes:
    """GatherElements, GatherND (batch_dims 1), ScatterElements add and max, and a GatherElements on
    indices computed from fed ones."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("GatherElements", ["a", "ge"], ["g1"], axis=1),
        helper.make_node("Sigmoid", ["g1"], ["s1"]),
        helper.make_node("GatherND", ["a", "gn"], ["g2"], batch_dims=1),
        helper.make_node("Tanh", ["g2"], ["s2"]),
        helper.make_node("Abs", ["x"], ["ax"]),
        helper.make_node("ScatterElements", ["ax", "se", "upd"], ["sc"], axis=1, reduction="add"),
        helper.make_node("Exp", ["sc"], ["y3"]),
        helper.make_node("ScatterElements", ["ax", "se", "upd"], ["sm"], axis=1, reduction="max"),
        helper.make_node("Neg", ["sm"], ["y4"]),
        helper.make_node("Add", ["ge", "one"], ["ge1"]),
        helper.make_node("GatherElements", ["a", "ge1"], ["g5"], axis=1),
        helper.make_node("Cos", ["g5"], ["y5"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", T.FLOAT, [4, 16]),
        helper.make_tensor_value_info("ge", T.INT64, [4, "k"]),
        helper.make_tensor_value_info("gn", T.INT64, [4, "j", 1]),
        helper.make_tensor_value_info("se", T.INT64, [4, "p"]),
        helper.make_tensor_value_info("upd", T.FLOAT, [4, "p"]),
    ]
    outputs = [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("s1", "s2", "y3", "y4", "y5")]
    graph = helper.make_graph(
        nodes, "elements", inputs, outputs, [helper.make_tensor("one", T.INT64, [], [1])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    return model.SerializeToString()


@pytest.mark.parametrize("keep_full", [True, False])
def test_element_gathers_and_reducing_scatters_alternating(
    keep_full: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not keep_full:
        monkeypatch.setattr(partitioned, "KEEP_FULL_MAX_BYTES", -1)
    data = _elements_model()
    reference, session = _reference(data), dmlshim.InferenceSession(data)
    rng = np.random.default_rng(7)
    for run in range(30):
        ge, gn = rng.integers(0, 15, (4, 3)), rng.integers(0, 16, (4, 2, 1))
        se = np.arange(12).reshape(4, 3)
        if run >= 8 and run % 2 == 0:
            kind = run % 6
            if kind == 0:
                ge[0, 0] = -1
            elif kind == 2:
                gn[1, 0, 0] = -16
            else:
                se[2, :] = 5  # one place added to three times
        feeds = {
            "x": rng.standard_normal((4, 16)).astype(np.float32),
            "ge": ge,
            "gn": gn,
            "se": se,
            "upd": rng.standard_normal((4, 3)).astype(np.float32),
        }
        assert _same(session.run(None, feeds), reference.run(None, feeds)), run
    assert session.engine._check.lean_runs > 0
