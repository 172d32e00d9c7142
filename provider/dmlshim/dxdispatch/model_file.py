"""Read and write DxDispatch model files restricted to the six gather/scatter operators.

A model is ``{"resources": {...}, "dispatchables": {...}, "commands": [...]}`` (see
``docs/dxdispatch.md``). Reading checks everything DxDispatch would refuse, plus a few things it lets
through silently (unknown keys, misspelt binding names), and names the JSON path of each problem.
Writing produces files DxDispatch 0.18 reads: DirectML names, JSON integers for integer types, non-finite
floats as the strings ``"nan"``, ``"inf"``, ``"-inf"``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..dml.enums import DataType
from ..dml.json_form import (
    UINT32_MAX,
    UINT64_MAX,
    JsonFormError,
    check_keys,
    describe,
    execution_flags_from_json,
    expect_object,
    expect_string,
    expect_uint,
    expect_uint_list,
    operator_from_json,
    operator_to_json,
)
from ..dml.operators import OperatorDesc
from ..errors import BadInputError, BadModelError
from ..files import confined_path, write_inside, write_text

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

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_RESOURCE_KEYS = ("initialValuesDataType", "initialValues", "sizeInBytes", "kind")
_TOP_LEVEL_KEYS = ("resources", "dispatchables", "commands")

Scalar = int | float


# --------------------------------------------------------------------------------------------------
# Initial values


@dataclass(frozen=True)
class ValueList:
    """``"initialValues": [v0, v1, ...]``."""

    values: tuple[Scalar, ...]


@dataclass(frozen=True)
class ConstantValues:
    """``"initialValues": {"valueCount": N, "value": v}``."""

    value_count: int
    value: Scalar


@dataclass(frozen=True)
class SequenceValues:
    """``"initialValues": {"valueCount": N, "valueStart": a, "valueDelta": d}``.

    Element i is the running sum ``a + d + ... + d`` computed in the buffer's type, as DxDispatch does.
    """

    value_count: int
    value_start: Scalar
    value_delta: Scalar


@dataclass(frozen=True)
class NpyFile:
    """``"initialValues": {"sourcePath": "x.npy"}``, relative to the model file's folder.

    ``array`` holds the file's contents: loaded when reading a model, written by ``DxDispatchModel.save``.
    """

    source_path: str
    array: np.ndarray | None = field(default=None, compare=False, repr=False)


InitialValues = ValueList | ConstantValues | SequenceValues | NpyFile
"""The four forms DxDispatch accepts for a buffer's ``initialValues``."""


def _scalar_to_json(value: Scalar) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _scalar_from_json(obj: Any, data_type: DataType, path: str) -> Scalar:
    """One element of an initial-values list, checked against the buffer's type."""
    dtype = data_type.numpy_dtype
    if data_type.is_integer:
        if isinstance(obj, bool) or not isinstance(obj, int):
            raise JsonFormError(
                path, f"expected a JSON integer for {data_type.dml_name}, got {describe(obj)}", value=obj
            )
        info = np.iinfo(dtype)
        if not info.min <= obj <= info.max:
            raise JsonFormError(
                path,
                f"{obj} is outside the range of {data_type.dml_name} [{info.min}, {info.max}]",
                value=obj,
            )
        return obj
    if isinstance(obj, str):
        if obj not in _NON_FINITE:
            raise JsonFormError(
                path, f'expected a number or one of "nan", "inf", "-inf", got {describe(obj)}', value=obj
            )
        return _NON_FINITE[obj]
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        raise JsonFormError(path, f"expected a JSON number, got {describe(obj)}", value=obj)
    value = float(obj)
    with np.errstate(over="ignore"):
        if math.isfinite(value) and not np.isfinite(np.array(value, dtype=dtype)):
            raise JsonFormError(path, f"{obj} overflows {data_type.dml_name}", value=obj)
    return value


def _data_type_from_json(obj: Any, path: str) -> DataType:
    text = expect_string(obj, path)
    try:
        data_type = DataType.parse(text)
        data_type.numpy_dtype  # noqa: B018 - raises for types no buffer can be initialised with
    except ValueError as exc:
        raise JsonFormError(path, f"unusable initialValuesDataType: {exc}", value=text) from exc
    return data_type


def _npy_data_type(dtype: np.dtype) -> DataType:
    # DxDispatch's .npy reader maps numpy bool ('|b1') to INT8.
    if dtype == np.bool_:
        return DataType.INT8
    return DataType.from_numpy(dtype)


def _load_npy(file: Path, path: str) -> np.ndarray:
    try:
        array = np.load(file, allow_pickle=False)
    except FileNotFoundError as exc:
        raise JsonFormError(path, f"file not found: {file}", value=str(file)) from exc
    except (OSError, ValueError) as exc:
        # allow_pickle=False turns object arrays (pickles) into a ValueError here.
        raise JsonFormError(path, f"cannot read {file} as a .npy array: {exc}", value=str(file)) from exc
    if not isinstance(array, np.ndarray):
        raise JsonFormError(path, f"{file} is an .npz archive, not a .npy array", value=str(file))
    if array.dtype.byteorder == ">":
        raise JsonFormError(
            path, f"{file} is big-endian; DxDispatch reads little-endian .npy only", value=str(file)
        )
    if array.ndim > 1 and not array.flags.c_contiguous:
        # DxDispatch copies the raw bytes, so a Fortran-order file would be read transposed.
        raise JsonFormError(path, f"{file} is stored in Fortran order; write it in C order", value=str(file))
    if array.size == 0:
        raise JsonFormError(
            path, f"{file} holds no elements; initialValues must be non-empty", value=str(file)
        )
    try:
        _npy_data_type(array.dtype)
    except ValueError as exc:
        raise JsonFormError(path, f"{file}: {exc}", value=str(array.dtype)) from exc
    return array


@dataclass(frozen=True)
class BufferResource:
    """One buffer of ``resources``: its element type, initial values and optional ``sizeInBytes``.

    Attributes:
        data_type: ``initialValuesDataType`` (for a ``.npy`` file, the file's type).
        initial_values: one of the four initializer forms.
        size_in_bytes: the explicit ``sizeInBytes``, or None for the initial values rounded up to 4 bytes.
    """

    data_type: DataType
    initial_values: InitialValues
    size_in_bytes: int | None = None

    @classmethod
    def from_array(
        cls,
        array: np.ndarray,
        *,
        source_path: str | None = None,
        size_in_bytes: int | None = None,
    ) -> BufferResource:
        """A buffer holding ``array``'s elements in C order, typed by its dtype.

        Args:
            array: the values; bool is stored as UINT8 (as the DML EP maps ONNX bool).
            source_path: write the values to this ``.npy`` file (relative to the model file) instead of
                inline.
            size_in_bytes: an explicit ``sizeInBytes`` (e.g. a TotalTensorSizeInBytes larger than the data).
        """
        arr = np.asarray(array)
        if arr.dtype == np.bool_:
            arr = arr.astype(np.uint8)
        data_type = DataType.from_numpy(arr.dtype)
        flat = np.ascontiguousarray(arr).reshape(-1)
        if flat.size == 0:
            raise BadInputError("a DxDispatch buffer needs at least one initial value", value=arr.shape)
        values: InitialValues
        if source_path is not None:
            values = NpyFile(source_path, np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"))))
        else:
            values = ValueList(tuple(flat.tolist()))
        return cls(data_type, values, size_in_bytes)

    @classmethod
    def zeros(
        cls, data_type: DataType, value_count: int, *, size_in_bytes: int | None = None
    ) -> BufferResource:
        """``{"valueCount": value_count, "value": 0}``: the initializer an output buffer needs."""
        zero: Scalar = 0 if data_type.is_integer else 0.0
        return cls(data_type, ConstantValues(value_count, zero), size_in_bytes)

    def values(self) -> np.ndarray:
        """The initial values as a 1-D array of ``data_type``.

        Raises:
            BadModelError: an ``NpyFile`` whose array was never loaded.
        """
        dtype = self.data_type.numpy_dtype
        iv = self.initial_values
        if isinstance(iv, ValueList):
            return np.array(iv.values, dtype=dtype)
        if isinstance(iv, ConstantValues):
            return np.full(iv.value_count, iv.value, dtype=dtype)
        if isinstance(iv, SequenceValues):
            return _sequence(dtype, iv.value_count, iv.value_start, iv.value_delta)
        if iv.array is None:
            raise BadModelError(f"the .npy file {iv.source_path!r} has not been loaded")
        return iv.array.reshape(-1).astype(dtype, copy=False)

    @property
    def initial_byte_count(self) -> int:
        """Bytes the initial values occupy."""
        iv = self.initial_values
        itemsize = self.data_type.numpy_dtype.itemsize
        if isinstance(iv, ValueList):
            return len(iv.values) * itemsize
        if isinstance(iv, (ConstantValues, SequenceValues)):
            return iv.value_count * itemsize
        return 0 if iv.array is None else int(iv.array.size) * itemsize

    @property
    def buffer_size_in_bytes(self) -> int:
        """``sizeInBytes`` if given, else the initial values' bytes rounded up to 4 (DxDispatch's rule)."""
        if self.size_in_bytes is not None:
            return self.size_in_bytes
        return (self.initial_byte_count + 3) & ~3

    def to_json(self) -> dict[str, Any]:
        """The resource as DxDispatch JSON (``initialValuesDataType`` always written)."""
        out: dict[str, Any] = {"initialValuesDataType": self.data_type.dml_name}
        iv = self.initial_values
        if isinstance(iv, ValueList):
            out["initialValues"] = [_scalar_to_json(v) for v in iv.values]
        elif isinstance(iv, ConstantValues):
            out["initialValues"] = {"valueCount": iv.value_count, "value": _scalar_to_json(iv.value)}
        elif isinstance(iv, SequenceValues):
            out["initialValues"] = {
                "valueCount": iv.value_count,
                "valueStart": _scalar_to_json(iv.value_start),
                "valueDelta": _scalar_to_json(iv.value_delta),
            }
        else:
            out["initialValues"] = {"sourcePath": iv.source_path}
        if self.size_in_bytes is not None:
            out["sizeInBytes"] = self.size_in_bytes
        return out


def _sequence(dtype: np.dtype, count: int, start: Scalar, delta: Scalar) -> np.ndarray:
    # DxDispatch adds valueDelta to a running value of the buffer's type, so float sums round at every
    # step and integer sums wrap; a cumulative sum in that dtype reproduces both.
    steps = np.empty(count, dtype=dtype)
    with np.errstate(over="ignore"):
        steps[:1] = np.array(start).astype(dtype)
        steps[1:] = np.array(delta).astype(dtype)
        return np.cumsum(steps, dtype=dtype)


def _resource_from_json(obj: Any, path: str, base_dir: Path | None) -> BufferResource:
    mapping = expect_object(obj, path)
    check_keys(mapping, path, _RESOURCE_KEYS, required=("initialValues",))
    if "kind" in mapping and expect_string(mapping["kind"], f"{path}.kind").lower() != "buffer":
        raise JsonFormError(f"{path}.kind", f"only buffer resources are supported, got {mapping['kind']!r}")
    declared: DataType | None = None
    if "initialValuesDataType" in mapping:
        declared = _data_type_from_json(mapping["initialValuesDataType"], f"{path}.initialValuesDataType")

    iv_path = f"{path}.initialValues"
    raw = mapping["initialValues"]
    values: InitialValues
    if isinstance(raw, list):
        data_type = _require_type(declared, path)
        if not raw:
            raise JsonFormError(iv_path, "initialValues must be non-empty", value=raw)
        values = ValueList(
            tuple(_scalar_from_json(v, data_type, f"{iv_path}[{i}]") for i, v in enumerate(raw))
        )
    elif isinstance(raw, Mapping):
        if "sourcePath" in raw:
            check_keys(raw, iv_path, ("sourcePath",))
            source = expect_string(raw["sourcePath"], f"{iv_path}.sourcePath")
            if not source.lower().endswith(".npy"):
                raise JsonFormError(
                    f"{iv_path}.sourcePath", f"only .npy files are supported, got {source!r}", value=source
                )
            folder = base_dir if base_dir is not None else Path.cwd()
            array = _load_npy(folder / source, f"{iv_path}.sourcePath")
            data_type = _npy_data_type(array.dtype)
            if declared is not None and declared != data_type:
                raise JsonFormError(
                    f"{path}.initialValuesDataType",
                    f"{declared.dml_name} does not match the .npy file's {data_type.dml_name}",
                    value=declared.dml_name,
                )
            if array.dtype == np.bool_:
                array = array.view(np.int8)
            values = NpyFile(source, array)
        elif "value" in raw:
            data_type = _require_type(declared, path)
            check_keys(raw, iv_path, ("valueCount", "value"), ("valueCount", "value"))
            values = ConstantValues(
                _value_count(raw["valueCount"], f"{iv_path}.valueCount"),
                _scalar_from_json(raw["value"], data_type, f"{iv_path}.value"),
            )
        elif "valueStart" in raw:
            data_type = _require_type(declared, path)
            check_keys(
                raw,
                iv_path,
                ("valueCount", "valueStart", "valueDelta"),
                ("valueCount", "valueStart", "valueDelta"),
            )
            values = SequenceValues(
                _value_count(raw["valueCount"], f"{iv_path}.valueCount"),
                _scalar_from_json(raw["valueStart"], data_type, f"{iv_path}.valueStart"),
                _scalar_from_json(raw["valueDelta"], data_type, f"{iv_path}.valueDelta"),
            )
        else:
            raise JsonFormError(
                iv_path, 'expected one of "value", "valueStart" or "sourcePath" in initialValues', value=raw
            )
    else:
        raise JsonFormError(iv_path, f"expected an array or an object, got {describe(raw)}", value=raw)

    size: int | None = None
    resource = BufferResource(data_type, values)
    if "sizeInBytes" in mapping:
        size = expect_uint(mapping["sizeInBytes"], f"{path}.sizeInBytes", UINT64_MAX)
        if size < resource.initial_byte_count:
            raise JsonFormError(
                f"{path}.sizeInBytes",
                f"sizeInBytes {size} is smaller than the {resource.initial_byte_count} bytes of "
                "initialValues",
                value=size,
            )
        resource = BufferResource(data_type, values, size)
    return resource


def _require_type(declared: DataType | None, path: str) -> DataType:
    if declared is None:
        raise JsonFormError(
            f"{path}.initialValuesDataType", "missing required key 'initialValuesDataType'", value=None
        )
    return declared


def _value_count(obj: Any, path: str) -> int:
    count = expect_uint(obj, path, UINT32_MAX)
    if count == 0:
        raise JsonFormError(path, "valueCount 0: initialValues must be non-empty", value=0)
    return count


# --------------------------------------------------------------------------------------------------
# Dispatchables and commands


@dataclass(frozen=True)
class Dispatchable:
    """A DirectML operator dispatchable: the descriptor and its optional ``executionFlags``."""

    desc: OperatorDesc
    execution_flags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"type": ..., "desc": {...}, ["executionFlags": ...]}``."""
        out = operator_to_json(self.desc)
        if self.execution_flags:
            flags = self.execution_flags
            out["executionFlags"] = flags[0] if len(flags) == 1 else list(flags)
        return out


@dataclass(frozen=True)
class DispatchCommand:
    """``{"type": "dispatch", "dispatchable": name, "bindings": {TensorField: resource}}``."""

    dispatchable: str
    bindings: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"type": "dispatch", "dispatchable": self.dispatchable, "bindings": dict(self.bindings)}


@dataclass(frozen=True)
class WriteFileCommand:
    """``{"type": "writeFile", "resource": name, "targetPath": file, "dimensions": [...]}``.

    Without ``dimensions`` the whole buffer (including padding) is written as a flat array.
    """

    resource: str
    target_path: str
    dimensions: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "writeFile", "resource": self.resource, "targetPath": self.target_path}
        if self.dimensions is not None:
            out["dimensions"] = list(self.dimensions)
        return out


@dataclass(frozen=True)
class PrintCommand:
    """``{"type": "print", "resource": name}``."""

    resource: str

    def to_json(self) -> dict[str, Any]:
        return {"type": "print", "resource": self.resource}


Command = DispatchCommand | WriteFileCommand | PrintCommand
"""A command of the ``commands`` array."""


def _command_from_json(obj: Any, path: str) -> Command:
    mapping = expect_object(obj, path)
    kind = expect_string(mapping.get("type"), f"{path}.type") if "type" in mapping else None
    if kind is None:
        raise JsonFormError(f"{path}.type", "missing required key 'type'", value=None)
    if kind == "dispatch":
        check_keys(mapping, path, ("type", "dispatchable", "bindings"), ("dispatchable", "bindings"))
        bindings_obj = expect_object(mapping["bindings"], f"{path}.bindings")
        bindings: dict[str, str] = {}
        for name, value in bindings_obj.items():
            bpath = f"{path}.bindings.{name}"
            if isinstance(value, Mapping):
                # DxDispatch's object form; only the plain whole-buffer binding is modelled here.
                check_keys(value, bpath, ("name",), ("name",))
                value = value["name"]
            bindings[name] = expect_string(value, bpath)
        return DispatchCommand(expect_string(mapping["dispatchable"], f"{path}.dispatchable"), bindings)
    if kind == "writeFile":
        check_keys(
            mapping, path, ("type", "resource", "targetPath", "dimensions"), ("resource", "targetPath")
        )
        dims = None
        if "dimensions" in mapping:
            dims = expect_uint_list(mapping["dimensions"], f"{path}.dimensions")
        target = expect_string(mapping["targetPath"], f"{path}.targetPath")
        try:
            confined_path(".", target, what="targetPath", suffixes=(".npy",))
        except BadInputError as exc:
            raise JsonFormError(f"{path}.targetPath", exc.message, value=target) from None
        return WriteFileCommand(expect_string(mapping["resource"], f"{path}.resource"), target, dims)
    if kind == "print":
        check_keys(mapping, path, ("type", "resource"), ("resource",))
        return PrintCommand(expect_string(mapping["resource"], f"{path}.resource"))
    raise JsonFormError(
        f"{path}.type", f"unknown command type {kind!r}; expected dispatch, writeFile or print", value=kind
    )


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

        ``sourcePath`` files must lie in the model's folder (see :func:`dmlshim.files.write_inside`).

        Returns:
            The path written.
        """
        target = Path(path)
        for name, resource in self.resources.items():
            iv = resource.initial_values
            if isinstance(iv, NpyFile):
                if iv.array is None:
                    raise BadInputError(f"resource {name!r}: no array to write to {iv.source_path!r}")
                arr = np.ascontiguousarray(iv.array)
                write_inside(
                    target.parent,
                    iv.source_path,
                    lambda h, a=arr: np.lib.format.write_array(h, a, allow_pickle=False),
                    what=f"resource {name!r} sourcePath",
                    suffixes=(".npy",),
                    overwrite=overwrite,
                )
        if not target.parent.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
        write_text(target, self.dumps(), overwrite=overwrite, what="DxDispatch model file")
        log.info("DxDispatch model written to %s", target)
        return target


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
        name: _resource_from_json(value, f"$.resources.{name}", folder)
        for name, value in expect_object(top["resources"], "$.resources").items()
    }
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
    commands = tuple(_command_from_json(c, f"$.commands[{i}]") for i, c in enumerate(commands_obj))
    metadata = {k: v for k, v in top.items() if k not in _TOP_LEVEL_KEYS}
    return DxDispatchModel(resources, dispatchables, commands, metadata)


def load_model_file(path: str | os.PathLike[str]) -> DxDispatchModel:
    """Read a DxDispatch model file (``sourcePath`` files resolved against its folder).

    Raises:
        BadModelError: the file cannot be read or is not JSON.
        JsonFormError: the JSON is not a valid gather/scatter model; ``path`` is set to the file.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadModelError(f"cannot read the DxDispatch model: {exc}", path=str(file)) from exc
    try:
        obj = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys)
    except ValueError as exc:
        raise BadModelError(f"not valid JSON: {exc}", path=str(file)) from exc
    try:
        model = model_from_json(obj, base_dir=file.parent)
    except JsonFormError as exc:
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
