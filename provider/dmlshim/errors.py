"""The exception hierarchy of dmlshim.

User errors (a bad model, a bad input, a node DirectML cannot express) are separated from internal bugs.
Every error carries structured context so the CLI can print one paragraph naming the file, node, op,
tensor, rule and offending value, and so tests can assert on fields instead of sentences. Errors leaving an
``InferenceSession`` or ``IOBinding`` are also made instances of onnxruntime's own exception classes (see
:mod:`dmlshim.ort.exceptions`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


class DmlShimError(Exception):
    """Base class of every error dmlshim raises on purpose.

    Attributes:
        rule: the rule (from the DirectML docs or the ONNX spec) that failed, if any.
        value: the offending value, if any.
        node: the ONNX node name, if the error concerns a node.
        op_type: the ONNX or DirectML operator concerned, if any.
        tensor: the tensor concerned (a DirectML binding name or an ONNX tensor name), if any.
        path: the file concerned, if any.
    """

    exit_code: int = 2

    def __init__(
        self,
        message: str,
        *,
        rule: str | None = None,
        value: Any = None,
        node: str | None = None,
        op_type: str | None = None,
        tensor: str | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.rule = rule
        self.value = value
        self.node = node
        self.op_type = op_type
        self.tensor = tensor
        self.path = path

    def __str__(self) -> str:
        parts: list[str] = []
        if self.path:
            parts.append(f"file {self.path!r}")
        if self.node is not None:
            parts.append(f"node {self.node!r}")
        if self.op_type:
            parts.append(f"op {self.op_type}")
        if self.tensor:
            parts.append(f"tensor {self.tensor}")
        where = (", ".join(parts) + ": ") if parts else ""
        text = where + self.message
        if self.rule and self.rule not in self.message:
            text += f" [rule: {self.rule}]"
        return text


class BadModelError(DmlShimError):
    """The model file cannot be read, is not ONNX, fails onnx.checker, or is otherwise unusable."""


class BadInputError(DmlShimError):
    """An input tensor or feed does not fit the model or the operator (shape, dtype, index range).

    Not a ``ValueError``: leaving an ``InferenceSession`` it is an instance of onnxruntime's class for the
    refusal (``InvalidArgument`` ...) and of nothing onnxruntime's error is not, so a client's
    ``except ValueError`` catches only what it caught under onnxruntime."""


class IndexOutOfRangeError(BadInputError):
    """An index lies outside the dimension it addresses (ONNX semantics: an error)."""


class TooLargeError(BadInputError):
    """The work would need more memory than the machine has; refused before allocating (see dmlshim.limits).

    ``value`` is the number of bytes one tensor would need.
    """


class InvalidDescriptorError(DmlShimError):
    """A DirectML operator descriptor breaks a rule of the DirectML docs at the target feature level.

    Attributes:
        violations: every rule that failed, not just the first.
    """

    def __init__(self, message: str, *, violations: tuple[Any, ...] = (), **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.violations = violations


class UnsupportedNodeError(DmlShimError):
    """A node cannot be expressed as a DirectML operator (and the caller asked for no fallback)."""

    exit_code = 1


class ValidationMismatchError(DmlShimError):
    """dmlshim's result differs from the reference (onnxruntime CPU)."""

    exit_code = 1


class EngineUnavailableError(DmlShimError):
    """The requested execution engine cannot run on this machine (e.g. no DmlExecutionProvider)."""


class NotSupportedError(DmlShimError):
    """An onnxruntime API dmlshim does not offer; the message says what to use instead."""


class OutOfMemoryError(TooLargeError):
    """Memory ran out while working: an allocation (numpy, onnxruntime) failed although every size
    dmlshim knows in advance fit the limit. ``value`` is the underlying message."""


def out_of_memory(exc: BaseException, doing: str) -> OutOfMemoryError:
    """The :class:`OutOfMemoryError` for a ``MemoryError`` raised while ``doing`` (e.g. "running the model").

    The message says what ran out (the allocator's own words, or "an allocation") and why: the model or
    its inputs need more memory than is free, with the limit dmlshim checks sizes against.
    """
    from .limits import format_bytes, memory_limit

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
