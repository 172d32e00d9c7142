"""Hostile round 49b, the drop-in: legal but unusual uses of onnxruntime's Python API on gather/scatter
models, each run on onnxruntime and on dmlshim (every gather/scatter node emulated); values and exception
classes must be onnxruntime's."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim

vi = helper.make_tensor_value_info
PROVIDER = str(Path(__file__).resolve().parents[1] / "provider")
SHRINK = "memory.enable_memory_arena_shrinkage"


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: tuple[Any, ...] = ()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    return model.SerializeToString()


MODELS: dict[str, bytes] = {
    "gather": _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=1, name="g")],
        [vi("x", T.FLOAT, ["a", "b", "c"]), vi("i", T.INT64, None)],
        [vi("y", T.FLOAT, None)],
    ),
    "gather_elements": _model(
        [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0, name="ge")],
        [vi("x", T.FLOAT, ["a", "b"]), vi("i", T.INT32, ["c", "d"])],
        [vi("y", T.FLOAT, ["c", "d"])],
    ),
    "gather_nd": _model(
        [helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd")],
        [vi("x", T.FLOAT, ["a", "b", "c"]), vi("i", T.INT64, ["n", 2])],
        [vi("y", T.FLOAT, None)],
    ),
    "scatter_elements": _model(
        [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="add", name="se")],
        [vi("x", T.FLOAT, ["a", "b"]), vi("i", T.INT64, ["a", "k"]), vi("u", T.FLOAT, ["a", "k"])],
        [vi("y", T.FLOAT, ["a", "b"])],
    ),
    "scatter_nd": _model(
        [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="snd")],
        [vi("x", T.FLOAT, ["a", "b"]), vi("i", T.INT64, ["n", 1]), vi("u", T.FLOAT, ["n", "b"])],
        [vi("y", T.FLOAT, ["a", "b"])],
    ),
}

X = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


FEEDS: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "reversed_strided_view": ("gather", lambda: {"x": X[:, ::2, ::-1], "i": np.array([1, 0, -1])}),
    "fortran": ("gather", lambda: {"x": np.asfortranarray(X), "i": np.asfortranarray([[3, 0], [-4, 2]])}),
    "read_only": ("gather", lambda: {"x": _readonly(X), "i": _readonly(np.array([2, 1]))}),
    "zero_d_index": ("gather", lambda: {"x": X, "i": np.array(-2)}),
    "list_index": ("gather", lambda: {"x": X, "i": [0, 3, -1]}),
    "float_list_index": ("gather", lambda: {"x": X, "i": [1.0, 2.0]}),
    "zero_strides": (
        "gather",
        lambda: {"x": np.broadcast_to(np.arange(5, dtype=np.float32), (2, 3, 5)), "i": [2, 0]},
    ),
    "masked_array": ("gather", lambda: {"x": X, "i": np.ma.masked_array([1, 2], mask=[0, 1])}),
    "big_endian_data": ("gather", lambda: {"x": X.astype(">f4"), "i": np.array([1, 0])}),
    "big_endian_index": ("gather", lambda: {"x": X, "i": np.array([1], dtype=">i8")}),
    "int_scalar": ("gather", lambda: {"x": X, "i": 2}),
    "numpy_scalar": ("gather", lambda: {"x": X, "i": np.int64(2)}),
    "int32_index": ("gather", lambda: {"x": X, "i": np.array([1], dtype=np.int32)}),
    "float64_data": ("gather", lambda: {"x": X.astype(np.float64), "i": np.array([1])}),
    "bool_index": ("gather", lambda: {"x": X, "i": np.array([True, False])}),
    "object_index": ("gather", lambda: {"x": X, "i": np.array([1, 2], dtype=object)}),
    "ragged_list": ("gather", lambda: {"x": X, "i": [[1], [2, 3]]}),
    "ge_transposed_views": (
        "gather_elements",
        lambda: {
            "x": np.arange(20, dtype=np.float32).reshape(5, 4).T,
            "i": np.array([[0, 3, -1, 2, 1], [3, 3, 0, -4, 1], [1, 1, 1, 1, 1]], dtype=np.int32)[::2, ::-1],
        },
    ),
    "gnd_fortran": (
        "gather_nd",
        lambda: {"x": np.asfortranarray(X), "i": np.asfortranarray([[0, 1], [2, -1], [-3, 0]])},
    ),
    "gnd_nested_lists": ("gather_nd", lambda: {"x": X.tolist(), "i": [[0, 1]]}),
    "se_duplicates_strided": (
        "scatter_elements",
        lambda: {
            "x": np.zeros((2, 6), np.float32),
            "i": np.array([[0, 0, 5, -1], [1, 1, 1, 2]])[:, ::2],
            "u": np.arange(8, dtype=np.float32).reshape(2, 4)[:, 1::2],
        },
    ),
    "snd_fortran_read_only": (
        "scatter_nd",
        lambda: {
            "x": _readonly(np.asfortranarray(np.arange(12, dtype=np.float32).reshape(4, 3))),
            "i": np.array([[3], [-4]]),
            "u": np.asfortranarray(np.full((2, 3), 7, np.float32)),
        },
    ),
}


def _outcome(run: Callable[[], list[Any]]) -> tuple[str, Any]:
    try:
        return "ok", run()
    except Exception as exc:  # the classes are compared
        classes = {c for c in type(exc).__mro__ if c.__module__.startswith(("onnxruntime", "builtins"))}
        return "raised", classes


def _same(expected: tuple[str, Any], got: tuple[str, Any]) -> None:
    assert got[0] == expected[0], (expected, got)
    if expected[0] == "raised":
        assert got[1] == expected[1]
        return
    assert len(got[1]) == len(expected[1])
    for a, b in zip(got[1], expected[1], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def sessions() -> dict[str, tuple[Any, Any]]:
    return {
        name: (
            ort.InferenceSession(data, providers=["CPUExecutionProvider"]),
            dmlshim.InferenceSession(data, providers=["DmlExecutionProvider"]),
        )
        for name, data in MODELS.items()
    }


@pytest.mark.parametrize("case", sorted(FEEDS))
def test_feed_matches_onnxruntime(sessions: dict[str, tuple[Any, Any]], case: str) -> None:
    model, make = FEEDS[case]
    ref, ours = sessions[model]
    feeds = make()
    kept = {k: np.array(v, copy=True) for k, v in feeds.items() if isinstance(v, np.ndarray)}
    _same(_outcome(lambda: ref.run(None, make())), _outcome(lambda: ours.run(None, feeds)))
    for name, before in kept.items():  # no feed is written to, read-only or not
        np.testing.assert_array_equal(feeds[name], before)


def test_ortvalue_reads_the_array_as_it_is_at_the_run(sessions: dict[str, tuple[Any, Any]]) -> None:
    """ortvalue_from_numpy shares the array's memory: a change after it is made shows in the run."""
    results = []
    for session in sessions["gather"]:
        index = np.array([1, 2], dtype=np.int64)
        value = ort.OrtValue.ortvalue_from_numpy(index)
        index[:] = [0, -1]
        results.append(
            session.run_with_ort_values(["y"], {"x": ort.OrtValue.ortvalue_from_numpy(X), "i": value})[
                0
            ].numpy()
        )
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_array_equal(results[0], X[:, [0, -1]])


def test_threads_with_different_shapes_on_one_session(sessions: dict[str, tuple[Any, Any]]) -> None:
    session = sessions["gather_nd"][1]
    wrong: list[Any] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(25):
            a, b, c = (int(v) for v in rng.integers(1, 6, 3))
            data = rng.standard_normal((a, b, c)).astype(np.float32)
            n = int(rng.integers(0, 5))
            index = np.stack([rng.integers(-a, a, n), rng.integers(-b, b, n)], 1).reshape(n, 2)
            got = session.run(None, {"x": data, "i": index})[0]
            expected = data[index[:, 0], index[:, 1]]
            if got.shape != expected.shape or not np.array_equal(got, expected):
                wrong.append((seed, got.shape, expected.shape))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


@pytest.mark.parametrize("arena", [True, False])
@pytest.mark.parametrize("shrink", ["cpu:0", "cpu:1", "gpu:0", "bogus", "", ";", "cpu"])
@pytest.mark.parametrize("how", ["run", "ort_values", "iobinding"])
def test_arena_shrink_list_is_checked_as_onnxruntime_checks_it(arena: bool, shrink: str, how: str) -> None:
    """onnxruntime refuses a shrink list naming an arena the session lacks before any node runs; dmlshim
    ran a fully emulated model with it."""
    so = ort.SessionOptions()
    so.enable_cpu_mem_arena = arena
    data = MODELS["gather"]
    ro = ort.RunOptions()
    ro.add_run_config_entry(SHRINK, shrink)
    index = np.array([0, -1])

    def run(session: Any) -> list[Any]:
        if how == "run":
            return list(session.run(None, {"x": X, "i": index}, ro))
        if how == "ort_values":
            feeds = {"x": ort.OrtValue.ortvalue_from_numpy(X), "i": ort.OrtValue.ortvalue_from_numpy(index)}
            return [v.numpy() for v in session.run_with_ort_values(["y"], feeds, ro)]
        binding = session.io_binding()
        binding.bind_cpu_input("x", X)
        binding.bind_cpu_input("i", index)
        binding.bind_output("y")
        session.run_with_iobinding(binding, ro)
        return list(binding.copy_outputs_to_cpu())

    expected = _outcome(lambda: run(ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])))
    _same(
        expected,
        _outcome(lambda: run(dmlshim.InferenceSession(data, so, providers=["DmlExecutionProvider"]))),
    )


SCRIPT = """
import json, os, sys
import numpy as np
import onnxruntime as ort
from onnxruntime.capi import _pybind_state as C
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

data = open(sys.argv[1], "rb").read()
out = {"providers_ok": "CPUExecutionProvider" in ort.get_available_providers()}
so = ort.SessionOptions()
out["options_class"] = isinstance(so, C.SessionOptions)
options = {"arena_extend_strategy": "kSameAsRequested"}
s = ort.InferenceSession(data, so, providers=[("CPUExecutionProvider", options)])
out["session_class"] = isinstance(s, ort.InferenceSession)
ro = ort.RunOptions()
ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "bogus")
ro.logid = "tag\\n"
try:
    s.run(None, {"x": np.ones((1, 2, 3), np.float32), "i": np.array([1])}, ro)
    out["shrink"] = "ran"
except InvalidArgument:
    out["shrink"] = "InvalidArgument"
print(json.dumps(out))
"""


def test_bound_script_sees_onnxruntime_classes_and_checks(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(SCRIPT)
    (tmp_path / "m.onnx").write_bytes(MODELS["gather"])
    outputs = []
    for prefix in ([], ["-m", "dmlshim.ort", "--emulate", "all", "--summary", "off"]):
        done = subprocess.run(
            [sys.executable, *prefix, "s.py", "m.onnx"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": PROVIDER},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.strip().splitlines()[-1])
    assert outputs[1] == outputs[0]
    assert '"shrink": "InvalidArgument"' in outputs[0]


def test_external_data_of_bytes_found_from_the_working_directory_at_creation(tmp_path: Path) -> None:
    weights = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(16, 4), "W")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["W", "i"], ["y"], axis=0, name="g")],
        "g",
        [vi("i", T.INT64, ["n"])],
        [vi("y", T.FLOAT, ["n", 4])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, location="ext.bin", size_threshold=0)
    data = (tmp_path / "ext.onnx").read_bytes()
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        pair = [
            ort.InferenceSession(data, providers=["CPUExecutionProvider"]),
            dmlshim.InferenceSession(data, providers=["DmlExecutionProvider"]),
        ]
    finally:
        os.chdir(old)
    feeds = {"i": np.array([15, -16, 3])}
    _same(("ok", pair[0].run(None, feeds)), ("ok", pair[1].run(None, feeds)))


def test_threads_scatter_and_gather_elements_with_duplicates(sessions: dict[str, tuple[Any, Any]]) -> None:
    """Many threads, one session per model, random shapes; references from numpy (ONNX's definitions)."""
    scatter_add, scatter_nd, gather_el = (
        sessions[k][1] for k in ("scatter_elements", "scatter_nd", "gather_elements")
    )
    wrong: list[Any] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(20):
            a, b, k = (int(v) for v in rng.integers(1, 7, 3))
            data = rng.integers(-5, 5, (a, b)).astype(np.float32)
            index = rng.integers(-b, b, (a, k))
            updates = rng.integers(-5, 5, (a, k)).astype(np.float32)
            expected = data.copy()
            np.add.at(
                expected, (np.arange(a)[:, None].repeat(k, 1), np.where(index < 0, index + b, index)), updates
            )
            if not np.array_equal(scatter_add.run(None, {"x": data, "i": index, "u": updates})[0], expected):
                wrong.append(("ScatterElements", seed))
            rows = rng.permutation(a)[: int(rng.integers(0, a + 1))]
            new = rng.standard_normal((len(rows), b)).astype(np.float32)
            expected = data.copy()
            expected[rows] = new
            got = scatter_nd.run(None, {"x": data, "i": rows.reshape(-1, 1).astype(np.int64), "u": new})[0]
            if not np.array_equal(got, expected):
                wrong.append(("ScatterND", seed))
            c, d = int(rng.integers(1, 5)), int(rng.integers(1, b + 1))
            picks = rng.integers(-a, a, (c, d)).astype(np.int32)
            expected = data[np.where(picks < 0, picks + a, picks), np.arange(d)[None, :]]
            if not np.array_equal(gather_el.run(None, {"x": data, "i": picks})[0], expected):
                wrong.append(("GatherElements", seed))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
