"""DirectML's own JSON form of operator descriptors, as DxDispatch reads it.

``operator_to_json`` writes the canonical form (full ``DML_`` names, every tensor field explicit except
``Strides`` when the tensor is packed); ``operator_from_json`` accepts every spelling DxDispatch accepts and
rejects anything malformed with a :class:`JsonFormError` naming the JSON path and the offending value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BadInputError
from .enums import DataType, OperatorType, TensorFlags
from .operators import DESC_TYPES, OperatorDesc
from .tensor import BufferTensorDesc, calc_buffer_tensor_size

__all__ = [
    "JsonFormError",
    "operator_from_json",
    "operator_to_json",
    "tensor_from_json",
    "tensor_to_json",
]

UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1

_TENSOR_KEYS = (
    "DataType",
    "Sizes",
    "Strides",
    "Flags",
    "DimensionCount",
    "TotalTensorSizeInBytes",
    "GuaranteedBaseOffsetAlignment",
)
_TENSOR_WRAPPER_KEYS = ("Type", "Desc")
_OPERATOR_KEYS = ("type", "desc", "executionFlags")


class JsonFormError(BadInputError):
    """A JSON document does not describe what it should; ``json_path`` says where.

    Attributes:
        json_path: the JSON path of the offending value, e.g. ``$.desc.IndicesTensor.Sizes[2]``.
    """

    def __init__(self, json_path: str, message: str, *, value: Any = None, **kwargs: Any) -> None:
        super().__init__(f"{json_path}: {message}", value=value, **kwargs)
        self.json_path = json_path


def describe(value: Any) -> str:
    """A short rendering of an offending JSON value for error messages."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    return repr(value)


def expect_object(obj: Any, path: str) -> Mapping[str, Any]:
    """``obj`` as a JSON object, or a JsonFormError."""
    if not isinstance(obj, Mapping):
        raise JsonFormError(path, f"expected a JSON object, got {describe(obj)}", value=obj)
    return obj


def expect_string(obj: Any, path: str) -> str:
    """``obj`` as a JSON string, or a JsonFormError."""
    if not isinstance(obj, str):
        raise JsonFormError(path, f"expected a JSON string, got {describe(obj)}", value=obj)
    return obj


def expect_uint(obj: Any, path: str, maximum: int = UINT32_MAX) -> int:
    """``obj`` as a non-negative JSON integer no larger than ``maximum``.

    DxDispatch reads UINT fields with rapidjson's integer accessors, so ``2.0`` (a JSON double) is
    refused even though it is integral; Python's ``json`` gives it to us as a float, which is refused too.
    """
    # bool is a subclass of int in Python, but true/false are not JSON numbers.
    if isinstance(obj, bool) or not isinstance(obj, int):
        raise JsonFormError(path, f"expected a non-negative JSON integer, got {describe(obj)}", value=obj)
    if not 0 <= obj <= maximum:
        raise JsonFormError(path, f"expected an integer in [0, {maximum}], got {obj}", value=obj)
    return obj


def expect_uint_list(obj: Any, path: str) -> tuple[int, ...]:
    """``obj`` as a JSON array of UINT32 values."""
    if not isinstance(obj, list):
        raise JsonFormError(path, f"expected a JSON array of integers, got {describe(obj)}", value=obj)
    return tuple(expect_uint(v, f"{path}[{i}]") for i, v in enumerate(obj))


def check_keys(
    obj: Mapping[str, Any], path: str, allowed: Sequence[str], required: Sequence[str] = ()
) -> None:
    """Refuse keys outside ``allowed`` and missing ``required`` keys.

    DxDispatch ignores unknown keys; we refuse them because a misspelt optional key (``Stride``) would
    otherwise silently describe a different tensor than the author meant.
    """
    for key in obj:
        if key not in allowed:
            raise JsonFormError(
                f"{path}.{key}", f"unknown key {key!r}; expected one of {', '.join(allowed)}", value=key
            )
    for key in required:
        if key not in obj:
            raise JsonFormError(f"{path}.{key}", f"missing required key {key!r}", value=None)


def tensor_to_json(tensor: BufferTensorDesc) -> dict[str, Any]:
    """A DML_BUFFER_TENSOR_DESC as DirectML-named JSON.

    ``Strides`` is omitted when it is null or equal to the packed strides (DirectML treats both alike);
    ``GuaranteedBaseOffsetAlignment`` is omitted when 0.

    Args:
        tensor: the buffer tensor desc.

    Returns:
        ``{"DataType", "Sizes", ["Strides"], "Flags", "DimensionCount", "TotalTensorSizeInBytes"}``.
    """
    out: dict[str, Any] = {"DataType": tensor.data_type.dml_name, "Sizes": list(tensor.sizes)}
    if tensor.strides is not None and not (len(tensor.strides) == len(tensor.sizes) and tensor.is_packed):
        out["Strides"] = list(tensor.strides)
    out["Flags"] = tensor.flags.dml_name
    out["DimensionCount"] = tensor.dimension_count
    out["TotalTensorSizeInBytes"] = int(tensor.total_tensor_size_in_bytes)
    if tensor.guaranteed_base_offset_alignment:
        out["GuaranteedBaseOffsetAlignment"] = int(tensor.guaranteed_base_offset_alignment)
    return out


def tensor_from_json(obj: Any, *, path: str = "$") -> BufferTensorDesc:
    """Read a tensor desc in any form DxDispatch accepts.

    Accepted: the buffer desc itself, or the DML_TENSOR_DESC wrapper ``{"Type": "DML_TENSOR_TYPE_BUFFER",
    "Desc": {...}}``. ``DataType`` and ``Flags`` with or without their ``DML_`` prefixes; ``Strides``,
    ``Flags``, ``DimensionCount``, ``TotalTensorSizeInBytes`` (0 means computed) and
    ``GuaranteedBaseOffsetAlignment`` optional; an empty or null ``Strides`` means packed.

    Args:
        obj: the parsed JSON value.
        path: the JSON path of ``obj``, used in error messages.

    Raises:
        JsonFormError: the value is not a well-formed tensor desc.
    """
    mapping = expect_object(obj, path)
    if "Desc" in mapping:
        check_keys(mapping, path, _TENSOR_WRAPPER_KEYS)
        if "Type" in mapping:
            kind = expect_string(mapping["Type"], f"{path}.Type")
            if kind not in ("DML_TENSOR_TYPE_BUFFER", "BUFFER"):
                raise JsonFormError(
                    f"{path}.Type", f"only DML_TENSOR_TYPE_BUFFER tensors exist, got {kind!r}", value=kind
                )
        return tensor_from_json(mapping["Desc"], path=f"{path}.Desc")

    check_keys(mapping, path, _TENSOR_KEYS, required=("DataType", "Sizes"))
    type_text = expect_string(mapping["DataType"], f"{path}.DataType")
    try:
        data_type = DataType.parse(type_text)
    except ValueError as exc:
        raise JsonFormError(f"{path}.DataType", str(exc), value=type_text) from exc

    sizes = expect_uint_list(mapping["Sizes"], f"{path}.Sizes")

    strides: tuple[int, ...] | None = None
    if mapping.get("Strides") is not None:
        strides = expect_uint_list(mapping["Strides"], f"{path}.Strides") or None
        if strides is not None and len(strides) != len(sizes):
            raise JsonFormError(
                f"{path}.Strides",
                f"Strides {list(strides)} has {len(strides)} entries but Sizes {list(sizes)} has "
                f"{len(sizes)}",
                value=list(strides),
            )

    flags = TensorFlags.NONE
    if "Flags" in mapping:
        flags = _flags_from_json(mapping["Flags"], f"{path}.Flags")

    if "DimensionCount" in mapping:
        count = expect_uint(mapping["DimensionCount"], f"{path}.DimensionCount")
        if count != len(sizes):
            raise JsonFormError(
                f"{path}.DimensionCount",
                f"DimensionCount {count} disagrees with Sizes {list(sizes)} ({len(sizes)} entries)",
                value=count,
            )

    total = -1
    if "TotalTensorSizeInBytes" in mapping:
        total = expect_uint(mapping["TotalTensorSizeInBytes"], f"{path}.TotalTensorSizeInBytes", UINT64_MAX)
        if total == 0:
            # DxDispatch fills in DMLCalcBufferTensorSize when the field is 0.
            total = calc_buffer_tensor_size(data_type, sizes, strides)

    alignment = 0
    if "GuaranteedBaseOffsetAlignment" in mapping:
        alignment = expect_uint(
            mapping["GuaranteedBaseOffsetAlignment"], f"{path}.GuaranteedBaseOffsetAlignment"
        )

    return BufferTensorDesc(
        data_type=data_type,
        sizes=sizes,
        strides=strides,
        flags=flags,
        total_tensor_size_in_bytes=total,
        guaranteed_base_offset_alignment=alignment,
    )


def _flags_from_json(obj: Any, path: str) -> TensorFlags:
    # DML_TENSOR_FLAGS is a bit set: a single name or an array of names, or-ed together.
    names = obj if isinstance(obj, list) else [obj]
    flags = TensorFlags.NONE
    for i, name in enumerate(names):
        item_path = f"{path}[{i}]" if isinstance(obj, list) else path
        text = expect_string(name, item_path)
        try:
            flags |= TensorFlags.parse(text)
        except ValueError as exc:
            raise JsonFormError(item_path, str(exc), value=text) from exc
    return flags


def operator_type_from_json(obj: Any, *, path: str = "$.type") -> OperatorType:
    """Read a gather/scatter DML_OPERATOR_TYPE name (with or without ``DML_OPERATOR_``).

    ``DML_OPERATOR_SCATTER_ELEMENTS`` is accepted although DxDispatch only knows ``DML_OPERATOR_SCATTER``.

    Raises:
        JsonFormError: not a string, or not one of the six gather/scatter operators.
    """
    text = expect_string(obj, path)
    try:
        op_type = OperatorType.parse(text)
    except ValueError:
        op_type = None
    if op_type is None or op_type not in DESC_TYPES:
        known = ", ".join(sorted({t.dml_name for t in DESC_TYPES}))
        raise JsonFormError(
            path, f"unknown or unsupported operator type {text!r}; dmlshim handles {known}", value=text
        )
    return op_type


def operator_to_json(desc: OperatorDesc) -> dict[str, Any]:
    """An operator descriptor as a DxDispatch dispatchable: ``{"type": ..., "desc": {...}}``.

    The scatter-elements family is written ``DML_OPERATOR_SCATTER``, the only name DxDispatch knows.
    Tensor fields come first, then UINT fields, in struct order.
    """
    fields: dict[str, Any] = {name: tensor_to_json(t) for name, t in desc.tensors().items()}
    fields.update(desc.uints())
    return {"type": desc.operator_type.dml_name, "desc": fields}


def operator_from_json(obj: Any, *, path: str = "$") -> OperatorDesc:
    """Read a DxDispatch operator dispatchable into a descriptor.

    Accepts ``executionFlags`` (ignored here: it changes how DirectML runs, not what it computes).
    Every tensor and UINT field of the struct is required, as in DxDispatch.

    Args:
        obj: the parsed JSON value, ``{"type": "DML_OPERATOR_...", "desc": {...}}``.
        path: the JSON path of ``obj``, used in error messages.

    Raises:
        JsonFormError: unknown operator type, unknown or missing field, non-integer UINT field, or a
            malformed tensor desc; the message names the JSON path and the offending value.
    """
    mapping = expect_object(obj, path)
    if "type" not in mapping:
        raise JsonFormError(f"{path}.type", "missing required key 'type'", value=None)
    # The type first: an HLSL or ONNX dispatchable should be reported as such, not by its first unknown key.
    op_type = operator_type_from_json(mapping["type"], path=f"{path}.type")
    check_keys(mapping, path, _OPERATOR_KEYS, required=("desc",))
    if "executionFlags" in mapping:
        _execution_flags_from_json(mapping["executionFlags"], f"{path}.executionFlags")
    cls = DESC_TYPES[op_type]
    desc_path = f"{path}.desc"
    fields = expect_object(mapping["desc"], desc_path)
    check_keys(
        fields, desc_path, cls.TENSOR_FIELDS + cls.UINT_FIELDS, required=cls.TENSOR_FIELDS + cls.UINT_FIELDS
    )
    tensors = {name: tensor_from_json(fields[name], path=f"{desc_path}.{name}") for name in cls.TENSOR_FIELDS}
    uints = {name: expect_uint(fields[name], f"{desc_path}.{name}") for name in cls.UINT_FIELDS}
    return cls.from_fields(tensors, uints)


_EXECUTION_FLAGS = (
    "NONE",
    "ALLOW_HALF_PRECISION_COMPUTATION",
    "DISABLE_META_COMMANDS",
    "DESCRIPTORS_VOLATILE",
)


def _execution_flags_from_json(obj: Any, path: str) -> tuple[str, ...]:
    names = obj if isinstance(obj, list) else [obj]
    out: list[str] = []
    for i, name in enumerate(names):
        item_path = f"{path}[{i}]" if isinstance(obj, list) else path
        text = expect_string(name, item_path)
        short = text[len("DML_EXECUTION_FLAG_") :] if text.startswith("DML_EXECUTION_FLAG_") else text
        if short not in _EXECUTION_FLAGS:
            raise JsonFormError(
                item_path,
                f"unknown DML_EXECUTION_FLAGS {text!r}; expected one of {', '.join(_EXECUTION_FLAGS)}",
                value=text,
            )
        out.append(short)
    return tuple(out)


def execution_flags_from_json(obj: Any, *, path: str = "$.executionFlags") -> tuple[str, ...]:
    """Read DML_EXECUTION_FLAGS (a name or an array of names, with or without the prefix).

    Returns:
        The short names, e.g. ``("DISABLE_META_COMMANDS",)``.

    Raises:
        JsonFormError: an unknown flag name.
    """
    return _execution_flags_from_json(obj, path)
