"""The ``resources`` of a DxDispatch model: buffers and the four forms of their initial values.

Reading checks what DxDispatch would refuse and what would exhaust memory: declared sizes
(``sizeInBytes``, ``valueCount``) are checked against the memory limit before anything is allocated, and
``sourcePath`` files must be regular ``.npy`` files inside the model's folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
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
    expect_object,
    expect_string,
    expect_uint,
)
from ..errors import BadInputError, BadModelError, TooLargeError
from ..fileio.confined import confined_path
from ..fileio.reading import read_npy
from ..limits import check_bytes

__all__ = [
    "BufferResource",
    "ConstantValues",
    "InitialValues",
    "NpyFile",
    "SequenceValues",
    "ValueList",
    "resource_from_json",
]

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_RESOURCE_KEYS = ("initialValuesDataType", "initialValues", "sizeInBytes", "kind")

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


def _source_file(folder: Path, source: str, path: str) -> Path:
    """The ``sourcePath`` file, refused unless it is a ``.npy`` name inside the model's folder."""
    try:
        file = confined_path(folder, source, what="sourcePath", suffixes=(".npy",))
    except BadInputError as exc:
        raise JsonFormError(path, exc.message, value=source) from None
    real_folder = os.path.realpath(folder)
    if os.path.commonpath([real_folder, os.path.realpath(file)]) != real_folder:
        raise JsonFormError(
            path, f"sourcePath {source!r} is a link that leads outside the model's folder", value=source
        )
    return file


def _load_npy(file: Path, path: str) -> np.ndarray:
    try:
        array = read_npy(file, what=f"file {str(file)!r}")
    except TooLargeError:
        raise
    except BadInputError as exc:
        # Missing, not a regular file (a FIFO would block), or declaring more bytes than it holds.
        raise JsonFormError(path, exc.message, value=str(file)) from None
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
            # no copy when the array is already little-endian and contiguous (a memory-mapped weight of
            # the model: a 1 GiB embedding table was copied whole for its input.npy, past the memory limit)
            little = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
            values = NpyFile(source_path, np.ascontiguousarray(little))
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


def resource_from_json(obj: Any, path: str, base_dir: Path | None) -> BufferResource:
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
            file = _source_file(folder, source, f"{iv_path}.sourcePath")
            array = _load_npy(file, f"{iv_path}.sourcePath")
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
    counted = (
        f"valueCount {values.value_count} of " if isinstance(values, (ConstantValues, SequenceValues)) else ""
    )
    check_bytes(resource.initial_byte_count, what=f"{iv_path} ({counted}{data_type.dml_name})")
    if "sizeInBytes" in mapping:
        size = expect_uint(mapping["sizeInBytes"], f"{path}.sizeInBytes", UINT64_MAX)
        check_bytes(size, what=f"{path}.sizeInBytes {size}")
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
