"""Starting the whole-model check (:mod:`.whole_model`): its onnxruntime session prepared here and built
on another thread while the engine builds its steps, then finished into a
:class:`~.whole_model.WholeModelCheck`."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx
import onnxruntime as ort

from ...background import BackgroundBuild
from ...runtime.real import OrtInferenceSession
from ..engine import EngineConfig
from ..plan.sessions import default_options, separate_profile
from ..proofs.symbol_shapes import FeedShapes
from ..weights.shared import SharedWeights, handed_weights_session, light_copy
from .lean_check import LeanCheckSpec
from .whole_model import EmulatedStepLike, NodeIO, WholeModelCheck, augmented_model, captured_names

logger = logging.getLogger(__name__)


class PendingCheck:
    """A whole-model check whose onnxruntime session is being built on another thread.

    Args:
        build: the session's build, started.
        graph_outputs: the model's output names.
        captured: the extra outputs of the session, as :func:`captured_names` lists them.
        ort_errors: the exception types onnxruntime raises.
    """

    def __init__(
        self,
        build: BackgroundBuild[Any],
        graph_outputs: Sequence[str],
        captured: Sequence[str],
        ort_errors: tuple[type[BaseException], ...],
        lean: frozenset[str] = frozenset(),
        feed_shapes: FeedShapes | None = None,
    ) -> None:
        self._build = build
        self._lean = lean
        self._feed_shapes = feed_shapes
        self._graph_outputs = list(graph_outputs)
        self._captured = list(captured)
        self._ort_errors = ort_errors

    def wait(self) -> None:
        """Wait for the build to end (the engine failed and drops the check)."""
        self._build.wait()

    def finish(
        self, steps: Sequence[EmulatedStepLike], lean_check: LeanCheckSpec | None = None
    ) -> WholeModelCheck | None:
        """The check over ``steps`` (the emulated steps whose names the session was built for), or None
        when onnxruntime could not build the session (it refuses an operator or a type that the emulated
        nodes cover, say). ``lean_check``: what its lean check needs (None: no lean check)."""
        try:
            session = self._build.result()
        except Exception as exc:
            logger.debug("whole-model check unavailable: %s", exc)
            return None
        from ..plan.cpu_step import NUMPY_TENSOR_TYPES

        narrow = [
            o.name
            for o in session.get_outputs()
            if o.type.startswith("tensor(") and o.type not in NUMPY_TENSOR_TYPES
        ]
        if narrow:
            # onnxruntime's run returns a float8e4m3fn value as its bytes (uint8) and refuses bfloat16:
            # such a value must cross as the OrtValue the partitions keep
            logger.debug("whole-model check unavailable: %s hold values numpy cannot", ", ".join(narrow))
            return None
        return WholeModelCheck(
            session,
            steps,
            self._graph_outputs,
            self._captured,
            self._ort_errors,
            self._lean,
            self._feed_shapes,
            lean_check,
        )


def start_whole_model_check(
    model: onnx.ModelProto,
    emulated: Sequence[NodeIO],
    known: set[str],
    make_builder: Callable[[list[str]], Callable[[], Any]],
    ort_errors: tuple[type[BaseException], ...],
    static: Mapping[str, Any],
    lean: frozenset[str] = frozenset(),
    feed_shapes: FeedShapes | None = None,
) -> PendingCheck | None:
    """Start building the check's session for ``model`` on another thread (``make_builder`` prepares the
    session of the model with the extra outputs it is given and returns what builds it). None when
    nothing is emulated or the session cannot be prepared. ``lean``: the outputs of the gathers taken by
    their inputs' shapes (:func:`dmlshim.execute.proofs.gather_given.lean_gathers`), ``feed_shapes``
    those of their inputs whose shapes come from the feeds'
    (:func:`dmlshim.execute.proofs.gather_given.feed_shapes`)."""
    if not emulated:
        return None
    graph_outputs = [o.name for o in model.graph.output]
    shaped = frozenset(feed_shapes.dims) if feed_shapes is not None else frozenset()
    indices = feed_shapes.indices if feed_shapes is not None else frozenset()
    captured = captured_names(emulated, known | set(static), graph_outputs, lean, shaped, indices)
    try:
        build = make_builder(captured)
    except Exception as exc:
        logger.debug("whole-model check unavailable: %s", exc)
        return None
    return PendingCheck(BackgroundBuild(build), graph_outputs, captured, ort_errors, lean, feed_shapes)


def whole_model_builder(
    model: onnx.ModelProto,
    config: EngineConfig,
    emulated: frozenset[str],
    shared: SharedWeights | None,
    extra_outputs: Sequence[str],
    arrays: Mapping[str, Any] | None = None,
    clash: Callable[[], bool] | None = None,
) -> Callable[[], ort.InferenceSession]:
    """What builds the whole-model check's session: the model with ``extra_outputs`` added. The payload
    and options are made here; the returned function only calls onnxruntime (so that it may run on
    another thread). With default options the emulated scatters do not force one thread (each is checked
    against its kernel); ``shared`` is given exactly when the options are dmlshim's own. With a copy of
    the caller's options (``config.fresh_options``) large weights are handed too (``arrays``: the
    engine's). ``clash``: the engine's answer of
    :func:`~dmlshim.execute.proofs.gather_given.shape_outputs_clash` for ``model``'s graph (asked once)."""
    options = config.sess_options
    if options is None:
        options = default_options(model.graph, skip=emulated, make=config.own_options)
    elif shared is None and config.fresh_options is not None:
        handed = handed_weights_session(
            model, config.fresh_options, extra_outputs, arrays or {}, _cpu_session, clash
        )
        if handed is not None:
            return handed
    if shared is not None:
        light = light_copy(model, shared, extra_outputs, clash)
        shared.attach(options, light)
        payload = light.SerializeToString()
    else:
        payload = augmented_model(model, extra_outputs, clash)
    return functools.partial(_cpu_session, payload, options)


def _cpu_session(payload: bytes, options: Any) -> ort.InferenceSession:
    separate_profile(options)  # a profiled session's own profile file, as each segment's
    return OrtInferenceSession(payload, options, providers=["CPUExecutionProvider"])
