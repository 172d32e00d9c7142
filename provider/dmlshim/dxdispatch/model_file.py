"""Read and write DxDispatch model files restricted to the six gather/scatter operators.

A model is ``{"resources": {...}, "dispatchables": {...}, "commands": [...]}`` (see
``docs/dxdispatch.md``). Reading checks everything DxDispatch would refuse, plus a few things it lets
through silently (unknown keys, misspelt binding names), and names the JSON path of each problem.
Writing produces files DxDispatch 0.18 reads: DirectML names, JSON integers for integer types, non-finite
floats as the strings ``"nan"``, ``"inf"``, ``"-inf"``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..dml.json_form import (
    JsonFormError,
    describe,
    execution_flags_from_json,
    expect_object,
    operator_from_json,
)
from ..dml.operators import OperatorDesc
from ..errors import BadInputError, BadModelError, DmlShimError
from ..fileio.confined import write_inside
from ..fileio.files import write_text
from ..fileio.reading import loads_json, read_text
from ..limits import check_bytes
from .commands import (
    Command,
    Dispatchable,
    DispatchCommand,
    PrintCommand,
    WriteFileCommand,
    command_from_json,
)
from .values import (
    BufferResource,
    ConstantValues,
    InitialValues,
    NpyFile,
    SequenceValues,
    ValueList,
    resource_from_json,
)

log = logging.getLogger(__name__)

__all__ = [
    "BufferResource",
    "Command",
    "ConstantValues",
    "DispatchCommand",
    "Dispatchable",
    "DxDispatchModel",
    "InitialValues",
    "NpyFile",
    "PrintCommand",
    "SequenceValues",
    "ValueList",
    "WriteFileCommand",
    "load_model_file",
    "model_from_json",
    "single_operator_model",
    "write_model_file",
]

_TOP_LEVEL_KEYS = ("resources", "dispatchables", "commands")


# --------------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class DxDispatchModel:
    """A DxDispatch model file.

    Attributes:
        resources: buffers by name.
        dispatchables: operators by name.
        commands: run in order.
        metadata: extra top-level keys (DxDispatch ignores them; useful for provenance and comments).
        source_path: the file this model was read from, if any.
    """

    resources: Mapping[str, BufferResource]
    dispatchables: Mapping[str, Dispatchable]
    commands: tuple[Command, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source_path: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "commands", tuple(self.commands))
        for key in self.metadata:
            if key in _TOP_LEVEL_KEYS:
                raise BadInputError(f"metadata key {key!r} would overwrite a DxDispatch member", value=key)
        _check_references(self)

    def to_json(self) -> dict[str, Any]:
        """The model as a JSON-ready dict (metadata keys first, then the three members)."""
        out: dict[str, Any] = dict(self.metadata)
        out["resources"] = {name: r.to_json() for name, r in self.resources.items()}
        out["dispatchables"] = {name: d.to_json() for name, d in self.dispatchables.items()}
        out["commands"] = [c.to_json() for c in self.commands]
        return out

    def dumps(self) -> str:
        """The model as JSON text: two-space indentation, arrays of numbers on one line, no NaN literals."""
        return _dumps(self.to_json(), 0) + "\n"

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = True) -> Path:
        """Write the model to ``path`` and every ``NpyFile`` array beside it, each atomically.

        ``sourcePath`` files must lie in the model's folder
        (see :func:`dmlshim.fileio.confined.write_inside`).

        Returns:
            The path written.
        """
        target = Path(path)
        for name, resource in self.resources.items():
            iv = resource.initial_values
            if isinstance(iv, NpyFile):
                if iv.array is None:
                    raise BadInputError(f"resource {name!r}: no array to write to {iv.source_path!r}")
                write_inside(
                    target.parent,
                    iv.source_path,
                    functools.partial(_write_npy, np.ascontiguousarray(iv.array)),
                    what=f"resource {name!r} sourcePath",
                    suffixes=(".npy",),
                    overwrite=overwrite,
                )
        if not target.parent.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
        write_text(target, self.dumps(), overwrite=overwrite, what="DxDispatch model file")
        log.info("DxDispatch model written to %s", target)
        return target


def _write_npy(array: np.ndarray, handle: BinaryIO) -> None:
    np.lib.format.write_array(handle, array, allow_pickle=False)


def _dumps(obj: Any, level: int) -> str:
    pad = "  " * (level + 1)
    if isinstance(obj, Mapping):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(str(k))}: {_dumps(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(obj, list) and any(isinstance(v, (Mapping, list)) for v in obj):
        items = [f"{pad}{_dumps(v, level + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"
    return json.dumps(obj, allow_nan=False, separators=(", ", ": "))


def _check_references(model: DxDispatchModel) -> None:
    """Commands must name existing dispatchables and resources, and bind every tensor by its field name."""
    for i, command in enumerate(model.commands):
        path = f"$.commands[{i}]"
        if isinstance(command, DispatchCommand):
            if command.dispatchable not in model.dispatchables:
                raise JsonFormError(
                    f"{path}.dispatchable",
                    f"no dispatchable named {command.dispatchable!r}",
                    value=command.dispatchable,
                )
            desc = model.dispatchables[command.dispatchable].desc
            for name, resource in command.bindings.items():
                # DxDispatch silently ignores a binding whose name is not a tensor field; the tensor then
                # surfaces later as an unbound-tensor DirectML error far from the typo. Refuse it here.
                if name not in desc.TENSOR_FIELDS:
                    raise JsonFormError(
                        f"{path}.bindings.{name}",
                        f"{name!r} is not a tensor of {desc.operator_type.dml_name}; "
                        f"expected {', '.join(desc.TENSOR_FIELDS)}",
                        value=name,
                    )
                if resource not in model.resources:
                    raise JsonFormError(
                        f"{path}.bindings.{name}", f"no resource named {resource!r}", value=resource
                    )
            for name in desc.TENSOR_FIELDS:
                if name not in command.bindings:
                    raise JsonFormError(
                        f"{path}.bindings.{name}", f"{name} is not bound to a resource", value=None
                    )
        elif command.resource not in model.resources:
            raise JsonFormError(
                f"{path}.resource", f"no resource named {command.resource!r}", value=command.resource
            )


def _reject_constant(token: str) -> float:
    # Python's json accepts NaN/Infinity literals; rapidjson (DxDispatch) does not.
    raise ValueError(
        f'{token} is not valid JSON; write the string "{token.lower().replace("infinity", "inf")}"'
    )


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def model_from_json(obj: Any, *, base_dir: str | os.PathLike[str] | None = None) -> DxDispatchModel:
    """Build a model from parsed JSON.

    Args:
        obj: the parsed JSON document.
        base_dir: the folder ``sourcePath`` files are relative to (the model file's folder); CWD if None.

    Raises:
        JsonFormError: any malformed part, named by its JSON path.
    """
    folder = Path(base_dir) if base_dir is not None else None
    top = expect_object(obj, "$")
    for key in _TOP_LEVEL_KEYS:
        if key not in top:
            raise JsonFormError(f"$.{key}", f"missing required key {key!r}", value=None)
    resources = {
        name: resource_from_json(value, f"$.resources.{name}", folder)
        for name, value in expect_object(top["resources"], "$.resources").items()
    }
    # Replaying allocates every buffer at once: their sum must fit, not just each one.
    check_bytes(
        sum(r.buffer_size_in_bytes for r in resources.values()),
        what=f"the {len(resources)} buffers of $.resources together",
    )
    dispatchables: dict[str, Dispatchable] = {}
    for name, value in expect_object(top["dispatchables"], "$.dispatchables").items():
        path = f"$.dispatchables.{name}"
        desc = operator_from_json(value, path=path)
        flags: tuple[str, ...] = ()
        if "executionFlags" in value:
            flags = execution_flags_from_json(value["executionFlags"], path=f"{path}.executionFlags")
        dispatchables[name] = Dispatchable(desc, flags)
    commands_obj = top["commands"]
    if not isinstance(commands_obj, list):
        raise JsonFormError(
            "$.commands", f"expected an array, got {describe(commands_obj)}", value=commands_obj
        )
    commands = tuple(command_from_json(c, f"$.commands[{i}]") for i, c in enumerate(commands_obj))
    metadata = {k: v for k, v in top.items() if k not in _TOP_LEVEL_KEYS}
    return DxDispatchModel(resources, dispatchables, commands, metadata)


def load_model_file(path: str | os.PathLike[str]) -> DxDispatchModel:
    """Read a DxDispatch model file (``sourcePath`` files resolved against its folder).

    Raises:
        BadModelError: the file cannot be read or is not JSON.
        JsonFormError: the JSON is not a valid gather/scatter model; ``path`` is set to the file.
    """
    file = Path(path)
    text = read_text(file, what="DxDispatch model", error=BadModelError)
    obj = loads_json(
        text,
        what="DxDispatch model",
        path=str(file),
        error=BadModelError,
        parse_constant=_reject_constant,
        object_pairs_hook=_no_duplicate_keys,
    )
    try:
        model = model_from_json(obj, base_dir=file.parent)
    except DmlShimError as exc:
        if exc.path is None or isinstance(exc, JsonFormError):
            exc.path = str(file)
        raise
    object.__setattr__(model, "source_path", file)
    log.debug(
        "read %s: %d resources, %d dispatchables, %d commands",
        file,
        len(model.resources),
        len(model.dispatchables),
        len(model.commands),
    )
    return model


def write_model_file(model: DxDispatchModel, path: str | os.PathLike[str]) -> Path:
    """Write ``model`` to ``path`` (and its ``.npy`` files beside it); same as ``model.save(path)``."""
    return model.save(path)


# --------------------------------------------------------------------------------------------------
# Building a model for one operator

RESOURCE_NAMES: Mapping[str, str] = {
    "InputTensor": "input",
    "IndicesTensor": "indices",
    "UpdatesTensor": "updates",
    "OutputTensor": "output",
}
"""The resource name ``single_operator_model`` gives each bound tensor."""


def single_operator_model(
    desc: OperatorDesc,
    inputs: Mapping[str, np.ndarray],
    *,
    dispatchable: str = "op",
    output_file: str = "output.npy",
    npy_inputs: bool = False,
    print_output: bool = False,
    execution_flags: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
) -> DxDispatchModel:
    """A model that dispatches ``desc`` once on ``inputs`` and writes the output to ``output_file``.

    Resources are named ``input``, ``indices``, ``updates`` and ``output``; the output buffer starts as zeros
    and is written with ``dimensions`` = OutputTensor.Sizes.

    Args:
        desc: the operator.
        inputs: arrays by binding name (``InputTensor``, ...): either packed with the tensor's element count
            or the flat buffer a strided tensor reads; dtype must be the tensor's DataType (bool for UINT8).
        dispatchable: the dispatchable's name.
        output_file: ``targetPath`` of the writeFile command.
        npy_inputs: store each input as ``<resource>.npy`` beside the model instead of inline.
        print_output: add a print command for the output.
        execution_flags: e.g. ``("DISABLE_META_COMMANDS",)``.
        metadata: extra top-level keys (provenance).

    Raises:
        BadInputError: a missing input, or an input whose dtype or size does not fit its tensor.
    """
    tensors = desc.tensors()
    resources: dict[str, BufferResource] = {}
    bindings: dict[str, str] = {}
    for name in desc.INPUT_TENSOR_FIELDS:
        tensor = tensors[name]
        if name not in inputs:
            raise BadInputError(f"no array given for {name}", tensor=name)
        arr = np.asarray(inputs[name])
        if arr.dtype == np.bool_:
            arr = arr.astype(np.uint8)
        if arr.dtype != tensor.data_type.numpy_dtype:
            raise BadInputError(
                f"array dtype {arr.dtype} does not match {tensor.data_type.dml_name}",
                tensor=name,
                value=str(arr.dtype),
            )
        if arr.size not in (tensor.element_count, tensor.buffer_element_count):
            raise BadInputError(
                f"array has {arr.size} elements; the tensor needs {tensor.buffer_element_count}",
                tensor=name,
                value=arr.shape,
            )
        resource = RESOURCE_NAMES[name]
        needed = tensor.total_tensor_size_in_bytes
        size = needed if needed > ((arr.nbytes + 3) & ~3) else None
        resources[resource] = BufferResource.from_array(
            arr, source_path=f"{resource}.npy" if npy_inputs else None, size_in_bytes=size
        )
        bindings[name] = resource
    out = tensors["OutputTensor"]
    itemsize = out.data_type.numpy_dtype.itemsize
    count = max(1, -(-out.total_tensor_size_in_bytes // itemsize))
    resources["output"] = BufferResource.zeros(out.data_type, count)
    bindings["OutputTensor"] = "output"
    commands: list[Command] = [
        DispatchCommand(dispatchable, bindings),
        WriteFileCommand("output", output_file, tuple(out.sizes)),
    ]
    if print_output:
        commands.append(PrintCommand("output"))
    return DxDispatchModel(
        resources,
        {dispatchable: Dispatchable(desc, tuple(execution_flags))},
        tuple(commands),
        dict(metadata or {}),
    )
