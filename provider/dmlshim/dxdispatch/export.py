"""Export a model's translated gather/scatter nodes as DxDispatch models, one folder per node.

Each folder holds what a user needs to replay the node on real DirectML (``dxdispatch.exe model.json``)
and to check the result against dmlshim's emulation (``dmlshim compare``): the operator, the node's actual
inputs as the DirectML operator sees them, and ``expected_output.npy`` from dmlshim's kernels.

The node inputs are captured by onnxruntime's CPU provider (:mod:`dmlshim.dxdispatch.capture`), which does
not depend on dmlshim's own execution engine. Nodes inside If/Loop/Scan bodies are exported too: their
inputs are those of the branch taken, or of one iteration (the first unless asked otherwise), and the
folder is named after the node's path (``loop/body/scatter_row`` -> ``002_loop_body_scatter_row``).

Modules: :mod:`.capture` (the values), :mod:`.export_node` (one folder), :mod:`.export_results` (what is
reported); this one puts them together and writes ``index.json``.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..errors import BadInputError, DmlShimError, IndexOutOfRangeError
from ..execute.plan.checks import refuse_static_sizes
from ..fileio.files import write_json
from ..fileio.folders import StagedFolder
from ..fileio.reading import read_json
from ..graph import default_opset
from ..inputs.narrow_floats import narrow_type
from ..inputs.sizes import refuse_run_sizes
from ..ort.session import LoadedModel, ModelSource, load_model
from ..resources import guard_resources
from ..translate import Status, TensorInfo, translate_node
from ..validate.value_kinds import feed_shape
from .capture import CapturedNode, capture_nodes
from .export_node import export_node, prepare_input
from .export_results import (
    DML_OUTPUT_FILE,
    EXPECTED_OUTPUT_FILE,
    FOLDER_RE,
    INDEX_FILE,
    INDEX_SCHEMA_VERSION,
    MODEL_FILE,
    README_FILE,
    ExportedNode,
    ExportResult,
    PreparedInput,
    SkippedNode,
    sanitize_name,
)

log = logging.getLogger(__name__)

EXPORT_TOOL = "dmlshim export"
"""The ``tool`` an export's index.json names: only such an index (and what it lists) is replaced."""

__all__ = [
    "DML_OUTPUT_FILE",
    "EXPECTED_OUTPUT_FILE",
    "INDEX_FILE",
    "MODEL_FILE",
    "README_FILE",
    "ExportResult",
    "ExportedNode",
    "PreparedInput",
    "SkippedNode",
    "export_model",
    "prepare_input",
    "sanitize_name",
]


def _feeds(
    loaded: LoadedModel,
    inputs: Mapping[str, np.ndarray] | None,
    input_shapes: Mapping[str, Sequence[int]] | None,
    seed: int,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The feeds, and the symbol sizes chosen when they were generated."""
    model = loaded.proto
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [vi.name for vi in model.graph.input if vi.name not in initializers]
    if inputs is None:
        from ..inputs import generate

        generated = generate(loaded, input_shapes=input_shapes, seed=seed)
        log.info("generated random inputs (seed %d): %s", seed, generated.describe())
        return generated.feeds, generated.symbols
    missing = [n for n in graph_inputs if n not in inputs]
    if missing:
        raise BadInputError(
            f"no value given for graph input(s) {', '.join(map(repr, missing))}", value=missing
        )
    extra = sorted(set(inputs) - set(graph_inputs))
    if extra:
        log.warning("ignoring inputs that are not graph inputs: %s", ", ".join(extra))
    # a bfloat16 or float8 input is an onnxruntime OrtValue (numpy cannot hold it): kept as it is
    feeds = {n: v if narrow_type(v := inputs[n]) is not None else np.asarray(v) for n in graph_inputs}
    refuse_run_sizes(model, feeds, path=loaded.path)
    return feeds, {}


def _previous_export(directory: Path) -> list[str]:
    """What an earlier export listed in its index.json (and the index itself): the entries --overwrite
    may remove. Anything else in the folder is kept."""
    index = directory / INDEX_FILE
    if not index.is_file() or index.is_symlink():
        log.warning("%s is not a previous export (no %s): writing into it", directory, INDEX_FILE)
        return []
    try:
        previous = read_json(index, what=f"previous {INDEX_FILE}")
        ours = isinstance(previous, dict) and previous.get("tool") == EXPORT_TOOL
        folders = [str(e["folder"]) for e in previous.get("exported", [])] if ours else []
    except (DmlShimError, OSError, ValueError, TypeError, KeyError, AttributeError):
        log.warning("cannot read the previous %s; leaving its folders in place", index)
        folders, ours = [], False
    if not ours:
        # someone else's index.json (a web project's, notes): never replaced, the commit refuses it
        log.warning("%s is not an index dmlshim export wrote: nothing in %s is replaced", index, directory)
        return []
    # Only plain child folder names are trusted; anything else in an edited index.json is ignored.
    return [f for f in folders if FOLDER_RE.match(f)] + [INDEX_FILE]


def _elem_type(array: np.ndarray) -> int:
    return int(helper.np_dtype_to_tensor_dtype(array.dtype))


@guard_resources("exporting the model")
def export_model(
    model: ModelSource,
    directory: str | os.PathLike[str],
    *,
    inputs: Mapping[str, np.ndarray] | None = None,
    feature_level: FeatureLevel | str = DEFAULT_FEATURE_LEVEL,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    overwrite: bool = False,
    seed: int = 0,
    iteration: int = 0,
    reads: Sequence[str | os.PathLike[str]] = (),
) -> ExportResult:
    """Write every gather/scatter node that runs as a DirectML operator as a DxDispatch model.

    For node ``i`` of the graph, ``directory/<i>_<name>/`` receives ``model.json``, the input ``.npy``
    files as the operator sees them, ``expected_output.npy`` and ``README.txt``; a node inside the
    control-flow node ``i`` gets ``directory/<i>_<path>/`` (``002_loop_body_scatter_row``).
    ``directory/index.json`` lists what was exported and what was skipped, with reasons.

    Args:
        model: an ONNX model path, serialized bytes or ``ModelProto``.
        directory: the export directory (created; must be empty unless ``overwrite``).
        inputs: a value for every graph input; random valid inputs are generated when None.
        feature_level: the DirectML feature level to translate for.
        input_shapes: shapes for generated inputs (an input name or a symbolic dimension -> size).
        overwrite: allow a non-empty directory; the node folders a previous export listed in its
            ``index.json`` are removed first, nothing else is.
        seed: the seed of generated inputs.
        iteration: which iteration of each Loop/Scan body to capture nodes in (0 = the first).
        reads: other files the export reads (the inputs file): with the model and its external data,
            never removed by ``overwrite``, even inside a node folder the previous export listed.

    Returns:
        The nodes exported and skipped.

    Raises:
        BadModelError: the model cannot be read.
        BadInputError: the directory is not usable, an input is missing, ``iteration`` is negative, or
            onnxruntime cannot run the model.
    """
    fl = feature_level if isinstance(feature_level, FeatureLevel) else FeatureLevel.parse(feature_level)
    if iteration < 0:
        raise BadInputError(f"--iteration must be >= 0, not {iteration}", value=iteration)
    # Read without its large weights: the capture session reads them from the model's files and a node
    # that reads one gets it from there when it is written, so no copy of the weights is ever held.
    loaded = load_model(model, weightless=True, own_weights=False)
    proto = loaded.proto
    model_label = loaded.path or "<in-memory model>"
    out_dir = Path(directory)
    # Checked before running the model; the export is built out of sight and moved into place at the
    # end, so a failed run or Ctrl-C leaves the old export (or nothing) and never a half-written one.
    stage = StagedFolder(
        out_dir,
        overwrite=overwrite,
        previous=_previous_export,
        what="export directory",
        inputs=[loaded.path, *reads],  # never removed by --overwrite, even inside a listed node folder
    )

    # The capture runs the whole model in onnxruntime: a value that cannot fit (a ConstantOfShape of
    # constants) is refused first, as every engine refuses it (2.1 GB under a 100 MB limit before).
    refuse_static_sizes(proto)
    feeds, symbols = _feeds(loaded, inputs, input_shapes, seed)
    capture = capture_nodes(proto, feeds, iteration=iteration, weights_path=loaded.weights_path)
    # (graph position, entry): reported in graph order.
    skipped: list[tuple[int, SkippedNode]] = [
        (m.position, SkippedNode(m.name, m.op_type, m.code, m.reason)) for m in capture.missed
    ]
    # Each node's captured values are let go once its folder is written.
    pending = deque(capture.nodes)
    del capture
    with stage:
        since = _default_opset(proto)
        width = max(3, len(str(max(len(proto.graph.node) - 1, 0))))
        used: set[str] = set()
        exported: list[ExportedNode] = []
        while pending:
            captured = pending.popleft()
            entry = _export_one(captured, since, fl, stage.path, _folder(captured, width, used), model_label)
            if isinstance(entry, ExportedNode):
                exported.append(entry)
            else:
                skipped.append((captured.position, entry))
            del captured
        # weights were read from the model's files while the folders were written
        loaded.check_unchanged()

        skipped.sort(key=lambda entry: entry[0])
        result = ExportResult(out_dir, fl, tuple(exported), tuple(s for _, s in skipped))
        if not exported and any(s.code == "EXPORT_FAILED" for _, s in skipped):
            # no node's files could be written (a full disk): a failed run, which leaves the old export
            # (or nothing) in place; `dmlshim export` exits 2
            log.warning("no node could be exported to %s: nothing was written", out_dir)
            return result
        generated = {"generated": True, "seed": seed, "symbols": symbols}
        index = {
            "schema_version": INDEX_SCHEMA_VERSION,
            "tool": EXPORT_TOOL,
            "model": model_label,
            "feature_level": fl.dml_name,
            "inputs": "given" if inputs is not None else generated,
            "input_shapes": {k: list(feed_shape(v)) for k, v in feeds.items()},
            "iteration": iteration,
            "exported": [e.to_json() for e in exported],
            "skipped": [s.to_json() for s in result.skipped],
        }
        write_json(stage.path / INDEX_FILE, index)
        stage.commit(last=INDEX_FILE)
    log.info("exported %d node(s), skipped %d, to %s", len(exported), len(skipped), out_dir)
    return result


def _default_opset(model: onnx.ModelProto) -> int:
    return default_opset(model)  # the last entry, as onnxruntime


def _folder(captured: CapturedNode, width: int, used: set[str]) -> str:
    """``<position>_<sanitized path>``, made unique when two paths sanitize alike."""
    stem = f"{captured.position:0{width}d}_{sanitize_name(captured.name)}"
    folder, k = stem, 1
    while folder in used:
        k += 1
        folder = f"{stem}_{k}"
    used.add(folder)
    return folder


def _export_one(
    captured: CapturedNode, since: int, fl: FeatureLevel, directory: Path, folder: str, model_label: str
) -> ExportedNode | SkippedNode:
    node, name = captured.node, captured.name
    arrays = captured.arrays
    infos = [TensorInfo(tuple(a.shape), _elem_type(a)) if a is not None else None for a in arrays]
    t = translate_node(node, since, infos, fl, name=name)
    if t.status is not Status.DML or t.operator is None:
        causes = "; ".join(f"{r.code}: {r.message}" for r in t.reasons) or t.status.value
        return SkippedNode(name, node.op_type, "NOT_DML", f"status {t.status.value}: {causes}")
    empty = [field for field, tensor in t.operator.tensors().items() if tensor.element_count == 0]
    if empty:
        return SkippedNode(
            name,
            node.op_type,
            "EMPTY_TENSOR",
            f"{', '.join(empty)} has no elements; DxDispatch needs non-empty buffers",
        )
    try:
        return export_node(
            folder, t, arrays, captured.output, directory, model_label, iterations=captured.iterations
        )
    except IndexOutOfRangeError as exc:
        _drop_partial(directory, folder)
        return SkippedNode(name, node.op_type, "INDEX_OUT_OF_RANGE", str(exc))
    except DmlShimError as exc:
        _drop_partial(directory, folder)
        return SkippedNode(name, node.op_type, "EXPORT_FAILED", str(exc))


def _drop_partial(directory: Path, folder: str) -> None:
    """Remove what a skipped node's export wrote before it failed (a full disk after ``input.npy``): the
    index does not list it, so it would be left in the export, and the next ``--overwrite`` would refuse
    the folder as something dmlshim did not write. ``directory`` is the export's own staging folder."""
    partial = directory / folder
    if os.path.lexists(partial):
        # our staging folder's entry; rmtree removes links inside without following them
        shutil.rmtree(partial, ignore_errors=True)
        if os.path.lexists(partial):
            log.warning("could not remove the partial export folder %s", partial)
