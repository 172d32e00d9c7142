"""dmlshim's errors as instances of onnxruntime's exception classes too.

onnxruntime raises its own classes (``onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument``,
``NoSuchFile``, ``InvalidProtobuf``, ``Fail``, ...), and client code catches them by name. A dmlshim
session keeps its own, clearer errors, but each one leaving the session is re-classed as a subclass of both
its dmlshim class and the onnxruntime class onnxruntime raises in that situation, so
``except dmlshim.BadInputError`` and ``except InvalidArgument`` both catch it. The combined classes are
made on first use and cached; they pickle by name (this module builds them again on unpickling).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar, cast

from google.protobuf.message import DecodeError

from .. import errors as _errors
from ..errors import (
    BadInputError,
    BadModelError,
    DmlShimError,
    EngineUnavailableError,
    IndexOutOfRangeError,
    NotSupportedError,
    OutOfMemoryError,
    UnsupportedNodeError,
)
from .real import pybind_state

_F = TypeVar("_F", bound=Callable[..., Any])

ORT_CLASS_NAMES = (
    "Fail",
    "InvalidArgument",
    "NoSuchFile",
    "NoModel",
    "EngineError",
    "RuntimeException",
    "InvalidProtobuf",
    "ModelLoaded",
    "NotImplemented",
    "InvalidGraph",
    "EPFail",
)
"""onnxruntime's own exception classes (``onnxruntime_pybind11_state``), by name."""

_SEP = "__as__"


def _ort_class(name: str) -> type[BaseException]:
    found = getattr(pybind_state, name)
    assert isinstance(found, type) and issubclass(found, BaseException)
    return found


def ort_class(name: str) -> type[BaseException]:
    """onnxruntime's exception class of that name (``Fail``, ``InvalidArgument`` ...)."""
    return _ort_class(name)


def _ort_classes() -> tuple[type[BaseException], ...]:
    return tuple(_ort_class(n) for n in ORT_CLASS_NAMES if hasattr(pybind_state, n))


def _from_cause(exc: BaseException) -> type[BaseException] | None:
    """The onnxruntime class of the onnxruntime error behind ``exc`` (its cause chain), if any."""
    own = _ort_classes()
    seen: set[int] = set()
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        for cls in own:
            if type(cause) is cls:
                return cls
        cause = cause.__cause__ or cause.__context__
    return None


def _plain_runtime_cause(exc: BaseException) -> bool:
    """Whether the cause chain of ``exc`` holds a plain ``RuntimeError``: what onnxruntime's Python layer
    raises outside its status classes (a bfloat16 output ``run`` cannot return, an array it cannot
    convert), and what a client catching onnxruntime's error there catches."""
    seen: set[int] = set()
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if type(cause) is RuntimeError:
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _has_decode_cause(exc: BaseException) -> bool:
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, DecodeError):
            return True
        cause = cause.__cause__
    return False


_CHECK_FAILED_OPS = frozenset({"GatherElements"})
"""Ops whose out-of-range index onnxruntime's CPU kernel reports as a failed internal check rather than
InvalidArgument (GatherElements enforces its range check): see :func:`check_failure_class`."""


@functools.cache
def check_failure_class() -> type[BaseException]:
    """The class onnxruntime raises when one of its internal checks fails (a kernel's ``ORT_ENFORCE`` at
    run time, a file missing while the session initializes): ``Fail`` in recent versions,
    ``RuntimeException`` in 1.24 and older. Asked once of the installed onnxruntime itself, with a
    GatherElements given an out-of-range index."""
    import numpy as np
    from onnx import TensorProto, helper

    from .real import OrtInferenceSession
    from .real import ort as real_ort

    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)],
        "dmlshim_check_failure_probe",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    try:
        # quiet: onnxruntime would log the probe's failure as an error on the user's terminal, beside an
        # unrelated error of theirs ("GatherElements op: Out of range value in index tensor")
        so = real_ort.SessionOptions()
        so.log_severity_level = 4
        ro = real_ort.RunOptions()
        ro.log_severity_level = 4
        session = OrtInferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        session.run(None, {"x": np.zeros(2, np.float32), "i": np.array([5], np.int64)}, ro)
    except Exception as exc:  # the answer is whichever onnxruntime class it raised
        if isinstance(exc, _ort_classes()):
            return type(exc)
    return _ort_class("Fail")  # no answer: the class recent onnxruntime versions raise


_NOT_A_MODEL = ("not a serialized onnx model", "not a readable onnx model", "not an onnx model", "empty")


ORT_CLASS_ATTR = "onnxruntime_class"
"""An attribute a raise site may set on a dmlshim error: the onnxruntime class onnxruntime raises there,
when the error's dmlshim class alone does not say (e.g. a plain ``RuntimeError``)."""


_E = TypeVar("_E", bound=DmlShimError)


def refusal_class(model: str | bytes, default: type[BaseException]) -> type[BaseException]:
    """The class the installed onnxruntime raises loading ``model`` (a path, or serialized bytes), for a
    model dmlshim refuses before onnxruntime sees it; the classes differ between versions (an empty model
    is ``InvalidArgument`` in 1.32, ``Fail`` in 1.24). Meant for models that fail fast (no graph, no
    opset); ``default`` when onnxruntime loads it or answers with no class of its own."""
    from .real import OrtInferenceSession

    try:
        OrtInferenceSession(model, providers=["CPUExecutionProvider"])
    except Exception as exc:  # the answer is whichever onnxruntime class it raised
        if isinstance(exc, _ort_classes()):
            return type(exc)
    return default


def with_onnxruntime_class(exc: _E, cls: type[BaseException]) -> _E:
    """Mark ``exc`` as raised where onnxruntime raises ``cls``; returns ``exc`` (for ``raise``)."""
    setattr(exc, ORT_CLASS_ATTR, cls)
    return exc


def onnxruntime_class(exc: DmlShimError) -> type[BaseException]:
    """The onnxruntime class onnxruntime raises where dmlshim raised ``exc``."""
    forced = getattr(exc, ORT_CLASS_ATTR, None)
    if isinstance(forced, type) and issubclass(forced, BaseException):
        return forced
    from_ort = _from_cause(exc)
    if from_ort is not None:
        return from_ort
    if isinstance(exc, OutOfMemoryError):
        return _ort_class("RuntimeException")
    if isinstance(exc, IndexOutOfRangeError) and exc.op_type in _CHECK_FAILED_OPS:
        return check_failure_class()
    if isinstance(exc, BadInputError):
        return _ort_class("InvalidArgument")
    if isinstance(exc, BadModelError):
        if exc.path is not None and not os.path.lexists(exc.path):
            return _ort_class("NoSuchFile")
        if isinstance(exc.__cause__, FileNotFoundError):  # the model is there, a file it names is not
            return check_failure_class()
        if _has_decode_cause(exc) or any(t in exc.message.lower() for t in _NOT_A_MODEL):
            return _ort_class("InvalidProtobuf")
        return _ort_class("InvalidGraph")
    if isinstance(exc, (NotSupportedError, UnsupportedNodeError)):
        return _ort_class("NotImplemented")
    if isinstance(exc, EngineUnavailableError):
        return _ort_class("EPFail")
    return _ort_class("Fail")


_STATUS_CODES = {
    "Fail": (1, "FAIL"),
    "InvalidArgument": (2, "INVALID_ARGUMENT"),
    "NoSuchFile": (3, "NO_SUCHFILE"),
    "NoModel": (4, "NO_MODEL"),
    "EngineError": (5, "ENGINE_ERROR"),
    "RuntimeException": (6, "RUNTIME_EXCEPTION"),
    "InvalidProtobuf": (7, "INVALID_PROTOBUF"),
    "ModelLoaded": (8, "MODEL_LOADED"),
    "NotImplemented": (9, "NOT_IMPLEMENTED"),
    "InvalidGraph": (10, "INVALID_GRAPH"),
    "EPFail": (11, "EP_FAIL"),
    "ModelLoadCanceled": (12, "MODEL_LOAD_CANCELED"),
    "ModelRequiresCompilation": (13, "MODEL_REQUIRES_COMPILATION"),
    "NotFound": (14, "NOT_FOUND"),
}
"""onnxruntime's status code of each of its exception classes, as its messages begin:
``[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ...``."""


def status_prefix(cls: type[BaseException]) -> str:
    """How onnxruntime begins the message of an error of class ``cls`` ("" for a plain Python class)."""
    code = _STATUS_CODES.get(cls.__name__) if cls.__module__ == pybind_state.__name__ else None
    return f"[ONNXRuntimeError] : {code[0]} : {code[1]} : " if code else ""


def _own_details(exc: DmlShimError) -> str:
    """What dmlshim adds to a message: the file, node, op, tensor and rule."""
    parts = [
        f"{label} {value}"
        for label, value in (
            ("file", repr(exc.path) if exc.path else None),
            ("node", repr(exc.node) if exc.node is not None else None),
            ("op", exc.op_type),
            ("tensor", exc.tensor),
            ("rule:", exc.rule if exc.rule and exc.rule not in exc.message else None),
        )
        if value
    ]
    return "; ".join(parts)


def onnxruntime_text(exc: DmlShimError) -> str:
    """``exc``'s message as onnxruntime's error for it reads: onnxruntime's status prefix, onnxruntime's own
    message first when one is behind it (its cause), then dmlshim's explanation and details."""
    # the class onnxruntime raises there comes first among the added ones: a plain Python class (a
    # RuntimeError from onnxruntime's bindings) has no status prefix
    bases = type(exc).__bases__
    prefix = status_prefix(bases[1]) if type(exc).__module__ == __name__ and len(bases) > 1 else ""
    message = exc.message
    cause = _ort_cause(exc)
    if cause is not None:
        theirs = str(cause).strip()
        prefixed = theirs.startswith("[ONNXRuntimeError]")
        bare = theirs[len(status_prefix(type(cause))) :] if prefixed else theirs
        if bare:
            # onnxruntime's message quoted in dmlshim's ("... out of range (THEIRS)") is not said twice
            rest = message.replace(theirs, "").replace(bare, "").replace(" ()", "").strip(" :;,")
            message = f"{bare} (dmlshim: {rest})" if rest else bare
    elif prefix and prefix in message:
        message = message.replace(prefix, "")
    if cause is None and isinstance(exc, IndexOutOfRangeError) and exc.node is not None and exc.op_type:
        # onnxruntime's kernel fails the run this way; its own words for the index follow in dmlshim's
        message = f"Non-zero status code returned while running {exc.op_type} node. Name:'{exc.node}' " + (
            f"Status Message: {message}"
        )
    words = getattr(exc, _WORDS_ATTR, "")
    if words and not message.startswith(words):
        message = f"{words} (dmlshim: {message})"
    lead = getattr(exc, _LEAD_ATTR, "")
    if lead and not message.startswith(lead):
        message = lead + message
    details = _own_details(exc)
    return f"{prefix}{message}" + (f" [{details}]" if details else "")


_LEAD_ATTR = "onnxruntime_lead"
_WORDS_ATTR = "onnxruntime_words"


def with_onnxruntime_words(exc: _E, words: str) -> _E:
    """Mark ``exc`` so that, leaving a session, its message is onnxruntime's ``words`` for the same
    failure followed by dmlshim's own in parentheses (dmlshim's commands keep their message); returns
    ``exc`` (for ``raise``)."""
    setattr(exc, _WORDS_ATTR, words)
    return exc


def with_leading_text(exc: _E, lead: str) -> _E:
    """Mark ``exc`` so its message begins with ``lead``, as onnxruntime's layer that raises it there
    begins its own (``run_with_iobinding``: "Error in execution: "); returns ``exc`` (for ``raise``)."""
    setattr(exc, _LEAD_ATTR, lead)
    return exc


def _ort_cause(exc: BaseException) -> BaseException | None:
    """The onnxruntime error in ``exc``'s cause chain, if any."""
    own = _ort_classes()
    seen: set[int] = set()
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, own) and not isinstance(cause, DmlShimError):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


@functools.cache
def combined_class(base: type[DmlShimError], extra: tuple[type[BaseException], ...]) -> type[DmlShimError]:
    """The subclass of ``base`` and each class of ``extra`` (made once), named after ``base``; its message
    reads as onnxruntime's (:func:`onnxruntime_text`)."""
    wanted = tuple(dict.fromkeys(c for c in extra if not issubclass(base, c)))  # each class once
    if not wanted:
        return base
    qualname = base.__name__ + _SEP + "_".join(c.__name__ for c in wanted)
    namespace = {"__module__": __name__, "__qualname__": qualname, "__str__": onnxruntime_text}
    cls = type(base.__name__, (base, *wanted), namespace)
    return cls


def as_onnxruntime_error(exc: DmlShimError, *extra: type[BaseException]) -> DmlShimError:
    """Re-class ``exc`` (in place, traceback kept) so it is also onnxruntime's class for it and ``extra``."""
    current = type(exc)
    if current.__module__ == __name__:  # re-classed by an inner boundary: add this boundary's classes
        base = current.__mro__[1]
        classes = tuple(c for c in current.__bases__[1:] if c not in extra) + extra
    else:
        base, classes = current, (onnxruntime_class(exc), *extra)
        if _plain_runtime_cause(exc) and RuntimeError not in classes:
            classes = (*classes, RuntimeError)
    exc.__class__ = combined_class(base, classes)
    return exc


_BINDING_CLASS_ATTR = "onnxruntime_binding_class"


def with_binding_class(exc: _E, cls: type[BaseException]) -> _E:
    """Mark ``exc`` as raised where onnxruntime's IOBinding layer raises the builtin ``cls`` rather than its
    plain ``RuntimeError`` (:func:`as_plain_runtime_error`); returns ``exc`` (for ``raise``)."""
    setattr(exc, _BINDING_CLASS_ATTR, cls)
    return exc


def as_plain_runtime_error(exc: DmlShimError) -> DmlShimError:
    """Re-class ``exc`` (in place) as its dmlshim class and ``RuntimeError`` alone, dropping the onnxruntime
    status class (and ``ValueError``) an inner boundary gave it: onnxruntime's IOBinding raises a plain
    ``RuntimeError`` for every failure, at bind time and in ``run_with_iobinding`` ("Error in execution:
    ..."), so a client's ``except InvalidArgument:`` or ``except ValueError:`` catches none of them."""
    current = type(exc)
    base = current.__mro__[1] if current.__module__ == __name__ else current
    # where onnxruntime's IOBinding Python layer raises a builtin class of its own (ValueError for another
    # session's binding, Exception for an unknown device name), that class instead (with_binding_class)
    plain = getattr(exc, _BINDING_CLASS_ATTR, RuntimeError)
    exc.__class__ = combined_class(base, (plain,))
    return exc


def raises_plain_runtime_errors(func: _F) -> _F:
    """Decorate an IOBinding method (or ``run_with_iobinding``): a dmlshim error leaving it is a
    ``RuntimeError`` and no onnxruntime status class (:func:`as_plain_runtime_error`)."""

    @functools.wraps(func)
    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except DmlShimError as exc:
            as_plain_runtime_error(exc)
            raise

    return inner  # type: ignore[return-value]


def raises_onnxruntime_errors(*extra: type[BaseException]) -> Callable[[_F], _F]:
    """Decorate a public session method: a dmlshim error leaving it is also onnxruntime's class for it
    (and each class of ``extra``, e.g. ``RuntimeError`` where onnxruntime raises a plain one)."""

    def wrap(func: _F) -> _F:
        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except DmlShimError as exc:
                as_onnxruntime_error(exc, *extra)
                raise

        return inner  # type: ignore[return-value]

    return wrap


def __getattr__(name: str) -> Any:
    # Unpickling a combined class: "<dmlshim class>__as__<onnxruntime classes>".
    base_name, sep, rest = name.partition(_SEP)
    base = getattr(_errors, base_name, None)
    if not sep or not isinstance(base, type) or not issubclass(base, DmlShimError):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    extra: list[type[BaseException]] = []
    for part in rest.split("_"):
        cls = getattr(pybind_state, part, None) or getattr(__import__("builtins"), part, None)
        if not isinstance(cls, type):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        extra.append(cls)
    return combined_class(cast(Any, base), tuple(extra))
