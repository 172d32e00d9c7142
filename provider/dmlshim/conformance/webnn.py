"""The WebNN conformance cases (transcribed from the Web Platform Tests) run at the DirectML level.

Each case of ``webnn_wpt_cases.json`` becomes one DirectML operator descriptor, built the way onnxruntime's
DirectML execution provider builds descriptors for the matching ONNX op (right-aligned Sizes, the same
DimensionCount rule), with the case's index type kept as given (UINT32, INT32 or INT64). The descriptor is
validated at DML_FEATURE_LEVEL_5_0, written to DxDispatch's JSON form, read back from that JSON (so what runs
is exactly what a replay would run), executed by :mod:`dmlshim.kernels` and compared bit for bit with the
case's expected values.

WebNN op -> DirectML operator:

========================  =============================  ==============================
WebNN                     DirectML                       DimensionCount
========================  =============================  ==============================
gatherElements            DML_OPERATOR_GATHER_ELEMENTS   rank(input)
gatherND                  DML_OPERATOR_GATHER_ND1 (0)    max(rank(input), rank(indices), rank(output))
scatterElements           DML_OPERATOR_SCATTER           max(rank(input), 4)
scatterND                 DML_OPERATOR_SCATTER_ND        max(rank(input), rank(indices), rank(updates))
========================  =============================  ==============================

Out-of-range indices: WebNN's expected values assume they are clamped, whereas dmlshim's default
(``IndexMode.ERROR``) follows ONNX and refuses them; run with ``IndexMode.CLAMP`` to reproduce WebNN.

The cases file is looked up at ``$DMLSHIM_WEBNN_CASES`` if set, else at
``<repository>/../shared/conformance/webnn_wpt_cases.json``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..dml.enums import DataType, FeatureLevel, OperatorType
from ..dml.json_form import operator_from_json, operator_to_json
from ..dml.operators import (
    GatherElementsDesc,
    GatherNd1Desc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
)
from ..dml.tensor import BufferTensorDesc, right_align
from ..dml.validate import check
from ..errors import BadInputError, DmlShimError
from ..kernels import IndexMode, KernelOptions, execute

__all__ = [
    "CASES_ENV_VAR",
    "FEATURE_LEVEL",
    "WEBNN_OPS",
    "CaseResult",
    "CaseStatus",
    "WebnnCase",
    "WebnnCaseError",
    "WebnnCasesFileError",
    "WebnnTensor",
    "build_descriptor",
    "case_inputs",
    "compare_exact",
    "default_cases_path",
    "execute_case",
    "load_cases",
    "run_all",
    "run_case",
    "totals",
]

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


def default_cases_path() -> Path:
    """Where :func:`load_cases` looks when given no path.

    Returns:
        ``$DMLSHIM_WEBNN_CASES`` if set; else the first existing
        ``../shared/conformance/webnn_wpt_cases.json`` beside the current directory (a checkout's root) or
        beside the checkout this package is installed from in editable mode; else the first of those.
    """
    override = os.environ.get(CASES_ENV_VAR)
    if override:
        return Path(override)
    relative = Path("shared") / "conformance" / "webnn_wpt_cases.json"
    # A regular (non-editable) install lives in site-packages, far from the checkout: look from the
    # working directory first.
    candidates = [Path.cwd().parent / relative, Path(__file__).resolve().parents[3].parent / relative]
    return next((c for c in candidates if c.is_file()), candidates[0])


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
            "(it lives in the shared folder beside the repository: shared/conformance/webnn_wpt_cases.json)",
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


def _buffer(
    tensor: WebnnTensor, dimension_count: int, shape: Sequence[int] | None = None
) -> BufferTensorDesc:
    sizes = right_align(tensor.shape if shape is None else shape, dimension_count)
    return BufferTensorDesc(tensor.dml_data_type, sizes)


def _webnn_axis(case: WebnnCase, rank: int) -> int:
    # MLGatherOptions/MLScatterOptions declare axis as "[EnforceRange] unsigned long axis = 0": a negative
    # value is a TypeError in WebNN (no Python-style wrap), and axis >= rank is rejected by the builder.
    axis = 0 if case.axis is None else case.axis
    if not 0 <= axis < rank:
        raise WebnnCaseError(
            f"options.axis {axis} is outside [0, {rank}): WebNN's axis is an unsigned long below the input "
            "rank, so a WebNN graph builder rejects this case",
            node=case.name,
            op_type=case.op,
            value=axis,
        )
    return axis


def build_descriptor(case: WebnnCase) -> OperatorDesc:
    """The DirectML descriptor for a case, built as the DML EP builds it for the matching ONNX op.

    Sizes are the case's shapes right-aligned into one DimensionCount (see the module docstring), with
    no Strides; the index tensor keeps the case's type; an omitted axis is 0 and the scatter axis is
    shifted by the padding.

    Raises:
        WebnnCaseError: the case's axis is not one WebNN accepts, or a scatter case has no updates.
    """
    r = len(case.input.shape)
    q = len(case.indices.shape)
    if case.op == "gatherElements":
        axis = _webnn_axis(case, r)
        d = r
        return GatherElementsDesc(
            input_tensor=_buffer(case.input, d),
            indices_tensor=_buffer(case.indices, d),
            output_tensor=_buffer(case.input, d, case.indices.shape),
            axis=axis,
        )
    if case.op == "gatherND":
        # WebNN gatherND: output = indices.shape[:-1] + input.shape[indices.shape[-1]:].
        tuple_size = case.indices.shape[-1] if q else 0
        out_shape = case.indices.shape[:-1] + case.input.shape[tuple_size:]
        d = max(r, q, len(out_shape))
        return GatherNd1Desc(
            input_tensor=_buffer(case.input, d),
            indices_tensor=_buffer(case.indices, d),
            output_tensor=_buffer(case.input, d, out_shape),
            input_dimension_count=r,
            indices_dimension_count=q,
            batch_dimension_count=0,
        )
    if case.updates is None:
        raise WebnnCaseError("a scatter case needs an updates operand", node=case.name, op_type=case.op)
    if case.op == "scatterElements":
        axis = _webnn_axis(case, r)
        # The DML EP pads only the scatter-elements family to at least 4 dimensions.
        d = max(r, 4)
        return ScatterDesc(
            input_tensor=_buffer(case.input, d),
            indices_tensor=_buffer(case.indices, d),
            updates_tensor=_buffer(case.updates, d),
            output_tensor=_buffer(case.input, d),
            axis=axis + (d - r),
        )
    d = max(r, q, len(case.updates.shape))
    return ScatterNdDesc(
        input_tensor=_buffer(case.input, d),
        indices_tensor=_buffer(case.indices, d),
        updates_tensor=_buffer(case.updates, d),
        output_tensor=_buffer(case.input, d),
        input_dimension_count=r,
        indices_dimension_count=q,
    )


def case_inputs(case: WebnnCase, desc: OperatorDesc) -> dict[str, np.ndarray]:
    """The case's operands as packed arrays of the descriptor's Sizes, keyed by DirectML binding name."""
    tensors = desc.tensors()
    operands = {"InputTensor": case.input, "IndicesTensor": case.indices}
    if case.updates is not None:
        operands["UpdatesTensor"] = case.updates
    return {name: t.array().reshape(tensors[name].sizes) for name, t in operands.items()}


def execute_case(case: WebnnCase, index_mode: IndexMode = IndexMode.ERROR) -> np.ndarray:
    """Build, validate and execute a case; the output in the expected (WebNN) shape.

    The descriptor executed is the one read back from its DxDispatch JSON, so the run is what a replay
    of that JSON would compute.

    Args:
        case: the case.
        index_mode: the out-of-range index policy of the kernels.

    Returns:
        The output array, reshaped from the descriptor's padded Sizes to the case's expected shape.

    Raises:
        WebnnCaseError: the case cannot be expressed.
        InvalidDescriptorError: the descriptor breaks a DirectML rule at FL 5_0.
        IndexOutOfRangeError: ``IndexMode.ERROR`` and an index is outside its dimension.
    """
    output, _ = _execute(case, index_mode)
    return output


def _execute(case: WebnnCase, index_mode: IndexMode) -> tuple[np.ndarray, int]:
    desc = build_descriptor(case)
    check(desc, FEATURE_LEVEL, node=case.name, op_type=case.op)
    replayed = operator_from_json(operator_to_json(desc))
    options = KernelOptions(feature_level=FEATURE_LEVEL, index_mode=index_mode, node=case.name)
    result = execute(replayed, case_inputs(case, replayed), options)
    output = result.output
    expected_shape = case.expected.shape
    if math.prod(output.shape) != math.prod(expected_shape):
        raise WebnnCaseError(
            f"the output has Sizes {list(output.shape)}, which cannot hold the expected shape "
            f"{list(expected_shape)}",
            node=case.name,
            op_type=case.op,
        )
    return output.reshape(expected_shape), result.duplicate_indices


def compare_exact(actual: np.ndarray, expected: np.ndarray) -> str | None:
    """Compare two arrays exactly (ULP 0): same dtype, same shape, same bits; a NaN matches any NaN.

    Returns:
        None when they match, else a one-line description of the first difference.
    """
    if actual.dtype != expected.dtype:
        return f"output dtype {actual.dtype} differs from the expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"output shape {list(actual.shape)} differs from the expected {list(expected.shape)}"
    if actual.dtype.kind == "f":
        bits = np.dtype(f"u{actual.dtype.itemsize}")
        nan_a, nan_e = np.isnan(actual), np.isnan(expected)
        # Gather and scatter only move values, so a match is bit-exact (which also tells -0.0 from 0.0).
        differs = (nan_a != nan_e) | (~nan_a & ~nan_e & (actual.view(bits) != expected.view(bits)))
    else:
        differs = actual != expected
    if not differs.any():
        return None
    first = tuple(int(i) for i in np.argwhere(differs)[0])
    return (
        f"{int(differs.sum())} of {differs.size} elements differ; first at {list(first)}: "
        f"got {actual[first]!r}, expected {expected[first]!r}"
    )


def run_case(case: WebnnCase, index_mode: IndexMode = IndexMode.ERROR) -> CaseResult:
    """Run one case and compare its output exactly with the expected values.

    Args:
        case: the case.
        index_mode: ``IndexMode.ERROR`` (dmlshim's default: an out-of-range index is an error) or
            ``IndexMode.CLAMP`` (WebNN's assumption in the expected values).

    Returns:
        The case's result. Errors dmlshim raises on purpose become ``status="error"``; anything else is an
        internal bug and propagates.
    """
    descriptor: Mapping[str, Any] | None = None
    try:
        descriptor = operator_to_json(build_descriptor(case))
        output, duplicates = _execute(case, index_mode)
    except DmlShimError as exc:
        logger.debug("WebNN case %r (%s): %s", case.name, index_mode.value, exc)
        return CaseResult(case.name, case.op, "error", index_mode, str(exc), type(exc).__name__, descriptor)
    mismatch = compare_exact(output, case.expected.array())
    if mismatch is not None:
        logger.debug("WebNN case %r (%s) failed: %s", case.name, index_mode.value, mismatch)
        return CaseResult(case.name, case.op, "fail", index_mode, mismatch, None, descriptor, duplicates)
    return CaseResult(case.name, case.op, "pass", index_mode, "", None, descriptor, duplicates)


def run_all(
    index_mode: IndexMode = IndexMode.ERROR, path: str | os.PathLike[str] | None = None
) -> list[CaseResult]:
    """Run every case of the cases file.

    Args:
        index_mode: the out-of-range policy, as for :func:`run_case`.
        path: the cases file; :func:`default_cases_path` when None.

    Returns:
        One result per case, in file order.

    Raises:
        WebnnCasesFileError: the cases file is absent or malformed.
    """
    results = [run_case(case, index_mode) for case in load_cases(path)]
    counts = totals(results)
    logger.info(
        "WebNN cases (%s): %d pass, %d fail, %d error",
        index_mode.value,
        counts["pass"],
        counts["fail"],
        counts["error"],
    )
    return results


def totals(results: Iterable[CaseResult]) -> dict[CaseStatus, int]:
    """How many results have each status: ``{"pass": n, "fail": n, "error": n}``."""
    counts: dict[CaseStatus, int] = {"pass": 0, "fail": 0, "error": 0}
    for result in results:
        counts[result.status] += 1
    return counts
