"""DxDispatch's parser rules, checked on a model.json without dmlshim's reader (the test oracle for export).

The rules are those of DxDispatch 0.18 (microsoft/DirectML, folder DxDispatch/: its JSON model parser and
.npy reader), as stated in docs/replay.md and ../shared/docs/dxdispatch.md, plus DirectML's buffer rule:
every bound buffer holds exactly the bytes its tensor's Sizes and Strides address (DMLCalcBufferTensorSize,
rounded up to 4 bytes), computed here independently of dmlshim.dml.tensor.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

_PREFIX_TYPE = "DML_TENSOR_DATA_TYPE_"
_PREFIX_OP = "DML_OPERATOR_"
_TYPES: dict[str, np.dtype[Any]] = {
    "FLOAT32": np.dtype("<f4"),
    "FLOAT16": np.dtype("<f2"),
    "FLOAT64": np.dtype("<f8"),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
}
_GATHER_TENSORS = ("InputTensor", "IndicesTensor", "OutputTensor")
_SCATTER_TENSORS = ("InputTensor", "IndicesTensor", "UpdatesTensor", "OutputTensor")
_OPERATORS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "GATHER": (_GATHER_TENSORS, ("Axis", "IndexDimensions")),
    "GATHER_ELEMENTS": (_GATHER_TENSORS, ("Axis",)),
    "GATHER_ND": (_GATHER_TENSORS, ("InputDimensionCount", "IndicesDimensionCount")),
    "GATHER_ND1": (_GATHER_TENSORS, ("InputDimensionCount", "IndicesDimensionCount", "BatchDimensionCount")),
    "SCATTER": (_SCATTER_TENSORS, ("Axis",)),
    "SCATTER_ND": (_SCATTER_TENSORS, ("InputDimensionCount", "IndicesDimensionCount")),
}
_TENSOR_KEYS = {"DataType", "Sizes", "Strides", "Flags", "DimensionCount", "TotalTensorSizeInBytes"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    short = text[len(_PREFIX_TYPE) :] if text.startswith(_PREFIX_TYPE) else text
    return short if short in _TYPES else None


def dml_calc_buffer_tensor_size(type_name: str, sizes: list[int], strides: list[int] | None) -> int:
    """DMLCalcBufferTensorSize (DirectMLX.h): the bytes a buffer tensor addresses, rounded up to 4."""
    elements = (
        math.prod(sizes)
        if strides is None
        else sum((s - 1) * st for s, st in zip(sizes, strides, strict=False)) + 1
    )
    return (elements * _TYPES[type_name].itemsize + 3) & ~3


def _no_constants(token: str) -> Any:
    raise ValueError(f"JSON literal {token} (non-finite floats must be strings)")


def dxdispatch_rule_violations(model_path: Path) -> list[str]:
    """Every rule of ../shared/docs/dxdispatch.md the file breaks (empty when it follows them all)."""
    problems: list[str] = []
    try:
        doc = json.loads(model_path.read_text(encoding="utf-8"), parse_constant=_no_constants)
    except ValueError as exc:
        return [f"not DxDispatch JSON: {exc}"]
    for key, kind in (("resources", dict), ("dispatchables", dict), ("commands", list)):
        if not isinstance(doc.get(key), kind):
            problems.append(f"top-level {key!r} missing or not a {kind.__name__}")
    if problems:
        return problems
    folder = model_path.parent
    # dmlshim export's node folders (they carry a "dmlshim" provenance key) hold exactly the bytes each
    # tensor addresses; other files may bind larger buffers, as DirectML allows.
    exact = "dmlshim" in doc

    buffer_bytes: dict[str, int] = {}
    buffer_types: dict[str, str] = {}
    constant_counts: dict[str, int | None] = {}
    for name, res in doc["resources"].items():
        where = f"resources.{name}"
        values = res.get("initialValues")
        declared = _type_name(res.get("initialValuesDataType")) if "initialValuesDataType" in res else None
        if "initialValuesDataType" in res and declared is None:
            problems.append(f"{where}: unknown initialValuesDataType {res['initialValuesDataType']!r}")
        if isinstance(values, dict) and "sourcePath" in values:
            source = values["sourcePath"]
            path = folder / str(source)
            if not str(source).endswith(".npy"):
                problems.append(f"{where}: sourcePath {source!r} is not a .npy file")
            if os.path.isabs(str(source)) or ".." in Path(str(source)).parts:
                problems.append(f"{where}: sourcePath {source!r} leaves the model's folder")
            if not path.is_file():
                problems.append(f"{where}: sourcePath {source!r} does not exist")
                continue
            array = np.load(path, allow_pickle=False)
            if array.dtype == np.bool_:
                problems.append(f"{where}: bool .npy (DxDispatch reads it as INT8; save uint8)")
            if array.dtype.byteorder == ">":
                problems.append(f"{where}: big-endian .npy")
            if array.size == 0:
                problems.append(f"{where}: empty .npy")
            if array.ndim > 1 and not array.flags.c_contiguous:
                problems.append(f"{where}: .npy not in C order")
            if declared is not None and array.dtype.newbyteorder("<") != _TYPES[declared]:
                problems.append(f"{where}: .npy dtype {array.dtype} is not {declared}")
            buffer_types[name] = declared or next(
                (k for k, v in _TYPES.items() if v == array.dtype.newbyteorder("<")), "?"
            )
            buffer_bytes[name] = (array.nbytes + 3) & ~3
            constant_counts[name] = None
        else:
            if declared is None:
                problems.append(f"{where}: inline initialValues need initialValuesDataType")
                continue
            buffer_types[name] = declared
            integer = _TYPES[declared].kind in "iu"
            if isinstance(values, list):
                items: list[Any] = values
                count = len(values)
                constant_counts[name] = None
            elif isinstance(values, dict) and "valueCount" in values:
                count = values["valueCount"]
                if not _is_int(count) or count <= 0:
                    problems.append(f"{where}: valueCount {count!r} is not a positive integer")
                    continue
                items = [values[k] for k in ("value", "valueStart", "valueDelta") if k in values]
                constant_counts[name] = count if "value" in values else None
            else:
                problems.append(f"{where}: unknown initialValues form")
                continue
            for item in items:
                if integer and not _is_int(item):
                    problems.append(f"{where}: integer buffer value {item!r} is not a JSON integer")
                if not integer and not (
                    (isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item))
                    or item in ("nan", "inf", "-inf")
                ):
                    problems.append(f"{where}: float value {item!r} is neither finite nor a nan/inf string")
            buffer_bytes[name] = (count * _TYPES[declared].itemsize + 3) & ~3
        if "sizeInBytes" in res:
            if not _is_int(res["sizeInBytes"]):
                problems.append(f"{where}: sizeInBytes is not an integer")
            else:
                buffer_bytes[name] = max(buffer_bytes[name], res["sizeInBytes"])

    descs: dict[str, dict[str, Any]] = {}
    tensor_bytes: dict[tuple[str, str], int] = {}
    if len(doc["dispatchables"]) != 1:
        problems.append(f"expected one dispatchable, found {len(doc['dispatchables'])}")
    for name, disp in doc["dispatchables"].items():
        where = f"dispatchables.{name}"
        op = disp.get("type")
        short = op[len(_PREFIX_OP) :] if isinstance(op, str) and op.startswith(_PREFIX_OP) else op
        if short == "SCATTER_ELEMENTS":
            problems.append(f"{where}: DML_OPERATOR_SCATTER_ELEMENTS is unknown to DxDispatch")
            continue
        if short not in _OPERATORS:
            problems.append(f"{where}: operator type {op!r} is not accepted")
            continue
        tensors, uints = _OPERATORS[str(short)]
        desc = disp.get("desc")
        if not isinstance(desc, dict):
            problems.append(f"{where}: desc missing")
            continue
        for key in (*tensors, *uints):
            if key not in desc:
                problems.append(f"{where}.desc: required field {key} missing")
        for key in desc:
            if key not in tensors and key not in uints:
                problems.append(f"{where}.desc: unknown field {key}")
        for key in uints:
            value: Any = desc.get(key)
            if key in desc and not (_is_int(value) and 0 <= value <= 0xFFFFFFFF):
                problems.append(f"{where}.desc.{key}: {value!r} is not a plain non-negative JSON integer")
        for key in tensors:
            tensor = desc.get(key)
            if not isinstance(tensor, dict):
                continue
            twhere = f"{where}.desc.{key}"
            if set(tensor) - _TENSOR_KEYS:
                problems.append(f"{twhere}: unknown keys {sorted(set(tensor) - _TENSOR_KEYS)}")
            if _type_name(tensor.get("DataType")) is None:
                problems.append(f"{twhere}: DataType {tensor.get('DataType')!r} unknown")
            sizes = tensor.get("Sizes")
            if not isinstance(sizes, list) or not all(_is_int(s) and s > 0 for s in sizes):
                problems.append(f"{twhere}: Sizes {sizes!r} are not positive JSON integers")
                continue
            strides = tensor.get("Strides")
            if strides is not None and (
                not isinstance(strides, list)
                or len(strides) != len(sizes)
                or not all(_is_int(s) and s >= 0 for s in strides)
            ):
                problems.append(f"{twhere}: Strides {strides!r} malformed")
            if tensor.get("Flags", "NONE") not in ("NONE", "DML_TENSOR_FLAG_NONE"):
                problems.append(f"{twhere}: Flags {tensor.get('Flags')!r}")
            if "DimensionCount" in tensor and tensor["DimensionCount"] != len(sizes):
                problems.append(f"{twhere}: DimensionCount disagrees with Sizes")
            total = tensor.get("TotalTensorSizeInBytes")
            type_name = _type_name(tensor.get("DataType"))
            if total is not None and not _is_int(total):
                problems.append(f"{twhere}: TotalTensorSizeInBytes {total!r} is not an integer")
            elif type_name is not None and (strides is None or isinstance(strides, list)):
                computed = dml_calc_buffer_tensor_size(type_name, sizes, strides)
                if total is not None and (total < computed or (exact and total != computed)):
                    problems.append(
                        f"{twhere}: TotalTensorSizeInBytes {total} is not DMLCalcBufferTensorSize {computed}"
                    )
                tensor_bytes[(name, key)] = max(computed, total or 0)
        descs[name] = desc

    for i, cmd in enumerate(doc["commands"]):
        where = f"commands[{i}]"
        if cmd.get("type") == "dispatch":
            desc = descs.get(cmd.get("dispatchable", ""))
            if desc is None:
                problems.append(f"{where}: unknown or invalid dispatchable {cmd.get('dispatchable')!r}")
                continue
            bindings = cmd.get("bindings", {})
            tensor_fields = [k for k in desc if k.endswith("Tensor")]
            if set(bindings) != set(tensor_fields):
                problems.append(
                    f"{where}: bindings {sorted(bindings)} are not the desc's {sorted(tensor_fields)}"
                )
            for field_name, resource in bindings.items():
                if resource not in buffer_types:
                    problems.append(f"{where}.bindings.{field_name}: no resource {resource!r}")
                    continue
                tensor = desc.get(field_name, {})
                if _type_name(tensor.get("DataType")) != buffer_types[resource]:
                    problems.append(
                        f"{where}.bindings.{field_name}: buffer type {buffer_types[resource]} is not "
                        f"{tensor.get('DataType')}"
                    )
                needed = tensor_bytes.get((cmd.get("dispatchable", ""), field_name))
                if needed is not None and (
                    buffer_bytes[resource] < needed or (exact and buffer_bytes[resource] != needed)
                ):
                    problems.append(
                        f"{where}.bindings.{field_name}: buffer has {buffer_bytes[resource]} bytes, "
                        f"the tensor addresses {needed} (DMLCalcBufferTensorSize)"
                    )
                if field_name == "OutputTensor":
                    value_count = constant_counts.get(resource)
                    itemsize = _TYPES[buffer_types[resource]].itemsize
                    if value_count is None:
                        problems.append(
                            f"{where}: output buffer {resource!r} has no valueCount/value initializer"
                        )
                    elif _is_int(needed) and value_count != -(-needed // itemsize):
                        problems.append(
                            f"{where}: output valueCount {value_count} does not cover "
                            f"TotalTensorSizeInBytes {needed}"
                        )
        elif cmd.get("type") == "writeFile":
            if cmd.get("resource") not in buffer_types:
                problems.append(f"{where}: writeFile of unknown resource {cmd.get('resource')!r}")
            if not isinstance(cmd.get("targetPath"), str):
                problems.append(f"{where}: writeFile without targetPath")
            dims = cmd.get("dimensions")
            if not isinstance(dims, list) or not dims or not all(_is_int(d) and d > 0 for d in dims):
                problems.append(f"{where}: writeFile needs integer dimensions, got {dims!r}")
        elif cmd.get("type") != "print":
            problems.append(f"{where}: unknown command type {cmd.get('type')!r}")
    writes = [c for c in doc["commands"] if c.get("type") == "writeFile"]
    dispatches = [c for c in doc["commands"] if c.get("type") == "dispatch"]
    if len(writes) != 1 or len(dispatches) != 1:
        problems.append("expected one dispatch and one writeFile")
    elif writes[0].get("resource") != dispatches[0].get("bindings", {}).get("OutputTensor"):
        problems.append("the writeFile does not write the dispatch's output")
    else:
        out_sizes = descs.get(dispatches[0].get("dispatchable", ""), {}).get("OutputTensor", {}).get("Sizes")
        if writes[0].get("dimensions") != out_sizes:
            problems.append(f"writeFile dimensions {writes[0].get('dimensions')} are not OutputTensor.Sizes")
    return problems
