"""Compiled gather/scatter kernels: one fused pass per node, on the kernel threads when the work is large.

The numpy kernels of :mod:`dmlshim.kernels` need several passes over the indices (the range proof, the
offset arithmetic, ``np.take`` or the assignment); the loops here read each index once, check it, wrap
it and move the element. They are compiled by numba, an optional dependency (the ``fast`` extra,
:func:`dmlshim.extras.install_command`); without it the numpy kernels run unchanged. The numpy kernels
stay the reference: the compiled ones give the same output bit for bit and the same duplicate counts,
and hand every case they do not take (an index out of range or negative where it may not be, which the
numpy kernel then raises or clamps; an input read through Strides; an empty tensor) to the numpy kernel.

``DMLSHIM_KERNELS`` chooses (read once, at the first kernel call: a bad value is logged where the
caller has set logging up by then): ``auto`` (the default: compiled when numba is installed, from
the first call whose output holds :data:`AUTO_MIN_ELEMENTS` elements or more on),
``numpy``, or ``compiled`` (every call; an error when numba is missing). :func:`use` changes the choice
in a running process. Loading numba and the cached loops costs a process about 0.5-1 s and 100 MB
(docs/performance.md): ``auto`` leaves processes that only ever run small gathers (most models' shape
computations) without that cost. See :mod:`.cache` for where the machine code is kept.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import EngineUnavailableError
from ...extras import install_command
from ...fork_locks import ChildLock

logger = logging.getLogger(__name__)

MODES = ("auto", "numpy", "compiled")
"""The values DMLSHIM_KERNELS takes."""

Kernel = Callable[[Any, Mapping[str, Any], Any], Any]
"""A compiled entry point: ``(desc, inputs, options) -> KernelResult | None`` (None: run the numpy
kernel)."""


AUTO_MIN_ELEMENTS = 1 << 18
"""In ``auto`` mode, numba is loaded by the first call with an output this large (1 MB of float32):
below it the numpy kernels cost tens of microseconds, and loading numba would cost a second."""


def installed() -> bool:
    """Whether numba can be imported (looked up without importing it)."""
    return importlib.util.find_spec("numba") is not None


def _env_mode() -> str:
    value = os.environ.get("DMLSHIM_KERNELS", "").strip().lower() or "auto"
    if value not in MODES:
        logger.warning("ignoring DMLSHIM_KERNELS=%r: expected one of %s", value, ", ".join(MODES))
        return "auto"
    return value


_lock = ChildLock()
_mode: str | None = None
"""The choice in force; None until first consulted (DMLSHIM_KERNELS is read then, so that a bad value is
reported through the logging the caller set up after importing dmlshim, as the CLI does)."""
_table: dict[type, Kernel] | None = None
_loaded = False
LOAD_SECONDS: float | None = None
"""How long importing numba and the compiled modules took in this process (None: not loaded)."""


def use(mode: str) -> None:
    """Choose the kernels from now on: ``auto``, ``numpy`` or ``compiled`` (as DMLSHIM_KERNELS).

    Raises:
        ValueError: an unknown mode.
        EngineUnavailableError: ``compiled`` without numba.
    """
    global _mode, _loaded, _table, _always
    if mode not in MODES:
        raise ValueError(f"unknown kernels {mode!r}: expected one of {', '.join(MODES)}")
    with _lock:
        # _always too: a call asking for the compiled kernels then gets the table now in force
        _mode, _loaded, _table, _always = mode, False, None, None
    if mode == "compiled":
        _kernels()


def _current() -> str:
    global _mode
    if _mode is None:
        from ..parallel import report_ignored  # read at import too: reported with DMLSHIM_KERNELS

        report_ignored()
        _mode = _env_mode()
    return _mode


def mode() -> str:
    """The choice in force: ``auto``, ``numpy`` or ``compiled``."""
    return _current()


def selected() -> str:
    """The kernels calls use now: ``numpy`` or ``compiled``."""
    return "compiled" if _kernels() is not None else "numpy"


def _load() -> dict[type, Kernel]:
    global LOAD_SECONDS
    start = time.perf_counter()
    from ...dml.operators import (
        GatherDesc,
        GatherElementsDesc,
        GatherNd1Desc,
        GatherNdDesc,
        ScatterDesc,
        ScatterNdDesc,
    )
    from . import gathers, scatters

    table: dict[type, Kernel] = {
        GatherDesc: gathers.gather,
        GatherElementsDesc: gathers.gather_elements,
        GatherNdDesc: gathers.gather_nd,
        GatherNd1Desc: gathers.gather_nd,
        ScatterDesc: scatters.scatter_elements,
        ScatterNdDesc: scatters.scatter_nd,
    }
    LOAD_SECONDS = time.perf_counter() - start
    logger.debug("compiled kernels: numba loaded in %.3f s", LOAD_SECONDS)
    return table


def _kernels() -> dict[type, Kernel] | None:
    """The compiled entry points by descriptor type, loading them on first use; None: numpy kernels."""
    global _loaded, _table
    if _loaded:
        return _table
    with _lock:
        if _loaded:
            return _table
        table = None
        if _current() == "compiled":
            table = _import_compiled()
        elif _current() == "auto" and installed():
            try:
                table = _load()
            except ImportError as e:
                logger.warning("numba is installed but cannot be imported (%s): using the numpy kernels", e)
        _table, _loaded = table, True
        return table


def kernel_for(
    desc_type: type, kernels: str | None = None, elements: int = AUTO_MIN_ELEMENTS
) -> Kernel | None:
    """The compiled entry point for a descriptor type, or None when the numpy kernels are to run.

    Args:
        desc_type: the descriptor's type.
        kernels: ``"numpy"`` or ``"compiled"`` to choose for this call; None: the selected kernels.
        elements: the call's output element count (``auto`` loads numba only for a large call).

    Raises:
        EngineUnavailableError: compiled kernels asked for (here or by DMLSHIM_KERNELS) without numba.
    """
    if kernels is None:
        if not _loaded and _current() == "auto" and elements < AUTO_MIN_ELEMENTS:
            return None
        table = _table if _loaded else _kernels()
    elif kernels == "numpy":
        return None
    elif kernels == "compiled":
        table = _compiled_table()
    else:
        raise ValueError(f"unknown kernels {kernels!r}: expected 'numpy' or 'compiled'")
    return None if table is None else table.get(desc_type)


_always: dict[type, Kernel] | None = None


def _compiled_table() -> dict[type, Kernel]:
    """The compiled entry points whatever the mode (loaded once)."""
    global _always
    if _always is None:
        table = _kernels() if _current() != "numpy" else None
        _always = table if table is not None else _import_compiled()
    return _always


def _import_compiled() -> dict[type, Kernel]:
    try:
        return _load()
    except ImportError as e:
        raise EngineUnavailableError(
            f"the compiled kernels need numba, which cannot be imported ({e}): "
            f"install numba with `{install_command('fast')}`",
            value="compiled",
        ) from e
