"""onnxruntime's verdict on whether a model loads: the acceptance session built beside dmlshim's own work
(:func:`start_ort_acceptance`, :class:`Acceptance`), and the small probe model that learns onnxruntime's
message when dmlshim's own check refuses a model first (:func:`probe_for`, :func:`ort_refusal`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import onnx
from google.protobuf.message import EncodeError
from onnx import TensorProto

from ..background import BackgroundBuild
from ..errors import BadModelError
from .ort_errors import ort_load_error
from .ort_outputs import OrtOutputs
from .wellformed import RAW_ITEMSIZE

logger = logging.getLogger(__name__)


_PROBE_BYTES = 1 << 20


def probe_for(model: onnx.ModelProto, own: BadModelError) -> onnx.ModelProto | None:
    """A small model onnxruntime refuses for the reason ``own`` gives, if it refuses it: the model without
    its weights (ir_version, opsets and node names kept), or for an initializer that disagrees with its
    declared input, that input, a zero-filled initializer of its type and shape, and one Identity node."""
    from .weightless import without_weights

    if own.tensor is None or own.rule is None or "initializer" not in own.rule:
        light = without_weights(model)
        return light if light.ByteSize() < PROBE_LIMIT else None
    t = next((i for i in model.graph.initializer if i.name == own.tensor), None)
    vi = next((i for i in model.graph.input if i.name == own.tensor), None)
    size = RAW_ITEMSIZE.get(t.data_type, 0) * math.prod(int(d) for d in t.dims) if t is not None else 0
    if t is None or vi is None or not size or size > _PROBE_BYTES:
        return None
    stub = TensorProto(name=t.name, data_type=t.data_type, dims=list(t.dims), raw_data=bytes(size))
    out = onnx.helper.make_tensor_value_info(f"{t.name}.dmlshim_probe", vi.type.tensor_type.elem_type, None)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", [t.name], [out.name])], "probe", [vi], [out], [stub]
    )
    return onnx.helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


PROBE_LIMIT = 64 << 20
"""The largest weightless model handed to onnxruntime only to learn its message for a refusal."""


def ort_refusal(probe: onnx.ModelProto | None) -> BaseException | None:
    """onnxruntime's error creating a session on ``probe`` (None: it accepts it, or no probe)."""
    if probe is None:
        return None
    import onnxruntime as ort

    from ..runtime.real import OrtInferenceSession
    from .ort_errors import ORT_ERRORS

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        OrtInferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except (EncodeError, *ORT_ERRORS) as exc:
        return exc
    return None


ACCEPTANCE_RULE = "a model loads exactly when onnxruntime's own session creation accepts it"


LOAD_CONFIG_ENTRIES = ("session.strict_shape_type_inference", "session.allow_released_opsets_only")
"""Session config entries that change which models onnxruntime loads."""


def _config_entry(sess_options: object, key: str) -> str | None:
    getter = getattr(sess_options, "get_session_config_entry", None)
    if getter is None:
        return None
    try:
        value = getter(key)
    except RuntimeError:  # not set
        return None
    return value if isinstance(value, str) else None


class Acceptance:
    """onnxruntime's verdict on a model (:func:`start_ort_acceptance`), decided by its acceptance session
    built on another thread. A lazy one starts that session when :meth:`start` or :meth:`verdict` is
    first called, unless a session of the same model was built meanwhile (:meth:`witnessed`,
    :mod:`dmlshim.model.ort_witness`). :meth:`verdict` waits for it and raises the refusal; later calls
    do nothing. A lazy one asked only for onnxruntime's outputs (:meth:`start_outputs`) loads the model
    in onnxruntime without initializing a session, and stays lazy for the verdict."""

    __slots__ = ("_accept", "_build", "_load", "_loading", "_original", "_path", "outputs", "serialized")

    def __init__(
        self,
        build: BackgroundBuild[OrtOutputs] | None,
        original: onnx.ModelProto,
        path: str | None,
        accept: Callable[[], OrtOutputs] | None = None,
        serialized: bytes | None = None,
        load: Callable[[], OrtOutputs] | None = None,
    ):
        self._build, self._path, self._accept = build, path, accept
        self._load = load
        self._loading: BackgroundBuild[OrtOutputs] | None = None
        self._original: onnx.ModelProto | None = original
        self.serialized = serialized
        """The weightless copy's bytes as onnxruntime is given them, when they are that copy's own
        serialization (None: a copy without the model's ``ort_config`` was serialized instead); the model
        check keys onnx's inference with them, then drops them here."""
        self.outputs: OrtOutputs | None = None
        """onnxruntime's ``get_outputs()`` of the acceptance session, once its verdict is known (None: no
        session was built for the verdict, or it refused the model)."""

    def start(self) -> None:
        """Start building the acceptance session (a lazy one), if not started or decided."""
        accept, self._accept = self._accept, None
        if accept is not None:
            self._build = BackgroundBuild(accept)

    def start_outputs(self) -> None:
        """Start learning onnxruntime's ``get_outputs()`` of a lazy acceptance: the model loaded (its
        graph resolved, so onnxruntime's own inference) but no session initialized, the verdict left to a
        session of the model built meanwhile, or to the acceptance session. A model with local functions
        gets the acceptance session at once: onnxruntime inlines them, and infers again, only when it
        initializes one."""
        if self._accept is None or self._loading is not None:
            return
        load, self._load = self._load, None
        if load is None:
            self.start()
        else:
            self._loading = BackgroundBuild(load)

    def witnessed(self, model: onnx.ModelProto) -> None:
        """onnxruntime built a CPU session of ``model`` with its default options: when ``model`` has the
        checked model's nodes and inputs (outputs may be added), the model is accepted and a lazy
        acceptance session is never built."""
        from .ort_witness import same_nodes

        if self._accept is not None and self._original is not None and same_nodes(self._original, model):
            self._accept = None
            logger.debug("onnxruntime's acceptance: a session of the model was built")

    def verdict(self) -> None:
        """Wait for onnxruntime; raise its refusal as :class:`BadModelError` (once)."""
        from .ort_errors import ORT_ERRORS

        self.start()
        build, self._build = self._build, None
        loading, self._loading = self._loading, None
        # the model is not held once decided (a session keeps this object for the outputs' types)
        original, self._original = self._original, None
        if original is None:
            return
        if build is None:
            build = loading  # witnessed: onnxruntime's loading alone is left to answer
        elif loading is not None:
            loading.wait()  # the acceptance session answers; the loading is not left running
        if build is None:
            return
        try:
            self.outputs = build.result()
        except ORT_ERRORS as exc:
            # loading is the first step of a session's creation: the acceptance session would fail there
            raise _refusal(original, exc, self._path) from exc


def _refusal(original: onnx.ModelProto, exc: BaseException, path: str | None) -> BadModelError:
    error = ort_load_error(original, "the model", exc, path=path)
    if error.rule is None:
        error.rule = ACCEPTANCE_RULE
    return error


def start_ort_acceptance(
    light: onnx.ModelProto,
    original: onnx.ModelProto,
    path: str | None,
    sess_options: object = None,
    *,
    lazy: bool = False,
    serialized: bytes | None = None,
) -> Acceptance:
    """Start building an onnxruntime CPU session on ``light`` (the weightless copy of ``original``), with
    graph optimizations off and one thread, on another thread: onnxruntime decides whether the model
    loads (:meth:`Acceptance.verdict`). The config entries of the caller's ``sess_options`` that decide
    what loads (strict shape and type inference, released opsets only) are the check's too.

    Raises:
        BadModelError: the model cannot even be serialized for onnxruntime.
    """
    import onnxruntime as ort

    from ..runtime.real import OrtInferenceSession, loaded_outputs

    def make_options() -> ort.SessionOptions:  # one each: the two builds may run on two threads
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 4
        for key in LOAD_CONFIG_ENTRIES:
            value = _config_entry(sess_options, key)
            if value is not None:
                options.add_session_config_entry(key, value)
        return options

    options = make_options()
    # A configuration the model carries for onnxruntime (ORT_LOAD_CONFIG_FROM_MODEL=1) is the session's,
    # read once (dmlshim.ort.model_config): the check must not start a profile of its own from it.
    # (``light`` may be the caller's model itself, small since weightless: changed on a copy.)
    stripped_config = any(p.key == "ort_config" for p in light.metadata_props)
    if stripped_config:
        kept = [p for p in light.metadata_props if p.key != "ort_config"]
        stripped = onnx.ModelProto()
        stripped.CopyFrom(light)
        del stripped.metadata_props[:]
        stripped.metadata_props.extend(kept)
        light = stripped
    try:
        # ``serialized``: ``light``'s bytes, already made by the caller (not made again)
        payload = serialized if serialized is not None and not stripped_config else light.SerializeToString()
    except EncodeError as exc:
        raise _refusal(original, exc, path) from exc

    def accept() -> OrtOutputs:
        # built and dropped on the worker: only the verdict (and the outputs' types, onnxruntime's first
        # answer: dmlshim.model.ort_outputs) is wanted, and the session's memory must not stay held while
        # the caller goes on building its own
        session = OrtInferenceSession(payload, options, providers=["CPUExecutionProvider"])
        return OrtOutputs.of(session)

    def load() -> OrtOutputs:
        return OrtOutputs.of_args(loaded_outputs(payload, make_options()))

    own = None if stripped_config else payload  # the bytes of ``light`` itself: its inference reads them
    if lazy:
        return Acceptance(None, original, path, accept, own, None if original.functions else load)
    return Acceptance(BackgroundBuild(accept), original, path, serialized=own)
