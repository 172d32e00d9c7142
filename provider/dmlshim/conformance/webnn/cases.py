"""The WebNN cases file: its data model, where it lives, and a loader that checks every case.

The cases (78, transcribed from the Web Platform Tests) ship with dmlshim as package data
(``dmlshim/conformance/data/webnn_wpt_cases.json``); ``$DMLSHIM_WEBNN_CASES`` names another file.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...dml.enums import DataType, FeatureLevel, OperatorType
from ...errors import BadInputError
from ...kernels import IndexMode

logger = logging.getLogger(__name__)

CASES_ENV_VAR = "DMLSHIM_WEBNN_CASES"
"""Environment variable naming the cases file; overrides the default location."""

FEATURE_LEVEL = FeatureLevel.FL_5_0
"""The level every case is validated and executed at: what onnxruntime-directml requires of a device."""

WEBNN_OPS: Mapping[str, OperatorType] = {
    "gatherElements": OperatorType.GATHER_ELEMENTS,
    "gatherND": OperatorType.GATHER_ND1,
    "scatterElements": OperatorType.SCATTER_ELEMENTS,
    "scatterND": OperatorType.SCATTER_ND,
}
"""The WebNN ops the cases file covers and the DirectML operator each one runs as."""

_SCATTER_OPS = frozenset({"scatterElements", "scatterND"})
_AXIS_OPS = frozenset({"gatherElements", "scatterElements"})

# The WebNN MLOperandDataType names a case may use; int4/uint4 have no numpy dtype and never occur here.
_WEBNN_DATA_TYPES: Mapping[str, DataType] = {
    "float32": DataType.FLOAT32,
    "float16": DataType.FLOAT16,
    "int64": DataType.INT64,
    "uint64": DataType.UINT64,
    "int32": DataType.INT32,
    "uint32": DataType.UINT32,
    "int8": DataType.INT8,
    "uint8": DataType.UINT8,
}
_WEBNN_INDEX_TYPES = frozenset({"int32", "uint32", "int64"})

CaseStatus = Literal["pass", "fail", "error"]


class WebnnCasesFileError(BadInputError):
    """The WebNN cases file is missing, unreadable, or not laid out as documented."""


class WebnnCaseError(BadInputError):
    """A case cannot be expressed as a DirectML operator (e.g. an axis WebNN itself would reject)."""


@dataclass(frozen=True)
class WebnnTensor:
    """One tensor of a case, as the file gives it: flat row-major data, a shape and a WebNN data type.

    Attributes:
        data: the elements in row-major order (Python numbers; NaN/Inf as floats).
        shape: the concrete shape.
        data_type: the WebNN data type name (``float32``, ``float16``, ``int8``, ``int32``, ``uint32``, ...).
        constant: the WPT case builds this operand as a constant (informational only).
    """

    data: tuple[float, ...]
    shape: tuple[int, ...]
    data_type: str
    constant: bool = False

    @property
    def dml_data_type(self) -> DataType:
        """The DML_TENSOR_DATA_TYPE of this tensor."""
        return _WEBNN_DATA_TYPES[self.data_type]

    def array(self) -> np.ndarray:
        """A fresh numpy array of ``shape`` and the data type's dtype.

        Float values are rounded once from the file's decimal (a double) to the target type, as a JS typed
        array does when the WPT harness fills its buffers.
        """
        dtype = self.dml_data_type.numpy_dtype
        if dtype.kind == "f":
            return np.array(self.data, dtype=np.float64).astype(dtype).reshape(self.shape)
        return np.array(self.data, dtype=dtype).reshape(self.shape)


@dataclass(frozen=True)
class WebnnCase:
    """One WebNN conformance case.

    Attributes:
        op: the WebNN op (``gatherElements``, ``gatherND``, ``scatterElements``, ``scatterND``).
        name: the WPT test name, unique within the file.
        input: the ``input`` operand.
        indices: the ``indices`` operand.
        updates: the ``updates`` operand (scatter ops only).
        axis: ``options.axis`` as given, None when omitted (WebNN then uses 0).
        expected: the expected output.
        note: the transcriber's note, if any (e.g. why an out-of-range index has a clamped expectation).
    """

    op: str
    name: str
    input: WebnnTensor
    indices: WebnnTensor
    updates: WebnnTensor | None
    axis: int | None
    expected: WebnnTensor
    note: str | None = None

    @property
    def dml_operator(self) -> OperatorType:
        """The DirectML operator this case runs as."""
        return WEBNN_OPS[self.op]


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case.

    Attributes:
        name: the case name.
        op: the WebNN op.
        status: ``pass`` (output equals the expected values bit for bit, NaN matching NaN), ``fail``
            (an output was produced and differs) or ``error`` (no output: the case could not be expressed,
            the descriptor was invalid, or the kernel refused an input such as an out-of-range index).
        index_mode: the out-of-range policy the case ran with.
        message: why the case failed or errored; empty on pass.
        error_type: the exception class name for ``error`` (e.g. ``IndexOutOfRangeError``), else None.
        descriptor: the DxDispatch dispatchable JSON of the descriptor, None if none could be built.
        duplicate_indices: scatter writes overwritten by a later write (0 for every WebNN case).
    """

    name: str
    op: str
    status: CaseStatus
    index_mode: IndexMode
    message: str = ""
    error_type: str | None = None
    descriptor: Mapping[str, Any] | None = field(default=None, hash=False)
    duplicate_indices: int = 0

    @property
    def passed(self) -> bool:
        """True when the status is ``pass``."""
        return self.status == "pass"


PACKAGED_CASES = Path(__file__).resolve().parents[1] / "data" / "webnn_wpt_cases.json"
"""The copy shipped with dmlshim (package data; the repository's conformance/ holds the same file)."""


def default_cases_path() -> Path:
    """Where :func:`load_cases` looks when given no path: ``$DMLSHIM_WEBNN_CASES`` if set, else the copy
    shipped with dmlshim (:data:`PACKAGED_CASES`)."""
    override = os.environ.get(CASES_ENV_VAR)
    return Path(override) if override else PACKAGED_CASES


def load_cases(path: str | os.PathLike[str] | None = None) -> list[WebnnCase]:
    """Read and check the WebNN cases file.

    Args:
        path: the JSON file; :func:`default_cases_path` when None.

    Returns:
        Every case, grouped by op in the file's order.

    Raises:
        WebnnCasesFileError: the file is absent, is not JSON, or a case is malformed (the message names
            the case and the offending key); also when the file's own ``counts`` disagree with its cases.
    """
    file = Path(path) if path is not None else default_cases_path()
    if not file.is_file():
        raise WebnnCasesFileError(
            f"WebNN cases file not found at {file}; pass a path or set ${CASES_ENV_VAR} "
            f"(dmlshim ships the cases at {PACKAGED_CASES})",
            path=str(file),
        )
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WebnnCasesFileError(f"cannot read WebNN cases: {exc}", path=str(file)) from exc

    groups = document.get("cases") if isinstance(document, dict) else None
    if not isinstance(groups, dict):
        raise WebnnCasesFileError("expected a top-level object with a 'cases' object", path=str(file))

    cases: list[WebnnCase] = []
    for op, entries in groups.items():
        if op not in WEBNN_OPS:
            raise WebnnCasesFileError(
                f"unknown op group {op!r}; expected one of {', '.join(WEBNN_OPS)}", path=str(file), value=op
            )
        if not isinstance(entries, list):
            raise WebnnCasesFileError(f"cases.{op} must be an array", path=str(file))
        for position, entry in enumerate(entries):
            try:
                cases.append(_parse_case(op, entry))
            except (KeyError, TypeError, ValueError) as exc:
                label = entry.get("name", f"#{position}") if isinstance(entry, dict) else f"#{position}"
                raise WebnnCasesFileError(
                    f"case {op}[{position}] ({label}) is malformed: {exc}", path=str(file)
                ) from exc

    names = Counter(case.name for case in cases)
    repeated = sorted(name for name, count in names.items() if count > 1)
    if repeated:
        raise WebnnCasesFileError(f"case names repeat: {repeated}", path=str(file), value=repeated)

    declared = document.get("counts")
    if isinstance(declared, dict):
        actual = Counter(case.op for case in cases)
        wrong = {op: (n, actual.get(op, 0)) for op, n in declared.items() if actual.get(op, 0) != n}
        if wrong:
            detail = ", ".join(f"{op}: declares {n}, holds {m}" for op, (n, m) in wrong.items())
            raise WebnnCasesFileError(f"'counts' disagrees with the cases ({detail})", path=str(file))

    logger.debug("loaded %d WebNN cases from %s", len(cases), file)
    return cases


def _parse_tensor(obj: Any, what: str) -> WebnnTensor:
    if not isinstance(obj, dict):
        raise TypeError(f"{what} must be an object")
    data_type = obj["dataType"]
    if data_type not in _WEBNN_DATA_TYPES:
        raise ValueError(f"{what}.dataType {data_type!r} is not one of {', '.join(_WEBNN_DATA_TYPES)}")
    shape = tuple(obj["shape"])
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"{what}.shape {list(shape)} must hold non-negative integers")
    data = obj["data"]
    if not isinstance(data, list) or len(data) != math.prod(shape):
        count = len(data) if isinstance(data, list) else "no"
        raise ValueError(f"{what}.data holds {count} values, shape {list(shape)} needs {math.prod(shape)}")
    dtype = _WEBNN_DATA_TYPES[data_type].numpy_dtype
    values: list[float] = []
    for i, value in enumerate(data):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"{what}.data[{i}] is not a number: {value!r}")
        if dtype.kind == "f":
            # Python's json reads NaN/Infinity literals; some transcriptions spell them as strings.
            values.append(float(value))
        else:
            if not isinstance(value, int):
                raise TypeError(f"{what}.data[{i}] = {value!r} is not an integer ({data_type})")
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise ValueError(f"{what}.data[{i}] = {value} does not fit {data_type}")
            values.append(value)
    return WebnnTensor(tuple(values), shape, data_type, bool(obj.get("constant", False)))


def _parse_case(op: str, entry: Any) -> WebnnCase:
    if not isinstance(entry, dict):
        raise TypeError("a case must be an object")
    if entry.get("op", op) != op:
        raise ValueError(f"'op' is {entry['op']!r} but the case sits under {op!r}")
    name = entry["name"]
    if not isinstance(name, str) or not name:
        raise ValueError("'name' must be a non-empty string")
    inputs = entry["inputs"]
    updates = _parse_tensor(inputs["updates"], "inputs.updates") if op in _SCATTER_OPS else None
    indices = _parse_tensor(inputs["indices"], "inputs.indices")
    if indices.data_type not in _WEBNN_INDEX_TYPES:
        raise ValueError(f"indices dataType {indices.data_type!r} is not int32, uint32 or int64")
    options = entry.get("options") or {}
    axis = options.get("axis")
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
        raise TypeError(f"options.axis must be an integer, got {axis!r}")
    return WebnnCase(
        op=op,
        name=name,
        input=_parse_tensor(inputs["input"], "inputs.input"),
        indices=indices,
        updates=updates,
        axis=axis,
        expected=_parse_tensor(entry["expected"], "expected"),
        note=entry.get("note"),
    )
