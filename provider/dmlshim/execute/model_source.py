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
from ..modelcheck import check_well_formed, load_external_data

logger = logging.getLogger(__name__)

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto
"""A model file path, serialized model bytes, or a ``ModelProto``."""


@dataclass(frozen=True)
class LoadedModel:
    """A model and the file it came from (None for bytes or a ModelProto)."""

    proto: onnx.ModelProto
    path: str | None


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
        load_external_data(proto, path)
        loaded = LoadedModel(proto, str(path))
    else:
        raise BadModelError(
            f"model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}",
            value=type(model).__name__,
        )
    _require_graph(loaded.proto, loaded.path)
    check_well_formed(loaded.proto, loaded.path)
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


def typed_outputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph outputs, with types from shape inference for those declared without one."""
    outputs = list(model.graph.output)
    if all(o.type.WhichOneof("value") is not None for o in outputs):
        return outputs
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except (
        onnx.shape_inference.InferenceError,
        onnx.checker.ValidationError,
        ValueError,
        RuntimeError,
    ) as exc:
        logger.debug("shape inference failed, output types stay unknown: %s", exc)
        return outputs
    known = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
    return [o if o.type.WhichOneof("value") is not None else known.get(o.name, o) for o in outputs]
