"""Initializers the caller hands onnxruntime through ``SessionOptions.add_external_initializers``.

onnxruntime then takes those tensors from the options and never reads their external-data file (which
need not exist). dmlshim takes them before it reads any external data: onnxruntime itself is asked which
names the options supply and with which values
(:func:`dmlshim.execute.weights.added_initializers.added_initializers`, whose probe works the same on every
onnxruntime from 1.20), and those values replace the model's external references, so their file is never
read.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import onnx

from ...model.weightless import is_external
from .added_initializers import (
    AddedInitializers,
    added_initializers,
    as_initializer,
    file_in_memory,
    read_files_in_memory,
    take_into_initializer,
)

logger = logging.getLogger(__name__)

__all__ = ["take_supplied_initializers"]


def take_supplied_initializers(
    model: onnx.ModelProto, options: Any, folder: Path | None = None, *, inline: frozenset[str] = frozenset()
) -> AddedInitializers | None:
    """Replace, in ``model``, every external-data initializer ``options`` supplies through
    ``add_external_initializers`` by the value onnxruntime takes from the options, and every one whose
    file the options hold in memory (``add_external_initializers_from_files_in_memory``; onnxruntime
    prefers it to a file of that name in ``folder``, the model's or, for a model given as bytes, the
    working folder) by the value onnxruntime reads from there.

    ``inline`` names initializers the model file holds inline that ``model`` (read without its weights)
    refers to as external data: for onnxruntime they are not external, and their file is the model's.

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
    external = frozenset(t.name for t in model.graph.initializer if is_external(t) and t.name not in inline)
    if not external:
        return None
    added = added_initializers(model, options, external)
    values = dict(added.values)
    added = dataclasses.replace(added, values={})  # the probe's arrays are in ``values`` alone now
    for i, t in enumerate(model.graph.initializer):
        if t.name in added.external:
            target = model.graph.initializer[i]
            take_into_initializer(target, values, t.name)
            # the model holds the value from now on: the probe's array is let go (one copy, not two)
            values[t.name] = target
    added = dataclasses.replace(added, values=values)
    if added.external:
        logger.info("initializers taken from the session options: %s", ", ".join(sorted(added.external)))
    by_file: dict[str, dict[str, onnx.TensorProto]] = {}
    for t in model.graph.initializer:
        if t.name in external and t.name not in added.external:
            by_file.setdefault(_location(t), {})[t.name] = t
    in_memory: dict[str, Any] = {}
    for location, tensors in by_file.items():
        # onnxruntime reads a file the options hold in memory from there, even when it is on disk too, and
        # refuses the session when a tensor lies outside it; a file neither there nor on disk is refused by
        # the model check (as onnxruntime refuses it)
        if file_in_memory(location, options):
            in_memory.update(read_files_in_memory(tensors, options))
    for i, t in enumerate(model.graph.initializer):
        if t.name in in_memory:
            model.graph.initializer[i].CopyFrom(as_initializer(in_memory[t.name], t.name))
    if in_memory:
        logger.info("initializers read from in-memory files: %s", ", ".join(sorted(in_memory)))
    return added


def _location(tensor: onnx.TensorProto) -> str:
    from ...fileio.nul_paths import location_read

    return location_read(next((e.value for e in tensor.external_data if e.key == "location"), ""))
