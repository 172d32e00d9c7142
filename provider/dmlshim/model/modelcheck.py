"""The one model check every command runs (:func:`check_model`), turning hostile or broken files into
clear errors before any weight is read.

* damaged protos (:func:`check_well_formed`), unknown ir_version / opset versions, duplicate node names,
  negative dims, initializers that disagree with their declared input;
* external data checked in full without reading it (:mod:`dmlshim.fileio.external_data`);
* onnx.checker on the shape-inferred model, every onnx/protobuf exception turned into BadModelError;
* when onnxruntime refuses a model, the culprit is named (:mod:`dmlshim.model.ort_errors`).
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, EncodeError, Message
from onnx import TensorProto

from ..errors import BadModelError
from ..fileio.external_data import EXTERNAL_DATA_RULE, check_external_data, load_external_data
from .graph import all_tensors, node_path, subgraph_prefix, subgraphs
from .ort_errors import (
    GATHER_SCATTER_INDEX_TYPES,
    UnknownOperator,
    ort_load_error,
    type_name,
    unknown_operators,
)
from .weightless import without_weights

__all__ = [
    "EXTERNAL_DATA_RULE",
    "UnknownOperator",
    "all_tensors",
    "check_model",
    "check_well_formed",
    "load_external_data",
    "ort_load_error",
    "unknown_operators",
]

logger = logging.getLogger(__name__)


# Where each element type keeps its values when not in raw_data, and how many entries one element takes.
_TYPED_FIELD: dict[int, tuple[str, int]] = {
    TensorProto.FLOAT: ("float_data", 1),
    TensorProto.DOUBLE: ("double_data", 1),
    TensorProto.INT64: ("int64_data", 1),
    TensorProto.UINT32: ("uint64_data", 1),
    TensorProto.UINT64: ("uint64_data", 1),
    TensorProto.INT32: ("int32_data", 1),
    TensorProto.INT16: ("int32_data", 1),
    TensorProto.INT8: ("int32_data", 1),
    TensorProto.UINT16: ("int32_data", 1),
    TensorProto.UINT8: ("int32_data", 1),
    TensorProto.BOOL: ("int32_data", 1),
    TensorProto.FLOAT16: ("int32_data", 1),
    TensorProto.BFLOAT16: ("int32_data", 1),
    TensorProto.STRING: ("string_data", 1),
    TensorProto.COMPLEX64: ("float_data", 2),
    TensorProto.COMPLEX128: ("double_data", 2),
}
_RAW_ITEMSIZE: dict[int, int] = {
    TensorProto.FLOAT: 4,
    TensorProto.DOUBLE: 8,
    TensorProto.INT64: 8,
    TensorProto.UINT64: 8,
    TensorProto.INT32: 4,
    TensorProto.UINT32: 4,
    TensorProto.INT16: 2,
    TensorProto.UINT16: 2,
    TensorProto.FLOAT16: 2,
    TensorProto.BFLOAT16: 2,
    TensorProto.INT8: 1,
    TensorProto.UINT8: 1,
    TensorProto.BOOL: 1,
    TensorProto.COMPLEX64: 8,
    TensorProto.COMPLEX128: 16,
}
_KNOWN_TYPES = frozenset(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}
_INT_ATTRIBUTES = {"axis", "batch_dims"}


def _text_and_message_fields(message: Message) -> list[tuple[FieldDescriptor, Any]]:
    """``message.ListFields()`` without its bytes fields: ListFields hands back every value, and a
    tensor's ``raw_data`` would be copied (hundreds of MB for a large weight) only to be skipped."""
    if not isinstance(message, onnx.TensorProto) or not message.HasField("raw_data"):
        return list(message.ListFields())
    found: list[tuple[FieldDescriptor, Any]] = []
    for field in message.DESCRIPTOR.fields:
        if field.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
            continue
        value = getattr(message, field.name)
        if (len(value) if field.is_repeated else message.HasField(field.name)):
            found.append((field, value))
    return found


def _bad_string(message: Message, where: str) -> str | None:
    """The path of the first string field that is not valid UTF-8 (protobuf then hands back bytes)."""
    for field, value in _text_and_message_fields(message):
        if field.type == FieldDescriptor.TYPE_STRING:
            values = value if field.is_repeated else [value]
            if any(not isinstance(v, str) for v in values):
                return f"{where}.{field.name}"
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                continue
            if not field.is_repeated:
                found = _bad_string(value, f"{where}.{field.name}")
                if found is not None:
                    return found
                continue
            for i, item in enumerate(value):
                found = _bad_string(item, f"{where}.{field.name}[{i}]")
                if found is not None:
                    return found
    return None


def _varint_size(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def _raw_length(t: onnx.TensorProto) -> int:
    """``len(t.raw_data)`` without reading ``t.raw_data`` (which copies the bytes: hundreds of MB for a
    large weight): the tensor's serialized size less that of its other fields is the raw_data field's
    tag (1 byte), length (a varint) and bytes. Read for real when that does not add up."""
    rest = onnx.TensorProto()
    for field in t.DESCRIPTOR.fields:
        if field.name == "raw_data":
            continue
        if field.is_repeated:
            values = getattr(t, field.name)
            if len(values):
                getattr(rest, field.name).extend(values)
        elif t.HasField(field.name):
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                getattr(rest, field.name).CopyFrom(getattr(t, field.name))
            else:
                setattr(rest, field.name, getattr(t, field.name))
    field_bytes = t.ByteSize() - rest.ByteSize() - 1
    for prefix in range(1, 11):
        length = field_bytes - prefix
        if length >= 0 and _varint_size(length) == prefix:
            return length
    return len(t.raw_data)


def _tensor_problem(t: onnx.TensorProto) -> str | None:
    if t.data_type not in _KNOWN_TYPES:
        return f"element type {t.data_type} is not an ONNX type"
    if any(d < 0 for d in t.dims):
        return f"negative dimension in {list(t.dims)}"
    if t.data_location == TensorProto.EXTERNAL or t.external_data:
        return None
    count = math.prod(int(d) for d in t.dims)
    if t.HasField("raw_data"):
        have = _raw_length(t)
        if have:
            size = _RAW_ITEMSIZE.get(t.data_type)
            if size is not None and have != count * size:
                return f"{have} bytes of raw_data for {count} elements of {size} bytes"
            return None
    typed = _TYPED_FIELD.get(t.data_type)
    if typed is not None:
        name, per = typed
        have = len(getattr(t, name))
        if have != count * per:
            return f"{have} values in {name} for {count} elements"
    return None


def _check_arity(node: onnx.NodeProto, label: str, opsets: dict[str, int], path: str | None) -> None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in ("", "ai.onnx.ml") or domain not in opsets:
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets[domain], domain)
    except Exception:  # unknown op or opset: onnxruntime reports those
        return
    n_in, n_out = len(node.input), len(node.output)
    ins = (schema.min_input, schema.max_input)
    outs = (schema.min_output, schema.max_output)
    if not ins[0] <= n_in <= ins[1] or not outs[0] <= n_out <= outs[1]:
        raise BadModelError(
            f"{node.op_type} has {n_in} inputs and {n_out} outputs; opset {opsets[domain]} takes "
            f"{ins[0]}..{ins[1]} inputs and {outs[0]}..{outs[1]} outputs",
            node=label,
            op_type=node.op_type,
            value=(n_in, n_out),
            path=path,
            rule="a node has as many inputs and outputs as its operator's schema allows",
        )


def _check_graph(graph: onnx.GraphProto, prefix: str, path: str | None, opsets: dict[str, int]) -> None:
    tensors = [(t.name, t) for t in graph.initializer]
    for vi in (*graph.input, *graph.output):
        tp = vi.type
        if tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.elem_type not in _KNOWN_TYPES:
            raise BadModelError(
                f"{vi.name!r} is declared as a tensor of element type {tp.tensor_type.elem_type}, which ONNX "
                "does not define",
                tensor=vi.name,
                value=int(tp.tensor_type.elem_type),
                path=path,
                rule="graph inputs and outputs have an ONNX element type",
            )
    for i, node in enumerate(graph.node):
        label = node_path(prefix, node, i)
        _check_arity(node, label, opsets, path)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.UNDEFINED or (
                attr.name in _INT_ATTRIBUTES
                and node.op_type in GATHER_SCATTER_INDEX_TYPES
                and attr.type != onnx.AttributeProto.INT
            ):
                raise BadModelError(
                    f"attribute {attr.name!r} has no valid type (type {attr.type})",
                    node=label,
                    op_type=node.op_type,
                    value=attr.name,
                    path=path,
                    rule="every attribute has a declared type that its op expects",
                )
            if attr.HasField("t"):
                tensors.append((f"{label}.{attr.name}", attr.t))
            tensors.extend((f"{label}.{attr.name}", t) for t in attr.tensors)
        for attr_name, sub in subgraphs(node):
            _check_graph(sub, subgraph_prefix(label, attr_name), path, opsets)
    for name, t in tensors:
        problem = _tensor_problem(t)
        if problem is not None:
            raise BadModelError(
                f"tensor {name!r} is damaged: {problem}",
                tensor=name,
                path=path,
                rule="a tensor's data matches its element type and dims",
            )


def check_well_formed(model: onnx.ModelProto, path: str | None = None) -> None:
    """Refuse a model that parses as protobuf but cannot be an ONNX model: names that are not UTF-8,
    tensors whose type is unknown or whose data does not match their dims, attributes without a type.

    onnx.checker lets some of these through, and they then break deep inside onnx or numpy helpers.

    Raises:
        BadModelError: naming the damaged field, tensor or node.
    """
    bad = _bad_string(model, "model")
    if bad is not None:
        raise BadModelError(
            f"the field {bad} is not valid UTF-8 text (a damaged or non-ONNX file)",
            path=path,
            value=bad,
            rule="ONNX string fields are UTF-8",
        )
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
    _check_graph(model.graph, "", path, opsets)


# onnx's C++ checker and shape inference raise their own errors, and also ValueError (UnicodeDecodeError
# on names that are not UTF-8, a model above 2 GiB), TypeError, RuntimeError, or protobuf's DecodeError
# (nesting deeper than protobuf's limit of 100, e.g. If inside If 32 deep) on damaged or extreme protos.
ONNX_ERRORS: tuple[type[Exception], ...] = (
    onnx.checker.ValidationError,
    onnx.shape_inference.InferenceError,
    ValueError,
    TypeError,
    RuntimeError,
    RecursionError,
    DecodeError,
    EncodeError,
)


def _check_versions(model: onnx.ModelProto, path: str | None) -> None:
    if model.ir_version > onnx.IR_VERSION:
        raise BadModelError(
            f"ir_version {model.ir_version} is newer than any this onnx ({onnx.__version__}) knows "
            f"(at most {onnx.IR_VERSION})",
            path=path,
            value=int(model.ir_version),
            rule="the model's ir_version must be one onnx and onnxruntime implement",
        )
    newest = {"": onnx.defs.onnx_opset_version()}
    for o in model.opset_import:
        domain = "" if o.domain == "ai.onnx" else o.domain
        if domain == "" and o.version > newest[""]:
            raise BadModelError(
                f"opset_import ai.onnx version {o.version} is newer than any this onnx ({onnx.__version__}) "
                f"defines (at most {newest['']})",
                path=path,
                value=int(o.version),
                rule="every opset the model imports must exist",
            )


def _check_names(graph: onnx.GraphProto, prefix: str, path: str | None) -> None:
    """Node names unique within a graph; dims not negative; initializers that agree with the graph input
    they feed."""
    for vi in (*graph.input, *graph.output, *graph.value_info):
        if vi.type.WhichOneof("value") != "tensor_type":
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value < 0:
                raise BadModelError(
                    f"{vi.name!r} is declared with dimension {d.dim_value}",
                    tensor=vi.name,
                    path=path,
                    value=int(d.dim_value),
                    rule="a dimension is a non-negative size or a symbolic name (ONNX TensorShapeProto)",
                )
    seen: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        if node.name:
            if node.name in seen:
                raise BadModelError(
                    f"two nodes are named {node.name!r} (nodes {seen[node.name]} and {i}"
                    f"{' of ' + prefix if prefix else ''})",
                    node=node.name,
                    op_type=node.op_type,
                    path=path,
                    value=node.name,
                    rule="node names are unique within a graph (onnxruntime refuses duplicates)",
                )
            seen[node.name] = i
        for attr_name, sub in subgraphs(node):
            _check_names(sub, subgraph_prefix(node_path(prefix, node, i), attr_name), path)
    declared = {vi.name: vi for vi in graph.input}
    for t in graph.initializer:
        vi = declared.get(t.name)
        if vi is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        tt = vi.type.tensor_type
        if tt.elem_type and tt.elem_type != t.data_type:
            raise BadModelError(
                f"initializer {t.name!r} is {type_name(t.data_type)} but the graph input it feeds is "
                f"declared {type_name(tt.elem_type)}",
                tensor=t.name,
                path=path,
                value=type_name(t.data_type),
                rule="an initializer has its graph input's element type",
            )
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            pairs = zip(dims, t.dims, strict=False)
            if len(dims) != len(t.dims) or any(d is not None and d != int(v) for d, v in pairs):
                raise BadModelError(
                    f"initializer {t.name!r} has shape {list(t.dims)} but the graph input it feeds is "
                    f"declared {['?' if d is None else d for d in dims]}",
                    tensor=t.name,
                    path=path,
                    value=list(t.dims),
                    rule="an initializer has its graph input's shape",
                )


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """What onnxruntime, onnx's checker and shape inference are given: ``model`` itself, or a copy in
    which large and external-data initializers are graph inputs of the same type and shape
    (:func:`dmlshim.model.weightless.without_weights`), so no weight is read or re-serialised for the check.
    """
    from ..fileio.external_data import external_tensors

    light = without_weights(model)  # large and external initializers as typed inputs: no weight copied
    if light is model:
        if not external_tensors(model.graph):
            return model
        light = onnx.ModelProto()
        light.CopyFrom(model)
    # Inside subgraphs (and in attributes) a tensor cannot become an input: give the checker zeros of the
    # declared size instead (already checked against the memory limit by check_external_data).
    for t in external_tensors(light.graph):
        size = _RAW_ITEMSIZE.get(t.data_type, 1) * math.prod(int(d) for d in t.dims)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
        t.raw_data = bytes(size)
    return light


ACCEPTANCE_RULE = "a model loads exactly when onnxruntime's own session creation accepts it"


def ort_accepts(light: onnx.ModelProto, original: onnx.ModelProto, path: str | None) -> None:
    """Create an onnxruntime CPU session on ``light`` (the weightless copy of ``original``), with graph
    optimizations off and one thread: onnxruntime decides whether the model loads.

    Raises:
        BadModelError: onnxruntime refuses the model, naming its reason (and the culprit node when it can).
    """
    import onnxruntime as ort

    from ..ort.real import OrtInferenceSession
    from .ort_errors import ORT_ERRORS

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    # A configuration the model carries for onnxruntime (ORT_LOAD_CONFIG_FROM_MODEL=1) is the session's,
    # read once (dmlshim.ort.model_config): the check must not start a profile of its own from it.
    # (``light`` may be the caller's model itself, small since weightless: changed on a copy.)
    if any(p.key == "ort_config" for p in light.metadata_props):
        kept = [p for p in light.metadata_props if p.key != "ort_config"]
        stripped = onnx.ModelProto()
        stripped.CopyFrom(light)
        del stripped.metadata_props[:]
        stripped.metadata_props.extend(kept)
        light = stripped
    try:
        payload = light.SerializeToString()
        OrtInferenceSession(payload, options, providers=["CPUExecutionProvider"])
    except (EncodeError, *ORT_ERRORS) as exc:
        error = ort_load_error(original, "the model", exc, path=path)
        if error.rule is None:
            error.rule = ACCEPTANCE_RULE
        raise error from exc


def _onnx_checker_findings(light: onnx.ModelProto) -> str | None:
    """What onnx.checker finds on the shape-inferred model (None: nothing)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False)
        # onnx.checker insists on a typed, shaped ValueInfo for every graph output; onnxruntime does not
        # (e.g. a Loop output of unknown rank). Check the nodes, not that bookkeeping.
        keep = [o for o in inferred.graph.output if o.type.tensor_type.HasField("shape")]
        del inferred.graph.output[:]
        inferred.graph.output.extend(keep)
        onnx.checker.check_model(inferred)
    except ONNX_ERRORS as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, (DecodeError, RecursionError)):
            first = f"{first} (subgraphs nested deeper than protobuf allows)"
        return first
    return None


def check_model(
    model: onnx.ModelProto,
    path: str | os.PathLike[str] | None = None,
    *,
    sess_options: object = None,
    read_below: int | None = None,
) -> None:
    """The one model check every command runs (inspect, validate, run, lower, export, InferenceSession).

    Refuses, as :class:`BadModelError` naming the file, node or tensor: damaged protos
    (:func:`check_well_formed`), unknown ir_version or opset versions, duplicate node names, initializers
    whose type or shape disagrees with their declared input, unsound external data (checked without
    reading it), and every model onnxruntime's own session creation refuses (:func:`ort_accepts`, on the
    weightless copy: weights are never read or re-serialised for this). What onnx.checker finds on a
    model onnxruntime loads is logged as a warning only (IR-3 initializers not listed as inputs, inputs
    without a shape, unsorted nodes, ...); on a refused model it is added to the message.

    Args:
        model: the model, external data not loaded.
        path: the file it was read from (external data is found beside it).
        sess_options: the caller's ``onnxruntime.SessionOptions`` (``InferenceSession``): an operator that
            only a custom-op library it registers may define is then not refused here.
        read_below: the model is read without its weights: only external tensors smaller than this are
            read into it, and only they count against the memory and protobuf limits.

    Raises:
        BadModelError: the model is not one onnxruntime would load.
        TooLargeError: its external data exceeds the memory limit.
    """
    where = os.fspath(path) if path is not None else None
    check_well_formed(model, where)
    _check_versions(model, where)
    _check_names(model.graph, "", where)
    check_external_data(model, where, read_below=read_below)
    light = _checkable(model)
    finding = _onnx_checker_findings(light)
    try:
        ort_accepts(light, model, where)
    except BadModelError as refused:
        if sess_options is not None and unknown_operators(model):
            # The caller's options may register the library that defines them (register_custom_ops_library),
            # which a new SessionOptions cannot copy: the engine's own sessions, built with those options,
            # decide.
            logger.info("%s; left to the session options' custom operators", refused)
            return
        if finding is not None:  # onnx's own words often say more about the same defect
            refused.message = f"{refused.message}; onnx.checker: {finding}"
            refused.args = (refused.message,)
        raise
    if finding is not None:
        logger.warning(
            "%s: onnx.checker finds %s; onnxruntime loads the model, so dmlshim does too",
            where or "the model",
            finding,
        )
