"""Running out of memory or of recursion depth, turned into dmlshim errors that say what ran out."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import BadInputError, OutOfMemoryError
from .limits import format_bytes, memory_limit

_F = TypeVar("_F", bound=Callable[..., Any])


def out_of_memory(exc: BaseException, doing: str) -> OutOfMemoryError:
    """The :class:`OutOfMemoryError` for a ``MemoryError`` raised while ``doing`` (e.g. "running the model").

    The message says what ran out (the allocator's own words, or "an allocation") and why: the model or
    its inputs need more memory than is free, with the limit dmlshim checks sizes against.
    """
    detail = str(exc).strip() or "an allocation failed with no further detail"
    try:
        cap = memory_limit()
    except BadInputError:  # a malformed DMLSHIM_MEMORY_LIMIT is refused where it is first read
        cap = None
    limit = f"; dmlshim's memory limit is {format_bytes(cap)}" if cap is not None else ""
    return OutOfMemoryError(
        f"ran out of memory while {doing}: {detail}. The model, its inputs or its outputs need more memory "
        f"than is free on this machine{limit}. Use smaller inputs, free memory, or lower "
        "DMLSHIM_MEMORY_LIMIT so oversized tensors are refused before allocation",
        value=str(exc),
        rule="a tensor must fit in free memory",
    )


def too_deep(exc: BaseException, doing: str) -> BadInputError:
    """The error for a RecursionError raised while ``doing``: the input nests deeper than Python allows."""
    return BadInputError(
        f"the input nests too deeply to process while {doing} (Python's recursion limit, "
        f"{type(exc).__name__}); no valid file nests that deep",
        rule="nesting stays within Python's recursion limit",
    )


def guard_resources(doing: str) -> Callable[[_F], _F]:
    """Decorate a public entry point so that running out of memory or recursion depth leaves it as a
    :class:`DmlShimError` (``OutOfMemoryError`` / ``BadInputError``) saying what ran out, never as a bare
    ``MemoryError`` with an empty message."""

    def wrap(func: _F) -> _F:
        @functools.wraps(func)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except MemoryError as exc:
                raise out_of_memory(exc, doing) from exc
            except RecursionError as exc:
                raise too_deep(exc, doing) from exc

        return guarded  # type: ignore[return-value]

    return wrap
