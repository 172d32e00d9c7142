"""How custom-op outputs cross onnxruntime-extensions' bridge: as numpy arrays (one buffer copy), every
element type and large outputs identical to onnxruntime CPU's (single-threaded), byte for byte."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime_extensions")

from dmlshim import InferenceSession
from dmlshim.execute.custom_ops import bridge as custom_op_bridge
from dmlshim.execute.custom_ops import types as custom_op_types
from tests.oracle import make_node_model, ort_run


def _same_bytes(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(expected).tobytes()


def _check(model: Any, feeds: dict[str, np.ndarray]) -> None:
    session = InferenceSession(model, engine="customop")
    got = session.run(None, feeds)
    record = session.last_run_record
    assert record is not None and record.nodes[0].placement == "dml"
    for g, e in zip(got, ort_run(model, feeds), strict=True):
        _same_bytes(g, e)


ALL_TYPES = [
    np.float32,
    np.float64,
    np.float16,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
]


def _values(dtype: type, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=lambda t: np.dtype(t).name)
def test_large_gather_output_of_every_type(dtype: type) -> None:
    rng = np.random.default_rng(22)
    data = _values(dtype, (64, 2048), rng)
    # Columns reversed along axis 1: 131072 output elements, every one moved.
    feeds = {"data": data, "indices": np.arange(2047, -1, -1, dtype=np.int64)}
    _check(make_node_model("Gather", feeds, {"axis": 1}, 13), feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.bool_], ids=lambda t: np.dtype(t).name)
def test_scatter_nd_rows_of_every_width(dtype: type) -> None:
    rng = np.random.default_rng(5)
    data = _values(dtype, (512, 96), rng)
    rows = rng.permutation(512)[:200].reshape(200, 1).astype(np.int64)
    feeds: dict[str, np.ndarray] = {"data": data, "indices": rows, "updates": _values(dtype, (200, 96), rng)}
    _check(make_node_model("ScatterND", feeds, {}, 13), feeds)


def test_gather_elements_output_is_shaped_like_the_indices() -> None:
    rng = np.random.default_rng(7)
    data = rng.standard_normal((300, 257)).astype(np.float32)
    idx = rng.integers(-300, 300, size=(123, 257), dtype=np.int64)
    feeds: dict[str, np.ndarray] = {"data": data, "indices": idx}
    _check(make_node_model("GatherElements", feeds, {"axis": 0}, 13), feeds)


def test_outputs_cross_as_arrays_with_the_installed_extensions() -> None:
    model = make_node_model("Gather", {"data": np.zeros(3, np.float32), "indices": np.zeros(1, np.int64)})
    InferenceSession(model, engine="customop")
    assert custom_op_bridge.array_outputs()


def _fake_extensions(calls: list[Any]) -> Any:
    def original(k_id: int, feed: Any, attributes: Any) -> Any:
        calls.append(k_id)
        return (k_id, (1,), [0.0])

    return SimpleNamespace(
        _ocos=SimpleNamespace(_on_pyop_invocation=original),
        PyCustomOpDef=SimpleNamespace(install_hooker=lambda f: None),
    )


def test_dispatch_hands_back_a_contiguous_flat_array(monkeypatch: pytest.MonkeyPatch) -> None:
    custom_op_bridge.register_custom_ops()
    k_id = next(iter(custom_op_bridge._OUR_OPS))
    source = np.arange(24, dtype=np.int16).reshape(4, 6)
    seen: dict[str, Any] = {}

    def fake_kernel(*arrays: Any, **attrs: Any) -> np.ndarray:
        seen.update(attrs)
        return source.T  # not C-contiguous

    monkeypatch.setattr(custom_op_bridge, "kernel", fake_kernel)
    calls: list[Any] = []
    dispatch = custom_op_bridge._dispatch_with_arrays(_fake_extensions(calls))
    rid, shape, flat = dispatch(k_id, [source], {"feature_level": "5", "mode": "descriptor"})
    assert rid == k_id and tuple(shape) == (6, 4) and not calls
    assert flat.flags.c_contiguous and flat.dtype == np.int16
    assert flat.tolist() == np.ascontiguousarray(source.T).reshape(-1).tolist()
    # Declared int attributes arrive as ints, string ones as strings (as Opdef.cast_attributes gives them).
    assert seen == {"feature_level": 5, "mode": "descriptor"}


def test_dispatch_leaves_other_python_ops_to_the_original() -> None:
    calls: list[Any] = []
    dispatch = custom_op_bridge._dispatch_with_arrays(_fake_extensions(calls))
    unknown = max(custom_op_bridge._OUR_OPS, default=0) + 1
    assert dispatch(unknown, [], {}) == (unknown, (1,), [0.0])
    assert calls == [unknown]


def test_no_array_dispatch_without_the_hook_points() -> None:
    assert custom_op_bridge._dispatch_with_arrays(SimpleNamespace(PyCustomOpDef=SimpleNamespace())) is None


@pytest.mark.parametrize("arrays", [True, False], ids=["array-bridge", "list-bridge"])
def test_float_data_modes_keep_every_bit(arrays: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # float32 crosses the array bridge as it is; with a list bridge it is lowered in tags mode (positions
    # out, onnxruntime moves the floats). Either way signalling NaNs and payloads arrive as onnxruntime's.
    monkeypatch.setattr(custom_op_types, "outputs_cross_as_arrays", lambda: arrays)
    bits = np.array([0x7F800001, 0xFFA00005, 0x7FC01234, 0x80000000, 0x3F800000, 0xFF800000], np.uint32)
    data = np.resize(bits, 64 * 48).view(np.float32).reshape(64, 48)
    rows = np.array([[3], [63], [0], [17]], dtype=np.int64)
    updates = np.resize(bits[::-1], 4 * 48).view(np.float32).reshape(4, 48)
    feeds: dict[str, np.ndarray] = {"data": data, "indices": rows, "updates": updates}
    model = make_node_model("ScatterND", feeds, {}, 13)
    session = InferenceSession(model, engine="customop")
    modes = [n.mode for n in session._engine.lowered.nodes]  # type: ignore[attr-defined]
    assert modes == (["descriptor"] if arrays else ["tags"])
    (got,) = session.run(None, feeds)
    _same_bytes(got, ort_run(model, feeds)[0])
