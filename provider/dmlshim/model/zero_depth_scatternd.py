"""ScatterND with empty index tuples, never handed to an onnxruntime that crashes on it.

A ScatterND whose indices' last dimension is 0 is valid ONNX: each of the ``prod(indices.shape[:-1])``
index tuples names the whole data tensor, so the updates replace it one after the other in row-major
order (the last wins), or are combined into it by the ``reduction``. onnxruntime's CPU kernel kills the
process with SIGFPE on it (an integer division by that 0) in the releases before 1.32 that dmlshim
supports: measured on 1.24.4, at run time, and at session creation when constant folding computes the
node; onnxruntime 1.32 computes ONNX's answer.

On such an onnxruntime every model dmlshim hands it (CPU segments, the whole-model and lean checks,
validate's reference, the custom-op engine's session, inspect's runs, the acceptance check) goes through
:func:`guarded_model_source` first: each such node, in the main graph or in any If/Loop/Scan body (nested),
is replaced by ONNX operators that compute ONNX's answer whatever the ranks: the data and the ``n`` updates
as the rows of one matrix, its last row with no reduction (the last update wins; the data itself when ``n =
0``), else the update rows folded into the data row one after the other by the ScatterND itself at a depth
of 1 (a Loop), so each element is combined by onnxruntime's own kernel, bit for bit as onnxruntime 1.32
combines them at depth 0; reshaped to the data's shape. Where the indices' last dimension (or their rank) is
known only at run time, the node sits behind an If on that dimension (0: those operators; else the node
itself). A model file whose weights are external is handed over as the rewritten bytes with the model's
folder as the external-data folder, so that onnxruntime reads the weights itself, once. The single-node
fallbacks (the partitioned engine's run-time fallback, the custom-op kernel's CPU path) compute the node in
numpy (:func:`scatter_nd_empty_tuples`) instead of onnxruntime.
"""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..graph import default_opset
from .zero_depth_operators import guarded, place, refused_type, replacement

logger = logging.getLogger(__name__)

FIXED_IN = (1, 32)
"""The first onnxruntime release known to run the node (1.22 and 1.24 crash; 1.25 to 1.31 unmeasured)."""

_FIELD = b'"\tScatterND'
"""How a NodeProto serializes ``op_type = "ScatterND"`` (field 4, length 9): a cheap first look."""


def _version(text: str) -> tuple[int, int]:
    parts = [int("".join(c for c in p if c.isdigit()) or 0) for p in text.split(".")[:2]]
    return (parts[0], parts[1]) if len(parts) == 2 else (0, 0)


def ort_version() -> str:
    """The installed onnxruntime's version."""
    import onnxruntime

    return str(onnxruntime.__version__)


def ort_crashes(version: str | None = None) -> bool:
    """Whether onnxruntime ``version`` (the installed one by default) crashes on the node."""
    return _version(ort_version() if version is None else version) < FIXED_IN


CRASH_MARK = "with SIGFPE, so dmlshim computes it itself"
"""The words of :data:`CRASH_NOTE` a report looks for."""

ORT_CRASHES_CODE = "ORT_CRASHES_ON_EMPTY_TUPLES"
"""The note's code in records, inspect and validate."""


CRASH_NOTE = (
    "a ScatterND whose index tuples are empty (indices' last dimension 0) kills onnxruntime {version} "
    "with SIGFPE, so dmlshim computes it itself with ONNX semantics (each update replaces, or is reduced "
    "into, the whole data tensor, in row-major order)"
)


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with onnx's shape inference (run on the model without its weights), or as it is."""
    from .weightless import without_weights

    try:
        return onnx.shape_inference.infer_shapes(without_weights(model))
    except Exception as exc:
        logger.debug("shape inference failed while looking for empty ScatterND tuples: %s", exc)
        return model


def _graph_shapes(
    graph: onnx.GraphProto, outer: dict[str, list[int | None] | None]
) -> dict[str, list[int | None] | None]:
    """Static shapes of the values ``graph`` sees: its own (initializers, inputs, annotations, outputs;
    None for a value of unknown rank) over those of the graphs around it (``outer``)."""
    shapes = dict(outer)
    own: dict[str, list[int | None] | None] = {t.name: [int(d) for d in t.dims] for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        t = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        own.setdefault(value.name, shape if t.HasField("shape") else None)
    shapes.update(own)
    return shapes


def _graph_types(graph: onnx.GraphProto, outer: dict[str, int]) -> dict[str, int]:
    """Element types of the values ``graph`` sees, over those of the graphs around it (``outer``)."""
    types = dict(outer)
    own: dict[str, int] = {t.name: int(t.data_type) for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        if value.type.tensor_type.elem_type:
            own.setdefault(value.name, int(value.type.tensor_type.elem_type))
    types.update(own)
    return types


def _empty_tuples_in(graph: onnx.GraphProto, shapes: dict[str, list[int | None] | None]) -> dict[int, bool]:
    """Positions of ``graph``'s ScatterND nodes whose indices' last dimension is 0 (True) or may be 0 at
    run time (False: its rank or last dimension is known only then), and whose data may have rank 1 or
    more (onnxruntime refuses rank 0 before it divides)."""
    found: dict[int, bool] = {}
    for k, node in enumerate(graph.node):
        if node.op_type != "ScatterND" or node.domain not in ("", "ai.onnx") or len(node.input) < 3:
            continue
        data, indices, updates = (shapes.get(name) for name in node.input[:3])
        if (indices is not None and len(indices) == 0) or (data is not None and len(data) == 0):
            continue  # refused by onnxruntime before it divides
        depth = indices[-1] if indices is not None else None
        if depth is None and indices is not None and data is not None and updates is not None:
            # ONNX: rank(updates) = rank(indices) - 1 + rank(data) - depth, so the ranks tell the depth
            depth = len(indices) - 1 + len(data) - len(updates)
        if depth == 0:
            found[k] = True
        elif depth is None:
            found[k] = False  # 0 or not only at run time: guarded by an If
    return found


def empty_tuple_nodes(model: onnx.ModelProto) -> dict[int, bool]:
    """Positions of the main graph's ScatterND nodes whose indices' last dimension is 0 (True) or may be 0
    at run time (False), as :func:`without_empty_tuples` rewrites them."""
    if not any(n.op_type == "ScatterND" for n in model.graph.node):
        return {}
    return _empty_tuples_in(model.graph, _graph_shapes(_inferred(model).graph, {}))


def _opset(model: onnx.ModelProto) -> int:
    return default_opset(model, missing=1)  # the last entry, as onnxruntime


class _Rewriter:
    """Rewrites a graph and its subgraphs (If branches, Loop and Scan bodies, nested) in place."""

    def __init__(self, opset: int, taken: set[str]) -> None:
        self.opset = opset
        self.taken = {n.split("/", 1)[0] for n in taken}
        self.count = 0
        self.rewritten: list[str] = []

    def _prefix(self) -> str:
        while f"dmlshim_scatternd_{self.count}" in self.taken:
            self.count += 1
        prefix = f"dmlshim_scatternd_{self.count}"
        self.taken.add(prefix)
        return prefix

    def graph(
        self,
        graph: onnx.GraphProto,
        inferred: onnx.GraphProto,
        outer: dict[str, Any],
        outer_types: dict[str, int] | None = None,
    ) -> None:
        """Rewrite ``graph`` (``inferred``: the same graph as shape inference annotated it)."""
        from ..graph import subgraphs

        shapes = _graph_shapes(inferred, outer)
        types = _graph_types(inferred, outer_types or {})
        for node, seen in zip(graph.node, inferred.node, strict=True):
            for (_, sub), (_, seen_sub) in zip(subgraphs(node), subgraphs(seen), strict=True):
                self.graph(sub, seen_sub, shapes, types)
        found = _empty_tuples_in(graph, shapes)
        if not found:
            return
        nodes = list(graph.node)
        del graph.node[:]
        for k, node in enumerate(nodes):
            if k not in found:
                graph.node.append(node)
                continue
            self.rewritten.append(node.name or f"{graph.name}#{k}")
            elem_type = types.get(node.input[0])
            if found[k]:
                place(graph, replacement(node, self._prefix(), self.opset, elem_type))
            else:
                guarded(graph, node, self._prefix(), self.opset, elem_type)


def without_empty_tuples(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of ``model`` with every ScatterND of empty index tuples, in its main graph and in every
    subgraph, computed by other ONNX operators (behind an If on the indices' last dimension where it is
    known only at run time), or None when it has none. ``model`` is not modified."""
    return _rewritten(model)[0]


def _rewritten(model: onnx.ModelProto) -> tuple[onnx.ModelProto | None, list[str]]:
    """:func:`without_empty_tuples` and the names of the nodes it rewrote."""
    from ..graph import op_types, value_names

    if "ScatterND" not in op_types(model.graph):
        return None, []
    inferred = _inferred(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rewriter = _Rewriter(_opset(model), value_names(model.graph))
    try:
        rewriter.graph(out.graph, inferred.graph, {})
    except ValueError:  # shape inference changed the node lists (it does not): the model's own shapes
        out.CopyFrom(model)
        rewriter = _Rewriter(_opset(model), value_names(model.graph))
        rewriter.graph(out.graph, model.graph, {})
    if not rewriter.rewritten:
        return None, []
    logger.info(
        "ScatterND with empty index tuples (%s) computed from ONNX operators: onnxruntime < %d.%d crashes",
        ", ".join(rewriter.rewritten),
        *FIXED_IN,
    )
    return out, rewriter.rewritten


def file_has_field(path: str, field: bytes = _FIELD) -> bool:
    """Whether the file at ``path`` holds ``field``'s bytes (False when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return False
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
                return view.find(field) >= 0
    except OSError:
        return False  # onnxruntime reports what it cannot read


@dataclass(frozen=True)
class GuardedSource:
    """What onnxruntime's ``InferenceSession`` is handed instead of a caller's model source.

    Attributes:
        source: the path or bytes as given, or the bytes of the rewritten model.
        weights_folder: for the rewritten bytes of a model file whose weights are external: the model's
            folder, which their locations are relative to (the session needs it as its
            ``session.model_external_initializers_file_folder_path`` entry); else None.
        nodes: the nodes rewritten (their names, or the graph's name and position).
    """

    source: Any
    weights_folder: str | None = None
    nodes: tuple[str, ...] = ()


def guarded_model_source(source: Any) -> GuardedSource:
    """``source`` (what onnxruntime's ``InferenceSession`` takes: a path, bytes) as is, or, on an
    onnxruntime that crashes on ScatterND with empty index tuples and when it has such a node (in any
    graph), the bytes of the model with those nodes computed by other ONNX operators. A model file whose
    weights are external is read without them: its rewritten bytes keep the external references, and
    :attr:`GuardedSource.weights_folder` names the folder onnxruntime reads them from (as it would for the
    file), so the weights are read once, by onnxruntime."""
    if not ort_crashes():
        return GuardedSource(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        if _FIELD not in source:
            return GuardedSource(source)
        rewritten, nodes = _rewritten(onnx.load_from_string(bytes(source)))
        if rewritten is None:
            return GuardedSource(source)
        return GuardedSource(rewritten.SerializeToString(), None, tuple(nodes))
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not file_has_field(path):
            return GuardedSource(source)
        model = onnx.load(path, load_external_data=False)
        rewritten, nodes = _rewritten(model)
        if rewritten is None:
            return GuardedSource(source)
        from ..graph import all_tensors
        from .weightless import is_external

        external = any(is_external(t) for t in all_tensors(model.graph))
        folder = os.path.dirname(os.path.abspath(path)) if external else None
        return GuardedSource(rewritten.SerializeToString(), folder, tuple(nodes))
    return GuardedSource(source)


def scatter_nd_empty_tuples(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str = "none"
) -> np.ndarray:
    """ScatterND with ONNX semantics where ``indices``' last dimension is 0: the ``prod(indices.shape[:-1])``
    updates replace (or are reduced into) the whole data tensor in row-major order.

    Raises:
        BadInputError: the data is a scalar, or the updates' shape is not ``indices.shape[:-1] + data.shape``
            (as onnxruntime refuses them).
    """
    from ..errors import BadInputError

    expected = tuple(indices.shape[:-1]) + tuple(data.shape)
    if data.ndim == 0 or tuple(updates.shape) != expected:
        raise BadInputError(
            f"ScatterND updates must have shape indices.shape[:-1] + data.shape = {list(expected)} (data of "
            f"rank 1 or more), not {list(updates.shape)} for data {list(data.shape)}",
            op_type="ScatterND",
            value=list(updates.shape),
            rule="ONNX ScatterND: updates.shape == indices.shape[:-1] + data.shape[indices.shape[-1]:]",
        )
    elem = helper.np_dtype_to_tensor_dtype(data.dtype) if data.dtype.kind in "biuf" else None
    if elem is None and data.dtype.itemsize == 2 and data.dtype.kind == "V":
        elem = onnx.TensorProto.BFLOAT16  # ml_dtypes' bfloat16
    if refused_type(elem, reduction):
        raise BadInputError(
            f"ScatterND: {data.dtype} data is not supported when reduction is {reduction!r} (onnxruntime's "
            "kernel refuses it)",
            op_type="ScatterND",
            value=reduction,
            rule="onnxruntime's ScatterND reductions: no float16 or bfloat16; max and min not on bool",
        )
    rows = updates.reshape((int(np.prod(indices.shape[:-1])), *data.shape))
    out = np.array(data, copy=True)
    for row in rows:
        if reduction == "none":
            out = np.array(row, copy=True)
        elif reduction == "add":
            out = out + row
        elif reduction == "mul":
            out = out * row
        elif reduction == "max":  # onnxruntime's kernel: NaN is not kept (np.maximum keeps it)
            out = np.where(row < out, out, row)
        elif reduction == "min":
            out = np.where(out < row, out, row)
    return out.astype(data.dtype, copy=False)
