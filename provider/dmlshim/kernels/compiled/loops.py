"""The compiled loops: one fused pass per gather/scatter, each over one box of the work.

Imported only when numba is installed (the ``fast`` extra), through :mod:`.cache`, which decides where
numba keeps the machine code. Every loop runs without the GIL, so :func:`dmlshim.kernels.parallel.run_all`
shares the boxes between the kernel threads exactly as it does for the numpy kernels.

Data is moved as unsigned integers of the element's width (a view, so float16, bfloat16, bool and every
other type are copied bit for bit through one specialization per width). Indices are read in their own
dtype. A loop that meets an index it may not use (out of range, or negative where negatives are not
allowed) stops and returns a nonzero status: the caller then runs the numpy kernel, which raises, clamps
or reports exactly as documented, so the compiled loops never decide an error themselves.

The loops address flat arrays with unsigned offsets: numba then drops the wrap-around fix-up it adds to
every signed subscript, which kept the loops from running at memory speed (2-3x slower, measured).
An index is proved in range with one unsigned comparison (a negative value is huge as unsigned); only
the values that fail it take the negative-index branch.
"""

from __future__ import annotations

import numpy as np

from .cache import inline, jit


@inline
def _index(value: int, dim: np.uint64, allow_negative: bool) -> np.uint64:
    """``value`` as an index into ``[0, dim)``, counted from the end when negative and allowed; ``dim``
    (an impossible index) when it may not be used. A uint64 above INT64_MAX is negative once cast, and
    unsigned indices never allow negatives, so it is refused."""
    u = np.uint64(np.int64(value))
    if u < dim:
        return u
    v = np.int64(u)
    if allow_negative and v < 0 and v + np.int64(dim) >= 0:
        return np.uint64(v + np.int64(dim))
    return dim


@jit
def normalize(raw: np.ndarray, dim: int, allow_negative: bool, out: np.ndarray) -> int:
    """Write the indices of the 1-D ``raw`` into the uint64 ``out``; 1 when one may not be used, else 0."""
    udim = np.uint64(dim)
    for i in range(raw.shape[0]):
        u = _index(raw[i], udim, allow_negative)
        if u == udim:
            return 1
        out[i] = u
    return 0


@jit
def gather(
    src: np.ndarray, idx: np.ndarray, out: np.ndarray, dim: int, post: int, p0: int, p1: int, k0: int, k1: int
) -> int:
    """GATHER: the flat ``src (pre, dim, post)`` by the valid uint64 ``idx (n,)`` into the flat
    ``out (pre, n, post)``, rows ``p0:p1`` by indices ``k0:k1``."""
    n = np.uint64(idx.shape[0])
    udim, upost = np.uint64(dim), np.uint64(post)
    if upost == 1:
        # One element per index (a gather along the last axis): no inner loop.
        for p in range(np.uint64(p0), np.uint64(p1)):
            s = p * udim
            o = p * n
            for k in range(np.uint64(k0), np.uint64(k1)):
                out[o + k] = src[s + idx[k]]
        return 0
    for p in range(np.uint64(p0), np.uint64(p1)):
        s = p * udim
        for k in range(np.uint64(k0), np.uint64(k1)):
            o = (p * n + k) * upost
            i = (s + idx[k]) * upost
            for q in range(upost):
                out[o + q] = src[i + q]
    return 0


@inline
def _plain(raw: np.ndarray, a: np.uint64, b: np.uint64, udim: np.uint64) -> bool:
    """Whether every index of ``raw[a:b]`` is in ``[0, dim)`` as it stands: one branch-free pass that the
    compiler vectorizes, so the copy after it needs no test per element."""
    bad = False
    for j in range(a, b):
        bad |= np.uint64(np.int64(raw[j])) >= udim
    return not bad


@inline
def _checked_run(
    src: np.ndarray,
    raw: np.ndarray,
    out: np.ndarray,
    s: np.uint64,
    a: np.uint64,
    b: np.uint64,
    udim: np.uint64,
    step: np.uint64,
    lanes: np.uint64,
    allow_negative: bool,
) -> bool:
    """``out[j] = src[s + index(raw[j]) * step + (j - a) * lanes]`` for ``j`` in ``a:b``, each index
    wrapped when negative and allowed; True (stopping) at one that may not be used. The run of
    :func:`gather_elements` that :func:`_plain` refused (negative or bad indices)."""
    for j in range(a, b):
        i = _index(raw[j], udim, allow_negative)
        if i == udim:
            return True
        out[j] = src[s + i * step + (j - a) * lanes]
    return False


@jit
def gather_elements(
    src: np.ndarray,
    raw: np.ndarray,
    out: np.ndarray,
    dim: int,
    k_count: int,
    post: int,
    p0: int,
    p1: int,
    k0: int,
    k1: int,
    allow_negative: bool,
) -> int:
    """GATHER_ELEMENTS: the flat ``src (pre, dim, post)`` by the flat ``raw (pre, k, post)`` into the flat
    ``out (pre, k, post)``, over the box ``p0:p1, k0:k1``; 1 when an index may not be used.

    Each run of indices (one row's ``k0:k1`` along the last axis, else one ``post`` run) is first proved
    in range by :func:`_plain`, then copied without a test per element: the loop that tested and copied
    each element in turn could not be vectorized and was 1.1-1.4x slower (CPU time at 4M elements).
    Runs with a negative or bad index take :func:`_checked_run`."""
    udim, upost, uk = np.uint64(dim), np.uint64(post), np.uint64(k_count)
    one, zero = np.uint64(1), np.uint64(0)
    if upost == 1:
        # Along the last axis (torch.gather's usual case): one run per row.
        for p in range(np.uint64(p0), np.uint64(p1)):
            s = p * udim
            a, b = p * uk + np.uint64(k0), p * uk + np.uint64(k1)
            if _plain(raw, a, b, udim):
                for j in range(a, b):
                    out[j] = src[s + np.uint64(np.int64(raw[j]))]
            elif _checked_run(src, raw, out, s, a, b, udim, one, zero, allow_negative):
                return 1
        return 0
    for p in range(np.uint64(p0), np.uint64(p1)):
        s = p * udim * upost
        for k in range(np.uint64(k0), np.uint64(k1)):
            a = (p * uk + k) * upost
            b = a + upost
            if _plain(raw, a, b, udim):
                for q in range(upost):
                    out[a + q] = src[s + np.uint64(np.int64(raw[a + q])) * upost + q]
            elif _checked_run(src, raw, out, s, a, b, udim, upost, one, allow_negative):
                return 1
    return 0


@inline
def _row(
    tuples: np.ndarray,
    at: np.uint64,
    dims: tuple[int, ...],
    strides: tuple[int, ...],
    base: np.uint64,
    allow_negative: bool,
) -> np.int64:
    """The row the tuple at flat offset ``at`` of ``tuples`` selects (``base`` plus each coordinate times
    its row stride); -1 when a coordinate may not be used. ``dims`` and ``strides`` are tuples, not arrays:
    values the compiler keeps in registers (an array could alias the output, so it would be read again
    after every store). The coordinates are all read before the one test, which let the compiler unroll
    the loop (an early return per coordinate made it 2x slower)."""
    row = base
    bad = False
    for j in range(len(dims)):
        dim = np.uint64(dims[j])
        i = _index(tuples[at + np.uint64(j)], dim, allow_negative)
        bad |= i == dim
        row += i * np.uint64(strides[j])
    return np.int64(-1) if bad else np.int64(row)


@inline
def _seen_before(marks: np.ndarray, target: np.uint64) -> bool:
    """Mark ``target`` in the bit set ``marks``; whether it was marked already. One bit per target keeps
    the marks of a 4M-element output in 512 KB of cache (a byte each was 1.3x slower)."""
    byte = target >> np.uint64(3)
    bit = np.uint8(1) << np.uint8(target & np.uint64(7))
    held = marks[byte]
    if held & bit:
        return True
    marks[byte] = held | bit
    return False


@jit
def gather_nd(
    src: np.ndarray,
    tuples: np.ndarray,
    dims: tuple[int, ...],
    strides: tuple[int, ...],
    batch_rows: np.ndarray,
    out: np.ndarray,
    n_count: int,
    block: int,
    b0: int,
    b1: int,
    n0: int,
    n1: int,
    allow_negative: bool,
) -> int:
    """GATHER_ND(1): the flat ``src (rows, block)`` by the flat ``tuples (B, N, t)`` into the flat
    ``out (B, N, block)`` over the box ``b0:b1, n0:n1``; 1 when an index may not be used."""
    t, un, ublock = np.uint64(len(dims)), np.uint64(n_count), np.uint64(block)
    for b in range(np.uint64(b0), np.uint64(b1)):
        base = np.uint64(batch_rows[b])
        for n in range(np.uint64(n0), np.uint64(n1)):
            row = _row(tuples, (b * un + n) * t, dims, strides, base, allow_negative)
            if row < 0:
                return 1
            if ublock == 1:
                out[b * un + n] = src[np.uint64(row)]
            else:
                o = (b * un + n) * ublock
                i = np.uint64(row) * ublock
                for q in range(ublock):
                    out[o + q] = src[i + q]
    return 0


@jit
def scatter_elements(
    out: np.ndarray,
    raw: np.ndarray,
    updates: np.ndarray,
    seen: np.ndarray,
    pre: int,
    dim: int,
    k_count: int,
    post: int,
    allow_negative: bool,
) -> int:
    """SCATTER into the flat ``out (pre, dim, post)`` (already a copy of InputTensor) of the flat
    ``updates (pre, k, post)`` at the flat ``raw (pre, k, post)``, in row-major index order so the last
    write wins. ``seen`` is a zeroed bit set (uint8) of ``out.size`` marks, or empty when duplicates are
    not counted. Returns the count of overwritten writes, or -1 when an index may not be used (``out`` is then
    partly written)."""
    udim, upost, uk = np.uint64(dim), np.uint64(post), np.uint64(k_count)
    count = seen.shape[0] > 0
    duplicates = 0
    for p in range(np.uint64(pre)):
        s = p * udim * upost
        for k in range(uk):
            o = (p * uk + k) * upost
            for q in range(upost):
                i = _index(raw[o + q], udim, allow_negative)
                if i == udim:
                    return -1
                target = s + i * upost + q
                if count and _seen_before(seen, target):
                    duplicates += 1
                out[target] = updates[o + q]
    return duplicates


@jit
def scatter_nd(
    out: np.ndarray,
    tuples: np.ndarray,
    dims: tuple[int, ...],
    strides: tuple[int, ...],
    updates: np.ndarray,
    seen: np.ndarray,
    block: int,
    allow_negative: bool,
) -> int:
    """SCATTER_ND into the flat ``out (rows, block)`` (already a copy of InputTensor) of the flat
    ``updates (N, block)`` at the rows the flat ``tuples (N, t)`` select, in index order so the last write
    wins. ``seen`` is a zeroed bit set (uint8) of one mark per row, or empty when duplicates are not counted.
    Returns the count of overwritten writes, or -1 when an index may not be used (``out`` is then partly
    written)."""
    t, ublock = np.uint64(len(dims)), np.uint64(block)
    count = seen.shape[0] > 0
    duplicates = 0
    for n in range(np.uint64(tuples.shape[0]) // t):
        row = _row(tuples, n * t, dims, strides, np.uint64(0), allow_negative)
        if row < 0:
            return -1
        r = np.uint64(row)
        if count and _seen_before(seen, r):
            duplicates += 1
        if ublock == 1:
            out[r] = updates[n]
        else:
            o = r * ublock
            u = n * ublock
            for q in range(ublock):
                out[o + q] = updates[u + q]
    return duplicates


@jit
def scatter_nd_owners(
    tuples: np.ndarray,
    dims: tuple[int, ...],
    strides: tuple[int, ...],
    owner: np.ndarray,
    allow_negative: bool,
) -> int:
    """SCATTER_ND's first pass when rows are wide: ``owner[row]`` (prefilled with -1) becomes the number
    of the last tuple, in index order, that writes ``row``: the write that wins. Returns the count of
    overwritten writes, or -1 when an index may not be used (nothing is written to the output then)."""
    t = np.uint64(len(dims))
    duplicates = 0
    for n in range(np.uint64(tuples.shape[0]) // t):
        row = _row(tuples, n * t, dims, strides, np.uint64(0), allow_negative)
        if row < 0:
            return -1
        r = np.uint64(row)
        if owner[r] >= 0:
            duplicates += 1
        owner[r] = n
    return duplicates


@jit
def scatter_nd_fill(
    src: np.ndarray, updates: np.ndarray, owner: np.ndarray, out: np.ndarray, block: int, r0: int, r1: int
) -> int:
    """SCATTER_ND's second pass over the output rows ``r0:r1``: each row is written once, from the update
    its owner names or, unowned, from the input, so the input copy and the writes are one pass. Rows are
    disjoint between calls, so calls may run on several threads at once. Element loops, not slices:
    numba's slice assignment made this pass 3x slower than a copy, the loops run at copy speed."""
    ublock = np.uint64(block)
    for r in range(np.uint64(r0), np.uint64(r1)):
        n = owner[r]
        o = r * ublock
        if n >= 0:
            u = np.uint64(n) * ublock
            for q in range(ublock):
                out[o + q] = updates[u + q]
        else:
            for q in range(ublock):
                out[o + q] = src[o + q]
    return 0
