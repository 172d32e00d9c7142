"""Generated gather/scatter nodes for the real-DirectML fidelity sweep.

Each case is one ONNX node with concrete inputs and a target feature level: the sweep translates it as
dmlshim does, writes the DxDispatch folder ``dmlshim export`` would write, replays it on DirectML.dll and
compares. The cases cover every data type DirectML takes, ranks 1 to 8, every axis, int32 and int64
indices, negative indices, strided windows (GatherElements/ScatterElements indices narrower than the
data), GatherND batch dimensions, the deprecated Scatter, and the feature levels whose descriptors differ
(1_0, 2_1, 3_0, 4_1, 6_4). Two kinds are observations rather than checks, because DirectML leaves the
result undefined: scatters with duplicate indices, and out-of-range indices (compared with dmlshim's
clamping stand-in).

Everything is drawn from one seeded generator: the same case list, names and values on every run.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dml.enums import FeatureLevel

__all__ = ["CHECK", "DUPLICATES", "OUT_OF_RANGE", "SweepCase", "sweep_cases"]

CHECK = "check"
"""DirectML must equal dmlshim exactly."""
DUPLICATES = "duplicates"
"""A scatter writing one element twice: DirectML does not say which write wins."""
OUT_OF_RANGE = "out_of_range"
"""An index outside its dimension: DirectML documents undefined values (reads clamped to the buffer)."""

DATA_TYPES: tuple[str, ...] = (
    "float32",
    "float16",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)
"""Every ONNX type that has a DirectML data type (bool travels as UINT8)."""

FEATURE_LEVELS: tuple[FeatureLevel, ...] = (
    FeatureLevel.FL_1_0,
    FeatureLevel.FL_2_1,
    FeatureLevel.FL_3_0,
    FeatureLevel.FL_4_1,
    FeatureLevel.FL_6_4,
)
"""The feature levels at which dmlshim's descriptors for these operators differ (5_0 to 6_4 are alike)."""

TOP = FeatureLevel.FL_6_4


@dataclass(frozen=True)
class SweepCase:
    """One generated node.

    Attributes:
        name: unique, usable as a folder name (``gather_elements_r3_a1_int64_i32_fl6_4``).
        op_type: the ONNX op.
        opset: the opset the node is translated for.
        inputs: the node's inputs (data, indices[, updates]).
        attrs: the node's attributes.
        feature_level: the DirectML feature level translated for.
        kind: ``check``, ``duplicates`` or ``out_of_range``.
    """

    name: str
    op_type: str
    opset: int
    inputs: tuple[np.ndarray, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    feature_level: FeatureLevel = TOP
    kind: str = CHECK


def _values(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    """Distinct-looking values of ``dtype``: both signs where the type has them, extremes included."""
    size = int(np.prod(shape, dtype=np.int64))
    if dtype == "bool":
        return rng.integers(0, 2, size).astype(np.bool_).reshape(shape)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        out = rng.standard_normal(size).astype(dt) * dt.type(8)
        if size >= 4:
            out[:4] = np.array([0.5, -0.0, np.finfo(dt).max, np.finfo(dt).tiny], dtype=dt)
        return out.reshape(shape)
    info = np.iinfo(dt)
    out = rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), size, dtype=np.int64, endpoint=True)
    arr = out.astype(dt)
    if size >= 2:
        arr[:2] = np.array([info.max, info.min], dtype=dt)
    return arr.reshape(shape)


def _indices(
    rng: np.random.Generator, shape: Sequence[int], bound: int, dtype: str, negative: bool = True
) -> np.ndarray:
    """Indices in ``[-bound, bound)`` (``[0, bound)`` without ``negative``)."""
    low = -bound if negative else 0
    return rng.integers(low, bound, tuple(shape), dtype=np.int64).astype(dtype)


def _fl(fl: FeatureLevel) -> str:
    return f"fl{fl.short}"


def _permutation_rows(rng: np.random.Generator, count: int, dims: Sequence[int]) -> np.ndarray:
    """``count`` distinct index tuples into ``dims`` (rows of a ``[count, len(dims)]`` array)."""
    total = int(np.prod(dims, dtype=np.int64))
    flat = rng.choice(total, size=min(count, total), replace=False)
    return np.stack(np.unravel_index(flat, tuple(dims)), axis=-1).astype(np.int64)


def _gather(
    rng: np.random.Generator, r: int, q: int, axis: int, dt: str, it: str, fl: FeatureLevel
) -> SweepCase:
    shape = tuple(int(rng.integers(1, 4)) for _ in range(r))
    shape = (*shape[:axis], int(rng.integers(2, 5)), *shape[axis + 1 :])
    ishape = tuple(int(rng.integers(1, 4)) for _ in range(q))
    data = _values(rng, shape, dt)
    idx = _indices(rng, ishape, shape[axis], it)
    onnx_axis = axis - r if axis % 2 else axis  # odd axes are written negative: both forms are swept
    return SweepCase(
        f"gather_r{r}_q{q}_a{axis}_{dt}_{it}_{_fl(fl)}", "Gather", 13, (data, idx), {"axis": onnx_axis}, fl
    )


def _gather_elements(
    rng: np.random.Generator, r: int, axis: int, dt: str, it: str, fl: FeatureLevel, window: bool = False
) -> SweepCase:
    shape = tuple(int(rng.integers(2, 4)) for _ in range(r))
    ishape = tuple(
        int(rng.integers(1, 5)) if d == axis else (max(1, s - 1) if window else s)
        for d, s in enumerate(shape)
    )
    data = _values(rng, shape, dt)
    idx = _indices(rng, ishape, shape[axis], it)
    tag = "_window" if window else ""
    return SweepCase(
        f"gather_elements_r{r}_a{axis}{tag}_{dt}_{it}_{_fl(fl)}",
        "GatherElements",
        13,
        (data, idx),
        {"axis": axis},
        fl,
    )


def _gather_nd(
    rng: np.random.Generator, r: int, q: int, k: int, b: int, dt: str, it: str, fl: FeatureLevel
) -> SweepCase:
    shape = tuple(int(rng.integers(1, 4)) for _ in range(r))
    batch = shape[:b]
    mid = tuple(int(rng.integers(1, 3)) for _ in range(q - 1 - b))
    rows = int(np.prod(batch + mid, dtype=np.int64))
    cols = [_indices(rng, (rows,), shape[b + j], it) for j in range(k)]
    idx = np.stack(cols, axis=-1).reshape(batch + mid + (k,)) if k else np.zeros(batch + mid + (0,), it)
    data = _values(rng, shape, dt)
    return SweepCase(
        f"gather_nd_r{r}_q{q}_k{k}_b{b}_{dt}_{it}_{_fl(fl)}",
        "GatherND",
        13,
        (data, idx.astype(it)),
        {"batch_dims": b},
        fl,
    )


def _scatter_elements(
    rng: np.random.Generator,
    r: int,
    axis: int,
    dt: str,
    it: str,
    fl: FeatureLevel,
    *,
    window: bool = False,
    op: str = "ScatterElements",
    opset: int = 16,
) -> SweepCase:
    shape = tuple(int(rng.integers(2, 4)) for _ in range(r))
    ishape = tuple(
        int(rng.integers(1, shape[axis] + 1)) if d == axis else (max(1, s - 1) if window else s)
        for d, s in enumerate(shape)
    )
    # distinct targets along the axis for each line: no duplicate writes
    lines = np.moveaxis(np.zeros(ishape, np.int64), axis, -1)
    flat = lines.reshape(-1, ishape[axis])
    for row in range(flat.shape[0]):
        flat[row] = rng.permutation(shape[axis])[: ishape[axis]]
    idx = np.moveaxis(flat.reshape(lines.shape), -1, axis)
    idx = np.where(rng.random(idx.shape) < 0.5, idx - shape[axis], idx).astype(it)
    data = _values(rng, shape, dt)
    updates = _values(rng, ishape, dt)
    tag = "_window" if window else ""
    prefix = "scatter_elements" if op == "ScatterElements" else "scatter"
    return SweepCase(
        f"{prefix}_r{r}_a{axis}{tag}_{dt}_{it}_{_fl(fl)}", op, opset, (data, idx, updates), {"axis": axis}, fl
    )


def _scatter_nd(
    rng: np.random.Generator, r: int, k: int, n: int, dt: str, it: str, fl: FeatureLevel
) -> SweepCase:
    shape = tuple(int(rng.integers(2, 4)) for _ in range(r))
    rows = _permutation_rows(rng, n, shape[:k])
    rows = np.where(rng.random(rows.shape) < 0.5, rows - np.array(shape[:k]), rows)
    data = _values(rng, shape, dt)
    updates = _values(rng, (rows.shape[0], *shape[k:]), dt)
    return SweepCase(
        f"scatter_nd_r{r}_k{k}_n{rows.shape[0]}_{dt}_{it}_{_fl(fl)}",
        "ScatterND",
        16,
        (data, rows.astype(it), updates),
        {},
        fl,
    )


def _types(rng: np.random.Generator) -> Iterator[SweepCase]:
    """Every data type and the index types ONNX allows (int32 and int64; int64 only for the ND ops), per
    op, at the top feature level."""
    for dt, it in itertools.product(DATA_TYPES, ("int32", "int64")):
        yield _gather(rng, 3, 2, 1, dt, it, TOP)
        yield _gather_elements(rng, 3, 2, dt, it, TOP)
        yield _scatter_elements(rng, 3, 1, dt, it, TOP)
        if it == "int64":  # ONNX GatherND and ScatterND take int64 indices only
            yield _gather_nd(rng, 3, 2, 2, 0, dt, it, TOP)
            yield _scatter_nd(rng, 3, 1, 2, dt, it, TOP)


def _ranks(rng: np.random.Generator) -> Iterator[SweepCase]:
    """Ranks 1 to 8, every axis (float32 and int64 data, int64 indices)."""
    for r in range(1, 9):
        for axis in range(r):
            dt = "float32" if (r + axis) % 2 else "int64"
            yield _gather_elements(rng, r, axis, dt, "int64", TOP)
            yield _scatter_elements(rng, r, axis, dt, "int64", TOP)
            if r >= 2 and axis in (0, r - 1):
                yield _gather_elements(rng, r, axis, dt, "int64", TOP, window=True)
                yield _scatter_elements(rng, r, axis, dt, "int64", TOP, window=True)
        for q in range(0, 4):
            if max(r, q, r + q - 1) <= 8:
                yield _gather(
                    rng, r, q, r - 1 if q % 2 else 0, "float16" if q == 2 else "int32", "int64", TOP
                )
        for k in range(1, r + 1):
            for b in range(0, min(r - k, 2) + 1):
                q = b + 2
                if max(r, q) <= 8 and r - k - b >= 0 and (q - 1 - b) + (r - k - b) + b <= 8:
                    yield _gather_nd(rng, r, q, k, b, "float32", "int64", TOP)
        for k in (1, r):
            yield _scatter_nd(rng, r, k, 2, "int32", "int64", TOP)


def _levels(rng: np.random.Generator) -> Iterator[SweepCase]:
    """The feature levels whose descriptors differ, with types that need emulation at the low ones."""
    for fl in FEATURE_LEVELS:
        for dt in ("float32", "float16", "int64", "uint8", "int32"):
            yield _gather(rng, 2, 1, 1, dt, "int64", fl)
            yield _gather(rng, 3, 2, 0, dt, "int32", fl)
            yield _gather_elements(rng, 3, 1, dt, "int64", fl)
            yield _gather_elements(rng, 2, 0, dt, "int64", fl, window=True)
            yield _gather_nd(rng, 3, 2, 1, 0, dt, "int64", fl)
            yield _gather_nd(rng, 3, 3, 1, 1, dt, "int64", fl)
            yield _scatter_elements(rng, 3, 2, dt, "int64", fl)
            yield _scatter_elements(rng, 2, 1, dt, "int64", fl, window=True)
            yield _scatter_nd(rng, 3, 2, 2, dt, "int64", fl)
        yield _scatter_elements(rng, 2, 0, "float32", "int64", fl, op="Scatter", opset=9)
        yield _scatter_elements(rng, 4, 3, "float32", "int32", fl, op="ScatterElements", opset=11)


def _specials(rng: np.random.Generator) -> Iterator[SweepCase]:
    """Scalar indices, whole-slice GatherND, larger tensors, and the two kinds of observation."""
    yield SweepCase(
        "gather_scalar_index", "Gather", 13, (_values(rng, (5, 3), "float32"), np.array(-2, np.int64))
    )
    yield SweepCase(
        "gather_nd_k0_slices", "GatherND", 13, (_values(rng, (2, 3), "int32"), np.zeros((4, 0), np.int64))
    )
    big = _values(rng, (64, 33, 7), "float32")
    yield SweepCase("gather_large", "Gather", 13, (big, _indices(rng, (300,), 33, "int64")), {"axis": 1})
    yield SweepCase(
        "gather_elements_large",
        "GatherElements",
        13,
        (big, _indices(rng, (64, 33, 7), 33, "int32")),
        {"axis": 1},
    )
    rows = _permutation_rows(rng, 40, (64, 33))
    yield SweepCase("scatter_nd_large", "ScatterND", 16, (big, rows, _values(rng, (40, 7), "float32")))
    # duplicates: one element written several times
    data = _values(rng, (4, 3), "float32")
    yield SweepCase(
        "scatter_elements_duplicates",
        "ScatterElements",
        16,
        (data, np.array([[1, 1, 1], [1, 2, 1]], np.int64), _values(rng, (2, 3), "float32")),
        {"axis": 0},
        kind=DUPLICATES,
    )
    yield SweepCase(
        "scatter_nd_duplicates",
        "ScatterND",
        16,
        (data, np.array([[2], [0], [2], [2]], np.int64), _values(rng, (4, 3), "float32")),
        kind=DUPLICATES,
    )
    # out of range: past the end and before the start
    yield SweepCase(
        "gather_out_of_range",
        "Gather",
        13,
        (data, np.array([0, 4, 7, -5, -9, 3], np.int64)),
        {"axis": 0},
        kind=OUT_OF_RANGE,
    )
    yield SweepCase(
        "gather_elements_out_of_range",
        "GatherElements",
        13,
        (data, np.array([[0, 3, 9], [-4, -7, 100]], np.int64)),
        {"axis": 0},
        kind=OUT_OF_RANGE,
    )
    yield SweepCase(
        "gather_nd_out_of_range",
        "GatherND",
        13,
        (data, np.array([[4, 0], [1, 3], [-5, 0], [2, -4]], np.int64)),
        kind=OUT_OF_RANGE,
    )
    yield SweepCase(
        "scatter_elements_out_of_range",
        "ScatterElements",
        16,
        (data, np.array([[5, 0, 1]], np.int64), _values(rng, (1, 3), "float32")),
        {"axis": 0},
        kind=OUT_OF_RANGE,
    )
    yield SweepCase(
        "scatter_nd_out_of_range",
        "ScatterND",
        16,
        (data, np.array([[6], [1]], np.int64), _values(rng, (2, 3), "float32")),
        kind=OUT_OF_RANGE,
    )


def sweep_cases(seed: int = 2024, *, quick: bool = False, extra: Iterable[SweepCase] = ()) -> list[SweepCase]:
    """Every generated case (``quick``: a fifth of them, every op and kind still present; ``extra``: cases
    added after them, such as the opt-in wide set of :func:`dmlshim.dxdispatch.sweep_wide.wide_sweep`)."""
    rng = np.random.default_rng(seed)
    cases = [*_types(rng), *_ranks(rng), *_levels(rng), *_specials(rng), *extra]
    seen: set[str] = set()
    unique: list[SweepCase] = []
    for case in cases:
        name, k = case.name, 1
        while name in seen:
            k += 1
            name = f"{case.name}_{k}"
        seen.add(name)
        unique.append(case if name == case.name else SweepCase(name, *_rest(case)))
    if quick:
        unique = [c for i, c in enumerate(unique) if i % 5 == 0 or c.kind != CHECK]
    return unique


def _rest(case: SweepCase) -> tuple[Any, ...]:
    return (case.op_type, case.opset, case.inputs, case.attrs, case.feature_level, case.kind)
