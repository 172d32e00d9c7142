"""The proof that a scatter writes every place once (issue 36, item 2: no sort per run where a set or a
mark per target answers), against a brute-force count in Python on random indices of every size class:
a few tuples (a Python set), many over a small target space (marks) and over a large one (a sort),
ScatterElements lines; negative, repeated and out-of-range values included."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from dmlshim.execute.proofs.proved_again import steady_proof
from dmlshim.execute.proofs.scatter_given import repeated_writes, scatter_output_is_given


def _nd_truth(data_shape: tuple[int, ...], indices: np.ndarray) -> tuple[bool, int]:
    """(every tuple in [0, dim) and distinct, overwritten writes with negative indices wrapped)."""
    k = indices.shape[-1]
    rows = [tuple(r) for r in indices.reshape(-1, k).tolist()]
    in_range = all(0 <= v < d for r in rows for v, d in zip(r, data_shape, strict=False))
    wrapped = [tuple(v + d if v < 0 else v for v, d in zip(r, data_shape, strict=False)) for r in rows]
    overwritten = sum(c - 1 for c in Counter(wrapped).values())
    return in_range and len(set(rows)) == len(rows), overwritten


@pytest.mark.parametrize(
    ("data_shape", "count", "k"),
    [
        ((4, 3, 5), 5, 2),
        ((4, 3, 5), 40, 1),
        ((64, 64, 2), 300, 2),
        ((2**20, 4096, 2), 2000, 2),
        ((9, 7), 100, 1),
    ],
)
def test_scatternd_written_once_matches_a_python_count(
    data_shape: tuple[int, ...], count: int, k: int
) -> None:
    rng = np.random.default_rng(count * 7 + k)
    for trial in range(30):
        dims = np.array(data_shape[:k])
        if trial % 3 == 0:  # distinct tuples in range
            flat = rng.choice(int(np.prod(dims)), size=min(count, int(np.prod(dims))), replace=False)
            indices = np.stack(np.unravel_index(flat, tuple(dims)), axis=-1).astype(np.int64)
        else:
            low = -1 if trial % 3 == 1 else 0
            indices = rng.integers(low, dims + (trial % 5 == 0), size=(count, k)).astype(np.int64)
        data = np.zeros((1,) * len(data_shape), np.float32)
        data = np.broadcast_to(data, data_shape)
        updates = np.broadcast_to(np.zeros((), np.float32), indices.shape[:-1] + tuple(data_shape[k:]))
        key = ((data_shape, data.dtype), (indices.shape, indices.dtype), (updates.shape, updates.dtype))
        given, overwritten = _nd_truth(data_shape, indices)
        assert steady_proof("ScatterND", {}, key, None)(indices) == given, trial
        assert scatter_output_is_given("ScatterND", {}, [data, indices, updates], data) == given, trial
        in_wrapped_range = all(
            -d <= v < d for r in indices.tolist() for v, d in zip(r, data_shape, strict=False)
        )
        if in_wrapped_range:
            assert repeated_writes("ScatterND", 0, data_shape, indices) == overwritten, trial


@pytest.mark.parametrize(("data_shape", "small"), [((6, 5), (4, 3)), ((60, 50), (40, 30))])
def test_scatter_elements_lines_written_once_match_a_python_check(
    data_shape: tuple[int, int], small: tuple[int, int]
) -> None:
    rng = np.random.default_rng(3)
    for trial in range(60):
        axis = trial % 2
        shape = small if axis == 0 else small[::-1]
        dim = data_shape[axis]
        if trial % 4 == 0:  # one permutation per line: distinct
            indices = np.stack(
                [rng.permutation(dim)[: shape[axis]] for _ in range(shape[1 - axis])], axis=1 - axis
            )
        else:
            indices = rng.integers(-1 if trial % 4 == 1 else 0, dim + (trial % 4 == 3), size=shape)
        indices = indices.astype(np.int64)
        lines = indices.T if axis == 0 else indices
        expected = bool(((indices >= 0) & (indices < dim)).all()) and all(
            len(set(line)) == len(line) for line in lines.tolist()
        )
        data = np.zeros(data_shape, np.float32)
        updates = np.zeros(shape, np.float32)
        key = ((data_shape, data.dtype), (shape, indices.dtype), (shape, updates.dtype))
        attrs = {"axis": axis}
        assert steady_proof("ScatterElements", attrs, key, None)(indices) == expected, trial
        assert scatter_output_is_given("ScatterElements", attrs, [data, indices, updates], data) == expected


def test_gathernd_tuples_in_range_match_numpy() -> None:
    """The lean gather's range proof of GatherND tuples (a few read as lists, more by numpy) against a
    numpy comparison, with negative and past-the-end coordinates."""
    from dmlshim.execute.proofs.gather_given import lean_indices_in_range

    rng = np.random.default_rng(11)
    data_shape = (2, 5, 7, 3)
    for trial in range(200):
        batch = trial % 2
        k = 1 + trial % 3
        count = (1, 3, 20, 40)[trial % 4]
        dims = np.array(data_shape[batch : batch + k])
        indices = rng.integers(-1 if trial % 5 == 0 else 0, dims + (trial % 7 == 0), size=(count, k))
        if batch:
            indices = np.broadcast_to(indices, (2, count, k)).copy()
        expected = bool(((indices >= 0) & (indices < dims)).all())
        got = lean_indices_in_range("GatherND", {"batch_dims": batch}, data_shape, indices.astype(np.int64))
        assert got == expected, (trial, indices.tolist())
