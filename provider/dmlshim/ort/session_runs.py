"""The ways onnxruntime offers to run a session besides ``run``: in a background thread, over OrtValues
and OrtValueVectors, and through an IOBinding; each a front to :class:`dmlshim.InferenceSession`'s one run."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import BadInputError, DmlShimError
from ..runtime.exceptions import (
    raises_onnxruntime_errors,
    raises_plain_runtime_errors,
    with_binding_class,
    with_leading_text,
)
from .iobinding import IOBinding, fill_fetches
from .ortvalues import numpy_outputs, ortvalues_from_vector, to_ortvalue

if TYPE_CHECKING:
    from ..execute.feeds import FeedValidator


_UNKNOWN_OUTPUT = "Invalid output name:"


class SessionRuns:
    """``run_async``, ``run_with_ort_values``, ``run_with_ortvaluevector``, ``io_binding`` and
    ``run_with_iobinding``, mixed into :class:`dmlshim.InferenceSession`."""

    if TYPE_CHECKING:
        _validator: FeedValidator
        _options: Any

        def _wanted(self, output_names: Sequence[str] | None) -> list[str]: ...

        def _feeds(self, input_feed: Mapping[str, Any]) -> dict[str, Any]: ...

        def _execute(self, names: list[str], feeds: dict[str, Any], run_options: Any) -> list[Any]: ...

        def _run_values(
            self, names: list[str], input_feed: Mapping[str, Any], run_options: Any
        ) -> list[Any]: ...

    @raises_onnxruntime_errors()
    def run_async(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        callback: Callable[[list[Any], Any, str], None],
        user_data: Any,
        run_options: Any = None,
    ) -> None:
        """Run in a background thread, then call ``callback(outputs, user_data, error)`` from it.

        ``error`` is ``""`` on success; on failure the outputs are ``[]`` and ``error`` is the dmlshim
        error's message. As in onnxruntime, only a missing input, and options whose intra-op thread pool
        is a single thread, are refused here; any other problem (an unknown output or input name, a wrong
        dtype or rank, an index out of range) reaches the callback as its ``error``. An output numpy cannot
        hold (bfloat16, float8) is such an error too: onnxruntime never calls back then (it prints "No
        corresponding Numpy type"), dmlshim calls back with that error rather than leave the caller waiting.
        """
        self._validator.check_present(input_feed)
        threads = getattr(self._options, "intra_op_num_threads", 0)
        if threads == 1:
            raise BadInputError(
                "intra op thread pool must have at least one thread for RunAsync (dmlshim: run_async needs "
                "an intra-op thread pool of at least two threads, as onnxruntime's does, but the "
                "SessionOptions set intra_op_num_threads = 1)",
                value=threads,
            )

        def work() -> None:
            try:
                names = self._wanted(output_names)
                outputs, error = self._execute(names, self._feeds(input_feed), run_options), ""
                # a bfloat16 output: onnxruntime never calls back (it prints this error); dmlshim says it
                outputs = numpy_outputs(names, outputs, instead="ask for it with run_with_ort_values")
            except DmlShimError as exc:
                outputs, error = [], str(exc)
            except Exception as exc:  # the callback is always called, as onnxruntime calls it
                outputs, error = [], f"{type(exc).__name__}: {exc}"
            callback(outputs, user_data, error)

        threading.Thread(target=work, name="dmlshim-run-async", daemon=True).start()

    @raises_onnxruntime_errors()
    def run_with_ort_values(
        self,
        output_names: Sequence[str] | None,
        input_dict_ort_values: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[Any]:
        """``run`` with ``onnxruntime.OrtValue`` inputs; returns ``OrtValue``s.

        As onnxruntime's Python layer: a missing input first (its ``ValueError``), then a feed that is no
        ``OrtValue`` (a numpy array, a list) is its ``AttributeError`` (``... has no attribute
        '_get_c_value'``); ``run`` takes arrays.
        """
        if isinstance(input_dict_ort_values, Mapping):
            self._validator.check_present(input_dict_ort_values)
            for value in input_dict_ort_values.values():
                value._get_c_value  # noqa: B018  (onnxruntime reads it from every feed: AttributeError)
        outputs = self._run_values(self._wanted(output_names), input_dict_ort_values, run_options)
        return [to_ortvalue(o) for o in outputs]

    @raises_onnxruntime_errors()
    def run_with_ortvaluevector(
        self,
        run_options: Any,
        feed_names: Sequence[str],
        feeds: Any,
        fetch_names: Sequence[str],
        fetches: Any,
        fetch_devices: Any,
    ) -> None:
        """``run`` over onnxruntime's ``OrtValueVector``s: reads ``feeds``, appends to ``fetches`` (or fills
        the values already in it)."""
        values = ortvalues_from_vector(feed_names, feeds)
        # bfloat16/float8 outputs stay OrtValues (onnxruntime returns them here; only run() cannot).
        fill_fetches(fetches, self._run_values(self._wanted(list(fetch_names)), values, run_options))

    def io_binding(self) -> IOBinding:
        """An :class:`~dmlshim.ort.iobinding.IOBinding` for :meth:`run_with_iobinding`."""
        return IOBinding(self)

    @raises_plain_runtime_errors
    def run_with_iobinding(self, iobinding: IOBinding, run_options: Any = None) -> None:
        """Run with the inputs and outputs bound on ``iobinding``; read results from it afterwards.

        Raises:
            BadInputError: the binding comes from another session (a ``ValueError``, as onnxruntime's), or no
                output is bound.
        """
        if not isinstance(iobinding, IOBinding) or iobinding.session is not self:
            if not hasattr(iobinding, "_session"):  # onnxruntime reads iobinding._session first
                raise AttributeError(f"{type(iobinding).__name__!r} object has no attribute '_session'")
            error = BadInputError("the IOBinding must come from this session's io_binding()")
            raise with_binding_class(error, ValueError)  # onnxruntime's Python layer: a ValueError
        try:
            names = iobinding.bound_output_names()
            if not names:
                raise BadInputError(
                    "At least one output should be requested. (dmlshim: at least one output must be bound "
                    "(bind_output) before run_with_iobinding)"
                )
            # outputs numpy cannot hold (bfloat16) stay OrtValues: get_outputs() returns them, as
            # onnxruntime's
            values = self._run_values(self._wanted(names), iobinding.bound_feeds(), run_options)
            iobinding.store_results(values)
        except DmlShimError as exc:
            # onnxruntime's run_with_iobinding begins every message of a failed run so, and words an
            # unknown output name with a space ("Invalid output name: x"; its run: "...name:x")
            if exc.message.startswith(_UNKNOWN_OUTPUT) and not exc.message.startswith(_UNKNOWN_OUTPUT + " "):
                exc.message = exc.message.replace(_UNKNOWN_OUTPUT, _UNKNOWN_OUTPUT + " ", 1)
                exc.args = (exc.message, *exc.args[1:])
            with_leading_text(exc, "Error in execution: ")
            raise
