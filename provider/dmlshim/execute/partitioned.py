"""The partitioned engine (the default): gather/scatter nodes run from their DirectML descriptors through
dmlshim's kernels; everything else runs in onnxruntime CPU sessions, one per connected CPU partition.

Everything that can be decided once is decided when the engine is built: shape inference, the static
translation of every gather/scatter node, the partition of the graph, one onnxruntime session per CPU
segment, and the step list a run walks. A run then only moves arrays between steps. Nodes whose shapes are
symbolic are translated at run time and cached by (shapes, dtypes); if such a translation says the node
cannot run as a DirectML operator (an empty tensor, say), the node runs in a cached one-node onnxruntime
session instead.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from ..dml.enums import FeatureLevel
from ..errors import BadInputError, BadModelError, DmlShimError, IndexOutOfRangeError
from ..graph import display_names, is_gather_scatter
from ..kernels.options import IndexMode
from ..limits import check_static_values, check_tensor, gather_scatter_output_shape
from ..modelcheck import ort_load_error
from ..translate import NodeTranslation, Status, TensorInfo, infer_shapes, run_translation, translate_node
from ..translate.placement import CPU_PREFERRED_MESSAGE, graph_placements
from ..translate.plan import CPU_PROVIDER, elem_type_of
from ..translate.shapes_info import tensor_infos
from ..translate.translator import model_opsets, model_placements, node_since_version
from .engine import EngineConfig
from .fallback import for_onnxruntime, has_deprecated_scatter, note_scatter_as_scatter_elements
from .partition import (
    CpuSegment,
    EmulatedNode,
    nested_gather_scatter,
    partition_graph,
)
from .profiling import separate_profile
from .record import PLACEMENT_CPU, PLACEMENT_DML, NodeRecord, RunRecord
from .whole_model import build_whole_model_check

logger = logging.getLogger(__name__)

SEGMENT_IR_VERSION = 10
"""IR version of the models built for CPU segments (onnxruntime 1.31 reads up to 13; onnx 1.23 writes 14)."""

TRANSLATION_CACHE_SIZE = 64
"""Translations kept per node (one per distinct input shapes and dtypes); the cache restarts when full."""

REASON_NOT_EMULATED = "not_emulated"
REASON_CPU_PREFERRED = "ort_cpu_preferred"
REASON_RUNTIME_FALLBACK = "runtime_fallback"

_SHAPE_UNKNOWN = "SHAPE_UNKNOWN"

MIN_SEGMENTS_FOR_CHECK = 2
"""CPU segments from which the whole-model check pays: with one, a partitioned run already makes one
onnxruntime call."""

Values = dict[str, Any]


@dataclass
class _RunState:
    """What one run accumulates besides the values."""

    records: list[NodeRecord | None]
    run_options: Any
    translations_computed: int = 0


ORT_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, ValueError)
try:  # onnxruntime's own exception types do not derive from RuntimeError.
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state_module

    ORT_ERRORS = (
        *ORT_ERRORS,
        *(
            getattr(ort_state_module, n)
            for n in (
                "Fail",
                "InvalidArgument",
                "RuntimeException",
                "InvalidGraph",
                "NotImplemented",
                "NoSuchFile",
                "EPFail",
                "InvalidProtobuf",
                "ModelLoaded",
                "NoModel",
                "EngineError",
            )
            if hasattr(ort_state_module, n)
        ),
    )
except ImportError:  # pragma: no cover - onnxruntime always ships it
    pass


_RACY_OPS = frozenset({"ScatterND", "ScatterElements", "Scatter"})


def _has_scatter(graph: onnx.GraphProto, skip: frozenset[str] = frozenset()) -> bool:
    """A scatter node in ``graph`` or its subgraphs, other than those writing an output in ``skip``."""
    for node in graph.node:
        if node.op_type in _RACY_OPS and not (node.output and node.output[0] in skip):
            return True
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH and _has_scatter(attr.g, skip):
                return True
            if attr.type == onnx.AttributeProto.GRAPHS and any(_has_scatter(g, skip) for g in attr.graphs):
                return True
    return False


def _session(model: onnx.ModelProto | bytes, sess_options: Any, what: str) -> ort.InferenceSession:
    if isinstance(model, onnx.ModelProto):
        model = for_onnxruntime(model)  # deprecated Scatter as ScatterElements
    if sess_options is None:
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model)
        sess_options = ort.SessionOptions()
        # onnxruntime's own error log would repeat, unasked, what the raised DmlShimError already says.
        sess_options.log_severity_level = 4
        if _has_scatter(proto.graph):
            # onnxruntime's CPU ScatterND loses updates on duplicate indices with more than one intra-op
            # thread (results differ run to run); one thread makes it exact and deterministic.
            sess_options.intra_op_num_threads = 1
    separate_profile(sess_options)
    payload = model if isinstance(model, bytes) else model.SerializeToString()
    try:
        return ort.InferenceSession(payload, sess_options, providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model)
        raise ort_load_error(proto, what, exc) from exc


def _reasons(t: NodeTranslation) -> tuple[tuple[str, str], ...]:
    return tuple((r.code, r.message) for r in t.reasons)


class _CpuStep:
    """A CPU segment: one onnxruntime session fed from the value table. The session can be given as a
    function that builds it, called on first use (the whole-model check usually makes it unnecessary)."""

    __slots__ = ("_build", "_session", "inputs", "label", "outputs")

    def __init__(
        self,
        session: ort.InferenceSession | Callable[[], ort.InferenceSession],
        inputs: Sequence[str],
        outputs: Sequence[str],
        label: str,
    ):
        self._session = session if isinstance(session, ort.InferenceSession) else None
        self._build = None if isinstance(session, ort.InferenceSession) else session
        self.inputs = tuple(inputs)
        self.outputs = list(outputs)
        self.label = label

    @property
    def session(self) -> ort.InferenceSession:
        if self._session is None:
            assert self._build is not None
            self._session, self._build = self._build(), None
        return self._session

    def __call__(self, values: Values, state: _RunState) -> None:
        feeds = {name: values[name] for name in self.inputs}
        try:
            results = self.session.run(self.outputs, feeds, state.run_options)
        except ORT_ERRORS as exc:
            raise ort_run_error(exc, f"onnxruntime failed in {self.label}") from exc
        for name, value in zip(self.outputs, results, strict=False):
            values[name] = value


class _EmulatedStep:
    """One gather/scatter node: run from its DirectML descriptor, or on the CPU when its translation for
    the actual shapes says so."""

    __slots__ = (
        "_attrs",
        "_cache",
        "_fallback",
        "_fallback_sessions",
        "_model",
        "_sess_options",
        "feature_level",
        "index_mode",
        "inputs",
        "name",
        "node",
        "output",
        "since_version",
        "slot",
    )

    def __init__(
        self,
        *,
        node: onnx.NodeProto,
        name: str,
        since_version: int,
        slot: int,
        feature_level: FeatureLevel,
        index_mode: IndexMode,
        model: onnx.ModelProto,
        sess_options: Any,
        static: NodeTranslation | None,
        static_key: tuple[Any, ...] | None,
    ) -> None:
        self.node = node
        self.name = name
        self.since_version = since_version
        self.slot = slot
        self.feature_level = feature_level
        self.index_mode = index_mode
        self.inputs = tuple(node.input)
        self.output = node.output[0]
        self._model = model
        self._sess_options = sess_options
        self._attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self._cache: dict[tuple[Any, ...], tuple[NodeTranslation, NodeRecord | None]] = {}
        self._fallback_sessions: dict[tuple[Any, ...], ort.InferenceSession] = {}
        if static is not None and static_key is not None:
            self._cache[static_key] = (static, self._clean_record(static))

    def _clean_record(self, t: NodeTranslation) -> NodeRecord | None:
        """The record of a run with no duplicates and no negative indices (shared, it is frozen)."""
        if t.status is not Status.DML or t.operator is None:
            return None
        return NodeRecord(
            name=self.name,
            op_type=self.node.op_type,
            placement=PLACEMENT_DML,
            status=t.status.value,
            operator=t.operator.operator_type.dml_name,
            reasons=_reasons(t),
            ort_placement=t.ort_placement,
        )

    def __call__(self, values: Values, state: _RunState) -> None:
        arrays = [values[n] if n else None for n in self.inputs]
        key = tuple((a.shape, a.dtype) if a is not None else None for a in arrays)
        entry = self._cache.get(key)
        if entry is None:
            # A gather's output can dwarf its inputs (small data, many indices): size it before running.
            shape = gather_scatter_output_shape(
                self.node.op_type, self._attrs, [a.shape if a is not None else None for a in arrays]
            )
            if shape is not None and arrays and arrays[0] is not None:
                check_tensor(
                    shape, arrays[0].dtype, tensor=self.output, node=self.name, op_type=self.node.op_type,
                    what="output",
                )  # fmt: skip
            infos = [
                TensorInfo(tuple(a.shape), elem_type_of(a.dtype)) if a is not None else None for a in arrays
            ]
            t = translate_node(self.node, self.since_version, infos, self.feature_level, name=self.name)
            if len(self._cache) >= TRANSLATION_CACHE_SIZE:
                self._cache.clear()
            entry = self._cache[key] = (t, self._clean_record(t))
            state.translations_computed += 1
        t, clean = entry
        if clean is None:
            values[self.output] = self._run_on_cpu(arrays, state)
            state.records[self.slot] = NodeRecord(
                name=self.name,
                op_type=self.node.op_type,
                placement=PLACEMENT_CPU,
                status=t.status.value,
                duplicate_indices=_overwritten_writes(self.node.op_type, self._attrs, arrays),
                reasons=(
                    *_reasons(t),
                    (
                        REASON_RUNTIME_FALLBACK,
                        "the translation for this run's shapes and types is not a DirectML operator; "
                        "the node ran in onnxruntime's CPU provider",
                    ),
                ),
                ort_placement=t.ort_placement,
            )
            return
        result = run_translation(t, arrays, index_mode=self.index_mode)
        values[self.output] = result.output
        indices = arrays[1]
        negative = bool(
            indices is not None and indices.dtype.kind == "i" and indices.size and indices.min() < 0
        )
        if result.duplicate_indices or negative:
            state.records[self.slot] = NodeRecord(
                name=clean.name,
                op_type=clean.op_type,
                placement=clean.placement,
                status=clean.status,
                operator=clean.operator,
                reasons=clean.reasons,
                duplicate_indices=result.duplicate_indices,
                negative_indices=negative,
                ort_placement=clean.ort_placement,
            )
        else:
            state.records[self.slot] = clean

    def _run_on_cpu(self, arrays: Sequence[np.ndarray | None], state: _RunState) -> np.ndarray:
        present = [(n, a) for n, a in zip(self.inputs, arrays, strict=False) if a is not None]
        key = tuple((a.dtype, a.ndim) for _, a in present)
        session = self._fallback_sessions.get(key)
        if session is None:
            session = self._fallback_sessions[key] = _session(
                _single_node_model(self._model, self.node, present), self._sess_options, f"node {self.name!r}"
            )
        try:
            (out,) = session.run([self.output], {n: a for n, a in present}, state.run_options)
        except ORT_ERRORS as exc:
            raise ort_run_error(exc, "onnxruntime failed", node=self.name, op_type=self.node.op_type) from exc
        return out


def _overwrites(node: onnx.NodeProto) -> bool:
    """A scatter without reduction: duplicate indices make some of its writes overwrite others."""
    if node.op_type not in ("Scatter", "ScatterElements", "ScatterND"):
        return False
    return not any(a.name == "reduction" and a.s not in (b"", b"none") for a in node.attribute)


def _overwritten_writes(op_type: str, attrs: Mapping[str, Any], arrays: Sequence[np.ndarray | None]) -> int:
    """Writes of a scatter without reduction that a later write to the same place overwrites, counted as
    the kernels count them (elements for ScatterElements, index tuples for ScatterND), for nodes that ran
    on onnxruntime (which has accepted the indices, so they are in range)."""
    if op_type not in ("Scatter", "ScatterElements", "ScatterND") or len(arrays) < 2:
        return 0
    reduction = attrs.get("reduction", b"none")
    if (reduction.decode() if isinstance(reduction, bytes) else str(reduction)) != "none":
        return 0
    data, indices = arrays[0], arrays[1]
    if data is None or indices is None or indices.size == 0 or data.size == 0:
        return 0
    idx = indices.astype(np.int64, copy=False)
    if op_type == "ScatterND":
        k = idx.shape[-1]
        dims = np.asarray(data.shape[:k], dtype=np.int64)
        tuples = idx.reshape(-1, k)
        tuples = np.where(tuples < 0, tuples + dims, tuples)
        strides = np.cumprod(np.concatenate([dims[1:], [1]])[::-1])[::-1] if k else dims
        targets = tuples @ strides if k else np.zeros(len(tuples), np.int64)
    else:
        axis = int(attrs.get("axis", 0))
        axis = axis + data.ndim if axis < 0 else axis
        idx = np.where(idx < 0, idx + data.shape[axis], idx)
        strides = np.cumprod((*data.shape[1:], 1)[::-1])[::-1]
        targets = np.zeros(idx.shape, np.int64)
        for d in range(idx.ndim):
            line = [-1 if e == d else 1 for e in range(idx.ndim)]
            coord = idx if d == axis else np.arange(idx.shape[d]).reshape(line)
            targets = targets + coord * int(strides[d])
    return int(targets.size - np.unique(targets).size)


_ORT_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")
_ORT_INDEX_PROBLEMS = ("out of data bounds", "out of range", "invalid ind", "out of bound")
_ORT_INDEX_VALUE = re.compile(r"(?:idx|index|indice)\s*=\s*(-?\d+)")


def ort_run_error(
    exc: BaseException, what: str, *, node: str | None = None, op_type: str | None = None
) -> BadInputError:
    """onnxruntime's run failure as a dmlshim error: IndexOutOfRangeError when onnxruntime rejected an
    index of a gather/scatter node (it names the node and often the value), BadInputError otherwise."""
    text = str(exc)
    found = _ORT_NODE.search(text)
    if found is not None:
        op_type, node = found.group(1), found.group(2) or node
    lowered = text.lower()
    if op_type in _GATHER_SCATTER and any(p in lowered for p in _ORT_INDEX_PROBLEMS):
        value = _ORT_INDEX_VALUE.search(text)
        return IndexOutOfRangeError(
            f"{what}: an index is out of range ({text.strip().splitlines()[0]})",
            rule="ONNX: every index must lie within the dimension it addresses",
            value=int(value.group(1)) if value else None,
            node=node,
            op_type=op_type,
        )
    return BadInputError(f"{what}: {text}", node=node, op_type=op_type)


_GATHER_SCATTER = frozenset(
    {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}
)


def _single_node_model(
    model: onnx.ModelProto, node: onnx.NodeProto, inputs: Sequence[tuple[str, np.ndarray]]
) -> onnx.ModelProto:
    graph_inputs = [
        helper.make_tensor_value_info(name, elem_type_of(arr.dtype), [None] * arr.ndim)
        for name, arr in inputs
    ]
    graph = helper.make_graph(
        [node],
        f"{node.op_type}_single",
        graph_inputs,
        [onnx.ValueInfoProto(name=o) for o in node.output if o],
    )
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=SEGMENT_IR_VERSION)


def _folded_constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Constant nodes with a tensor or numeric value, as initializers named after their output."""
    found: dict[str, onnx.TensorProto] = {}
    for node in graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
            continue
        attr = node.attribute[0]
        out = node.output[0]
        if attr.name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(attr.t)
        elif attr.name == "value_float":
            tensor = numpy_helper.from_array(np.array(attr.f, dtype=np.float32))
        elif attr.name == "value_floats":
            tensor = numpy_helper.from_array(np.array(list(attr.floats), dtype=np.float32))
        elif attr.name == "value_int":
            tensor = numpy_helper.from_array(np.array(attr.i, dtype=np.int64))
        elif attr.name == "value_ints":
            tensor = numpy_helper.from_array(np.array(list(attr.ints), dtype=np.int64))
        else:
            continue  # strings and sparse values stay nodes
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            continue
        tensor.name = out
        found[out] = tensor
    return found


def _type_protos(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    types: dict[str, onnx.TypeProto] = {}
    for vi in (*graph.value_info, *graph.output, *graph.input):
        if vi.HasField("type") and vi.type.WhichOneof("value") is not None:
            types[vi.name] = vi.type
    return types


def _tensor_type(elem_type: int, dims: Sequence[int]) -> onnx.TypeProto:
    tp = onnx.TypeProto()
    tp.tensor_type.elem_type = elem_type
    shape = tp.tensor_type.shape
    for d in dims:
        shape.dim.add().dim_value = int(d)
    return tp


def _check_outputs_defined(graph: onnx.GraphProto) -> None:
    """Every graph output must be computed by a node or be an input or initializer of the graph."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for node in graph.node for o in node.output if o}
    for out in graph.output:
        if out.name not in defined:
            raise BadModelError(
                f"graph output {out.name!r} is computed by no node and is no graph input or initializer",
                tensor=out.name,
                rule="every graph output must be defined in the graph",
            )


def _check_static_sizes(
    graph: onnx.GraphProto, infos: Mapping[str, TensorInfo], names: Sequence[str]
) -> None:
    """Refuse, before any allocation, a graph in which a statically shaped value cannot fit in memory."""
    producers = {
        out: (names[i], node.op_type) for i, node in enumerate(graph.node) for out in node.output if out
    }
    check_static_values(
        {n: (i.static_shape, i.elem_type) for n, i in infos.items() if i.is_static}, producers=producers
    )


def _static_key(infos: Sequence[TensorInfo | None]) -> tuple[Any, ...] | None:
    """The cache key a run with exactly these static shapes and types will look up."""
    key: list[Any] = []
    for info in infos:
        if info is None:
            key.append(None)
            continue
        if not info.is_static:
            return None
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(info.elem_type))
        except (KeyError, TypeError, ValueError):
            return None
        key.append((info.static_shape, dtype))
    return tuple(key)


class PartitionedEngine:
    """The default engine. See the module docstring.

    Args:
        model: the model (not modified).
        config: feature level, index mode and onnxruntime session options.
        ort_cpu_preference: place gather/scatter nodes that onnxruntime's DirectML provider would run on
            the CPU (shape computations over CPU tensors) on the CPU too, as that provider does.
    """

    name = "partitioned"

    def __init__(
        self, model: onnx.ModelProto, config: EngineConfig, *, ort_cpu_preference: bool = True
    ) -> None:
        self.config = config
        self._fl_name = config.feature_level.dml_name
        self._scatter_as_elements = has_deprecated_scatter(model)
        graph = model.graph
        nodes = list(graph.node)
        names = display_names(nodes)
        opsets = model_opsets(model)
        if config.providers and any(
            (p if isinstance(p, str) else p[0]) not in ("CPUExecutionProvider", "DmlShimExecutionProvider")
            for p in config.providers
        ):
            logger.warning(
                "the partitioned engine runs non-emulated nodes on CPUExecutionProvider; "
                "providers %s ignored",
                list(config.providers),
            )

        _check_outputs_defined(graph)
        try:
            inferred = infer_shapes(model)
        except DmlShimError as exc:
            logger.warning("shape inference failed (%s); translating gather/scatter nodes at run time", exc)
            inferred = model
        infos = tensor_infos(inferred.graph)
        _check_static_sizes(inferred.graph, infos, names)
        types = _type_protos(inferred.graph)
        constants = _folded_constants(graph)
        for name, tensor in constants.items():
            infos.setdefault(name, TensorInfo(tuple(int(d) for d in tensor.dims), int(tensor.data_type)))
            types.setdefault(name, _tensor_type(int(tensor.data_type), tensor.dims))

        # Slots of the per-run record: top-level gather/scatter nodes, each followed by the nested ones.
        template: list[NodeRecord | None] = []
        slot_of: dict[int, int] = {}
        candidates: dict[int, tuple[int, NodeTranslation, list[TensorInfo | None]]] = {}
        translated: dict[int, NodeTranslation] = {}
        for i, node in enumerate(nodes):
            if is_gather_scatter(node):
                since = node_since_version(node, opsets)
                node_infos = [infos.get(n) if n else None for n in node.input]
                t = translate_node(node, since, node_infos, config.feature_level, name=names[i])
                slot_of[i] = len(template)
                template.append(None)
                translated[i] = t
                shape_unknown = t.status is Status.ERROR and _SHAPE_UNKNOWN in t.reason_codes
                # A scatter without reduction that falls back still runs as its own step, so that the
                # writes its duplicate indices overwrite are counted in the run record.
                counted = t.status is Status.FALLBACK and _overwrites(node)
                if t.status is Status.DML or shape_unknown or counted:
                    candidates[i] = (since, t, node_infos)
                else:
                    template[slot_of[i]] = NodeRecord(
                        name=names[i],
                        op_type=node.op_type,
                        placement=PLACEMENT_CPU,
                        status=t.status.value,
                        reasons=_reasons(t),
                        ort_placement=t.ort_placement,
                    )
            for nested in nested_gather_scatter([node], [names[i]]):
                template.append(
                    NodeRecord(
                        name=nested.path,
                        op_type=nested.node.op_type,
                        placement=PLACEMENT_CPU,
                        status=REASON_NOT_EMULATED,
                        reasons=(
                            (
                                REASON_NOT_EMULATED,
                                f"inside the {nested.owner_op} node {nested.owner!r}: the partitioned "
                                "engine runs control flow in onnxruntime as a whole, so this node ran on "
                                "onnxruntime's CPU provider (the custom-op engine can emulate nodes inside "
                                "subgraphs)",
                            ),
                        ),
                    )
                )

        if any(r is not None and r.status == REASON_NOT_EMULATED for r in template):
            # Inside control flow onnxruntime still places each node: say where, as inspect does.
            ep = model_placements(model, config.feature_level)
            template = [
                dataclasses.replace(r, ort_placement=ep.get(r.name))
                if r is not None and r.status == REASON_NOT_EMULATED
                else r
                for r in template
            ]
        if ort_cpu_preference and translated:
            elem_types = {n: info.elem_type for n, info in infos.items()}
            moved = graph_placements(graph, translated, elem_types)
            for i in sorted(moved - set(candidates)):
                record = template[slot_of[i]]
                if record is not None:
                    template[slot_of[i]] = dataclasses.replace(record, ort_placement=CPU_PROVIDER)
            for i in sorted(moved & set(candidates)):
                _, t, _ = candidates.pop(i)
                template[slot_of[i]] = NodeRecord(
                    name=names[i],
                    op_type=nodes[i].op_type,
                    placement=PLACEMENT_CPU,
                    status=t.status.value,
                    reasons=(*_reasons(t), (REASON_CPU_PREFERRED, CPU_PREFERRED_MESSAGE)),
                    ort_placement=CPU_PROVIDER,
                )

        for i in candidates:
            # A gather/scatter output has the data input's type; give it at least that (rank unknown) when
            # shape inference could not, so a CPU segment can declare it as an input.
            out, data = nodes[i].output[0], nodes[i].input[0]
            data_info = infos.get(data)
            if out not in types and data_info is not None and data_info.elem_type:
                tp = onnx.TypeProto()
                tp.tensor_type.elem_type = data_info.elem_type
                types[out] = tp

        self._template = template
        self._steps: list[Callable[[Values, _RunState], None]] = []
        self._static_values: Values = {}
        graph_inputs = [v.name for v in graph.input]
        init_names = {t.name for t in graph.initializer}
        if not candidates:
            # Nothing to emulate: the model runs as it is, in one onnxruntime session.
            session = _session(model, config.sess_options, "the model")
            self._steps.append(
                _CpuStep(session, [n for n in graph_inputs], [o.name for o in graph.output], "the model")
            )
            self._default_feeds = {
                t.name: numpy_helper.to_array(t) for t in graph.initializer if t.name in set(graph_inputs)
            }
            self._cpu_partitions = 1
            self._whole_model = True
            self._copy_on_output: frozenset[str] = frozenset()
            self._finish_init()
            return
        self._whole_model = False
        self._default_feeds = {}

        partition = partition_graph(graph, candidates, available=graph_inputs, constants=constants)
        init_protos = {t.name: t for t in graph.initializer}
        init_protos.update(constants)
        emulated_reads = {
            n
            for step in partition.steps
            if isinstance(step, EmulatedNode)
            for n in nodes[step.node].input
            if n
        }
        graph_outputs = {o.name for o in graph.output}
        overridable = init_names & set(graph_inputs)
        for name in ((emulated_reads | graph_outputs) & set(init_protos)) | overridable:
            self._static_values[name] = numpy_helper.to_array(init_protos[name])
        self._copy_on_output = frozenset(graph_outputs & (set(graph_inputs) | set(self._static_values)))

        segments = 0
        for step in partition.steps:
            if isinstance(step, CpuSegment):
                if not step.outputs:
                    logger.debug("CPU segment %d produces nothing used later; skipped", step.index)
                    continue
                label = (
                    f"CPU partition {segments} (nodes {names[step.nodes[0]]!r}..{names[step.nodes[-1]]!r})"
                )
                build = functools.partial(_segment_session, model, step, types, init_protos, config, label)
                self._steps.append(_CpuStep(build, step.inputs, step.outputs, label))
                segments += 1
            else:
                i = step.node
                since, t, node_infos = candidates[i]
                static_key = _static_key(node_infos) if t.status is Status.DML else None
                self._steps.append(
                    _EmulatedStep(
                        node=nodes[i],
                        name=names[i],
                        since_version=since,
                        slot=slot_of[i],
                        feature_level=config.feature_level,
                        index_mode=config.index_mode,
                        model=model,
                        sess_options=config.sess_options,
                        static=t if static_key is not None else None,
                        static_key=static_key,
                    )
                )
        self._cpu_partitions = segments
        self._check = None
        if config.whole_model_check and segments >= MIN_SEGMENTS_FOR_CHECK:
            emulated = [s for s in self._steps if isinstance(s, _EmulatedStep)]
            outputs = frozenset(s.output for s in emulated)
            make = functools.partial(_whole_session, model, config, outputs)
            self._check = build_whole_model_check(
                model, emulated, set(graph_inputs), make, ORT_ERRORS, self._static_values
            )
        if self._check is None:
            for cpu_step in self._steps:
                if isinstance(cpu_step, _CpuStep):
                    _ = cpu_step.session  # built now, so that a segment onnxruntime refuses fails here
        self._finish_init()

    def _finish_init(self) -> None:
        logger.info(
            "partitioned engine: %d steps, %d CPU partitions, %d emulated nodes",
            len(self._steps),
            self._cpu_partitions,
            sum(isinstance(s, _EmulatedStep) for s in self._steps),
        )

    @property
    def cpu_partitions(self) -> int:
        """How many onnxruntime CPU sessions run the graph's non-emulated nodes."""
        return self._cpu_partitions

    @property
    def emulated_nodes(self) -> tuple[str, ...]:
        """Names of the nodes planned to run from their DirectML descriptors."""
        return tuple(s.name for s in self._steps if isinstance(s, _EmulatedStep))

    step_observer: Callable[[Callable[[Values, _RunState], None], Values, _RunState], None] | None = None
    """Called as ``observe(step, values, state)`` in place of each ``step(values, state)`` (profiling)."""

    def ort_sessions(self) -> list[tuple[str, ort.InferenceSession]]:
        """Every onnxruntime session built so far (CPU partitions, then one-node fallbacks), labelled."""
        found: list[tuple[str, ort.InferenceSession]] = []
        for step in self._steps:
            if isinstance(step, _CpuStep):
                found.append((step.label, step.session))
            elif isinstance(step, _EmulatedStep):
                found.extend((f"node {step.name!r} on the CPU", s) for s in step._fallback_sessions.values())
        return found

    def get_providers(self) -> list[str]:
        if self._whole_model:
            return ["CPUExecutionProvider"]
        return ["DmlShimExecutionProvider", "CPUExecutionProvider"]

    def run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord]:
        """Run every step; return the named outputs and the run's record."""
        state = _RunState(self._template.copy(), run_options)
        if self._whole_model:
            values: Values = dict(self._default_feeds)
            values.update(feeds)
            step = self._steps[0]
            assert isinstance(step, _CpuStep)
            results = _run_whole(step, values, output_names, run_options)
        else:
            values = dict(self._static_values)
            values.update(feeds)
            observe = self.step_observer
            check = self._check if observe is None else None
            checked = None if check is None else check.run(output_names, values, state, run_options)
            if checked is not None:
                return checked, self._record(state)
            state = _RunState(self._template.copy(), run_options)
            values = dict(self._static_values)
            values.update(feeds)
            for run_step in self._steps:
                if observe is None:
                    run_step(values, state)
                else:
                    observe(run_step, values, state)
            results = [
                np.array(values[n], copy=True) if n in self._copy_on_output else values[n]
                for n in output_names
            ]
        return results, self._record(state)

    def _record(self, state: _RunState) -> RunRecord:
        nodes = tuple(r for r in state.records if r is not None)
        if self._scatter_as_elements:
            nodes = note_scatter_as_scatter_elements(nodes)
        return RunRecord(
            engine=self.name,
            feature_level=self._fl_name,
            nodes=nodes,
            cpu_partitions=self._cpu_partitions,
            translations_computed=state.translations_computed,
        )


def _run_whole(step: _CpuStep, values: Values, output_names: Sequence[str], run_options: Any) -> list[Any]:
    feeds = {n: values[n] for n in step.inputs if n in values}
    try:
        return list(step.session.run(list(output_names), feeds, run_options))
    except ORT_ERRORS as exc:
        raise ort_run_error(exc, "onnxruntime failed running the model") from exc


def _segment_session(
    model: onnx.ModelProto,
    segment: CpuSegment,
    types: Mapping[str, onnx.TypeProto],
    init_protos: Mapping[str, onnx.TensorProto],
    config: EngineConfig,
    label: str,
) -> ort.InferenceSession:
    return _session(_segment_model(model, segment, types, init_protos), config.sess_options, label)


def _whole_session(
    model: onnx.ModelProto, config: EngineConfig, emulated: frozenset[str], payload: bytes
) -> ort.InferenceSession:
    """The whole-model check's session. With default options it keeps onnxruntime's default thread count
    unless a scatter that no kernel replaces would run in it (onnxruntime's CPU scatters lose updates on
    duplicate indices with several threads); emulated scatters are checked against their kernel anyway."""
    options = config.sess_options
    if options is None:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        if _has_scatter(model.graph, skip=emulated):
            options.intra_op_num_threads = 1
    return ort.InferenceSession(payload, options, providers=["CPUExecutionProvider"])


def _segment_model(
    model: onnx.ModelProto,
    segment: CpuSegment,
    types: Mapping[str, onnx.TypeProto],
    init_protos: Mapping[str, onnx.TensorProto],
) -> onnx.ModelProto:
    """An ONNX model of one CPU segment: its nodes, the initializers they read, typed inputs, outputs."""
    graph = model.graph
    seg = onnx.GraphProto(name=f"{graph.name or 'graph'}_cpu{segment.index}")
    seg.node.extend(graph.node[i] for i in segment.nodes)
    for name in segment.inputs:
        tp = types.get(name)
        if tp is None:
            raise BadModelError(
                f"the type of {name!r} is unknown (shape inference gave none), so CPU partition "
                f"{segment.index} cannot declare it as an input",
                tensor=name,
            )
        vi = seg.input.add()
        vi.name = name
        vi.type.CopyFrom(tp)
    for name in segment.initializers:
        seg.initializer.append(init_protos[name])
    for name in segment.outputs:
        seg.output.add().name = name
    out = onnx.ModelProto(
        ir_version=SEGMENT_IR_VERSION,
        producer_name="dmlshim",
        graph=seg,
    )
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    return out
