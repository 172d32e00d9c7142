"""Write one gather/scatter node as a DxDispatch model folder: model.json, inputs, expected output, README."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..dml.operators import OperatorDesc
from ..errors import BadInputError, DmlShimError
from ..fileio.files import write_npy, write_text
from ..kernels import IndexMode, KernelOptions, execute
from ..translate import InputBinding, NodeTranslation, Reinterpret, run_translation
from ..translate.plan import elem_type_name
from ..translate.runner import bind_input, onnx_duplicates
from .export_results import (
    DML_OUTPUT_FILE,
    EXPECTED_OUTPUT_FILE,
    MODEL_FILE,
    README_FILE,
    ExportedNode,
    PreparedInput,
)
from .model_file import single_operator_model

log = logging.getLogger(__name__)

__all__ = ["export_node", "prepare_input"]


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
    steps = _describe_steps(binding, source, prepared)
    tensor = binding.tensor
    if tensor.strides is not None and prepared.size > tensor.buffer_element_count:
        # DirectML reads only the span Strides reach (DMLCalcBufferTensorSize); a DxDispatch buffer
        # holds exactly those bytes, so the rest of the flat ONNX buffer is left out.
        flat_size = prepared.size
        prepared = np.ascontiguousarray(prepared.reshape(-1)[: tensor.buffer_element_count])
        steps = (
            *steps,
            f"buffer trimmed from {flat_size} to the {prepared.size} elements Sizes and Strides reach",
        )
    return PreparedInput(binding.binding, prepared, steps)


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
        *[
            f"Captured in:    the branch If {owner!r} took"
            if it is None
            else f"Captured in:    iteration {it} of {owner!r}"
            for owner, it in exported.iterations
        ],
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


def _inside(directory: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
    except ValueError:
        return False
    return True


def export_node(
    folder: str,
    t: NodeTranslation,
    arrays: Sequence[np.ndarray | None],
    onnx_output: np.ndarray | None,
    directory: Path,
    model_label: str,
    iterations: tuple[tuple[str, int | None], ...] = (),
    index_mode: IndexMode = IndexMode.ERROR,
) -> ExportedNode:
    """Write ``directory/folder`` for a node translated to DirectML (status ``dml``).

    Args:
        folder: the folder name (one plain path component).
        t: the node's translation for the captured shapes and types.
        arrays: the node's captured ONNX inputs.
        onnx_output: the node's output as onnxruntime computed it (None when not captured).
        directory: the export directory.
        model_label: how the README names the model.
        iterations: where a node inside control flow was captured (see :class:`ExportedNode`).
        index_mode: what the expected output does with an out-of-range index (``CLAMP`` writes
            dmlshim's stand-in for DirectML's undefined result, to observe what DirectML does).

    Raises:
        BadInputError: an input is missing or does not fit the translation, or ``folder`` would leave
            ``directory``.
        IndexOutOfRangeError: an index outside its dimension.
    """
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
    result = execute(
        desc, bound, KernelOptions(feature_level=t.feature_level, index_mode=index_mode, node=t.name)
    )
    expected = np.ascontiguousarray(result.output)

    matches = False
    if onnx_output is not None:
        try:
            ours = run_translation(t, list(arrays)).output
            matches = _same(ours, onnx_output)
        except DmlShimError as exc:
            log.warning("%s: could not run the translation for the onnxruntime check: %s", t.name, exc)

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
        duplicate_indices=onnx_duplicates(t, int(result.duplicate_indices)),
        matches_onnxruntime=matches,
        steps=tuple((p.binding, p.steps) for p in prepared),
        iterations=iterations,
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
                **({"captured_in": [list(i) for i in iterations]} if iterations else {}),
            }
        },
    )
    target.mkdir()
    model.save(target / MODEL_FILE)
    write_npy(target / EXPECTED_OUTPUT_FILE, expected)
    write_text(target / README_FILE, _readme(t, desc, prepared, exported, model_label))
    log.info("exported %s to %s", t.name, target)
    return exported
