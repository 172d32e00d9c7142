"""Execute a DxDispatch model file with dmlshim's kernels, the way DxDispatch runs it on DirectML.

Buffers are flat byte arrays typed only by their initial values. A dispatch reinterprets each bound buffer's
bytes as the tensor's DataType (Strides honoured), validates the descriptor at the requested feature level,
runs the kernel and writes the output tensor back into its buffer through its Strides. ``writeFile`` saves a
buffer as ``.npy`` in the buffer's type; ``print`` logs its values and returns the text.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..dml.enums import DEFAULT_FEATURE_LEVEL, DataType, FeatureLevel
from ..dml.json_form import JsonFormError
from ..dml.tensor import BufferTensorDesc
from ..dml.validate import check
from ..errors import BadInputError, DmlShimError
from ..fileio.confined import write_inside
from ..kernels import IndexMode, KernelOptions, execute
from ..resources import guard_resources
from .model_file import (
    BufferResource,
    DispatchCommand,
    DxDispatchModel,
    PrintCommand,
    WriteFileCommand,
    load_model_file,
)
from .values import NpyFile

log = logging.getLogger(__name__)

TARGET_SUFFIXES = (".npy",)
"""``writeFile`` targets dmlshim writes: ``.npy`` files (DxDispatch writes raw bytes for other names)."""

__all__ = [
    "DispatchRecord",
    "ReplayResult",
    "WrittenFile",
    "format_values",
    "initial_buffer",
    "model_source_files",
    "replay",
    "replay_model",
    "typed_buffer",
    "write_buffer_file",
]


@dataclass(frozen=True)
class WrittenFile:
    """One ``writeFile`` command's result.

    Attributes:
        resource: the buffer written.
        path: the ``.npy`` file (absolute).
        shape: the array's shape (``dimensions``, or the flat buffer length).
        data_type: the buffer's type, the ``.npy`` dtype.
    """

    resource: str
    path: Path
    shape: tuple[int, ...]
    data_type: DataType


@dataclass(frozen=True)
class DispatchRecord:
    """One ``dispatch`` command's result.

    Attributes:
        dispatchable: the dispatchable's name.
        output_resource: the buffer bound to OutputTensor.
        duplicate_indices: scatter writes overwritten by a later write (DirectML leaves the winner undefined).
    """

    dispatchable: str
    output_resource: str
    duplicate_indices: int


@dataclass(frozen=True)
class ReplayResult:
    """What replaying a model produced.

    Attributes:
        outputs: per resource bound as an OutputTensor, the last dispatch's output tensor (shape Sizes).
        buffers: every buffer's final contents as a flat array of its type (padding included).
        files: the ``.npy`` files written, in command order.
        dispatches: one record per dispatch, in command order.
        printed: the text of each ``print`` command, in command order.
        messages: one line per command, in command order, worded like DxDispatch's console output.
    """

    outputs: Mapping[str, np.ndarray] = field(default_factory=dict)
    buffers: Mapping[str, np.ndarray] = field(default_factory=dict)
    files: tuple[WrittenFile, ...] = ()
    dispatches: tuple[DispatchRecord, ...] = ()
    printed: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()


@guard_resources("replaying a DxDispatch model")
def replay(
    model_path: str | os.PathLike[str],
    *,
    output_path: str | os.PathLike[str] | None = None,
    feature_level: FeatureLevel = DEFAULT_FEATURE_LEVEL,
    index_mode: IndexMode = IndexMode.ERROR,
    overwrite: bool = False,
) -> ReplayResult:
    """Read a DxDispatch model file and run its commands with dmlshim's kernels.

    Args:
        model_path: the model JSON file.
        output_path: the folder ``writeFile`` target paths are relative to (created if missing); the
            current directory if None, as with ``dxdispatch --output_path``.
        feature_level: the DirectML feature level every descriptor is validated and executed at.
        index_mode: what to do with out-of-range indices (DirectML leaves the result undefined).
        overwrite: replace a file that already exists at a ``writeFile`` target (refused otherwise;
            dxdispatch.exe replaces it, dmlshim never replaces a file it did not write in this replay
            unless asked).

    Returns:
        The outputs, final buffers, files written and printed text.

    Raises:
        BadModelError: the file is not readable JSON.
        JsonFormError: the model is malformed, or a bound buffer is smaller than its tensor.
        InvalidDescriptorError: a descriptor breaks a DirectML rule at ``feature_level``.
        IndexOutOfRangeError: an index is out of range and ``index_mode`` is ERROR.
    """
    model = load_model_file(model_path)
    try:
        return replay_model(
            model,
            output_path=output_path,
            feature_level=feature_level,
            index_mode=index_mode,
            overwrite=overwrite,
        )
    except DmlShimError as exc:
        if exc.path is None:
            exc.path = str(model_path)
        raise


def replay_model(
    model: DxDispatchModel,
    *,
    output_path: str | os.PathLike[str] | None = None,
    feature_level: FeatureLevel = DEFAULT_FEATURE_LEVEL,
    index_mode: IndexMode = IndexMode.ERROR,
    overwrite: bool = False,
) -> ReplayResult:
    """Run an already parsed model; see :func:`replay`."""
    fl = FeatureLevel(feature_level)
    out_dir = Path(output_path) if output_path is not None else Path.cwd()
    buffers: dict[str, np.ndarray] = {name: initial_buffer(r) for name, r in model.resources.items()}
    types = {name: r.data_type for name, r in model.resources.items()}
    outputs: dict[str, np.ndarray] = {}
    files: list[WrittenFile] = []
    dispatches: list[DispatchRecord] = []
    printed: list[str] = []
    messages: list[str] = []
    sources = model_source_files(model)

    for i, command in enumerate(model.commands):
        path = f"$.commands[{i}]"
        if isinstance(command, DispatchCommand):
            record, output = _dispatch(model, command, buffers, path, fl, index_mode)
            dispatches.append(record)
            outputs[record.output_resource] = output
            note = (
                f" ({record.duplicate_indices} duplicate scatter write(s))"
                if record.duplicate_indices
                else ""
            )
            messages.append(f"Dispatch '{record.dispatchable}': done{note}")
        elif isinstance(command, WriteFileCommand):
            # A target this replay wrote before is its own to replace (two writeFile commands on one path).
            mine = overwrite or any(f.path == (out_dir / command.target_path).absolute() for f in files)
            written = write_buffer_file(
                command,
                buffers[command.resource],
                types[command.resource],
                out_dir,
                path,
                sources,
                overwrite=mine,
            )
            files.append(written)
            messages.append(f"Resource '{written.resource}' written to '{written.path}'")
        elif isinstance(command, PrintCommand):
            text = f"Resource '{command.resource}': " + format_values(
                typed_buffer(buffers[command.resource], types[command.resource])
            )
            log.info("%s", text)
            printed.append(text)
            messages.append(text)

    return ReplayResult(
        outputs=outputs,
        buffers={name: typed_buffer(buf, types[name]).copy() for name, buf in buffers.items()},
        files=tuple(files),
        dispatches=tuple(dispatches),
        printed=tuple(printed),
        messages=tuple(messages),
    )


def initial_buffer(resource: BufferResource) -> np.ndarray:
    """The buffer's bytes before any command runs: its initial values, zero-padded to its size."""
    buf = np.zeros(resource.buffer_size_in_bytes, dtype=np.uint8)
    data = np.ascontiguousarray(resource.values()).view(np.uint8)
    buf[: data.size] = data
    return buf


def typed_buffer(buf: np.ndarray, data_type: DataType) -> np.ndarray:
    """The whole byte buffer as elements of ``data_type`` (a trailing partial element is dropped)."""
    dtype = data_type.numpy_dtype
    count = buf.size // dtype.itemsize
    return buf[: count * dtype.itemsize].view(dtype)


def _tensor_window(buf: np.ndarray, tensor: BufferTensorDesc, resource: str, where: str) -> np.ndarray:
    """The elements a tensor may read or write in ``buf``, as a 1-D array of its type (a view)."""
    needed = tensor.total_tensor_size_in_bytes
    if buf.size < needed:
        # DirectML refuses a binding smaller than TotalTensorSizeInBytes.
        raise JsonFormError(
            where,
            f"buffer {resource!r} has {buf.size} bytes but the tensor needs TotalTensorSizeInBytes {needed}",
            value=buf.size,
        )
    dtype = tensor.data_type.numpy_dtype
    count = tensor.buffer_element_count
    return buf[: count * dtype.itemsize].view(dtype)


def _dispatch(
    model: DxDispatchModel,
    command: DispatchCommand,
    buffers: dict[str, np.ndarray],
    path: str,
    fl: FeatureLevel,
    index_mode: IndexMode,
) -> tuple[DispatchRecord, np.ndarray]:
    name = command.dispatchable
    desc = model.dispatchables[name].desc
    check(desc, fl, node=name)
    tensors = desc.tensors()
    inputs: dict[str, np.ndarray] = {}
    for field_name in desc.INPUT_TENSOR_FIELDS:
        resource = command.bindings[field_name]
        window = _tensor_window(
            buffers[resource], tensors[field_name], resource, f"{path}.bindings.{field_name}"
        )
        # A copy: a buffer bound as both input and output must be read as it was before the dispatch.
        inputs[field_name] = window.copy()
    out_tensor = tensors["OutputTensor"]
    out_resource = command.bindings["OutputTensor"]
    out_window = _tensor_window(
        buffers[out_resource], out_tensor, out_resource, f"{path}.bindings.OutputTensor"
    )

    result = execute(desc, inputs, KernelOptions(feature_level=fl, index_mode=index_mode, node=name))
    output = np.asarray(result.output)
    if output.shape != out_tensor.sizes:
        raise BadInputError(
            f"kernel returned shape {list(output.shape)}, OutputTensor.Sizes is {list(out_tensor.sizes)}",
            node=name,
            tensor="OutputTensor",
        )
    itemsize = out_window.dtype.itemsize
    target = np.lib.stride_tricks.as_strided(
        out_window,
        shape=out_tensor.sizes,
        strides=tuple(s * itemsize for s in out_tensor.effective_strides),
        writeable=True,
    )
    target[...] = output
    if result.duplicate_indices:
        log.warning(
            "Dispatch '%s': %d scatter write(s) overwritten by a later write to the same element; "
            "DirectML does not guarantee which write wins",
            name,
            result.duplicate_indices,
        )
    log.info("Dispatch '%s': %s at %s", name, desc.operator_type.dml_name, fl.dml_name)
    return DispatchRecord(name, out_resource, int(result.duplicate_indices)), output.copy()


def model_source_files(model: DxDispatchModel) -> tuple[Path, ...]:
    """The files the model was read from: the JSON file and its ``sourcePath`` arrays (never written)."""
    if model.source_path is None:
        return ()
    folder = Path(model.source_path).parent
    found = [Path(model.source_path)]
    for resource in model.resources.values():
        iv = resource.initial_values
        if isinstance(iv, NpyFile):
            found.append(folder / iv.source_path)
    return tuple(found)


def write_buffer_file(
    command: WriteFileCommand,
    buf: np.ndarray,
    data_type: DataType,
    out_dir: Path,
    path: str,
    sources: tuple[Path, ...] = (),
    *,
    overwrite: bool = False,
) -> WrittenFile:
    """Carry out one ``writeFile`` command on a buffer's bytes: an ``.npy`` file inside ``out_dir``
    (an existing file there is replaced only when ``overwrite``)."""
    flat = typed_buffer(buf, data_type)
    if command.dimensions is None:
        array = flat
    else:
        count = int(np.prod(command.dimensions, dtype=np.int64))
        if count > flat.size:
            raise JsonFormError(
                f"{path}.dimensions",
                f"dimensions {list(command.dimensions)} need {count} elements; buffer "
                f"{command.resource!r} holds {flat.size} {data_type.name} elements",
                value=list(command.dimensions),
            )
        array = flat[:count].reshape(command.dimensions)
    data = np.ascontiguousarray(array)
    # DxDispatch writes wherever targetPath points; dmlshim keeps every file inside --output-path.
    target = write_inside(
        out_dir,
        command.target_path,
        lambda handle: np.lib.format.write_array(handle, data, allow_pickle=False),
        what=f"{path}.targetPath",
        suffixes=TARGET_SUFFIXES,
        overwrite=overwrite,
        inputs=sources,
    ).absolute()
    log.info("Resource '%s' written to '%s'", command.resource, target)
    return WrittenFile(command.resource, target, tuple(array.shape), data_type)


def format_values(values: np.ndarray) -> str:
    """Values as DxDispatch's print shows them: comma-separated, floats with 6 significant digits.

    (DxDispatch prints INT8 values as characters; numbers are printed here, being what people compare.)
    """
    if values.dtype.kind == "f":
        return ", ".join(f"{float(v):.6g}" for v in values)
    return ", ".join(str(int(v)) for v in values)
