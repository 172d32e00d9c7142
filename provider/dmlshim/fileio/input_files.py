"""The files a command reads, for the writer's "inputs are never outputs" rule: each input itself and,
for an ONNX model, every external-data file its tensors name (:mod:`dmlshim.fileio.files`)."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["input_files"]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


def _model_data_files(source: str) -> list[Path]:
    """The external-data files an ONNX model file names (its tensors' ``location`` entries, resolved
    against its folder); empty for anything that is not a readable ONNX model."""
    if not source.lower().endswith(".onnx") or not os.path.isfile(source):
        return []
    st = os.stat(source)
    folder = Path(source).parent
    return [folder / loc for loc in _locations(os.path.realpath(source), st.st_mtime_ns, st.st_size)]


@functools.lru_cache(maxsize=16)
def _locations(source: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """The distinct external-data locations of the model file ``source`` (a real path; its time and size
    key the cache)."""
    import onnx  # files.py stays import-light for commands that write no model

    from ..execute.weights.file_slices import read_weightless
    from ..model.weightless import WEIGHTLESS_MIN_BYTES
    from .external_data import external_tensors
    from .nul_paths import location_read

    # read without the large inline weights (a 361 MB model parsed whole doubled `run -o`'s peak);
    # those become references to the model file itself (location: its own name), not data files
    inline: frozenset[str] = frozenset()
    try:
        walked = read_weightless(source, WEIGHTLESS_MIN_BYTES)
        if walked is not None:
            model, inline = walked
        else:
            model = onnx.load(source, load_external_data=False)
    except Exception as exc:  # not a model, unreadable: nothing more to protect than the file itself
        logger.debug("no external data listed for %s: %s", source, exc)
        return ()
    own_name = os.path.basename(source)
    found: dict[str, None] = {}
    for tensor in external_tensors(model.graph):
        for entry in tensor.external_data:
            # a location holding a NUL names the file up to it, as onnxruntime reads it
            location = location_read(entry.value) if entry.key == "location" else ""
            if not location:
                continue
            if tensor.name in inline and location == own_name:
                continue  # an inline weight read_weightless left in the model file
            found.setdefault(location)
    return tuple(found)


def input_files(inputs: Iterable[PathLike | None]) -> list[tuple[Path, str]]:
    """Every file the inputs read, each with how to name it: the inputs themselves and, for an ONNX
    model, each of its external-data files."""
    out: list[tuple[Path, str]] = []
    for source in inputs:
        if source is None:
            continue
        text = os.fspath(source)
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        out.append((Path(text), f"the input {text!r}"))
        out.extend(
            (data, f"{str(data)!r}, the external data of the input model {text!r}")
            for data in _model_data_files(text)
        )
    return out
