"""The exception hierarchy of dmlshim.

User errors (a bad model, a bad input, a node DirectML cannot express) are separated from internal bugs.
Every error carries structured context so the CLI can print one paragraph naming the file, node, op,
tensor, rule and offending value, and so tests can assert on fields instead of sentences. Errors leaving an
``InferenceSession`` or ``IOBinding`` are also made instances of onnxruntime's own exception classes (see
:mod:`dmlshim.runtime.exceptions`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .text import printable

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
            parts.append(f"tensor {printable(self.tensor)}")
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


class InputsNotGeneratedError(BadInputError):
    """No inputs can be generated for the model (an input with no shape, of a type or range nothing can be
    drawn from, or no shapes onnxruntime accepts): the caller has to give them. Internal: ``--json`` errors
    report it as the ``BadInputError`` it is (``reported_as``)."""

    reported_as = "BadInputError"


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
