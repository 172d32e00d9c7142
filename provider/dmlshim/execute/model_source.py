"""Reading a model for a session: from a path, bytes or an ``onnx.ModelProto``, checked once."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ..errors import BadModelError
from ..filekind import require_onnx_model
from ..limits import check_model_inputs
from ..modelcheck import check_model, load_external_data

logger = logging.getLogger(__name__)

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto
"""A model file path, serialized model bytes, or a ``ModelProto``."""


@dataclass(frozen=True)
class LoadedModel:
    """A model and the file it came from (None for bytes or a ModelProto)."""

    proto: onnx.ModelProto
    path: str | None
    external: frozenset[str] = frozenset()
    """The main graph's initializers whose data the file keeps in external files."""


def load_model(model: ModelSource) -> LoadedModel:
    """Read a model from a path, bytes or a ModelProto, with external data kept inside the model's folder.

    Raises:
        BadModelError: the file is missing, empty, is not an ONNX model, is truncated, or has external data
            whose location leaves the model's folder.
        TooLargeError: a graph input has a static shape that cannot fit in this machine's memory.
    """
    if isinstance(model, onnx.ModelProto):
        loaded = LoadedModel(model, None)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        try:
            loaded = LoadedModel(onnx.load_from_string(bytes(model)), None)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise BadModelError(f"the bytes are not a serialized ONNX model: {exc}") from exc
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise BadModelError(
                "model file not found" if not path.exists() else "not a regular file", path=str(path)
            )
        require_onnx_model(path)
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except (DecodeError, ValueError, RuntimeError, OSError) as exc:
            raise BadModelError(f"not a readable ONNX model: {exc}", path=str(path)) from exc
        _require_graph(proto, str(path))
        check_model(proto, path)  # before reading any weights
        external = frozenset(
            t.name for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
        )
        load_external_data(proto, path)
        loaded = LoadedModel(proto, str(path), external)
    else:
        raise BadModelError(
            f"model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}",
            value=type(model).__name__,
        )
    _require_graph(loaded.proto, loaded.path)
    if loaded.path is None:
        check_model(loaded.proto)
    check_model_inputs(loaded.proto, path=loaded.path)
    return loaded


def _require_graph(proto: onnx.ModelProto, path: str | None) -> None:
    # An empty file parses as an empty ModelProto; say so instead of letting onnxruntime say "no graph".
    if not proto.HasField("graph") or not proto.opset_import:
        raise BadModelError(
            "not an ONNX model (empty, or no graph or no opset_import)",
            path=path,
            rule="an ONNX model has a graph and at least one opset_import",
        )


def _fully_static(vi: onnx.ValueInfoProto) -> bool:
    tp = vi.type
    if tp.WhichOneof("value") is None:
        return False
    if tp.WhichOneof("value") != "tensor_type":
        return True
    tt = tp.tensor_type
    return tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)


def typed_outputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph outputs as onnxruntime describes them: declared types and shapes, completed by shape
    inference (a type for an output declared without one, a size for a dimension declared symbolic or
    unknown when inference finds one)."""
    outputs = list(model.graph.output)
    if all(_fully_static(o) for o in outputs):
        return outputs
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except (
        onnx.shape_inference.InferenceError,
        onnx.checker.ValidationError,
        ValueError,
        RuntimeError,
    ) as exc:
        logger.debug("shape inference failed, output types stay as declared: %s", exc)
        return outputs
    merged = {v.name: v for v in inferred.graph.output}
    known = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
    result = []
    for out in outputs:
        candidate = merged.get(out.name)
        if out.type.WhichOneof("value") is None:
            candidate = known.get(out.name, candidate)
        result.append(candidate if candidate is not None and candidate.type.WhichOneof("value") else out)
    return result
