"""The custom-op engine: the whole model in one onnxruntime session, gather/scatter nodes as Python ops.

The model is lowered (:mod:`dmlshim.execute.lowering`): every translated gather/scatter node, including
those inside If/Loop/Scan bodies, becomes a node of the ``ai.onnx.contrib`` domain whose kernel, registered
here with onnxruntime-extensions, executes the DirectML descriptor through :func:`dmlshim.kernels.execute`
(``descriptor`` mode) or runs the node's whole translation plan, translating at run time when the shapes
were not static (``translate`` mode).

onnxruntime-extensions copies every tensor across the bridge element by element (outputs go through
Python lists), so this engine is far slower than the partitioned one on large tensors; its point is that
it covers nodes inside control flow and that the lowered model can be inspected.

A custom-op kernel cannot tell onnxruntime *why* it failed, so each kernel keeps the exception it raised
in a side channel and :meth:`CustomOpEngine.run` re-raises that dmlshim error instead of onnxruntime's
opaque one.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..dml.json_form import operator_from_json
from ..dml.operators import OperatorDesc
from ..errors import BadInputError, BadModelError, DmlShimError, EngineUnavailableError
from ..kernels import execute
from ..kernels.options import IndexMode, KernelOptions
from ..translate import NodeTranslation, Status, TensorInfo, run_translation, translate_node
from ..translate.plan import elem_type_of, np_dtype_of
from .engine import EngineConfig
from .fallback import for_onnxruntime, has_deprecated_scatter, note_scatter_as_scatter_elements
from .lowering import (
    CUSTOM_DOMAIN,
    DECLARED_ATTRIBUTES,
    MODE_DESCRIPTOR,
    LoweredModel,
    LoweredNode,
    all_signatures,
    lower_model,
    transport_type,
)
from .record import PLACEMENT_CPU, PLACEMENT_DML, NodeRecord, RunRecord

logger = logging.getLogger(__name__)

__all__ = [
    "CustomOpEngine",
    "create_engine",
    "library_path",
    "register_custom_ops",
    "session_options_with_custom_ops",
]

ENGINE_NAME = "customop"
REASON_RUNTIME_TRANSLATION = "runtime_translation"
REASON_RUNTIME_FALLBACK = "runtime_fallback"
REASON_NOT_LOWERED = "not_lowered"
TRANSLATION_CACHE_SIZE = 64
"""Run-time translations kept per custom node (one per distinct input shapes and dtypes)."""

_COPIED_SESSION_OPTIONS = (
    "intra_op_num_threads",
    "inter_op_num_threads",
    "execution_mode",
    "execution_order",
    "graph_optimization_level",
    "log_severity_level",
    "log_verbosity_level",
    "logid",
    "enable_cpu_mem_arena",
    "enable_mem_pattern",
    "enable_mem_reuse",
    "use_deterministic_compute",
    "enable_profiling",
    "profile_file_prefix",
)


def _extensions() -> Any:
    try:
        import onnxruntime_extensions
    except ImportError as exc:
        raise EngineUnavailableError(
            "the custom-op engine needs onnxruntime-extensions: pip install 'dmlshim[customop]'",
            value="onnxruntime-extensions",
        ) from exc
    return onnxruntime_extensions


def library_path() -> str:
    """The onnxruntime-extensions custom-op library to register on a SessionOptions.

    Raises:
        EngineUnavailableError: onnxruntime-extensions is not installed.
    """
    return str(_extensions().get_library_path())


# --- The side channel between a run and the kernels it calls. -------------------------------------------


@dataclass
class _NodeRun:
    """What one custom node did during one run (a node inside a Loop body runs many times)."""

    calls: int = 0
    duplicate_indices: int = 0
    negative_indices: bool = False
    operator: str | None = None
    status: str = "dml"
    reasons: tuple[tuple[str, str], ...] = ()
    fallback: bool = False


@dataclass
class _RunState:
    nodes: dict[str, _NodeRun] = field(default_factory=dict)
    translations_computed: int = 0
    error: BaseException | None = None


_ACTIVE: _RunState | None = None
"""The state of the run in progress; runs are serialized by ``_RUN_LOCK`` (kernels hold the GIL anyway)."""
_RUN_LOCK = threading.RLock()


# --- The kernels. ------------------------------------------------------------------------------------------


def _from_bridge(arr: Any, dtype: np.dtype) -> np.ndarray:
    """A bridged array as the element type it stands for (float16 came as float32, uint64 as int64)."""
    arr = np.asarray(arr)
    if arr.dtype == dtype:
        return arr
    if dtype == np.float16:
        return arr.astype(np.float16)
    if arr.dtype.itemsize == dtype.itemsize and dtype != np.bool_:
        return arr.view(dtype)
    return arr.astype(dtype)


def _to_bridge(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if arr.dtype == dtype:
        return arr
    if arr.dtype == np.float16 or dtype == np.bool_:
        return arr.astype(dtype)
    if arr.dtype.itemsize == dtype.itemsize:
        return np.ascontiguousarray(arr).view(dtype)
    return arr.astype(dtype)


def _has_negative(indices: np.ndarray | None) -> bool:
    return bool(indices is not None and indices.dtype.kind == "i" and indices.size and indices.min() < 0)


class _Prepared:
    """One custom node's attributes, parsed once, and its caches."""

    def __init__(self, attrs: Mapping[str, Any]) -> None:
        self.mode = str(attrs["mode"])
        self.node_name = str(attrs["node_name"])
        self.op_type = str(attrs["onnx_op_type"])
        self.since_version = int(attrs["onnx_since_version"])
        self.feature_level = FeatureLevel(int(attrs["feature_level"]))
        self.index_mode = IndexMode(str(attrs["index_mode"]))
        io = json.loads(str(attrs["io_types"]))
        self.input_dtypes = tuple(np_dtype_of(int(e)) for e in io["inputs"])
        self.output_dtype = np_dtype_of(int(io["output"]))
        carried = transport_type(int(io["output"]))
        assert carried is not None  # lowering only emits types that cross the bridge
        self.bridge_dtype = np_dtype_of(carried)
        self.bindings: tuple[str, ...] = tuple(io.get("bindings", ()))
        self.onnx_inputs: tuple[str, ...] = tuple(json.loads(str(attrs["onnx_inputs"])))
        self.onnx_attributes: dict[str, Any] = json.loads(str(attrs["onnx_attributes"]))
        text = str(attrs["descriptor"])
        self.descriptor: OperatorDesc | None = operator_from_json(json.loads(text)) if text else None
        self.options = KernelOptions(
            feature_level=self.feature_level, index_mode=self.index_mode, node=self.node_name
        )
        self.node = helper.make_node(self.op_type, list(self.onnx_inputs), ["output"], **self.onnx_attributes)
        self.translations: dict[tuple[Any, ...], NodeTranslation] = {}
        self._fallback_sessions: dict[tuple[Any, ...], ort.InferenceSession] = {}

    def __call__(self, arrays: Sequence[Any], state: _RunState | None) -> np.ndarray:
        values = [_from_bridge(a, dt) for a, dt in zip(arrays, self.input_dtypes, strict=True)]
        run = state.nodes.setdefault(self.node_name, _NodeRun()) if state is not None else _NodeRun()
        run.calls += 1
        if self.mode == MODE_DESCRIPTOR:
            out = self._run_descriptor(values, run)
        else:
            out = self._run_translation(values, run, state)
        return _to_bridge(out, self.bridge_dtype)

    def _run_descriptor(self, values: Sequence[np.ndarray], run: _NodeRun) -> np.ndarray:
        assert self.descriptor is not None
        bound = dict(zip(self.bindings, values, strict=True))
        result = execute(self.descriptor, bound, self.options)
        run.operator = self.descriptor.operator_type.dml_name
        run.duplicate_indices += int(result.duplicate_indices)
        run.negative_indices |= _has_negative(bound.get("IndicesTensor"))
        out = result.output
        return out.astype(self.output_dtype) if out.dtype != self.output_dtype else out

    def translation_for(self, values: Sequence[np.ndarray], state: _RunState | None) -> NodeTranslation:
        key = tuple((v.shape, v.dtype) for v in values)
        t = self.translations.get(key)
        if t is None:
            infos = [TensorInfo(tuple(v.shape), elem_type_of(v.dtype)) for v in values]
            t = translate_node(self.node, self.since_version, infos, self.feature_level, name=self.node_name)
            if len(self.translations) >= TRANSLATION_CACHE_SIZE:
                self.translations.clear()
            self.translations[key] = t
            if state is not None:
                state.translations_computed += 1
        return t

    def _run_translation(
        self, values: Sequence[np.ndarray], run: _NodeRun, state: _RunState | None
    ) -> np.ndarray:
        t = self.translation_for(values, state)
        run.status = t.status.value
        if t.status is not Status.DML:
            run.fallback = True
            run.reasons = tuple((r.code, r.message) for r in t.reasons)
            return self._run_on_cpu(values)
        result = run_translation(t, values, index_mode=self.index_mode)
        assert t.operator is not None
        run.operator = t.operator.operator_type.dml_name
        run.reasons = tuple((r.code, r.message) for r in t.reasons)
        run.duplicate_indices += int(result.duplicate_indices)
        run.negative_indices |= _has_negative(values[1] if len(values) > 1 else None)
        return result.output

    def _run_on_cpu(self, values: Sequence[np.ndarray]) -> np.ndarray:
        """ONNX's answer from onnxruntime CPU, for shapes the DirectML translation does not cover."""
        key = tuple((v.dtype, v.ndim) for v in values)
        session = self._fallback_sessions.get(key)
        feeds: dict[str, np.ndarray] = {}
        for name, v in zip(self.onnx_inputs, values, strict=True):
            feeds.setdefault(name, v)
        if session is None:
            graph = helper.make_graph(
                [self.node],
                f"{self.op_type}_fallback",
                [
                    helper.make_tensor_value_info(n, elem_type_of(v.dtype), [None] * v.ndim)
                    for n, v in feeds.items()
                ],
                [onnx.ValueInfoProto(name="output")],
            )
            model = helper.make_model(
                graph, opset_imports=[helper.make_opsetid("", self.since_version)], ir_version=10
            )
            model = for_onnxruntime(model)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.inter_op_num_threads = 1
            session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            self._fallback_sessions[key] = session
        try:
            (out,) = session.run(["output"], feeds)
        except Exception as exc:
            raise BadInputError(
                f"onnxruntime failed: {exc}", node=self.node_name, op_type=self.op_type
            ) from exc
        return np.asarray(out)


_PREPARED: dict[tuple[Any, ...], _Prepared] = {}
_ATTRIBUTE_NAMES = tuple(name for name, _ in DECLARED_ATTRIBUTES)


def _prepared(attrs: Mapping[str, Any]) -> _Prepared:
    key = tuple(attrs[name] for name in _ATTRIBUTE_NAMES)
    found = _PREPARED.get(key)
    if found is None:
        found = _PREPARED[key] = _Prepared(attrs)
    return found


def _node_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A custom node's declared attributes as onnxruntime-extensions hands them to the kernel."""
    out: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.name in _ATTRIBUTE_NAMES:
            value = helper.get_attribute_value(attr)
            out[attr.name] = value.decode() if isinstance(value, bytes) else int(value)
    return out


def _placeholder(prep: _Prepared | None, arrays: Sequence[Any]) -> np.ndarray:
    """What a failed kernel hands back: zeros of the output's bridge type and, where known, its shape."""
    dtype = prep.bridge_dtype if prep is not None else np.asarray(arrays[0]).dtype
    shape: tuple[int, ...] = tuple(np.shape(arrays[0])) if arrays else (0,)
    if prep is not None and prep.descriptor is not None:
        shape = tuple(prep.descriptor.output_tensor.sizes)
    return np.zeros(shape, dtype=dtype)


def _kernel(*arrays: Any, **attrs: Any) -> np.ndarray:
    # An exception leaving a Python custom op aborts the process (onnxruntime-extensions lets the C++
    # exception cross onnxruntime's C API), so nothing may escape: the error goes to the run's side channel
    # and the kernel returns a placeholder; CustomOpEngine.run raises the error once the session returns.
    state = _ACTIVE
    prep: _Prepared | None = None
    try:
        prep = _prepared(attrs)
        if state is not None and state.error is not None:
            return _placeholder(prep, arrays)
        return prep(arrays, state)
    except BaseException as exc:
        if isinstance(exc, DmlShimError) and exc.node is None:
            exc.node = prep.node_name if prep is not None else attrs.get("node_name")
        if state is not None:
            if state.error is None:
                state.error = exc
        else:
            logger.error(
                "custom op %s failed outside CustomOpEngine.run; its output is zeros: %s",
                attrs.get("node_name"),
                exc,
            )
        try:
            return _placeholder(prep, arrays)
        except Exception:
            return np.zeros((0,), dtype=np.float32)


# --- Registration. -----------------------------------------------------------------------------------------

_ALL_REGISTERED = False
_REGISTER_LOCK = threading.Lock()


def register_custom_ops() -> None:
    """Register the Python kernel of every custom op a lowered model can use (once per process).

    All of them are registered at once, before any session uses the onnxruntime-extensions library:
    registering more op types after such a session exists makes onnxruntime-extensions crash when that
    session is destroyed.

    Raises:
        EngineUnavailableError: onnxruntime-extensions is not installed.
    """
    global _ALL_REGISTERED
    if _ALL_REGISTERED:
        return
    ext = _extensions()
    dt = ext.PyCustomOpDef
    bridge: dict[int, Any] = {
        onnx.TensorProto.FLOAT: dt.dt_float,
        onnx.TensorProto.DOUBLE: dt.dt_double,
        onnx.TensorProto.INT8: dt.dt_int8,
        onnx.TensorProto.INT16: dt.dt_int16,
        onnx.TensorProto.INT32: dt.dt_int32,
        onnx.TensorProto.INT64: dt.dt_int64,
        onnx.TensorProto.UINT8: dt.dt_uint8,
        onnx.TensorProto.UINT16: dt.dt_uint16,
        onnx.TensorProto.UINT32: dt.dt_uint32,
        onnx.TensorProto.BOOL: dt.dt_bool,
    }
    kinds = {"string": dt.dt_string, "int": dt.dt_int64}
    attrs = {name: kinds[kind] for name, kind in DECLARED_ATTRIBUTES}
    with _REGISTER_LOCK:
        if _ALL_REGISTERED:
            return
        for sig in all_signatures():
            ext.onnx_op(
                op_type=sig.op_type,
                domain=CUSTOM_DOMAIN,
                inputs=[bridge[t] for t in sig.input_types],
                outputs=[bridge[sig.output_type]],
                attrs=attrs,
            )(_kernel)
        _ALL_REGISTERED = True
        logger.debug("registered %d custom ops in %s", len(all_signatures()), CUSTOM_DOMAIN)


def session_options_with_custom_ops(sess_options: Any = None) -> ort.SessionOptions:
    """A new SessionOptions with the onnxruntime-extensions library registered.

    The caller's options are copied (threads, optimization level, logging, ...), never modified.
    """
    so = ort.SessionOptions()
    if sess_options is not None:
        for name in _COPIED_SESSION_OPTIONS:
            try:
                setattr(so, name, getattr(sess_options, name))
            except (AttributeError, TypeError, RuntimeError):
                logger.debug("session option %s not copied", name)
    register_custom_ops()
    so.register_custom_ops_library(library_path())
    return so


# --- The engine. -------------------------------------------------------------------------------------------


def _reasons(t: NodeTranslation) -> tuple[tuple[str, str], ...]:
    return tuple((r.code, r.message) for r in t.reasons)


def _template_record(node: LoweredNode) -> NodeRecord:
    t = node.translation
    if not node.lowered:
        return NodeRecord(
            name=node.name,
            op_type=node.op_type,
            placement=PLACEMENT_CPU,
            status=t.status.value,
            reasons=(*_reasons(t), (REASON_NOT_LOWERED, node.reason or "not lowered")),
            ort_placement=t.ort_placement,
        )
    if node.dynamic:
        return NodeRecord(
            name=node.name,
            op_type=node.op_type,
            placement=PLACEMENT_DML,
            status=Status.DML.value,
            reasons=(
                (
                    REASON_RUNTIME_TRANSLATION,
                    "the shapes are not static; the custom op translates the node from the actual inputs",
                ),
            ),
        )
    assert t.operator is not None
    return NodeRecord(
        name=node.name,
        op_type=node.op_type,
        placement=PLACEMENT_DML,
        status=t.status.value,
        operator=t.operator.operator_type.dml_name,
        reasons=_reasons(t),
        ort_placement=t.ort_placement,
    )


def _custom_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        if node.domain == CUSTOM_DOMAIN:
            yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _custom_nodes(attr.g)
            for g in attr.graphs:
                yield from _custom_nodes(g)


class CustomOpEngine:
    """Runs a lowered model in one onnxruntime session; gather/scatter nodes run as Python custom ops.

    Built once: the model is lowered, the custom op types it needs are registered, static translations
    are cached, and one onnxruntime CPU session is created.

    Args:
        model: the model (not modified).
        feature_level: the DirectML feature level emulated.
        index_mode: the out-of-range policy (``IndexMode.ERROR`` raises ``IndexOutOfRangeError``).
        sess_options: onnxruntime ``SessionOptions`` to copy (threads, optimization level, logging);
            never modified.
        providers: accepted for the Engine interface; the session always uses ``CPUExecutionProvider``.
        input_shapes: concrete shapes for graph inputs with symbolic dims (the session then accepts only
            those shapes).

    Raises:
        EngineUnavailableError: onnxruntime-extensions is not installed.
        BadModelError: onnxruntime cannot load the lowered model.
    """

    name = ENGINE_NAME

    def __init__(
        self,
        model: onnx.ModelProto,
        feature_level: FeatureLevel = DEFAULT_FEATURE_LEVEL,
        *,
        index_mode: IndexMode = IndexMode.ERROR,
        sess_options: Any = None,
        providers: Sequence[Any] | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        _extensions()
        self._feature_level = FeatureLevel(feature_level)
        self._index_mode = IndexMode(index_mode)
        if providers and any(
            (p if isinstance(p, str) else p[0]) not in ("CPUExecutionProvider", "DmlShimExecutionProvider")
            for p in providers
        ):
            logger.warning(
                "the custom-op engine runs on CPUExecutionProvider; providers %s ignored", providers
            )
        self._lowered = lower_model(
            model, self._feature_level, input_shapes=input_shapes, index_mode=self._index_mode
        )
        register_custom_ops()
        self._prime_static_translations()
        # Scatter nodes kept (lowering rewrote them), or handed to onnxruntime at run time, run as
        # ScatterElements there.
        self._scatter_as_elements = has_deprecated_scatter(model)
        payload = self._lowered.model.SerializeToString()
        try:
            self._session = ort.InferenceSession(
                payload, session_options_with_custom_ops(sess_options), providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise BadModelError(f"onnxruntime cannot load the lowered model: {exc}") from exc
        self._template = tuple(_template_record(n) for n in self._lowered.nodes)
        logger.info(
            "custom-op engine: %d of %d gather/scatter nodes lowered",
            self._lowered.lowered_count,
            len(self._lowered.nodes),
        )

    @classmethod
    def from_config(cls, model: onnx.ModelProto, config: EngineConfig) -> CustomOpEngine:
        """The engine for ``InferenceSession(engine="customop")`` (an ``EngineFactory``)."""
        return cls(
            model,
            config.feature_level,
            index_mode=config.index_mode,
            sess_options=config.sess_options,
            providers=config.providers,
        )

    def _prime_static_translations(self) -> None:
        """Seed the kernels' caches with the translations made while lowering, so runs at the static shapes
        count no new translations."""
        static = {n.name: n.translation for n in self._lowered.nodes if n.lowered and not n.dynamic}
        for node in _custom_nodes(self._lowered.model.graph):
            attrs = _node_attributes(node)
            t = static.get(str(attrs.get("node_name")))
            if t is None or attrs.get("mode") == MODE_DESCRIPTOR:
                continue
            prep = _prepared(attrs)
            key = tuple(
                (b.onnx_shape, np_dtype_of(b.onnx_elem_type))
                for b in sorted(t.inputs, key=lambda b: b.onnx_index)
            )
            prep.translations.setdefault(key, t)

    def ort_sessions(self) -> list[tuple[str, ort.InferenceSession]]:
        """The one onnxruntime session, running the lowered model (for profiling)."""
        return [("the lowered model", self._session)]

    @property
    def lowered(self) -> LoweredModel:
        """The lowered model and what happened to each gather/scatter node."""
        return self._lowered

    @property
    def feature_level(self) -> FeatureLevel:
        return self._feature_level

    def get_providers(self) -> list[str]:
        if self._lowered.lowered_count:
            return ["DmlShimExecutionProvider", "CPUExecutionProvider"]
        return ["CPUExecutionProvider"]

    def run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord]:
        """Run the lowered model; return the named outputs and the run's record.

        Raises:
            IndexOutOfRangeError: an index out of range in a lowered node (index mode ``error``).
            DmlShimError: any other error a custom op raised, naming the node.
            BadInputError: onnxruntime failed on these inputs for another reason.
        """
        global _ACTIVE
        state = _RunState()
        with _RUN_LOCK:
            _ACTIVE = state
            try:
                results = self._session.run(list(output_names), dict(feeds), run_options)
            except Exception as exc:
                # A custom op's failure can make a later onnxruntime node fail; the custom op's is the cause.
                if state.error is not None:
                    raise state.error from exc
                raise BadInputError(f"onnxruntime failed running the lowered model: {exc}") from exc
            finally:
                _ACTIVE = None
        if state.error is not None:
            raise state.error
        return list(results), self._record(state)

    def _record(self, state: _RunState) -> RunRecord:
        records: list[NodeRecord] = []
        for template in self._template:
            run = state.nodes.get(template.name)
            if run is None or not run.calls:
                records.append(template)
            elif run.fallback:
                records.append(
                    NodeRecord(
                        name=template.name,
                        op_type=template.op_type,
                        placement=PLACEMENT_CPU,
                        status=run.status,
                        reasons=(
                            *run.reasons,
                            (
                                REASON_RUNTIME_FALLBACK,
                                "the translation for this run's shapes and types is not a DirectML "
                                "operator; the custom op computed the node with onnxruntime's CPU provider",
                            ),
                        ),
                        ort_placement=template.ort_placement,
                    )
                )
            else:
                records.append(
                    NodeRecord(
                        name=template.name,
                        op_type=template.op_type,
                        placement=PLACEMENT_DML,
                        status=run.status,
                        operator=run.operator or template.operator,
                        reasons=run.reasons or template.reasons,
                        duplicate_indices=run.duplicate_indices,
                        negative_indices=run.negative_indices,
                        ort_placement=template.ort_placement,
                    )
                )
        nodes = tuple(records)
        if self._scatter_as_elements:
            nodes = note_scatter_as_scatter_elements(nodes)
        return RunRecord(
            engine=self.name,
            feature_level=self._feature_level.dml_name,
            nodes=nodes,
            cpu_partitions=1,
            translations_computed=state.translations_computed,
        )


def create_engine(model: onnx.ModelProto, config: EngineConfig) -> CustomOpEngine:
    """The ``EngineFactory`` of the custom-op engine (register it as ``"customop"``)."""
    return CustomOpEngine.from_config(model, config)
