"""The Python kernel behind every custom node of a lowered model, and the side channel to the engine's run.

onnxruntime-extensions calls :func:`kernel` with the custom node's inputs and declared attributes. The
attributes say what to run (see :mod:`dmlshim.execute.custom_ops.types`): the descriptor the node carries,
the node's whole translation plan, or (``tags`` mode) the translation on element tags, returning for every
output element the position of the element it holds.

A custom-op kernel cannot tell onnxruntime *why* it failed, so it keeps the exception in the run's side
channel (:class:`RunState`) and the engine re-raises that dmlshim error instead of onnxruntime's opaque one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from ...dml.enums import FeatureLevel
from ...dml.json_form import operator_from_json
from ...dml.operators import OperatorDesc
from ...errors import DmlShimError, IndexOutOfRangeError
from ...fork_locks import ChildLock
from ...kernels import execute
from ...kernels.options import IndexMode, KernelOptions
from ...model.zero_depth_scatternd import ort_crashes, scatter_nd_empty_tuples
from ...runtime.real import OrtInferenceSession
from ...translate import NodeTranslation, Status, TensorInfo, run_translation, translate_node
from ...translate.plan import elem_type_of, np_dtype_of
from ...translate.runner import index_error_in_onnx_terms
from ..plan.fallback import for_onnxruntime
from ..plan.sessions import ort_run_error
from .types import DECLARED_ATTRIBUTES, MODE_DESCRIPTOR, MODE_TAGS, transport_type

logger = logging.getLogger(__name__)

__all__ = ["NodeRun", "RunState", "active_run", "kernel", "node_attributes", "prepared"]

TRANSLATION_CACHE_SIZE = 64
"""Run-time translations kept per custom node (one per distinct input shapes and dtypes)."""


@dataclass
class NodeRun:
    """What one custom node did during one run (a node inside a Loop body runs many times)."""

    calls: int = 0
    duplicate_indices: int = 0
    negative_indices: bool = False
    operator: str | None = None
    status: str = "dml"
    reasons: tuple[tuple[str, str], ...] = ()
    fallback: bool = False


@dataclass
class RunState:
    """What the kernels of one run report: per node, the number of translations made, the first error."""

    nodes: dict[str, NodeRun] = field(default_factory=dict)
    translations_computed: int = 0
    error: BaseException | None = None


_ACTIVE: RunState | None = None
"""The state of the run in progress; runs are serialized by ``_RUN_LOCK`` (kernels hold the GIL anyway)."""
_RUN_LOCK = ChildLock(threading.RLock)


def _no_run_in_child() -> None:
    """After ``fork``: a run another thread had in progress is none of the child's (``_RUN_LOCK``, a
    :class:`~dmlshim.fork_locks.ChildLock`, is new there: every run of a custom-op session in a child forked
    while another thread ran one waited forever)."""
    global _ACTIVE
    _ACTIVE = None


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_no_run_in_child)


@contextmanager
def active_run(state: RunState) -> Iterator[RunState]:
    """Make ``state`` the side channel of the kernels for the duration of one session run."""
    global _ACTIVE
    with _RUN_LOCK:
        _ACTIVE = state
        try:
            yield state
        finally:
            _ACTIVE = None


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


class Prepared:
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
        if self.mode == MODE_TAGS:
            self.bridge_dtype = np.dtype(np.int64)  # positions
        else:
            carried = transport_type(int(io["output"]))
            assert carried is not None  # lowering only emits types that cross the bridge
            self.bridge_dtype = np_dtype_of(carried)
        self.bindings: tuple[str, ...] = tuple(io.get("bindings", ()))
        shape = io.get("indices_shape")
        self.indices_shape: tuple[int, ...] | None = None if shape is None else tuple(int(d) for d in shape)
        self.onnx_inputs: tuple[str, ...] = tuple(json.loads(str(attrs["onnx_inputs"])))
        self.onnx_attributes: dict[str, Any] = json.loads(str(attrs["onnx_attributes"]))
        text = str(attrs["descriptor"])
        self.descriptor: OperatorDesc | None = operator_from_json(json.loads(text)) if text else None
        self.options = KernelOptions(
            feature_level=self.feature_level, index_mode=self.index_mode, node=self.node_name
        )
        # named as the model's node: onnxruntime's message from the fallback session quotes the name
        self.node = helper.make_node(
            self.op_type, list(self.onnx_inputs), ["output"], name=self.node_name, **self.onnx_attributes
        )
        self.translations: dict[tuple[Any, ...], NodeTranslation] = {}
        self._fallback_sessions: dict[tuple[Any, ...], ort.InferenceSession] = {}
        self._tag_cache: dict[tuple[int, int, str], np.ndarray] = {}

    def __call__(self, arrays: Sequence[Any], state: RunState | None) -> np.ndarray:
        run = state.nodes.setdefault(self.node_name, NodeRun()) if state is not None else NodeRun()
        run.calls += 1
        if self.mode == MODE_TAGS:
            out = self._run_tags(arrays, run, state)
        else:
            values = [_from_bridge(a, dt) for a, dt in zip(arrays, self.input_dtypes, strict=True)]
            if self.mode == MODE_DESCRIPTOR:
                out = self._run_descriptor(values, run)
            else:
                out = self._run_translation(values, run, state)
        # The bridge cannot return rank 0 reliably: a scalar leaves as [1] and lowering's Gather of
        # element 0 makes it a scalar again.
        return _to_bridge(out.reshape(1) if out.ndim == 0 else out, self.bridge_dtype)

    def _run_tags(self, arrays: Sequence[Any], run: NodeRun, state: RunState | None) -> np.ndarray:
        """Tags mode: the node run on element tags; for each output element, the position it came from.

        Element ``i`` of data (then of updates) is tagged with the bits of ``i`` in data's own element type,
        so the translation, its host steps and its descriptor run exactly as on the real data. Types
        narrower than the positions take several runs, one per digit of the positions in base 2^bits.
        """
        data_shape = tuple(int(d) for d in np.asarray(arrays[0]).reshape(-1))
        indices = _from_bridge(arrays[1], self.input_dtypes[1])
        shapes = [data_shape]
        if len(arrays) > 2:
            shapes.append(tuple(int(d) for d in np.asarray(arrays[2]).reshape(-1)))
        dtype = self.input_dtypes[0]
        bits = dtype.itemsize * 8
        unsigned = np.dtype(f"u{dtype.itemsize}")
        counts = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        total = sum(counts)
        digits = max(1, -(-max(total - 1, 1).bit_length() // bits))
        found: np.ndarray | None = None
        for digit in range(digits):
            tagged = self._tags(total, digit, dtype)
            values = [tagged[: counts[0]].reshape(shapes[0]), indices]
            if len(shapes) > 1:
                values.append(tagged[counts[0] :].reshape(shapes[1]))
            # Only the first run counts (duplicates, calls); the others repeat it on other digits.
            out = self._run_translation(values, run if digit == 0 else NodeRun(), state)
            part = np.ascontiguousarray(out).view(unsigned).astype(np.int64) << (bits * digit)
            found = part if found is None else found | part
        assert found is not None
        return found

    def _tags(self, total: int, digit: int, dtype: np.dtype) -> np.ndarray:
        """Digit ``digit`` (base 2^bits) of the positions 0..total-1, as values of ``dtype``; the last ones
        made are kept, as a Loop body asks for the same again and again (the kernels never write them)."""
        key = (total, digit, dtype.str)
        cached = self._tag_cache.get(key)
        if cached is None:
            bits = dtype.itemsize * 8
            positions = np.arange(total, dtype=np.uint64)
            digits = (positions >> np.uint64(bits * digit)) & np.uint64((1 << bits) - 1)
            cached = digits.astype(np.dtype(f"u{dtype.itemsize}")).view(dtype)
            cached.flags.writeable = False
            if len(self._tag_cache) >= 4:
                self._tag_cache.clear()
            self._tag_cache[key] = cached
        return cached

    def _run_descriptor(self, values: Sequence[np.ndarray], run: NodeRun) -> np.ndarray:
        assert self.descriptor is not None
        bound = dict(zip(self.bindings, values, strict=True))
        try:
            result = execute(self.descriptor, bound, self.options)
        except IndexOutOfRangeError as exc:
            raise self._in_onnx_terms(exc, bound["IndicesTensor"].shape) from exc
        run.operator = self.descriptor.operator_type.dml_name
        run.duplicate_indices += int(result.duplicate_indices)
        run.negative_indices |= _has_negative(bound.get("IndicesTensor"))
        out = result.output
        return out.astype(self.output_dtype) if out.dtype != self.output_dtype else out

    def _in_onnx_terms(self, exc: IndexOutOfRangeError, sizes: tuple[int, ...]) -> IndexOutOfRangeError:
        """The kernel's error named as the other engines name it: the ONNX node, op, indices tensor and,
        where the lowering recorded the ONNX indices' shape, the ONNX position."""
        position = getattr(exc, "position", None)
        where: tuple[int, ...] | None = None
        if position is not None and self.indices_shape is not None and len(position) == len(sizes):
            flat = int(np.ravel_multi_index(tuple(int(p) for p in position), sizes))
            where = (
                tuple(int(p) for p in np.unravel_index(flat, self.indices_shape))
                if self.indices_shape
                else ()
            )
        tensor = self.onnx_inputs[1] if len(self.onnx_inputs) > 1 else "indices"
        assert self.descriptor is not None
        return index_error_in_onnx_terms(
            exc,
            node=self.node_name,
            op_type=self.op_type,
            tensor=tensor,
            onnx_position=where,
            dml_op=self.descriptor.operator_type.dml_name,
        )

    def translation_for(self, values: Sequence[np.ndarray], state: RunState | None) -> NodeTranslation:
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
        self, values: Sequence[np.ndarray], run: NodeRun, state: RunState | None
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
        empty_tuples = (
            self.op_type == "ScatterND" and len(values) > 2 and values[1].ndim and values[1].shape[-1] == 0
        )
        if empty_tuples and ort_crashes():  # onnxruntime would die of SIGFPE: ONNX's answer from numpy
            reduction = next((a.s.decode() for a in self.node.attribute if a.name == "reduction"), "none")
            return scatter_nd_empty_tuples(values[0], values[1], values[2], reduction)
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
                    # no rank: see dmlshim.execute.plan.segments.single_node_model
                    helper.make_tensor_value_info(n, elem_type_of(v.dtype), None)
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
            session = OrtInferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            self._fallback_sessions[key] = session
        try:
            (out,) = session.run(["output"], feeds)
        except Exception as exc:
            # classified as every engine classifies onnxruntime's failures (an index out of range: the
            # IndexOutOfRangeError the other engines and onnxruntime report)
            raise ort_run_error(exc, "onnxruntime failed", node=self.node_name, op_type=self.op_type) from exc
        return np.asarray(out)


_PREPARED: dict[tuple[Any, ...], Prepared] = {}
_ATTRIBUTE_NAMES = tuple(name for name, _ in DECLARED_ATTRIBUTES)


def prepared(attrs: Mapping[str, Any]) -> Prepared:
    key = tuple(attrs[name] for name in _ATTRIBUTE_NAMES)
    found = _PREPARED.get(key)
    if found is None:
        found = _PREPARED[key] = Prepared(attrs)
    return found


def node_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A custom node's declared attributes as onnxruntime-extensions hands them to the kernel."""
    out: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.name in _ATTRIBUTE_NAMES:
            value = helper.get_attribute_value(attr)
            out[attr.name] = value.decode() if isinstance(value, bytes) else int(value)
    return out


def _placeholder(prep: Prepared | None, arrays: Sequence[Any]) -> np.ndarray:
    """What a failed kernel hands back: zeros of the output's bridge type and, where known, its shape."""
    dtype = prep.bridge_dtype if prep is not None else np.asarray(arrays[0]).dtype
    shape: tuple[int, ...] = tuple(np.shape(arrays[0])) if arrays else (0,)
    if prep is not None and prep.descriptor is not None:
        shape = tuple(prep.descriptor.output_tensor.sizes)
    return np.zeros(shape, dtype=dtype)


def kernel(*arrays: Any, **attrs: Any) -> np.ndarray:
    """The Python kernel of every custom op: run the node the attributes describe on the bridged arrays."""
    # An exception leaving a Python custom op aborts the process (onnxruntime-extensions lets the C++
    # exception cross onnxruntime's C API), so nothing may escape: the error goes to the run's side channel
    # and the kernel returns a placeholder; CustomOpEngine.run raises the error once the session returns.
    state = _ACTIVE
    prep: Prepared | None = None
    try:
        prep = prepared(attrs)
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
