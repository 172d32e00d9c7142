"""Export a model's translated gather/scatter nodes as DxDispatch models, one folder per node.

Each folder holds what a user needs to replay the node on real DirectML (``dxdispatch.exe model.json``)
and to check the result against dmlshim's emulation (``dmlshim compare``): the operator, the node's actual
inputs as the DirectML operator sees them, and ``expected_output.npy`` from dmlshim's kernels.

The node inputs are captured by running onnxruntime's CPU provider on a copy of the model whose graph
outputs also list every gather/scatter node's inputs and output. That does not depend on dmlshim's own
execution engine, but it only reaches the top-level graph: nodes inside If/Loop/Scan bodies are listed as
skipped.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..dml.operators import OperatorDesc
from ..errors import BadInputError, DmlShimError, IndexOutOfRangeError, guard_resources
from ..execute.session import LoadedModel, ModelSource, load_model
from ..files import write_json, write_npy, write_text
from ..folders import StagedFolder
from ..graph import display_names, is_gather_scatter, subgraph_prefix, subgraphs, walk_nodes
from ..kernels import KernelOptions, execute
from ..reading import read_json
from ..translate import (
    InputBinding,
    NodeTranslation,
    Reinterpret,
    Status,
    TensorInfo,
    run_translation,
    translate_node,
)
from ..translate.plan import elem_type_name
from ..translate.runner import bind_input
from .model_file import single_operator_model

log = logging.getLogger(__name__)

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

INDEX_SCHEMA_VERSION = 1
MODEL_FILE = "model.json"
EXPECTED_OUTPUT_FILE = "expected_output.npy"
DML_OUTPUT_FILE = "dml_output.npy"
README_FILE = "README.txt"
INDEX_FILE = "index.json"

_FOLDER_RE = re.compile(r"^\d+_[A-Za-z0-9_.-]+$")
_MAX_NAME_CHARS = 80


@dataclass(frozen=True)
class PreparedInput:
    """One DirectML input buffer as the operator sees it.

    Attributes:
        binding: the DirectML tensor field (``InputTensor``, ``IndicesTensor``, ``UpdatesTensor``).
        array: the buffer: shaped like the tensor's Sizes (or flat, for a strided tensor) in the tensor's
            data type.
        steps: what was done to the ONNX array to get there, one sentence each, in order.
    """

    binding: str
    array: np.ndarray = field(compare=False, repr=False)
    steps: tuple[str, ...]


@dataclass(frozen=True)
class ExportedNode:
    """A node written as a DxDispatch model.

    Attributes:
        folder: the node's folder name inside the export directory.
        node: the node's name (``<op_type>_<index>`` when it has none).
        op_type: the ONNX op type.
        operator: the DirectML operator type name, as written in ``model.json``.
        output_shape: the DirectML OutputTensor Sizes (the shape of ``expected_output.npy``).
        output_dtype: the numpy dtype of ``expected_output.npy``.
        duplicate_indices: scatter writes overwritten by a later write; DirectML does not define which
            write wins, so a real GPU may legitimately disagree where this is non-zero.
        matches_onnxruntime: whether dmlshim's result for the node, mapped back to ONNX, equals the value
            onnxruntime computed for the node's output.
        steps: the host-side preparation applied, per binding.
    """

    folder: str
    node: str
    op_type: str
    operator: str
    output_shape: tuple[int, ...]
    output_dtype: str
    duplicate_indices: int
    matches_onnxruntime: bool
    steps: tuple[tuple[str, tuple[str, ...]], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "node": self.node,
            "op_type": self.op_type,
            "operator": self.operator,
            "output_shape": list(self.output_shape),
            "output_dtype": self.output_dtype,
            "duplicate_indices": self.duplicate_indices,
            "matches_onnxruntime": self.matches_onnxruntime,
            "host_preparation": {binding: list(steps) for binding, steps in self.steps},
        }


@dataclass(frozen=True)
class SkippedNode:
    """A gather/scatter node that was not exported.

    Attributes:
        node: the node's name (subgraph nodes are prefixed with their path, ``loop/body/scatter``).
        op_type: the ONNX op type.
        code: a stable reason code (``SUBGRAPH_NODE``, ``NOT_DML``, ``EMPTY_TENSOR``,
            ``INDEX_OUT_OF_RANGE``, ``EXPORT_FAILED``).
        reason: one sentence for people.
    """

    node: str
    op_type: str
    code: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "op_type": self.op_type, "code": self.code, "reason": self.reason}


@dataclass(frozen=True)
class ExportResult:
    """What ``export_model`` wrote.

    Attributes:
        directory: the export directory.
        feature_level: the DirectML feature level the nodes were translated for.
        exported: the nodes written, in graph order.
        skipped: the gather/scatter nodes not written, with reasons.
    """

    directory: Path
    feature_level: FeatureLevel
    exported: tuple[ExportedNode, ...]
    skipped: tuple[SkippedNode, ...]


def sanitize_name(name: str) -> str:
    """A node name made safe as one path component: only ``[A-Za-z0-9_.-]``, no ``..``, at most 80 chars.

    Path separators and every other character become ``_``, so the folder can never leave the export
    directory whatever the model calls its nodes.
    """
    text = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    text = re.sub(r"\.{2,}", "_", text)
    text = re.sub(r"_{2,}", "_", text)[:_MAX_NAME_CHARS].strip("._")
    return text or "node"


# --------------------------------------------------------------------------------------------------
# Preparing the DirectML inputs


def prepare_input(binding: InputBinding, array: np.ndarray) -> PreparedInput:
    """Apply a plan binding's host-side preparation to an ONNX input, as the DirectML operator receives it.

    The arrays come from the same code the emulation runs (:func:`dmlshim.translate.runner.bind_input`);
    this adds the plain-words description of each step for the folder's README.

    Args:
        binding: the binding of the translation's plan.
        array: the ONNX input value.

    Returns:
        The buffer (DirectML Sizes, or flat for a strided tensor; bool as uint8; indices in the
        descriptor's index type) and the steps applied.

    Raises:
        BadInputError: the array is not the shape/type the translation was made for, or indices do not
            fit the descriptor's index type.
        IndexOutOfRangeError: an index outside its dimension (checked by the normalisation step).
    """
    source = np.asarray(array)
    prepared = bind_input(source, binding)
    return PreparedInput(binding.binding, prepared, _describe_steps(binding, source, prepared))


def _describe_steps(binding: InputBinding, source: np.ndarray, prepared: np.ndarray) -> tuple[str, ...]:
    tensor = binding.tensor
    strided = tensor.strides is not None
    steps = [f"{step.kind.value}: {step.description}" for step in binding.host_steps]
    if binding.window is not None and not strided:
        steps.append(f"window {list(binding.window)} of the ONNX tensor copied out (starting at 0)")
    if binding.reinterpret is Reinterpret.BOOL_AS_UINT8:
        steps.append("bool bytes reinterpreted as UINT8 (0/1)")
    elif binding.reinterpret is Reinterpret.UINT32_PAIRS:
        steps.append("each 64-bit element reinterpreted as two UINT32 (low word first)")
    if binding.binding == "IndicesTensor" and not binding.host_steps and source.dtype != prepared.dtype:
        steps.append(f"indices cast from {source.dtype} to {tensor.data_type.dml_name}")
    if strided:
        steps.append(
            f"the whole buffer bound flat ({prepared.size} elements); Strides {list(tensor.strides or ())} "
            "address the part the operator reads"
        )
    elif tuple(source.shape) != tensor.sizes:
        steps.append(f"reshaped from {list(source.shape)} to Sizes {list(tensor.sizes)}")
    return tuple(steps)


# --------------------------------------------------------------------------------------------------
# Capturing node inputs with onnxruntime


@dataclass(frozen=True)
class _Candidate:
    index: int
    node: onnx.NodeProto
    name: str


def _nested(graph: onnx.GraphProto, prefix: str) -> Iterator[tuple[str, onnx.NodeProto]]:
    return ((name, node) for name, node in walk_nodes(graph, prefix) if is_gather_scatter(node))


def _capture(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], names: set[str]
) -> dict[str, np.ndarray]:
    """The values of ``names`` (tensors of the top-level graph) in one onnxruntime CPU run."""
    graph = model.graph
    values: dict[str, np.ndarray] = {k: v for k, v in feeds.items() if k in names}
    for init in graph.initializer:
        if init.name in names and init.name not in values:
            values[init.name] = numpy_helper.to_array(init)
    wanted = sorted(names - set(values))
    if not wanted:
        # An empty output list would make onnxruntime return every graph output instead.
        return values
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    declared = {o.name for o in copy.graph.output}
    typed = {v.name: v for v in (*copy.graph.value_info, *copy.graph.output)}
    for name in wanted:
        if name in declared:
            continue
        # onnxruntime infers the type of an output declared by name only.
        copy.graph.output.append(typed[name] if name in typed else onnx.ValueInfoProto(name=name))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    # Unfused ops only: the captured values must be what each node really reads.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        session = ort.InferenceSession(copy.SerializeToString(), so, providers=["CPUExecutionProvider"])
        results = session.run(wanted, dict(feeds))
    except Exception as exc:  # onnxruntime raises its own exception types
        raise BadInputError(f"onnxruntime could not run the model to capture node inputs: {exc}") from exc
    for name, value in zip(wanted, results, strict=True):
        values[name] = np.asarray(value)
    return values


def _feeds(
    loaded: LoadedModel,
    inputs: Mapping[str, np.ndarray] | None,
    input_shapes: Mapping[str, Sequence[int]] | None,
    seed: int,
) -> dict[str, np.ndarray]:
    model = loaded.proto
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [vi.name for vi in model.graph.input if vi.name not in initializers]
    if inputs is None:
        from ..inputs import generate_inputs

        generated = generate_inputs(loaded, input_shapes=input_shapes, seed=seed)
        log.info("generated random inputs (seed %d): %s", seed, {k: v.shape for k, v in generated.items()})
        return generated
    missing = [n for n in graph_inputs if n not in inputs]
    if missing:
        raise BadInputError(
            f"no value given for graph input(s) {', '.join(map(repr, missing))}", value=missing
        )
    extra = sorted(set(inputs) - set(graph_inputs))
    if extra:
        log.warning("ignoring inputs that are not graph inputs: %s", ", ".join(extra))
    return {n: np.asarray(inputs[n]) for n in graph_inputs}


# --------------------------------------------------------------------------------------------------
# Writing


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _tensor_line(field_name: str, desc: OperatorDesc) -> str:
    tensor = desc.tensors()[field_name]
    text = f"{field_name:<14} {tensor.data_type.name:<8} Sizes {list(tensor.sizes)}"
    if tensor.strides is not None:
        text += f" Strides {list(tensor.strides)}"
    return text


def _readme(
    t: NodeTranslation,
    desc: OperatorDesc,
    prepared: Sequence[PreparedInput],
    exported: ExportedNode,
    model_label: str,
) -> str:
    fl = t.feature_level
    lines = [
        f"dmlshim export: ONNX node {t.name!r}",
        "",
        f"Model:          {model_label}",
        f"ONNX op:        {t.op_type} (since opset {t.since_version})",
        f"Feature level:  {fl.dml_name}",
        f"DML operator:   {desc.operator_type.dml_name}",
        "",
        "Descriptor:",
    ]
    for field_name in desc.TENSOR_FIELDS:
        lines.append("  " + _tensor_line(field_name, desc))
    for key, value in desc.uints().items():
        lines.append(f"  {key} = {value}")
    lines += ["", "Inputs (ONNX tensor -> DirectML binding, file):"]
    by_binding = {b.binding: b for b in t.inputs}
    for p in prepared:
        b = by_binding[p.binding]
        lines.append(
            f"  {p.binding:<14} <- input {b.onnx_index} {b.onnx_name!r} "
            f"{elem_type_name(b.onnx_elem_type)}{list(b.onnx_shape)}; file {_RESOURCE[p.binding]}.npy "
            f"({p.array.dtype}{list(p.array.shape)})"
        )
    lines += ["", "Host-side preparation applied to the exported inputs (DirectML receives these bytes):"]
    any_step = False
    for p in prepared:
        for step in p.steps:
            lines.append(f"  {p.binding}: {step}")
            any_step = True
    if not any_step:
        lines.append("  none: the ONNX tensors are bound as they are")
    if t.output is not None and t.output.host_steps:
        lines += ["", "Not part of this replay (dmlshim does it on the host after the operator):"]
        lines += [f"  OutputTensor: {s.kind.value}: {s.description}" for s in t.output.host_steps]
    lines += [
        "",
        f"Expected output: {EXPECTED_OUTPUT_FILE} ({exported.output_dtype}{list(exported.output_shape)}), "
        "computed by dmlshim's kernels.",
    ]
    if exported.duplicate_indices:
        lines.append(
            f"Warning: {exported.duplicate_indices} scatter write(s) hit an element written before; DirectML "
            "does not define which write wins, so a mismatch there is not necessarily a bug."
        )
    lines += [
        "",
        "Replay on DirectML (Windows, DxDispatch), from this folder:",
        "  dxdispatch.exe model.json --output_path .",
        f"  (it writes {DML_OUTPUT_FILE}; add --dml_feature_level {fl.short.replace('_', '.')} to request "
        "this feature level, -d for the debug layers)",
        "",
        "Compare with dmlshim's expected output (every node of the export; DIR = this folder's parent):",
        "  dmlshim compare ..",
        "",
        "Replay here with dmlshim's kernels instead of DirectML (writes the same file):",
        f"  dmlshim replay model.json --output-path . --feature-level {fl.short}",
        "",
    ]
    return "\n".join(lines)


_RESOURCE = {"InputTensor": "input", "IndicesTensor": "indices", "UpdatesTensor": "updates"}


def _previous_export(directory: Path) -> list[str]:
    """What an earlier export listed in its index.json (and the index itself): the entries --overwrite
    may remove. Anything else in the folder is kept."""
    index = directory / INDEX_FILE
    if not index.is_file() or index.is_symlink():
        log.warning("%s is not a previous export (no %s): writing into it", directory, INDEX_FILE)
        return []
    try:
        previous = read_json(index, what=f"previous {INDEX_FILE}")
        folders = [str(e["folder"]) for e in previous.get("exported", [])]
    except (DmlShimError, OSError, ValueError, TypeError, KeyError, AttributeError):
        log.warning("cannot read the previous %s; leaving its folders in place", index)
        folders = []
    # Only plain child folder names are trusted; anything else in an edited index.json is ignored.
    return [f for f in folders if _FOLDER_RE.match(f)] + [INDEX_FILE]


def _inside(directory: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
    except ValueError:
        return False
    return True


def _elem_type(array: np.ndarray) -> int:
    return int(helper.np_dtype_to_tensor_dtype(array.dtype))


def _export_node(
    cand: _Candidate,
    t: NodeTranslation,
    arrays: Sequence[np.ndarray | None],
    onnx_output: np.ndarray | None,
    directory: Path,
    width: int,
    model_label: str,
) -> ExportedNode:
    desc = t.operator
    assert desc is not None and t.output is not None  # status dml
    prepared: list[PreparedInput] = []
    for binding in t.inputs:
        arr = arrays[binding.onnx_index] if binding.onnx_index < len(arrays) else None
        if arr is None:
            raise BadInputError(f"input {binding.onnx_index} ({binding.onnx_name}) was not captured")
        try:
            prepared.append(prepare_input(binding, arr))
        except DmlShimError as exc:
            exc.node = t.name
            exc.op_type = t.op_type
            raise
    bound = {p.binding: p.array for p in prepared}
    result = execute(desc, bound, KernelOptions(feature_level=t.feature_level, node=t.name))
    expected = np.ascontiguousarray(result.output)

    matches = False
    if onnx_output is not None:
        try:
            ours = run_translation(t, list(arrays)).output
            matches = _same(ours, onnx_output)
        except DmlShimError as exc:
            log.warning("%s: could not run the translation for the onnxruntime check: %s", t.name, exc)

    folder = f"{cand.index:0{width}d}_{sanitize_name(cand.name)}"
    target = directory / folder
    if not _inside(directory, target):  # unreachable after sanitize_name; kept as the last guard
        raise BadInputError(f"refusing to write outside the export directory: {folder!r}")
    exported = ExportedNode(
        folder=folder,
        node=t.name,
        op_type=t.op_type,
        operator=desc.operator_type.dml_name,
        output_shape=tuple(int(s) for s in expected.shape),
        output_dtype=str(expected.dtype),
        duplicate_indices=int(result.duplicate_indices),
        matches_onnxruntime=matches,
        steps=tuple((p.binding, p.steps) for p in prepared),
    )
    model = single_operator_model(
        desc,
        bound,
        dispatchable="op",
        output_file=DML_OUTPUT_FILE,
        npy_inputs=True,
        metadata={
            "dmlshim": {
                "node": t.name,
                "op_type": t.op_type,
                "feature_level": t.feature_level.dml_name,
                "model": model_label,
                "expected_output": EXPECTED_OUTPUT_FILE,
            }
        },
    )
    target.mkdir()
    model.save(target / MODEL_FILE)
    write_npy(target / EXPECTED_OUTPUT_FILE, expected)
    write_text(target / README_FILE, _readme(t, desc, prepared, exported, model_label))
    log.info("exported %s to %s", t.name, target)
    return exported


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
) -> ExportResult:
    """Write every top-level gather/scatter node that runs as a DirectML operator as a DxDispatch model.

    For node ``i`` of the graph, ``directory/<i>_<name>/`` receives ``model.json``, the input ``.npy``
    files as the operator sees them, ``expected_output.npy`` and ``README.txt``; ``directory/index.json``
    lists what was exported and what was skipped, with reasons.

    Args:
        model: an ONNX model path, serialized bytes or ``ModelProto``.
        directory: the export directory (created; must be empty unless ``overwrite``).
        inputs: a value for every graph input; random valid inputs are generated when None.
        feature_level: the DirectML feature level to translate for.
        input_shapes: shapes for generated inputs (an input name or a symbolic dimension -> size).
        overwrite: allow a non-empty directory; the node folders a previous export listed in its
            ``index.json`` are removed first, nothing else is.
        seed: the seed of generated inputs.

    Returns:
        The nodes exported and skipped.

    Raises:
        BadModelError: the model cannot be read.
        BadInputError: the directory is not usable, an input is missing, or onnxruntime cannot run the model.
    """
    fl = feature_level if isinstance(feature_level, FeatureLevel) else FeatureLevel.parse(feature_level)
    loaded = load_model(model)
    proto = loaded.proto
    model_label = loaded.path or "<in-memory model>"
    out_dir = Path(directory)
    # Checked before running the model; the export is built out of sight and moved into place at the
    # end, so a failed run or Ctrl-C leaves the old export (or nothing) and never a half-written one.
    stage = StagedFolder(out_dir, overwrite=overwrite, previous=_previous_export, what="export directory")

    feeds = _feeds(loaded, inputs, input_shapes, seed)
    graph = proto.graph
    names = display_names(list(graph.node))
    candidates: list[_Candidate] = []
    # (graph position, entry): reported in graph order whichever loop found them.
    skipped: list[tuple[int, SkippedNode]] = []
    for i, node in enumerate(graph.node):
        if is_gather_scatter(node):
            candidates.append(_Candidate(i, node, names[i]))
        for attr_name, sub in subgraphs(node):
            for nested_name, nested in _nested(sub, subgraph_prefix(names[i], attr_name)):
                skipped.append(
                    (
                        i,
                        SkippedNode(
                            nested_name,
                            nested.op_type,
                            "SUBGRAPH_NODE",
                            "the node is inside a control-flow body; its inputs cannot be captured as graph "
                            "outputs, so it is not exported",
                        ),
                    )
                )
    wanted = {n for c in candidates for n in (*c.node.input, *c.node.output[:1]) if n}
    values = _capture(proto, feeds, wanted)
    with stage:
        opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in proto.opset_import}
        width = max(3, len(str(max(len(graph.node) - 1, 0))))
        exported: list[ExportedNode] = []
        for cand in candidates:
            node = cand.node
            arrays: list[np.ndarray | None] = [values.get(n) if n else None for n in node.input]
            infos = [TensorInfo(tuple(a.shape), _elem_type(a)) if a is not None else None for a in arrays]
            t = translate_node(node, opsets.get("", 0), infos, fl, name=cand.name)
            if t.status is not Status.DML or t.operator is None:
                causes = "; ".join(f"{r.code}: {r.message}" for r in t.reasons) or t.status.value
                skipped.append(
                    (
                        cand.index,
                        SkippedNode(cand.name, node.op_type, "NOT_DML", f"status {t.status.value}: {causes}"),
                    )
                )
                continue
            empty = [name for name, tensor in t.operator.tensors().items() if tensor.element_count == 0]
            if empty:
                skipped.append(
                    (
                        cand.index,
                        SkippedNode(
                            cand.name,
                            node.op_type,
                            "EMPTY_TENSOR",
                            f"{', '.join(empty)} has no elements; DxDispatch needs non-empty buffers",
                        ),
                    )
                )
                continue
            onnx_output = values.get(node.output[0]) if node.output else None
            try:
                exported.append(_export_node(cand, t, arrays, onnx_output, stage.path, width, model_label))
            except IndexOutOfRangeError as exc:
                skipped.append(
                    (cand.index, SkippedNode(cand.name, node.op_type, "INDEX_OUT_OF_RANGE", str(exc)))
                )
            except DmlShimError as exc:
                skipped.append((cand.index, SkippedNode(cand.name, node.op_type, "EXPORT_FAILED", str(exc))))

        skipped.sort(key=lambda entry: entry[0])
        result = ExportResult(out_dir, fl, tuple(exported), tuple(s for _, s in skipped))
        index = {
            "schema_version": INDEX_SCHEMA_VERSION,
            "tool": "dmlshim export",
            "model": model_label,
            "feature_level": fl.dml_name,
            "inputs": "given" if inputs is not None else {"generated": True, "seed": seed},
            "input_shapes": {k: list(np.shape(v)) for k, v in feeds.items()},
            "exported": [e.to_json() for e in exported],
            "skipped": [s.to_json() for s in result.skipped],
        }
        write_json(stage.path / INDEX_FILE, index)
        stage.commit(last=INDEX_FILE)
    log.info("exported %d node(s), skipped %d, to %s", len(exported), len(skipped), out_dir)
    return result
