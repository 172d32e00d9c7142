"""Initializers the caller hands onnxruntime through ``SessionOptions.add_external_initializers``.

onnxruntime then takes those tensors from the options and never reads their external-data file (which
need not exist). A ``SessionOptions`` cannot list what it holds, so dmlshim asks onnxruntime itself: a
probe model holds every top-level initializer of the model as a stub whose external data is a file that
does not exist, and is loaded with the caller's options. onnxruntime refuses the first stub the options do
not supply (naming it); that stub is dropped and the probe loaded again, until onnxruntime loads it. The
stubs left are supplied, and the probe's Identity outputs give their values, which replace the model's
external references (the file is never read for them).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ort.real import OrtInferenceSession
from ..ort_errors import ORT_ERRORS
from ..weightless import is_external

logger = logging.getLogger(__name__)

__all__ = ["take_supplied_initializers"]

ABSENT_LOCATION = "dmlshim-probe-absent-external-data.bin"
"""The external-data location of a probe stub (never present: onnxruntime must take the options' value)."""

_NAMED = re.compile(r"for initializer: (?P<name>.+?)\. Error")


def _stub(tensor: onnx.TensorProto) -> onnx.TensorProto:
    stub = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims))
    stub.data_location = onnx.TensorProto.EXTERNAL
    entry = stub.external_data.add()
    entry.key, entry.value = "location", ABSENT_LOCATION
    return stub


def _probe(model: onnx.ModelProto, tensors: list[onnx.TensorProto]) -> onnx.ModelProto:
    nodes = [helper.make_node("Identity", [t.name], [f"probe_{i}"]) for i, t in enumerate(tensors)]
    outputs = [onnx.ValueInfoProto(name=f"probe_{i}") for i in range(len(tensors))]
    graph = helper.make_graph(nodes, "probe", [], outputs, initializer=[_stub(t) for t in tensors])
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", max(int(opset), 13))], ir_version=model.ir_version or 10
    )


def _session(model: onnx.ModelProto, options: Any) -> Any:
    """An onnxruntime session on ``model`` with the caller's options, writing no profile or model file."""

    saved = (options.enable_profiling, options.optimized_model_filepath)
    options.enable_profiling = False
    options.optimized_model_filepath = ""
    try:
        return OrtInferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    finally:
        options.enable_profiling, options.optimized_model_filepath = saved


def take_supplied_initializers(model: onnx.ModelProto, options: Any) -> frozenset[str]:
    """Replace, in ``model``, every external-data initializer ``options`` supplies through
    ``add_external_initializers`` by the value onnxruntime takes from the options; their names.

    Only models with top-level external-data initializers are probed (others need no file).
    """
    if options is None or not any(is_external(t) for t in model.graph.initializer):
        return frozenset()
    candidates = [t for t in model.graph.initializer if is_external(t)]
    session = None
    for _ in range(len(candidates) + 1):
        if not candidates:
            return frozenset()
        try:
            session = _session(_probe(model, candidates), options)
            break
        except ORT_ERRORS as exc:
            found = _NAMED.search(" ".join(str(exc).split()))
            remaining = [t for t in candidates if found is None or t.name != found["name"]]
            if found is None or len(remaining) == len(candidates):
                logger.debug("no initializer supplied by the session options: %s", exc)
                return frozenset()
            candidates = remaining
    if session is None:
        return frozenset()
    values = session.run(None, {})
    supplied = {t.name: np.asarray(v) for t, v in zip(candidates, values, strict=True)}
    for i, t in enumerate(model.graph.initializer):
        if t.name in supplied:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(supplied[t.name], t.name))
    logger.info("initializers taken from the session options: %s", ", ".join(sorted(supplied)))
    return frozenset(supplied)
