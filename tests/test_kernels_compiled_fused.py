"""The compiled kernels' fused paths against onnxruntime CPU and, bit for bit, against the numpy kernels:
ScatterND's rows of 16 bytes or more (owners, then one pass over the output rows on the kernel threads)
and GatherElements' runs (proved in range, then copied without a test per element; runs with negative
or bad indices checked element by element). Negative indices, duplicates (the last write in index order
wins), out-of-range errors, clamp mode, several threads. Skipped when numba is not installed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dmlshim.extras import install_command

pytest.importorskip("numba", reason=f"the compiled kernels need numba: {install_command('fast')}")

from dmlshim.errors import DmlShimError
from dmlshim.kernels import IndexMode, KernelOptions, execute, parallel
from dmlshim.kernels.compiled import loops, scatters
from tests.test_kernels_support import assert_same, gather_elements_desc, ort, scatter_nd_desc

CALLS: dict[str, list[str]] = {}
"""The threads each spied loop ran on, by loop name."""


class _Handoff:
    """Holds each of the two threads' first loop call until the other has made one (at most 10 s):
    otherwise, on a loaded machine, one thread may take every chunk before the other wakes, and a test of
    the threaded path would not see two threads. The calling thread is the one that made the hand-off (the
    test's thread, which pytest-xdist need not run on the main thread)."""

    def __init__(self) -> None:
        self.caller = threading.current_thread()
        self.seen = {True: threading.Event(), False: threading.Event()}
        self.waited: set[bool] = set()

    def __call__(self) -> None:
        mine = threading.current_thread() is self.caller
        self.seen[mine].set()
        if mine not in self.waited:
            self.waited.add(mine)
            self.seen[not mine].wait(10)


HANDOFF: list[_Handoff] = []
"""The hand-off in force (set by the ``small_chunks`` fixture)."""


@pytest.fixture(autouse=True)
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Record which fused loops run, and on which threads."""
    CALLS.clear()
    for name in ("scatter_nd_owners", "scatter_nd_fill", "scatter_nd", "gather_elements"):
        loop = getattr(loops, name)

        def recording(*args: Any, _loop: Any = loop, _name: str = name) -> Any:
            CALLS.setdefault(_name, []).append(threading.current_thread().name)
            if HANDOFF and _name in ("scatter_nd_fill", "gather_elements"):
                HANDOFF[0]()
            return _loop(*args)

        monkeypatch.setattr(loops, name, recording)
    yield


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two kernel threads and 64-element chunks, so that small cases run on both threads."""
    monkeypatch.setattr(parallel, "THREADS", 2)
    monkeypatch.setattr(parallel, "CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(parallel, "MIN_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_ELEMENTS", 64)


@pytest.fixture
def both_threads(small_chunks: None) -> Iterator[None]:
    """:func:`small_chunks`, and the calling thread's first chunk held until a kernel thread runs one."""
    HANDOFF[:] = [_Handoff()]
    yield
    HANDOFF.clear()


def _bound(data: np.ndarray, idx: np.ndarray, updates: np.ndarray) -> tuple[Any, dict[str, np.ndarray]]:
    desc = scatter_nd_desc(data, idx)
    tensors = desc.tensors()
    arrays = {"InputTensor": data, "IndicesTensor": idx, "UpdatesTensor": updates}
    return desc, {name: a.reshape(tensors[name].sizes) for name, a in arrays.items()}


def _outcome(desc: Any, bound: dict[str, np.ndarray], options: KernelOptions, kernels: str) -> Any:
    try:
        result = execute(desc, bound, options, kernels=kernels)
    except DmlShimError as e:
        return type(e), str(e)
    return result.output.tobytes(), result.output.dtype, result.output.shape, result.duplicate_indices


def test_negative_indices_match_onnxruntime(both_threads: None) -> None:
    """Distinct rows, half of them named from the end: onnxruntime's output, on both kernel threads."""
    rng = np.random.default_rng(1)
    data = rng.standard_normal((40, 2, 4)).astype(np.float32)
    rows = rng.permutation(40)[:25]
    idx = np.where(rng.random(25) < 0.5, rows - 40, rows).astype(np.int64)[:, None]
    assert (idx < 0).any()
    updates = rng.standard_normal((25, 2, 4)).astype(np.float32)
    desc, bound = _bound(data, idx, updates)
    result = execute(desc, bound, kernels="compiled")
    assert_same(desc, result.output, ort("ScatterND", {"data": data, "indices": idx, "updates": updates}))
    assert result.duplicate_indices == 0
    assert len(CALLS["scatter_nd_owners"]) == 1 and "scatter_nd" not in CALLS
    assert len(set(CALLS["scatter_nd_fill"])) == 2, CALLS


def test_wide_rows_stay_on_one_thread(small_chunks: None) -> None:
    """Rows of 64 bytes or more: the fused pass is a memory copy, run on the calling thread only."""
    data = np.zeros((300, 16), dtype=np.float32)
    idx = np.arange(0, 300, 2, dtype=np.int64)[:, None]
    updates = np.ones((150, 16), dtype=np.float32)
    desc, bound = _bound(data, idx, updates)
    result = execute(desc, bound, kernels="compiled")
    assert result.output.reshape(300, 16)[::2].all() and not result.output.reshape(300, 16)[1::2].any()
    assert CALLS["scatter_nd_fill"] == ["MainThread"]


def test_two_tuples_match_onnxruntime() -> None:
    """2-tuples selecting rows of 8 int16 (16 bytes): the fused path, onnxruntime's output."""
    rng = np.random.default_rng(2)
    data = rng.integers(-1000, 1000, (5, 7, 8), dtype=np.int16)
    flat = rng.permutation(35)[:20]
    idx = np.stack(np.unravel_index(flat, (5, 7)), axis=-1).astype(np.int64)
    updates = rng.integers(-1000, 1000, (20, 8), dtype=np.int16)
    desc, bound = _bound(data, idx, updates)
    result = execute(desc, bound, kernels="compiled")
    assert_same(desc, result.output, ort("ScatterND", {"data": data, "indices": idx, "updates": updates}))
    assert "scatter_nd_fill" in CALLS


def test_duplicates_last_write_wins(small_chunks: None) -> None:
    """Rows written several times keep the last update in index order, counted, as the numpy kernel."""
    data = np.zeros((6, 4), dtype=np.float32)
    idx = np.array([[3], [1], [3], [-3], [0], [1]], dtype=np.int64)
    updates = np.arange(24, dtype=np.float32).reshape(6, 4)
    desc, bound = _bound(data, idx, updates)
    result = execute(desc, bound, kernels="compiled")
    expected = data.copy()
    expected[0], expected[1], expected[3] = updates[4], updates[5], updates[3]
    np.testing.assert_array_equal(result.output.reshape(6, 4), expected, strict=True)
    assert result.duplicate_indices == 3
    assert "scatter_nd_fill" in CALLS
    options = KernelOptions()
    assert _outcome(desc, bound, options, "compiled") == _outcome(desc, bound, options, "numpy")
    quiet = KernelOptions(detect_duplicates=False)
    assert _outcome(desc, bound, quiet, "compiled") == _outcome(desc, bound, quiet, "numpy")


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64, np.bool_])
def test_random_cases_equal_the_numpy_kernel_bit_for_bit(dtype: type, small_chunks: None) -> None:
    """Random ScatterND with many duplicates, row widths on both sides of the fused path's threshold."""
    rng = np.random.default_rng(3)
    for trial in range(12):
        block = 1 if trial == 0 else int(rng.integers(1, 40))
        t = int(rng.integers(1, 3))
        lead = (int(rng.integers(2, 9)), int(rng.integers(2, 9)))[:t]
        data: np.ndarray = (rng.random((*lead, block)) * 200).astype(dtype)
        n = int(rng.integers(1, 60))
        idx = np.stack([rng.integers(-d, d, n) for d in lead], axis=-1).astype(np.int64)
        updates: np.ndarray = (rng.random((n, block)) * 200).astype(dtype)
        desc, bound = _bound(data, idx, updates)
        for options in (KernelOptions(), KernelOptions(detect_duplicates=False)):
            ours = _outcome(desc, bound, options, "compiled")
            assert ours == _outcome(desc, bound, options, "numpy"), trial
    assert "scatter_nd_fill" in CALLS and "scatter_nd" in CALLS


@pytest.mark.parametrize("bad", [6, -7, np.iinfo(np.int64).max])
def test_out_of_range_raises_the_numpy_error(bad: int) -> None:
    """An index out of range stops the owners pass before anything is written; the error (class and
    message, naming the first bad index) and clamp mode's output are the numpy kernel's."""
    data = np.arange(24, dtype=np.float32).reshape(6, 4)
    idx = np.array([[1], [bad], [2], [bad]], dtype=np.int64)
    updates = np.full((4, 4), -1, dtype=np.float32)
    desc, bound = _bound(data, idx, updates)
    with pytest.raises(DmlShimError) as info:
        execute(desc, bound, KernelOptions(node="s1"), kernels="compiled")
    assert "IndicesTensor[1, 0]" in str(info.value) and "node 's1'" in str(info.value)
    assert "scatter_nd_fill" not in CALLS
    for options in (KernelOptions(node="s1"), KernelOptions(index_mode=IndexMode.CLAMP)):
        assert _outcome(desc, bound, options, "compiled") == _outcome(desc, bound, options, "numpy")


def test_narrow_rows_keep_the_ordered_writes() -> None:
    """Single float32 elements (4-byte rows) take the copy and the in-order writes, not the owners."""
    data = np.zeros((4, 4), dtype=np.float32)
    idx = np.array([[0, 1], [2, 3], [0, 1]], dtype=np.int64)
    updates = np.array([1, 2, 3], dtype=np.float32)
    desc, bound = _bound(data, idx, updates)
    result = execute(desc, bound, kernels="compiled")
    assert result.output.reshape(4, 4)[0, 1] == 3 and result.duplicate_indices == 1
    assert "scatter_nd" in CALLS and "scatter_nd_owners" not in CALLS
    assert scatters.OWNER_MIN_BYTES > 4


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_elements_runs_match_onnxruntime(axis: int, both_threads: None) -> None:
    """Indices in range, some runs holding negative ones: onnxruntime's output, on two threads."""
    rng = np.random.default_rng(4 + axis)
    data = rng.standard_normal((6, 9, 10)).astype(np.float32)
    shape = list(data.shape)
    shape[axis] = 7
    dim = data.shape[axis]
    idx = rng.integers(0, dim, shape).astype(np.int64)
    flat = idx.reshape(-1)
    flat[rng.permutation(flat.size)[:20]] -= dim  # the same element, counted from the end
    desc = gather_elements_desc(data, idx, axis)
    bound: dict[str, np.ndarray] = {
        "InputTensor": data.reshape(desc.input_tensor.sizes),
        "IndicesTensor": idx.reshape(desc.indices_tensor.sizes),
    }
    result = execute(desc, bound, kernels="compiled")
    expected = ort("GatherElements", {"data": data, "indices": idx}, {"axis": axis})
    assert_same(desc, result.output, expected)
    assert len(set(CALLS["gather_elements"])) == 2, CALLS


@pytest.mark.parametrize("spoil", ["high", "negative", "unsigned"])
def test_gather_elements_bad_runs_equal_the_numpy_kernel(spoil: str) -> None:
    """A bad index in a run: the error (naming the first bad index) and clamp mode's output are the
    numpy kernel's; so is the output when negatives are refused (unsigned indices)."""
    rng = np.random.default_rng(7)
    data = rng.integers(0, 100, (5, 8, 3), dtype=np.int16)
    for axis in range(3):
        shape = list(data.shape)
        shape[axis] = 4
        dim = data.shape[axis]
        idx = rng.integers(0, dim, shape).astype(np.uint32 if spoil == "unsigned" else np.int64)
        flat = idx.reshape(-1)
        at = rng.permutation(flat.size)[:2]
        if spoil == "high":
            flat[at] = dim
        elif spoil == "negative":
            flat[at] = -dim - 1
        else:
            flat[at] = np.iinfo(np.uint32).max
        desc = gather_elements_desc(data, idx, axis)
        bound: dict[str, np.ndarray] = {"InputTensor": data, "IndicesTensor": idx}
        for options in (KernelOptions(node="g1"), KernelOptions(index_mode=IndexMode.CLAMP)):
            outcome = _outcome(desc, bound, options, "compiled")
            assert outcome == _outcome(desc, bound, options, "numpy"), (axis, options)
        first = int(np.flatnonzero((flat >= dim) | (flat.astype(np.int64) < -dim))[0])
        where = ", ".join(str(int(c)) for c in np.unravel_index(first, idx.shape))
        assert f"IndicesTensor[{where}]" in _outcome(desc, bound, KernelOptions(node="g1"), "compiled")[1]
