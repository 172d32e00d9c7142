"""Sparse ``Constant`` values inside model-local functions, handed to onnxruntime in their dense form.

onnxruntime (1.24 to 1.32 at least) reads past a buffer when it builds a session, with graph optimizations
disabled, of a model whose local function holds a ``Constant`` with a ``sparse_value`` of about 30,000
elements or more: a SIGSEGV in ``memcmp`` on any thread but the main one when the ``onnx`` package is
imported too (dmlshim's case: its acceptance session is built that way, on a worker thread). The same
``Constant`` with the equal dense ``value`` builds and runs; ONNX defines the two as the same value. So
every model onnxruntime is given as bytes (the acceptance check's weightless copy, the engines' sessions)
gets that dense form first. The dense sizes were checked against the memory limit when the model was
loaded (:func:`dmlshim.model.wellformed.check_well_formed`).
"""

from __future__ import annotations

import logging
from typing import Any

import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from ..graph import constant_node_value

logger = logging.getLogger(__name__)

_MARK = b"sparse_value"
"""The attribute name a sparse Constant carries in the serialized model (a cheap test before parsing)."""


def _densify(nodes: Any) -> int:
    """Replace each sparse ``Constant`` among ``nodes`` (and in their subgraphs) by its dense value; the
    number replaced."""
    changed = 0
    for node in nodes:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                changed += _densify(attr.g.node)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                changed += sum(_densify(g.node) for g in attr.graphs)
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        if not any(a.name == "sparse_value" for a in node.attribute):
            continue
        value = constant_node_value(node)
        if value is None:
            continue
        del node.attribute[:]
        node.attribute.add().CopyFrom(onnx.helper.make_attribute("value", numpy_helper.from_array(value)))
        changed += 1
    return changed


def dense_function_constants(source: Any) -> tuple[Any, str | None]:
    """``source`` (what onnxruntime's ``InferenceSession`` takes: model bytes or a path), or, for a model
    whose local functions hold a sparse ``Constant``, the bytes of the model with those values dense (see
    the module docstring); and, for such bytes made from a file whose weights are external, the file's
    folder (their locations are relative to it), else None."""
    import io
    import os

    from ..fileio.protobuf_wire import MODEL_FUNCTIONS, has_model_field
    from ..model.zero_depth_scatternd import file_has_field

    folder: str | None = None
    if isinstance(source, (bytes, bytearray, memoryview)):
        # no local function (a walk of the top-level fields), or no sparse Constant: nothing to do, and no
        # scan of a large model's bytes on every session build
        if not has_model_field(io.BytesIO(source), MODEL_FUNCTIONS) or _MARK not in source:
            return source, None
        try:
            model = onnx.load_from_string(bytes(source))
        except (DecodeError, ValueError, RuntimeError):
            return source, None  # onnxruntime reports what it cannot parse
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                functions = has_model_field(f, MODEL_FUNCTIONS)
        except OSError:
            return source, None  # onnxruntime reports what it cannot read
        if not functions or not file_has_field(path, _MARK):
            return source, None
        try:
            model = onnx.load(path, load_external_data=False)
        except (OSError, DecodeError, ValueError, RuntimeError):
            return source, None
        from ..graph import all_tensors
        from ..model.weightless import is_external

        if any(is_external(t) for t in all_tensors(model.graph)):
            folder = os.path.dirname(os.path.abspath(path))
    else:
        return source, None
    if not model.functions or not sum(_densify(f.node) for f in model.functions):
        return source, None
    logger.debug("sparse Constant values in local functions handed to onnxruntime dense")
    return model.SerializeToString(), folder
