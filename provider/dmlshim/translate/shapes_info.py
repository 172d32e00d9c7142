"""Static types and shapes of a model's tensors: ONNX shape inference plus ``--input-shape`` overrides,
completed by onnxruntime's own inference for the values ONNX's cannot type (outputs of com.microsoft and
other operators whose schemas only onnxruntime holds)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ..errors import BadInputError, BadModelError, DmlShimError
from ..fileio.external_data import ExternalRef
from ..fileio.filekind import require_onnx_model
from ..fileio.reading import open_regular
from ..graph import op_types_among
from ..limits import check_bytes
from ..model.data_prop import MAX_RANK, infer_with_data_prop
from ..model.graph_columns import declared_types
from ..model.modelcheck import ONNX_ERRORS, check_model, load_external_data
from ..model.ort_view import ort_value_types
from ..model.prepare import prepare_model
from ..model.weightless import without_fed_defaults, without_weights
from .plan import TensorInfo
from .static_if import settle_static_ifs
from .subgraph_shapes import type_loop_states

logger = logging.getLogger(__name__)

__all__ = ["infer_shapes", "load_model", "richer", "tensor_info", "tensor_infos"]


_ONNX_ERRORS = ONNX_ERRORS


_READ_TYPES: dict[bytes, TensorInfo | None] = {}
_READ_TYPES_MAX = 4096


def tensor_info(value: onnx.ValueInfoProto) -> TensorInfo | None:
    """The TensorInfo of a value_info (None when it is not a tensor or carries no type)."""
    # Most values of a large graph share a handful of types: one serialization (in C) finds the
    # TensorInfo already read, instead of a protobuf read per dimension.
    tp = value.type
    key = tp.SerializeToString()
    try:
        return _READ_TYPES[key]
    except KeyError:
        pass
    info = _read_type(tp)
    if len(_READ_TYPES) >= _READ_TYPES_MAX:
        _READ_TYPES.clear()
    _READ_TYPES[key] = info
    return info


def _read_type(tp: onnx.TypeProto) -> TensorInfo | None:
    if not tp.HasField("tensor_type"):
        return None
    tensor_type = tp.tensor_type
    shape: tuple[int | str | None, ...] | None = None
    if tensor_type.HasField("shape"):
        dims: list[int | str | None] = []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                dims.append(int(dim.dim_value))
            elif dim.HasField("dim_param"):
                dims.append(dim.dim_param)
            else:
                dims.append(None)
        shape = tuple(dims)
    return TensorInfo(shape, int(tensor_type.elem_type))


def richer(earlier: TensorInfo | None, later: TensorInfo) -> TensorInfo:
    """What two declarations of one value say together: the later one, except that a declaration without
    a shape (or element type) keeps the earlier one's. A graph output that is also a graph input is often
    declared with a type only (``[x, g]`` outputs of a model reading ``x [4,3]``): its input shape stays."""
    if earlier is None:
        return later
    shape = later.shape if later.shape is not None else earlier.shape
    elem_type = later.elem_type or earlier.elem_type
    if shape is later.shape and elem_type == later.elem_type:
        return later
    return TensorInfo(shape, elem_type)


def tensor_infos(graph: onnx.GraphProto) -> dict[str, TensorInfo]:
    """Every typed tensor a graph declares: inputs, initializers, value_info and outputs."""
    out: dict[str, TensorInfo] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        info = tensor_info(value)
        if info is not None and value.name:
            out[value.name] = richer(out.get(value.name), info)
    for init in graph.initializer:
        out[init.name] = TensorInfo(tuple(int(d) for d in init.dims), int(init.data_type))
    for sparse in graph.sparse_initializer:
        out[sparse.values.name] = TensorInfo(tuple(int(d) for d in sparse.dims), int(sparse.values.data_type))
    return out


def _override_inputs(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(without_weights(model).SerializeToString())
    inputs = {value.name: value for value in model.graph.input}
    for name, dims in input_shapes.items():
        value = inputs.get(name)
        if value is None:
            known = ", ".join(sorted(inputs)) or "none"
            raise BadInputError(
                f"--input-shape names {name!r}, which is not a graph input (inputs: {known})", value=name
            )
        tensor_type = value.type.tensor_type
        if tensor_type.HasField("shape") and len(tensor_type.shape.dim) != len(dims):
            raise BadInputError(
                f"--input-shape {name}: {len(dims)} dimensions given, the input has rank "
                f"{len(tensor_type.shape.dim)}",
                value=list(dims),
            )
        tensor_type.ClearField("shape")
        shape = tensor_type.shape
        shape.SetInParent()  # NAME= (no dims) declares a scalar: rank 0, not an unknown rank
        for d in dims:
            shape.dim.add().dim_value = int(d)
    return model


_RANK_OPS = frozenset({"Reshape", "Expand", "ConstantOfShape", "Tile", "Range"})
"""Ops whose output rank follows from their inputs' ranks and shape tensors' lengths, even when the
values (and so onnx's inference) leave the output's dimensions unknown."""


def _ranked(name: str, elem_type: int, rank: int) -> onnx.ValueInfoProto:
    value = onnx.ValueInfoProto(name=name)
    tensor_type = value.type.tensor_type
    tensor_type.elem_type = elem_type
    tensor_type.shape.SetInParent()
    for _ in range(rank):
        tensor_type.shape.dim.add()  # a dimension of unknown size
    return value


def _output_rank(node: onnx.NodeProto, known: Mapping[str, TensorInfo]) -> tuple[int, int] | None:
    """(element type, rank) of ``node``'s output from its inputs' ranks and shape-tensor lengths."""

    def info(i: int) -> TensorInfo | None:
        return known.get(node.input[i]) if i < len(node.input) and node.input[i] else None

    def rank(i: int) -> int | None:
        found = info(i)
        return len(found.shape) if found is not None and found.shape is not None else None

    def length(i: int) -> int | None:  # the length of a 1-D shape tensor
        found = info(i)
        if found is None or found.shape is None or len(found.shape) != 1:
            return None
        n = found.shape[0]
        return n if isinstance(n, int) and n >= 0 else None

    def elem(i: int) -> int:
        found = info(i)
        return found.elem_type if found is not None else 0

    op = node.op_type
    if op == "Reshape":
        out = length(1)
        return None if out is None or out > MAX_RANK else (elem(0), out)
    if op == "Expand":
        n, r = length(1), rank(0)
        return None if n is None or r is None or n > MAX_RANK else (elem(0), max(n, r))
    if op == "ConstantOfShape":
        n = length(0)
        values = [a.t for a in node.attribute if a.name == "value"]
        elem_type = int(values[0].data_type) if values else onnx.TensorProto.FLOAT
        return None if n is None or n > MAX_RANK else (elem_type, n)
    if op == "Tile":
        r = rank(0)
        return None if r is None else (elem(0), r)
    if op == "Range":
        return elem(0), 1
    return None


def _propagate_ranks(model: onnx.ModelProto) -> bool:
    """Give the outputs of Reshape/Expand/ConstantOfShape/Tile/Range in the top-level graph the rank their
    inputs fix where onnx's inference left it unknown (a shape tensor of known length but unknown values);
    True when it added any (the caller infers again, so the ranks reach the nodes downstream)."""
    graph = model.graph
    candidates = [n for n in graph.node if n.op_type in _RANK_OPS and n.domain in ("", "ai.onnx")]
    if not candidates:
        return False
    known = tensor_infos(graph)
    added = False
    for node in candidates:
        if not node.output or not node.output[0]:
            continue
        have = known.get(node.output[0])
        if have is not None and have.shape is not None:
            continue
        found = _output_rank(node, known)
        if found is None or not found[0]:
            continue
        elem_type, rank = found
        value = _ranked(node.output[0], elem_type, rank)
        for i, old in enumerate(graph.value_info):
            if old.name == value.name:
                del graph.value_info[i]
                break
        graph.value_info.append(value)
        known[value.name] = TensorInfo((None,) * rank, elem_type)
        added = True
    return added


def _lacks_rank(tp: onnx.TypeProto | None) -> bool:
    """No type at all, or a tensor type of unknown rank."""
    if tp is None or tp.WhichOneof("value") is None:
        return True
    return tp.HasField("tensor_type") and not tp.tensor_type.HasField("shape")


def _may_lack_ranks(graph: onnx.GraphProto) -> bool:
    """False when every top-level node output is an initializer or declared a tensor with a rank (the
    usual answer after onnx's inference), found from the graph's columns (:mod:`dmlshim.model.graph_columns`:
    one parse in C, and one type read per distinct serialized type); True when one may not be (the walk
    decides). False also tells :func:`_propagate_ranks` that it has nothing to give a rank to."""
    columns = declared_types(graph)
    if columns is None:
        return True
    outputs, typed = columns
    lacks: dict[bytes, bool] = {}
    declared: set[str] = set()
    for name, tp in typed.items():
        found = lacks.get(tp)
        if found is None:
            read = onnx.TypeProto.FromString(tp)
            found = lacks[tp] = not read.HasField("tensor_type") or _lacks_rank(read)
        if not found:
            declared.add(name)
    declared.update(t.name for t in graph.initializer)
    declared.add("")
    return not declared.issuperset(outputs)


def _add_ort_types(source: onnx.ModelProto, inferred: onnx.ModelProto) -> bool:
    """Give the top-level node outputs ONNX's inference left untyped (or of unknown rank) the type and shape
    onnxruntime infers for them in ``source``; True when any was added (the caller infers again, so they
    reach the nodes downstream). onnxruntime's session is built only when such a value exists. Called
    where :func:`_may_lack_ranks` is True."""
    graph = inferred.graph
    typed = {v.name: v.type for v in (*graph.input, *graph.value_info, *graph.output)}
    typed.update((t.name, onnx.TypeProto()) for t in graph.initializer)  # initializers are always typed
    initializers = {t.name for t in graph.initializer}
    missing = [
        name
        for node in graph.node
        for name in node.output
        if name and name not in initializers and _lacks_rank(typed.get(name))
    ]
    if not missing:
        return False
    # only the missing values are asked for: onnxruntime's answer for each is the one it gives among all
    onnx_types = {n: tp for n in missing if (tp := typed.get(n)) is not None and tp.WhichOneof("value")}
    view = ort_value_types(source, onnx_types=onnx_types, names=missing)
    added = False
    outputs = {o.name: o for o in graph.output}
    for name in missing:
        tp = view.get(name)
        if tp is None or (typed.get(name) is not None and _lacks_rank(tp)):
            continue  # onnxruntime knows no more than ONNX does
        target = outputs.get(name)
        if target is None:
            for i, old in enumerate(graph.value_info):
                if old.name == name:
                    del graph.value_info[i]
                    break
            target = graph.value_info.add()
            target.name = name
        target.type.CopyFrom(tp)
        added = True
    if added:
        logger.debug("types from onnxruntime's inference for %s", ", ".join(missing))
    return added


def infer_shapes(
    model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> onnx.ModelProto:
    """A copy of ``model`` with ONNX shape inference applied (after the input-shape overrides); large
    initializers appear in it as graph inputs of their type and shape, without their values
    (:func:`dmlshim.model.weightless.without_weights`).

    Raises:
        BadInputError: an override names no graph input or has the wrong rank.
        BadModelError: shape inference finds the model inconsistent.
    """
    # onnx's inference serializes the model and parses it back: give it no weight bytes to copy.
    model = _override_inputs(model, input_shapes) if input_shapes else without_weights(model)
    model = without_fed_defaults(model)  # a value a feed may change decides no type
    # Inference changes types, never nodes: the If and Loop passes below (each a walk of every graph) are
    # skipped where no If or Loop exists (found from the graph's bytes where it can be: no walk).
    # One serialization of the model to infer, read by every step below that looks at its bytes (the op
    # search, the size check, the inference itself): each serialized it again.
    data = model.SerializeToString()
    ops = op_types_among(model.graph, ("If", "Loop"), data)
    try:
        inferred = infer_with_data_prop(model, serialized=data)
        # every top-level node output ranked (the usual case): nothing for onnxruntime or the rank
        # propagation to add (each a walk of every value)
        if _may_lack_ranks(inferred.graph):
            if _add_ort_types(model, inferred):
                inferred = _infer_again(inferred)
            for _ in range(3):  # each pass can give ranks to the next op of the kind downstream
                if not _propagate_ranks(inferred):
                    break
                inferred = _infer_again(inferred)
    except DmlShimError:
        raise  # a refusal (the memory limit) says itself which step it refuses
    except _ONNX_ERRORS as exc:
        raise BadModelError(f"ONNX shape inference failed: {exc}") from exc
    try:
        if "If" in ops:
            inferred = settle_static_ifs(inferred, _infer_again)
    except _ONNX_ERRORS as exc:  # the chosen branch's types contradict the graph: leave the If merged
        logger.debug("If outputs left as ONNX infers them: %s", exc)
    if "Loop" not in ops:
        return inferred
    try:
        return type_loop_states(inferred, _infer_again)
    except _ONNX_ERRORS as exc:  # the types given to loop-carried inputs contradict the body: leave them
        logger.debug("loop-carried inputs left untyped: %s", exc)
        return inferred


def _infer_again(model: onnx.ModelProto) -> onnx.ModelProto:
    return infer_with_data_prop(model)


def load_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read and check an ONNX model file, prepared as onnxruntime prepares it (local functions expanded,
    nodes sorted: :func:`dmlshim.model.prepare.prepare_model`).

    The checker runs on the shape-inferred model, leaving out graph outputs whose type or rank stays
    unknown (onnxruntime accepts those), so only real defects fail it.

    Raises:
        BadModelError: the file cannot be read, is not ONNX (or is truncated), or fails onnx.checker.
        TooLargeError: the file, or its external data, is larger than the memory limit.
    """
    where = os.fspath(path)
    require_onnx_model(where)
    try:
        with open_regular(where, what="model", error=BadModelError) as handle:  # a FIFO must not block
            # read whole (and parsed): a file larger than the memory limit is refused first, as the
            # external data of a model read this way is
            check_bytes(
                os.fstat(handle.fileno()).st_size,
                what=f"reading the model file whole ({Path(where).name})",
                path=where,
            )
            payload = handle.read()
    except OSError as exc:
        raise BadModelError(f"cannot read the model: {exc.strerror or exc}", path=where) from exc
    try:
        model = onnx.ModelProto.FromString(payload)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise BadModelError(f"not an ONNX model (protobuf parse failed: {exc})", path=where) from exc
    del payload  # the file's bytes: as large as the model, and not needed past the parse
    if not model.HasField("graph") or not model.opset_import:
        raise BadModelError("not an ONNX model (no graph or no opset_import)", path=where)
    external: list[ExternalRef] = []
    check_model(model, where, external_found=external)  # the one model check; reads no weights
    if external:  # none: nothing to read (the check's walk for them is not made again)
        load_external_data(model, Path(where))
    return prepare_model(model, owned=True)  # local functions expanded, nodes sorted, as onnxruntime does
