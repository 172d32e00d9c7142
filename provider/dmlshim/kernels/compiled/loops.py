"""The compiled loops: one fused pass per gather/scatter, each over one box of the work.

Imported only when numba is installed (the ``fast`` extra), through :mod:`.cache`, which decides where
numba keeps the machine code. Every loop runs without the GIL, so :func:`dmlshim.kernels.parallel.run_all`
shares the boxes between the kernel threads exactly as it does for the numpy kernels.

Data is moved as unsigned integers of the element's width (a view, so float16, bfloat16, bool and every
other type are copied bit for bit through one specialization per width). Indices are read in their own
dtype. A loop that meets an index it may not use (out of range, or negative where negatives are not
allowed) stops and returns a nonzero status: the caller then runs the numpy kernel, which raises, clamps
or reports exactly as documented, so the compiled loops never decide an error themselves.
"""

from __future__ import annotations

import numpy as np

from .cache import jit


@jit
def _index(value: int, dim: int, allow_negative: bool) -> int:
    """``value`` as an index into ``[0, dim)``, counted from the end when negative and allowed; -1 when
    the index may not be used. A uint64 above INT64_MAX turns negative in the cast and is refused, since
    unsigned indices never allow negatives."""
    v = np.int64(value)
    if v < 0:
        if not allow_negative:
            return -1
        v += dim
        if v < 0:
            return -1
    elif v >= dim:
        return -1
    return v


@jit
def normalize(raw: np.ndarray, dim: int, allow_negative: bool, out: np.ndarray) -> int:
    """Write the indices of the 1-D ``raw`` into the int64 ``out``; 1 when one may not be used, else 0."""
    for i in range(raw.shape[0]):
        v = _index(raw[i], dim, allow_negative)
        if v < 0:
            return 1
        out[i] = v
    return 0


@jit
def gather(src: np.ndarray, idx: np.ndarray, out: np.ndarray, p0: int, p1: int, k0: int, k1: int) -> int:
    """GATHER on ``src (pre, dim, post)`` by the valid int64 ``idx (n,)`` into ``out (pre, n, post)``,
    rows ``p0:p1`` by indices ``k0:k1``."""
    post = src.shape[2]
    for p in range(p0, p1):
        for k in range(k0, k1):
            i = idx[k]
            for q in range(post):
                out[p, k, q] = src[p, i, q]
    return 0


@jit
def gather_elements(
    src: np.ndarray, raw: np.ndarray, out: np.ndarray, p0: int, p1: int, k0: int, k1: int, allow_negative: bool
) -> int:
    """GATHER_ELEMENTS on ``src (pre, dim, post)`` by ``raw (pre, k, post)`` into ``out (pre, k, post)``,
    over the box ``p0:p1, k0:k1``; 1 when an index may not be used."""
    dim = src.shape[1]
    post = src.shape[2]
    for p in range(p0, p1):
        for k in range(k0, k1):
            for q in range(post):
                i = _index(raw[p, k, q], dim, allow_negative)
                if i < 0:
                    return 1
                out[p, k, q] = src[p, i, q]
    return 0


@jit
def _row(
    tuples: np.ndarray, b: int, n: int, dims: np.ndarray, strides: np.ndarray, base: int, allow_negative: bool
) -> int:
    """The row a tuple of ``tuples (B, N, t)`` selects (``base`` plus each coordinate times its row
    stride); -1 when a coordinate may not be used."""
    row = base
    for j in range(tuples.shape[2]):
        i = _index(tuples[b, n, j], dims[j], allow_negative)
        if i < 0:
            return -1
        row += i * strides[j]
    return row


@jit
def gather_nd(
    src: np.ndarray,
    tuples: np.ndarray,
    dims: np.ndarray,
    strides: np.ndarray,
    batch_rows: np.ndarray,
    out: np.ndarray,
    b0: int,
    b1: int,
    n0: int,
    n1: int,
    allow_negative: bool,
) -> int:
    """GATHER_ND(1) on ``src (rows, block)`` by ``tuples (B, N, t)`` into ``out (B, N, block)`` over the
    box ``b0:b1, n0:n1``; 1 when an index may not be used."""
    block = src.shape[1]
    for b in range(b0, b1):
        for n in range(n0, n1):
            row = _row(tuples, b, n, dims, strides, batch_rows[b], allow_negative)
            if row < 0:
                return 1
            for q in range(block):
                out[b, n, q] = src[row, q]
    return 0


@jit
def scatter_elements(
    out: np.ndarray, raw: np.ndarray, updates: np.ndarray, seen: np.ndarray, allow_negative: bool
) -> int:
    """SCATTER into ``out (pre, dim, post)`` (already a copy of InputTensor) of ``updates (pre, k, post)``
    at ``raw (pre, k, post)``, in row-major index order so the last write wins. ``seen`` is a zeroed
    uint8 array of ``out.size`` marks, or empty when duplicates are not counted. Returns the count of
    overwritten writes, or -1 when an index may not be used (``out`` is then partly written)."""
    pre, dim, post = out.shape
    k_count = raw.shape[1]
    count = seen.shape[0] > 0
    duplicates = 0
    for p in range(pre):
        for k in range(k_count):
            for q in range(post):
                i = _index(raw[p, k, q], dim, allow_negative)
                if i < 0:
                    return -1
                if count:
                    target = (p * dim + i) * post + q
                    if seen[target]:
                        duplicates += 1
                    else:
                        seen[target] = 1
                out[p, i, q] = updates[p, k, q]
    return duplicates


@jit
def scatter_nd(
    out: np.ndarray,
    tuples: np.ndarray,
    dims: np.ndarray,
    strides: np.ndarray,
    updates: np.ndarray,
    seen: np.ndarray,
    allow_negative: bool,
) -> int:
    """SCATTER_ND into ``out (rows, block)`` (already a copy of InputTensor) of ``updates (N, block)`` at
    the rows ``tuples (1, N, t)`` select, in index order so the last write wins. ``seen`` is a zeroed uint8
    array of one mark per row, or empty when duplicates are not counted. Returns the count of overwritten
    writes, or -1 when an index may not be used (``out`` is then partly written)."""
    block = out.shape[1]
    count = seen.shape[0] > 0
    duplicates = 0
    for n in range(tuples.shape[1]):
        row = _row(tuples, 0, n, dims, strides, 0, allow_negative)
        if row < 0:
            return -1
        if count:
            if seen[row]:
                duplicates += 1
            else:
                seen[row] = 1
        for q in range(block):
            out[row, q] = updates[n, q]
    return duplicates
