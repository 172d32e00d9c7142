"""Chunked execution of a kernel's element-wise work, on several cores when the work is large.

Large tensors are processed in chunks of a few hundred thousand elements: the temporaries of one chunk
(index offsets, masks) stay in cache instead of being written to and read back from memory, and the
numpy calls that do the work (``np.take``, ufuncs, reductions, fancy assignment) release the GIL, so a
thread pool runs chunks on every core. Chunks much smaller than this spend more time on Python overhead
and GIL hand-offs than on data.

Two environment variables tune it (read once, at import): ``DMLSHIM_KERNEL_THREADS`` (worker threads;
default: the cores this process may use, at most 8; ``1`` runs everything on the calling thread) and
``DMLSHIM_KERNEL_CHUNK`` (the largest chunk in elements; small values exercise the chunked paths in tests).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..portable import usable_cores
from . import recycle

logger = logging.getLogger(__name__)


_IGNORED: list[str] = []
"""Settings read at import and not taken as given; reported by :func:`report_ignored` (no logging is set
up yet at import)."""


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        _IGNORED.append(f"ignoring {name}={value!r}: not an integer")
        return default
    if number < 1:
        _IGNORED.append(f"{name}={value!r} is below 1: using 1")
    return max(1, number)


def report_ignored() -> None:
    """Log, once, each setting not taken as given at import: called when the kernels are first consulted,
    so the warning reaches the logging the caller (the CLI) set up after importing dmlshim."""
    while _IGNORED:
        logger.warning(_IGNORED.pop(0))


THREADS = _env_int("DMLSHIM_KERNEL_THREADS", min(usable_cores(), 8))
"""Worker threads used for large tensors."""

CHUNK_ELEMENTS = _env_int("DMLSHIM_KERNEL_CHUNK", 1 << 18)
"""The largest chunk, in elements of the biggest array a chunk touches."""

MIN_CHUNK_ELEMENTS = min(CHUNK_ELEMENTS, 1 << 15)
"""Chunks are not cut smaller than this to feed more threads (overhead would dominate)."""

PARALLEL_MIN_ELEMENTS = min(1 << 20, 4 * CHUNK_ELEMENTS)
"""Below this much work, handing chunks to other threads costs more (wake-ups, GIL hand-offs) than it
saves, so everything runs on the calling thread."""

BLOCK_COPY_BYTES = 64
"""Gathers and scatters that move runs of at least this many bytes per index are memory-copy bound:
numpy's whole-array ``take`` / row assignment already runs at memory speed. A second thread made them up
to 1.3x faster on an idle 2-core machine but up to 2.5x slower when other processes kept the cores busy
(a descheduled helper holds its chunk while the caller waits), so they skip this module."""


Box = tuple[int, int, int, int]
"""A chunk of work: ``(o0, o1, i0, i1)``, see :func:`spans`."""

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_forked = False
"""Whether this process is a forked child (see :func:`_forget_pool_in_child`)."""


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="dmlshim-kernel")
        return _pool


def _forget_pool_in_child() -> None:
    """After ``fork``: the child has none of the parent's kernel threads, so the parent's pool would queue
    a chunk no thread ever takes and :func:`run_all` would wait for it forever (a session run in a forked
    worker after its parent ran a large gather hung); a lock another thread held at the fork would stay
    held. The child starts no kernel threads at all: a forked copy of a threaded process is not safe to
    start threads in (a run inside onnxruntime's custom-op call hung creating its first helper thread,
    with onnxruntime 1.24.4), so its kernels run on the calling thread."""
    global _pool, _pool_lock, _forked
    _forked = True
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forget_pool_in_child)


SCRATCH_MIN_ELEMENTS = min(1 << 15, CHUNK_ELEMENTS)
"""Index temporaries at least this long come from the thread's reusable scratch buffer (:func:`scratch`)
instead of a fresh allocation: a fresh multi-megabyte array costs page faults on first touch, which
made chunked gathers up to 1.4x slower."""

_local = threading.local()


def scratch(count: int) -> np.ndarray:
    """A 1-D int64 array of ``count`` elements for a chunk's index offsets: a view of a buffer owned by
    the calling thread and reused by its next chunk, so the caller must be done with it before asking
    again (and never hand it out). Small counts get a new array."""
    if count < SCRATCH_MIN_ELEMENTS:
        return np.empty(count, dtype=np.int64)
    buf: np.ndarray | None = getattr(_local, "buffer", None)
    if buf is None or buf.size < count:
        buf = _local.buffer = np.empty(max(count, CHUNK_ELEMENTS), dtype=np.int64)
    return buf[:count]


def worth_chunking(block_bytes: int) -> bool:
    """Whether a gather/scatter moving ``block_bytes`` per index should take its chunked path."""
    return block_bytes < BLOCK_COPY_BYTES


def chunk_length(total: int) -> int:
    """The chunk length for ``total`` elements: at most CHUNK_ELEMENTS, and small enough that every
    worker gets about two chunks when the work is large enough to share."""
    if total < PARALLEL_MIN_ELEMENTS or THREADS <= 1:
        return max(1, min(total, CHUNK_ELEMENTS))
    share = -(-total // (2 * THREADS))
    return max(1, min(CHUNK_ELEMENTS, max(MIN_CHUNK_ELEMENTS, share)))


def spans(outer: int, inner: int, length: int) -> list[Box]:
    """Split an ``outer x inner`` grid of rows into chunks of about ``length`` grid cells.

    Returns:
        ``(o0, o1, i0, i1)`` boxes covering the grid in row-major order. A box either spans whole rows
        (``i0 == 0, i1 == inner``) or lies within one row (``o1 == o0 + 1``), so the matching slice of a
        C-contiguous ``(outer, inner, ...)`` array is itself contiguous.
    """
    if outer == 0 or inner == 0:
        return []
    if inner >= length:
        step = max(1, length)
        return [(o, o + 1, i, min(inner, i + step)) for o in range(outer) for i in range(0, inner, step)]
    rows = max(1, length // inner)
    return [(o, min(outer, o + rows), 0, inner) for o in range(0, outer, rows)]


def run_all(work: Callable[[Box], bool], boxes: Sequence[Box], elements: int) -> bool:
    """Call ``work`` on every box, sharing the boxes between the calling thread and the kernel threads
    when the boxes hold at least PARALLEL_MIN_ELEMENTS ``elements`` in all.

    The calling thread takes boxes too, and every thread takes the next unclaimed box when it is done,
    so when other processes keep the cores busy the work simply runs on fewer threads instead of
    waiting for a descheduled one.

    ``work`` returns False to refuse its box (an index the fast path cannot handle); the boxes not yet
    started are then skipped and False is returned, and the caller redoes the whole operation on its
    general path. An exception stops the other threads the same way and is re-raised.
    """
    if len(boxes) <= 1 or THREADS <= 1 or elements < PARALLEL_MIN_ELEMENTS:
        return all(work(box) for box in boxes)
    claim = threading.Lock()
    order = iter(range(len(boxes)))
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            with claim:
                i = next(order, None)
            if i is None:
                return
            try:
                ok = work(boxes[i])
            except BaseException:
                stop.set()
                raise
            if not ok:
                stop.set()

    helpers = [] if _forked else [_executor().submit(drain) for _ in range(min(THREADS, len(boxes)) - 1)]
    try:
        drain()
    finally:
        for helper in helpers:
            # Waits for the helper's current box; re-raises its exception, if any.
            helper.result()
    return not stop.is_set()


def parallel_copy(flat: np.ndarray) -> np.ndarray:
    """A new C-contiguous copy of the 1-D array ``flat`` (in a recycled buffer, see
    :mod:`dmlshim.kernels.recycle`), copied chunk by chunk on the kernel threads when large."""
    if flat.size < PARALLEL_MIN_ELEMENTS or THREADS <= 1:
        return recycle.copy(flat)
    out = recycle.empty(flat.shape, flat.dtype)

    def work(box: Box) -> bool:
        _, _, a, b = box
        np.copyto(out[a:b], flat[a:b])
        return True

    run_all(work, spans(1, flat.size, chunk_length(flat.size)), flat.size)
    return out
