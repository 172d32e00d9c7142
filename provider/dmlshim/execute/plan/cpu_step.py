"""The partitioned engine's onnxruntime steps: a CPU segment's session fed from the run's value table,
and the call that runs such a session with values numpy cannot hold (bfloat16, float8, ...) passed as
``OrtValue``s."""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from ...inputs.narrow_floats import NARROW_FLOATS, from_bits, narrow_elem_type
from ...runtime.real import OrtInferenceSession
from ..record import NodeRecord
from .sessions import ORT_ERRORS, ort_run_error

logger = logging.getLogger(__name__)

Values = dict[str, Any]


@dataclass
class RunState:
    """What one run accumulates besides the values."""

    records: list[NodeRecord | None]
    run_options: Any
    translations_computed: int = 0
    lean_fetched: list[Any] | None = None
    """What the lean check's session fetched, when a lean run answered (the steady lane is made from it)."""


_FEED_SHAPE_REFUSED = ("Invalid rank for input", "Got invalid dimensions for input")
"""onnxruntime's words when a feed does not fit the rank or dimensions a graph input declares."""


NUMPY_TENSOR_TYPES = frozenset(
    f"tensor({t})"
    for t in (
        "float", "double", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
        "uint64", "bool", "string", "complex64", "complex128",
    )
)  # fmt: skip
"""onnxruntime tensor types numpy holds; values of other types (bfloat16, float8, int4, ...) cross
partition boundaries as the ``OrtValue`` onnxruntime produced."""


_NEEDS_ORT_VALUES: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def needs_ort_values(session: ort.InferenceSession) -> bool:
    """Whether an output of ``session`` is a tensor numpy cannot hold (``session.run`` refuses those).
    Asked once per session: ``get_outputs()`` builds new objects on every call, on every run."""
    try:
        return _NEEDS_ORT_VALUES[session]
    except (KeyError, TypeError):
        pass
    needs = any(
        o.type.startswith("tensor(") and o.type not in NUMPY_TENSOR_TYPES for o in session.get_outputs()
    )
    with contextlib.suppress(TypeError):  # a session that takes no weak reference: asked every time
        _NEEDS_ORT_VALUES[session] = needs
    return needs


def run_session(
    session: ort.InferenceSession, outputs: Sequence[str], feeds: Mapping[str, Any], run_options: Any
) -> list[Any]:
    """``session.run``, except that values numpy cannot hold go in and come out as OrtValues, unconverted
    (onnxruntime's ``run`` cannot return a bfloat16 tensor); numpy-typed outputs still come out as arrays."""
    if not any(_narrow(v) for v in feeds.values()) and (
        not runs_by_ort_values(session) or (not needs_ort_values(session) and _string_feed(feeds))
    ):
        # (an OrtValue of strings is made only by a session: string feeds keep run(), whose string
        # outputs are then decoded)
        return list(session.run(list(outputs), dict(feeds), run_options))
    ort_feeds = {name: _ort_value(v) for name, v in feeds.items()}
    results = session.run_with_ort_values(list(outputs), ort_feeds, run_options)
    out: list[Any] = []
    for value in results:
        if value.is_tensor() and value.data_type() in NUMPY_TENSOR_TYPES:
            try:
                out.append(value.numpy())
            except UnicodeDecodeError:
                # a string value whose bytes are no UTF-8 (a Constant's, an initializer's): it crosses to
                # the next partition as the OrtValue; only a graph output of it is onnxruntime's error
                out.append(value)
        else:
            out.append(value)
    return out


_RUNS_BY_ORT_VALUES: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def runs_by_ort_values(session: ort.InferenceSession) -> bool:
    """Whether :func:`run_session` runs ``session`` with OrtValues: an output numpy cannot hold, or a string
    output (its bytes may be no UTF-8, which ``session.run`` refuses while onnxruntime's run of the whole
    model does not, when the value is no output of it)."""
    try:
        return _RUNS_BY_ORT_VALUES[session]
    except (KeyError, TypeError):
        pass
    by = needs_ort_values(session) or any(o.type == "tensor(string)" for o in session.get_outputs())
    with contextlib.suppress(TypeError):
        _RUNS_BY_ORT_VALUES[session] = by
    return by


def _narrow(value: Any) -> bool:
    """Whether ``value`` goes to onnxruntime as an OrtValue: one already, or an ml_dtypes array (a
    bfloat16 weight, say), which onnxruntime's ``run`` and ``ortvalue_from_numpy`` refuse."""
    if isinstance(value, ort.OrtValue):
        return True
    return isinstance(value, np.ndarray) and (
        value.dtype.kind == "V" or narrow_elem_type(value.dtype) is not None
    )


def _string_feed(feeds: Mapping[str, Any]) -> bool:
    return any(isinstance(v, np.ndarray) and v.dtype.kind in "OUS" for v in feeds.values())


def _ort_value(value: Any) -> Any:
    if isinstance(value, ort.OrtValue):
        return value
    array = np.asarray(value, order="C")  # ascontiguousarray makes a 0-d array 1-d
    if array.dtype.kind in "OUS":  # beside an OrtValue feed (strings kept undecoded): only a session makes it
        from ...runtime.string_values import string_ortvalue

        return string_ortvalue(array)
    elem = narrow_elem_type(array.dtype)
    if elem is not None:  # bfloat16, float8 (float8_e5m2 is an "f" kind in ml_dtypes, the others "V")
        return from_bits(array.view(NARROW_FLOATS[elem].bits_dtype), elem)
    return ort.OrtValue.ortvalue_from_numpy(array)


def ort_run_of(session: Any, static_feeds: Mapping[str, Any]) -> Callable[..., list[Any]]:
    """A session's run for feeds already checked (the steady lane's lean session, a CPU segment's, a model
    with nothing to emulate): onnxruntime's compiled run itself when its Python layer would only repeat
    checks already made (the feed names; no OrtValue feed, ``static_feeds`` included; a CPU-only session,
    so no provider to fall back from), else that layer's ``run``."""
    inner = getattr(session, "_sess", None)
    plain = getattr(type(session), "run", None) is ort.InferenceSession.run
    arrays = all(type(v) is np.ndarray for v in static_feeds.values())
    if inner is not None and plain and arrays and session.get_providers() == ["CPUExecutionProvider"]:
        return inner.run
    return session.run


class CpuStep:
    """A CPU segment: one onnxruntime session fed from the value table. The session can be given as a
    function that builds it, called on first use (the whole-model check usually makes it unnecessary).

    ``relaxed`` builds the segment again with inputs that declare element types only. A segment whose
    declared input shape (derived by shape inference) turns out wrong for a real value is rebuilt that
    way once, so that it runs wherever onnxruntime runs the whole model.
    """

    __slots__ = ("_build", "_builder", "_planned", "_relaxed", "_session", "inputs", "label", "outputs")

    def __init__(
        self,
        session: ort.InferenceSession | Callable[[], ort.InferenceSession],
        inputs: Sequence[str],
        outputs: Sequence[str],
        label: str,
        relaxed: Callable[[], ort.InferenceSession | None] | None = None,
    ):
        self._session = session if isinstance(session, OrtInferenceSession) else None
        self._build = None if isinstance(session, OrtInferenceSession) else session
        self._builder = self._build
        self._relaxed = relaxed
        self._planned: tuple[Any, Callable[..., list[Any]] | None] | None = None
        """(the session, onnxruntime's compiled run of it or None) for :meth:`run_planned`."""
        self.inputs = tuple(inputs)
        self.outputs = list(outputs)
        self.label = label

    @property
    def session(self) -> ort.InferenceSession:
        if self._session is None:
            assert self._build is not None
            self._session, self._build = self._build(), None
        return self._session

    @property
    def built(self) -> ort.InferenceSession | None:
        """The session when it is built (None: built on first use)."""
        return self._session

    def unload(self) -> None:
        """Drop a session built on first use (its weights with it); the next use builds it again."""
        if self._builder is not None and self._session is not None:
            self._session, self._build = None, self._builder

    def run_planned(self, values: Values, state: RunState) -> None:
        """A step of a partitioned run without run options: as a call, except that arrays go straight to
        onnxruntime's compiled run when its Python layer would only repeat checks the step makes (a
        CPU-only session whose outputs numpy holds, every feed an array: :func:`ort_run_of`). A run
        onnxruntime refuses is answered as a call answers it (raised, or the segment rebuilt for a feed
        shape it refused), never run again as it was: a segment's seeded random node would draw twice,
        and every later run would differ from onnxruntime's sequence."""
        session = self._session
        planned = self._planned
        if planned is None or planned[0] is not session:
            plain = session is not None and not runs_by_ort_values(session)
            planned = self._planned = (session, ort_run_of(session, {}) if plain else None)
        run = planned[1]
        if run is not None:
            feeds = {name: values[name] for name in self.inputs}
            ndarray = np.ndarray
            if all(type(v) is ndarray for v in feeds.values()):
                try:
                    results = run(self.outputs, feeds, None)
                except ORT_ERRORS as exc:
                    results = self._refused(exc, feeds, state)
                for name, value in zip(self.outputs, results, strict=False):
                    values[name] = value
                return
        self(values, state)

    def __call__(self, values: Values, state: RunState) -> None:
        feeds = {name: values[name] for name in self.inputs}
        try:
            results = run_session(self.session, self.outputs, feeds, state.run_options)
        except ORT_ERRORS as exc:
            results = self._refused(exc, feeds, state)
        for name, value in zip(self.outputs, results, strict=False):
            values[name] = value

    def _refused(self, exc: BaseException, feeds: Mapping[str, Any], state: RunState) -> list[Any]:
        """The answer to a run onnxruntime refused with ``exc``: its error as dmlshim's, or, when it
        refused a feed's shape (before any node ran) and the segment can be rebuilt with inputs that
        declare element types only, the rebuilt segment's run."""
        if self._relaxed is None or not any(p in str(exc) for p in _FEED_SHAPE_REFUSED):
            raise ort_run_error(exc, f"onnxruntime failed in {self.label}") from exc
        rebuilt = self._relaxed()
        self._relaxed = None
        if rebuilt is None:  # its inputs declare element types only already
            raise ort_run_error(exc, f"onnxruntime failed in {self.label}") from exc
        logger.warning(
            "%s: a value's real shape contradicts the shape inferred for it (%s); the partition is "
            "rebuilt with inputs that declare element types only",
            self.label,
            str(exc).strip().splitlines()[0],
        )
        self._session, self._builder = rebuilt, None
        try:
            return run_session(self._session, self.outputs, feeds, state.run_options)
        except ORT_ERRORS as again:
            raise ort_run_error(again, f"onnxruntime failed in {self.label}") from again
