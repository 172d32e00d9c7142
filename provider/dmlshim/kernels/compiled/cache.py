"""Where numba keeps the compiled loops' machine code, and the decorator that compiles them.

The loops are compiled on first use for each combination of argument types and saved in a ``numba``
folder of dmlshim's user cache folder (:func:`dmlshim.portable.user_cache_dir`, ``DMLSHIM_CACHE_DIR`` to
move it), so later processes load them in milliseconds. numba would otherwise write beside the source
file (inside site-packages) or in a folder of its own choosing; a cache locator that answers only for
this package's files sends it to dmlshim's folder and leaves every other numba user's caching as it was.
numba writes the cache files itself (an index and one object file per compiled signature, replaced
atomically by numba); dmlshim only makes the folder, refusing one that is a link. When the folder cannot
be made or written, or ``NUMBA_CACHE_LOCATOR_CLASSES`` overrides numba's locators, the loops are compiled
in each process instead and nothing is written.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import numba
from numba.core import caching
from numba.core import config as numba_config

from ...portable import is_link, user_cache_dir

logger = logging.getLogger(__name__)

_HERE = os.path.dirname(os.path.abspath(__file__))


def _usable_folder() -> str | None:
    """The numba cache folder, made if missing; None when it cannot be used."""
    if getattr(numba_config, "CACHE_LOCATOR_CLASSES", ""):
        logger.debug("NUMBA_CACHE_LOCATOR_CLASSES is set: compiled kernels are not cached on disk")
        return None
    folder = os.path.join(user_cache_dir(), "numba")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        st = os.lstat(folder)
        if is_link(st) or not stat.S_ISDIR(st.st_mode):
            raise OSError(f"{folder} is not a plain folder")
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        logger.warning("compiled kernels are not cached on disk (%s): each process compiles them again", e)
        return None
    return folder


FOLDER = _usable_folder()
"""Where the machine code is kept (None: not kept)."""


class _Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """numba's cache locator for this package's loops only: everything in :data:`FOLDER`."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = FOLDER

    def get_cache_path(self) -> str | None:
        return self._cache_path

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> _Locator | None:
        if FOLDER is None or os.path.dirname(os.path.abspath(py_file)) != _HERE:
            return None
        return cls(py_func, py_file)


# Older numba releases name the class _CacheImpl.
_IMPL: Any = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")  # noqa: B009
_LOCATORS: list[Any] = _IMPL._locator_classes
if FOLDER is not None and _Locator not in _LOCATORS:
    _LOCATORS.insert(0, _Locator)

_F = TypeVar("_F", bound=Callable[..., Any])


def _compile(function: _F, inline: Literal["never", "always"]) -> _F:
    compiled: Any = numba.njit(
        nogil=True, cache=FOLDER is not None, boundscheck=False, error_model="numpy", inline=inline
    )(function)
    return compiled


def jit(function: _F) -> _F:
    """Compile ``function`` lazily, without the GIL, cached in :data:`FOLDER` when there is one.

    Indices are proved in range inside the loops before they are used, so numba's own bounds checks
    stay off; ``error_model="numpy"`` keeps integer division from raising.
    """
    return _compile(function, "never")


def inline(function: _F) -> _F:
    """:func:`jit` for a helper the loops call per element: inlined into each caller by numba."""
    return _compile(function, "always")
