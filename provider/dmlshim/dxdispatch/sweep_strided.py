"""Strided descriptors for the real-DirectML fidelity sweep (``directml_sweep.py --strided``).

The generated ONNX nodes reach DirectML with packed tensors (only the element-wise windows carry
Strides), but a DxDispatch model file or a caller of :func:`dmlshim.kernels.execute` may give any
Strides: a transposed or padded layout, a stride of 0 (a broadcast), any stride on a dimension of size 1.
Each case here takes a packed sweep case's descriptor and inputs, gives some of its input tensors such a
layout and writes the same logical values through it into a larger buffer (junk between them). Two
checks follow: dmlshim's kernels on the strided descriptor equal its kernels on the packed one (here,
without DirectML), and real DirectML's output on the strided descriptor equals that.

Indices keep every value in its position (permuted or padded layouts only): a broadcast of indices
would change which index meets which bound. Scatters that end up writing one element twice (a
broadcast of updates cannot cause it; only the base case's own duplicates) are not generated.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dml.enums import DataType, FeatureLevel
from ..dml.operators import OperatorDesc
from ..dml.tensor import BufferTensorDesc
from ..errors import DmlShimError
from ..fileio.files import write_npy
from ..fileio.reading import read_npy
from ..kernels import KernelOptions, execute
from ..translate import Status, TensorInfo, translate_node
from .export_node import prepare_input
from .host_stack import HostStack
from .model_file import single_operator_model
from .real_replay import replay_folders
from .sweep_cases import CHECK, SweepCase, sweep_cases

log = logging.getLogger(__name__)

__all__ = ["StridedCase", "StridedOutcome", "run_strided", "strided_cases"]

DML_OUTPUT = "dml_output.npy"
EXPECTED = "expected_output.npy"


@dataclass(frozen=True)
class StridedCase:
    """One descriptor with strided inputs.

    Attributes:
        name: the base sweep case's name and the layout's tag.
        desc: the descriptor with Strides on some inputs.
        inputs: the flat buffers bound to it (by binding name).
        expected: dmlshim's kernels' output for the packed descriptor (the same logical values).
        strided: whether dmlshim's kernels on ``desc`` and ``inputs`` gave ``expected`` bit for bit.
    """

    name: str
    desc: OperatorDesc
    inputs: Mapping[str, np.ndarray]
    expected: np.ndarray
    strided: bool


@dataclass(frozen=True)
class StridedOutcome:
    """A strided case's verdict: ``pass``, ``fail`` (DirectML differs, or dmlshim's strided run differs
    from its packed run) or ``error`` (DirectML did not run it)."""

    case: str
    verdict: str
    detail: str = ""


def _layout(rng: np.random.Generator, sizes: Sequence[int], broadcast: bool) -> tuple[int, ...]:
    """Strides of a permuted, padded layout; size-1 dims get any stride; with ``broadcast`` one dim of
    size above 1 may get stride 0."""
    r = len(sizes)
    strides = [0] * r
    running = 1
    for d in rng.permutation(r):
        if sizes[d] == 1:
            strides[d] = int(rng.integers(0, 9))
            continue
        strides[d] = running
        running *= sizes[d] + int(rng.integers(0, 3))
    if broadcast:
        wide = [d for d in range(r) if sizes[d] > 1]
        if wide and rng.random() < 0.5:
            strides[int(rng.choice(wide))] = 0
    return tuple(strides)


def _offsets(sizes: Sequence[int], strides: Sequence[int]) -> np.ndarray:
    grids = np.indices(tuple(sizes), dtype=np.int64) if sizes else np.zeros((0,), np.int64)
    if not sizes:
        return np.zeros((), np.int64)
    return sum((g * s for g, s in zip(grids, strides, strict=True)), np.zeros(tuple(sizes), np.int64))


def _strided_input(
    rng: np.random.Generator, tensor: BufferTensorDesc, packed: np.ndarray, broadcast: bool
) -> tuple[BufferTensorDesc, np.ndarray, np.ndarray]:
    """(strided tensor, its flat buffer, the logical tensor it now holds)."""
    strides = _layout(rng, tensor.sizes, broadcast)
    strided = dataclasses.replace(tensor, strides=strides, total_tensor_size_in_bytes=-1)
    dtype = packed.dtype
    count = strided.buffer_element_count
    raw = rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8)
    buffer = raw.view(dtype).copy() if dtype != np.bool_ else (raw[:count] & 1).astype(np.bool_)
    offsets = _offsets(tensor.sizes, strides)
    buffer[offsets.reshape(-1)] = packed.reshape(-1)
    logical = buffer[offsets]
    return strided, buffer, logical


def _index_type(
    rng: np.random.Generator, level: FeatureLevel, current: DataType, values: np.ndarray
) -> DataType | None:
    """Another index type for the same values (FL 3_0 on: INT32, INT64, UINT32, UINT64), or None."""
    if current not in _INDEX_TYPES or level < FeatureLevel.FL_3_0 or rng.random() < 0.4:
        return None
    choices = [t for t in _INDEX_TYPES if t != current and (values.min(initial=0) >= 0 or t.name[0] == "I")]
    return choices[int(rng.integers(0, len(choices)))] if choices else None


_INDEX_TYPES = (DataType.INT32, DataType.INT64, DataType.UINT32, DataType.UINT64)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype != np.bool_ else a.astype(np.uint8)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays hold the same shape, dtype and bytes (NaN payloads and -0 included)."""
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(_bits(a), _bits(b)))


def _strided_case(rng: np.random.Generator, case: SweepCase) -> StridedCase | None:
    from onnx import helper

    names = [f"x{i}" for i in range(len(case.inputs))]
    node = helper.make_node(case.op_type, names, ["y"], name=case.name, **case.attrs)
    infos = [TensorInfo(tuple(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype)) for a in case.inputs]
    t = translate_node(node, case.opset, infos, case.feature_level, name=case.name)
    if t.status is not Status.DML or t.operator is None:
        return None
    desc = t.operator
    tensors = desc.tensors()
    if any(tensor.strides is not None for tensor in tensors.values()):
        return None  # the windows: already strided
    try:
        packed = {b.binding: prepare_input(b, case.inputs[b.onnx_index]).array for b in t.inputs}
    except DmlShimError:
        return None
    packed = {k: v.reshape(tensors[k].sizes) for k, v in packed.items()}
    indices_type = _index_type(
        rng, case.feature_level, tensors["IndicesTensor"].data_type, packed["IndicesTensor"]
    )
    if indices_type is not None:  # the same values in another index type DirectML takes at the level
        packed["IndicesTensor"] = packed["IndicesTensor"].astype(indices_type.numpy_dtype)
        tensors = {**tensors, "IndicesTensor": dataclasses.replace(
            tensors["IndicesTensor"], data_type=indices_type, total_tensor_size_in_bytes=-1
        )}  # fmt: skip
        desc = dataclasses.replace(desc, indices_tensor=tensors["IndicesTensor"])
    fields: dict[str, BufferTensorDesc] = {}
    buffers: dict[str, np.ndarray] = {}
    logical: dict[str, np.ndarray] = {}
    tags = []
    for name, arr in packed.items():
        if rng.random() < 0.3 and name != "InputTensor":
            buffers[name], logical[name] = arr, arr
            continue
        broadcast = name != "IndicesTensor"
        fields[name], buffers[name], logical[name] = _strided_input(rng, tensors[name], arr, broadcast)
        tags.append(f"{name[:-6].lower()}{list(fields[name].strides or ())}")
    options = KernelOptions(feature_level=case.feature_level, node=case.name)
    reference = execute(desc, logical, options, kernels="numpy")
    if reference.duplicate_indices:
        return None
    strided_desc = dataclasses.replace(desc, **{_attr(desc, n): tensor for n, tensor in fields.items()})
    try:
        ours = execute(strided_desc, buffers, options).output
        agrees = same_bits(ours, reference.output)
    except DmlShimError as exc:
        log.warning("%s: dmlshim's kernels refused the strided descriptor: %s", case.name, exc.message)
        agrees = False
    name = f"{case.name}__strided"
    return StridedCase(name, strided_desc, buffers, np.ascontiguousarray(reference.output), agrees)


_ATTRS = {"InputTensor": "input_tensor", "IndicesTensor": "indices_tensor", "UpdatesTensor": "updates_tensor"}


def _attr(desc: OperatorDesc, binding: str) -> str:
    return _ATTRS[binding]


def strided_cases(seed: int = 2024, *, every: int = 3) -> list[StridedCase]:
    """Every ``every``-th check case of the default sweep, with strided inputs (seeded)."""
    rng = np.random.default_rng(seed + 0x57D)
    out = []
    for case in sweep_cases(seed)[::every]:
        if case.kind != CHECK:
            continue
        made = _strided_case(rng, case)
        if made is not None:
            out.append(made)
    return out


def run_strided(
    cases: Sequence[StridedCase], directory: Path, *, stack: HostStack | None = None
) -> list[StridedOutcome]:
    """Write each case's folder, replay them on DirectML.dll and judge them."""
    start = time.monotonic()
    directory.mkdir(parents=True, exist_ok=True)
    folders = []
    for case in cases:
        folder = directory / case.name
        folder.mkdir()
        model = single_operator_model(case.desc, case.inputs, output_file=DML_OUTPUT, npy_inputs=True)
        model.save(folder / "model.json")
        write_npy(folder / EXPECTED, case.expected)
        folders.append(folder)
    replay = replay_folders(folders, stack=stack)
    outcomes = []
    for case, node in zip(cases, replay.nodes, strict=True):
        if not case.strided:
            why = "dmlshim's kernels on the strided descriptor differ from their packed run"
            outcomes.append(StridedOutcome(case.name, "fail", why))
        elif not node.result.ok:
            outcomes.append(StridedOutcome(case.name, "error", node.result.describe()))
        else:
            got = read_npy(node.folder / DML_OUTPUT).reshape(case.expected.shape)
            if same_bits(got, case.expected):
                outcomes.append(StridedOutcome(case.name, "pass"))
            else:
                width = case.expected.dtype.itemsize
                a = _bits(got).reshape(-1, width)
                b = _bits(case.expected).reshape(-1, width)
                wrong = np.flatnonzero((a != b).any(axis=1))
                detail = (
                    f"{wrong.size} of {got.size} element(s) differ, the first at flat position {wrong[0]}"
                )
                outcomes.append(StridedOutcome(case.name, "fail", detail))
    log.info("strided sweep: %d case(s) in %.0f s", len(cases), time.monotonic() - start)
    return outcomes
