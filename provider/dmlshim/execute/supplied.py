"""Initializers the caller hands onnxruntime through ``SessionOptions.add_external_initializers``.

onnxruntime then takes those tensors from the options and never reads their external-data file (which
need not exist). dmlshim takes them before it reads any external data: onnxruntime itself is asked which
names the options supply and with which values (:func:`dmlshim.execute.added_initializers.added_initializers`,
whose probe works the same on every onnxruntime from 1.20), and those values replace the model's external
references, so their file is never read.
"""

from __future__ import annotations

import logging
from typing import Any

import onnx
from onnx import numpy_helper

from ..model.weightless import is_external
from .added_initializers import AddedInitializers, added_initializers

logger = logging.getLogger(__name__)

__all__ = ["take_supplied_initializers"]


def take_supplied_initializers(model: onnx.ModelProto, options: Any) -> AddedInitializers | None:
    """Replace, in ``model``, every external-data initializer ``options`` supplies through
    ``add_external_initializers`` by the value onnxruntime takes from the options.

    Returns:
        What the options add (``external``: the names supplied; ``values`` also holds what
        ``add_initializer`` adds), or None when nothing was probed: only models with top-level
        external-data initializers are (others need no file).

    Raises:
        BadInputError: onnxruntime refuses what the options add (a name the model holds inline, another
            type or shape), as it would refuse the session.
    """
    if options is None:
        return None
    external = frozenset(t.name for t in model.graph.initializer if is_external(t))
    if not external:
        return None
    added = added_initializers(model, options, external)
    for i, t in enumerate(model.graph.initializer):
        if t.name in added.external:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(added.values[t.name], t.name))
    if added.external:
        logger.info("initializers taken from the session options: %s", ", ".join(sorted(added.external)))
    return added
