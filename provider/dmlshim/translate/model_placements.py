"""Where onnxruntime-directml places each gather/scatter node of a model, by name, for the session build:
the nodes inside control-flow bodies alone, or every node through :func:`translate_model`.
"""

from __future__ import annotations

import logging
from typing import Any

import onnx

from ..dml.enums import FeatureLevel
from ..errors import DmlShimError
from ..graph import node_path
from .converters import get_converter
from .graph_infos import _GraphInfos
from .model_translation import _structure_key, _walk, translate_model
from .translator import model_opsets, translate_node

__all__ = ["model_placements", "nested_placements"]

logger = logging.getLogger(__name__)


def model_placements(
    model: onnx.ModelProto, feature_level: FeatureLevel, inferred: onnx.ModelProto | None = None
) -> dict[str, str | None]:
    """``ort_placement`` of every gather/scatter node of a model by name (subgraphs included); empty when
    the model cannot be translated statically. ``inferred``: as :func:`translate_model` takes it."""
    try:
        translation = translate_model(model, feature_level, inferred=inferred)
        return {t.name: t.ort_placement for t in translation.nodes}
    except DmlShimError as exc:
        logger.warning("no static placement: %s", exc)
        return {}


def nested_placements(
    model: onnx.ModelProto, feature_level: FeatureLevel, inferred: onnx.ModelProto | None
) -> dict[str, str | None]:
    """``ort_placement`` of the gather/scatter nodes inside control-flow bodies, by path name: what
    :func:`model_placements` gives them, without translating the top-level graph's nodes, asking for the
    graph's session refusals or placing its shape computations (none of which changes a body node's
    placement). ``inferred``: ``infer_shapes(model)`` of a prepared ``model``; without it (inference
    failed) this is :func:`model_placements`."""
    if inferred is None:
        return model_placements(model, feature_level)
    fl = FeatureLevel(feature_level)
    opsets = model_opsets(inferred)
    top = _GraphInfos(inferred.graph, {})
    scopes: dict[str, _GraphInfos] = {}
    # Nodes that differ only in tensor names are placed alike (translate_model shares their lowering).
    placed: dict[tuple[Any, ...], str | None] = {}
    found: dict[str, str | None] = {}
    for node, prefix, scope, index in _walk(inferred.graph, "", top, scopes):
        if scope is top:
            continue
        domain = "" if node.domain == "ai.onnx" else node.domain
        if get_converter(domain, node.op_type) is None:
            continue
        name = node_path(prefix, node, index)
        names = node.input
        infos = tuple([scope.get(i) if i else None for i in names])
        opset = opsets.get(domain, 0)
        key = _structure_key(node, domain, opset, infos)
        if key not in placed:
            placed[key] = translate_node(node, opset, infos, fl, name=name, symbolic=True).ort_placement
        found[name] = placed[key]
    return found
