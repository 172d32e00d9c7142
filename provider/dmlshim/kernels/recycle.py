"""Output buffers the kernels reuse once nobody holds them any more.

A fresh multi-megabyte numpy array is memory the operating system maps on first touch: writing it costs
a page fault per 4 KB page, which made a scatter's 3 MB copy of its input 3-5x slower than the same copy
into memory already touched (measured on the 2-core bench VM: 24 copies of a (1, 12, 1024, 64) float32
KV cache took 60-110 ms fresh, 20-27 ms into touched buffers). onnxruntime keeps such memory in its
arena; the kernels keep a small pool of their large output buffers instead.

A pooled buffer is handed out again only when the pool holds the last reference to it: every array a
caller was given (and every view of it, which references it as its ``base``) keeps it out of reuse, so a
result the caller still holds is never overwritten. Buffers under :data:`MIN_BYTES` are left to numpy's
own allocator, and the pool keeps at most :data:`MAX_BYTES` (least recently used buffers go first).
``DMLSHIM_KERNEL_RECYCLE=0`` turns the pool off.
"""

from __future__ import annotations

import math
import os
import sys
import sysconfig
from collections import OrderedDict

import numpy as np

from ..fork_locks import ChildLock

MIN_BYTES = 1 << 20
"""Smaller outputs come from numpy's allocator (the C library reuses small blocks without faults)."""

MAX_BYTES = 256 << 20
"""The most memory the pool keeps (free or in use) beyond what callers hold."""

# Reuse is decided by reference counts, which are exact only where the GIL is on (free-threaded builds
# defer and bias them): there the pool stays off.
ENABLED = os.environ.get("DMLSHIM_KERNEL_RECYCLE", "1") != "0" and not sysconfig.get_config_var(
    "Py_GIL_DISABLED"
)

# The references a free buffer has inside _take: the pool's dict, the loop variable, getrefcount's arg.
_FREE_REFS = 3

_lock = ChildLock()
_buffers: OrderedDict[int, list[np.ndarray]] = OrderedDict()
_pooled_bytes = 0


def empty(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised C-contiguous array like ``np.empty(shape, dtype)``, backed by a recycled buffer
    when one of its size is free (see the module docstring)."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    if not ENABLED or nbytes < MIN_BYTES or dt.hasobject:
        return np.empty(shape, dtype=dt)
    return _take(nbytes).view(dt).reshape(shape)


def copy(flat: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``flat`` in a (possibly recycled) buffer."""
    out = empty(flat.shape, flat.dtype)
    np.copyto(out, flat)
    return out


def _take(nbytes: int) -> np.ndarray:
    global _pooled_bytes
    with _lock:
        same = _buffers.get(nbytes)
        if same is not None:
            for buf in same:
                if sys.getrefcount(buf) <= _FREE_REFS:
                    _buffers.move_to_end(nbytes)
                    return buf
        if nbytes > MAX_BYTES:
            return np.empty(nbytes, dtype=np.uint8)
        _evict(MAX_BYTES - nbytes)
        if _pooled_bytes + nbytes > MAX_BYTES:
            return np.empty(nbytes, dtype=np.uint8)  # the pool is full of buffers still in use
        buf = np.empty(nbytes, dtype=np.uint8)
        _buffers.setdefault(nbytes, []).append(buf)
        _buffers.move_to_end(nbytes)
        _pooled_bytes += nbytes
        return buf


def _evict(limit: int) -> None:
    """Drop free buffers, least recently used sizes first, until the pool keeps at most ``limit`` bytes
    (buffers in use stay: their holders own them; the pool forgets them only when they are free)."""
    global _pooled_bytes
    for size in list(_buffers):
        if _pooled_bytes <= limit:
            return
        kept = []
        for buf in _buffers[size]:
            if _pooled_bytes > limit and sys.getrefcount(buf) <= _FREE_REFS:
                _pooled_bytes -= size
            else:
                kept.append(buf)
        if kept:
            _buffers[size] = kept
        else:
            del _buffers[size]


def clear() -> None:
    """Forget every pooled buffer (arrays still held by callers stay valid: they own a reference)."""
    global _pooled_bytes
    with _lock:
        _buffers.clear()
        _pooled_bytes = 0


def pooled_bytes() -> int:
    """Bytes of every buffer the pool keeps (free or in use)."""
    return _pooled_bytes
