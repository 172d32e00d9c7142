"""A model file reached through a symbolic link leading out of its folder (the Hugging Face cache's
``snapshots/<rev>/model.onnx -> ../../blobs/<sha>``): its weights read where they lie (issue 53)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import onnx

from ...model.weightless import is_external
from .values import external_slice

logger = logging.getLogger(__name__)


def leads_out(path: Path) -> bool:
    """``path`` is a symbolic link (or passes through one) whose real file lies outside its folder."""
    return not _within(os.path.realpath(path.parent), os.path.realpath(path))


def _within(folder: str, real: str) -> bool:
    """The resolved path ``real`` lies in the resolved ``folder`` (not on another drive)."""
    try:
        return os.path.commonpath([folder, real]) == folder
    except ValueError:
        return False


def linked_weights(proto: onnx.ModelProto, path: Path) -> tuple[str | None, frozenset[str]]:
    """Give the large external weights of ``proto`` (read from ``path``, a link leading out of its folder,
    and checked from there as onnxruntime checks them) the one folder the engines' onnxruntime sessions
    read them from: the folder of the model's real file, where onnxruntime's own check lets them lie.

    onnxruntime resolves each location from the folder of ``path`` as given and accepts a file whose real
    path lies in that folder, resolved, or in the real file's folder (the Hugging Face cache's
    ``model.onnx`` and ``model.onnx_data`` links both lead into ``blobs/``); the check refused the rest.
    When every large weight lies in the real file's folder, their locations (the inline ones' too) are
    rewritten relative to it: (the real file, no names); else (None, the names of those there), for the
    caller to read into ``proto`` as before, the rest staying relative to the link's folder."""
    real = os.path.realpath(path)
    real_dir = os.path.dirname(real)
    base = os.path.dirname(os.path.abspath(path))
    tensors = [t for t in proto.graph.initializer if is_external(t)]
    places = {t.name: os.path.realpath(os.path.join(base, external_slice(t).location)) for t in tensors}
    beside = frozenset(n for n, p in places.items() if _within(real_dir, p))
    if len(beside) < len(places):
        return None, beside
    for tensor in tensors:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = os.path.relpath(places[tensor.name], real_dir)
    logger.debug("the weights of %s are read from %s", path, real_dir)
    return real, frozenset()
