"""The opt-in wide set of the real-DirectML fidelity sweep (``directml_sweep.py --wide``).

The default cases (:mod:`.sweep_cases`) keep shapes small and sample the feature levels with five types.
The wide set adds the axes where a kernel or a translation is most likely to hide a wrong value:

* every data type at the low levels (2_1, 3_0: 64-bit data as UINT32 pairs, UINT32 indices at 2_1);
* ranks 5 to 8 at 2_1 (exactly 4 dimensions: merged views) and at 3_0 with 64-bit data (the pair
  dimension makes 9: merged views);
* every Gather axis with 1 to 3 index dimensions, size-1 dimensions in every position of data and
  indices, broadcast-like index shapes (all 1s but one);
* GatherND with batch dimensions up to rank - 1 and tuples addressing every remaining dimension, at 2_1
  (the batch folded into the tuples) and 3_0;
* strided windows on middle axes, with some dimensions narrowed and others not, merged at 2_1;
* the older opsets (Gather-1, GatherND-11, ScatterND-11, ScatterElements-11, Scatter-9);
* large tensors (about a million elements) that cross many thread groups, with 8- and 16-bit data whose
  scatters write neighbouring bytes of one 32-bit word from different threads;
* duplicate writes in ScatterND, ScatterElements with 8-bit data and with 64-bit pairs (observations:
  DirectML does not define the winner);
* NaN payloads, signalling NaNs, infinities, -0 and subnormals through every op (bit for bit);
* int64 indices beyond 32 bits (observations: out of range).

Drawn from its own generator (the seed plus a constant), so adding it leaves the default cases as they
were. The count is fixed for every seed.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence

import numpy as np

from ..dml.enums import FeatureLevel
from .sweep_cases import (
    DATA_TYPES,
    DUPLICATES,
    OUT_OF_RANGE,
    TOP,
    SweepCase,
    _fl,
    _indices,
    _permutation_rows,
    _values,
    sweep_cases,
)

__all__ = ["wide_cases"]

FL21 = FeatureLevel.FL_2_1
FL30 = FeatureLevel.FL_3_0
FL41 = FeatureLevel.FL_4_1
LOW_LEVELS = (FL21, FL30)
WIDE_SEED_OFFSET = 0x5EED
"""Added to the sweep's seed for the wide set's generator."""


def _shape(rng: np.random.Generator, r: int, one_at: int | None = None, low: int = 1) -> tuple[int, ...]:
    shape = [int(rng.integers(low, 4)) for _ in range(r)]
    if one_at is not None:
        shape[one_at] = 1
    return tuple(shape)


def gather(
    name: str, data_shape: Sequence[int], idx_shape: Sequence[int], axis: int, dt: str, it: str,
    fl: FeatureLevel, rng: np.random.Generator, opset: int = 13,
) -> SweepCase:  # fmt: skip
    data = _values(rng, data_shape, dt)
    idx = _indices(rng, idx_shape, data_shape[axis], it, negative=fl >= FL30 or opset >= 11)
    return SweepCase(name, "Gather", opset, (data, idx), {"axis": axis}, fl)


def gather_elements(
    name: str, data_shape: Sequence[int], idx_shape: Sequence[int], axis: int, dt: str, it: str,
    fl: FeatureLevel, rng: np.random.Generator, opset: int = 13,
) -> SweepCase:  # fmt: skip
    data = _values(rng, data_shape, dt)
    idx = _indices(rng, idx_shape, data_shape[axis], it)
    return SweepCase(name, "GatherElements", opset, (data, idx), {"axis": axis}, fl)


def scatter_elements(
    name: str, data_shape: Sequence[int], idx_shape: Sequence[int], axis: int, dt: str, it: str,
    fl: FeatureLevel, rng: np.random.Generator, *, op: str = "ScatterElements", opset: int = 16,
    kind: str = "check",
) -> SweepCase:  # fmt: skip
    """Distinct targets along the axis for each line (``kind`` duplicates: each line writes one target
    twice or more)."""
    n = data_shape[axis]
    lines = np.moveaxis(np.zeros(tuple(idx_shape), np.int64), axis, -1)
    flat = lines.reshape(-1, idx_shape[axis])
    for row in range(flat.shape[0]):
        if kind == DUPLICATES:
            flat[row] = rng.integers(0, max(1, n // 2), idx_shape[axis])
        else:
            flat[row] = rng.permutation(n)[: idx_shape[axis]]
    idx = np.moveaxis(flat.reshape(lines.shape), -1, axis)
    idx = np.where(rng.random(idx.shape) < 0.5, idx - n, idx).astype(it)
    data = _values(rng, data_shape, dt)
    updates = _values(rng, idx_shape, dt)
    return SweepCase(name, op, opset, (data, idx, updates), {"axis": axis}, fl, kind)


def gather_nd(
    name: str, data_shape: Sequence[int], lead: Sequence[int], k: int, b: int, dt: str,
    fl: FeatureLevel, rng: np.random.Generator, opset: int = 13,
) -> SweepCase:  # fmt: skip
    """Indices of shape data[:b] + lead + [k]."""
    batch = tuple(data_shape[:b])
    rows = int(np.prod(batch + tuple(lead), dtype=np.int64))
    cols = [_indices(rng, (rows,), data_shape[b + j], "int64") for j in range(k)]
    idx = np.stack(cols, axis=-1).reshape(batch + tuple(lead) + (k,))
    attrs = {"batch_dims": b} if opset >= 12 else {}
    data = _values(rng, data_shape, dt)
    return SweepCase(name, "GatherND", opset, (data, idx), attrs, fl)


def scatter_nd(
    name: str, data_shape: Sequence[int], n: int, k: int, dt: str, fl: FeatureLevel,
    rng: np.random.Generator, *, opset: int = 16, duplicates: int = 0, lead: Sequence[int] = (),
) -> SweepCase:  # fmt: skip
    """``n`` distinct tuples of ``k`` coordinates (``duplicates`` of them repeated), reshaped to
    ``lead + [k]`` when ``lead`` is given."""
    rows = _permutation_rows(rng, n, data_shape[:k])
    if duplicates:
        rows = np.concatenate([rows, rows[rng.integers(0, rows.shape[0], duplicates)]])
    rows = np.where(rng.random(rows.shape) < 0.5, rows - np.array(data_shape[:k]), rows)
    shape = (*lead, k) if lead and int(np.prod(lead)) == rows.shape[0] else rows.shape
    rows = rows.reshape(shape)
    data = _values(rng, data_shape, dt)
    updates = _values(rng, (*shape[:-1], *data_shape[k:]), dt)
    kind = DUPLICATES if duplicates else "check"
    return SweepCase(name, "ScatterND", opset, (data, rows.astype(np.int64), updates), {}, fl, kind)


def _types_low(rng: np.random.Generator) -> Iterator[SweepCase]:
    """Every data type with every op at 2_1 and 3_0 (int32 indices where ONNX allows them at 3_0)."""
    for fl, dt in itertools.product(LOW_LEVELS, DATA_TYPES):
        it = "int32" if fl == FL30 else "int64"
        tag = f"{dt}_{_fl(fl)}"
        yield gather(f"w_types_gather_{tag}", (3, 4, 2), (2, 3), 1, dt, it, fl, rng)
        yield gather_elements(f"w_types_ge_{tag}", (3, 4, 2), (3, 5, 2), 1, dt, it, fl, rng)
        yield gather_nd(f"w_types_gnd_{tag}", (3, 4, 2), (2,), 2, 0, dt, fl, rng)
        yield scatter_elements(f"w_types_se_{tag}", (3, 4, 2), (3, 2, 2), 1, dt, it, fl, rng)
        yield scatter_nd(f"w_types_snd_{tag}", (3, 4, 2), 3, 1, dt, fl, rng)


def _high_ranks_low_levels(rng: np.random.Generator) -> Iterator[SweepCase]:
    """Ranks 5 to 8 where the view must be merged: 2_1 (4 dimensions) and 3_0 with 64-bit pairs."""
    for r, fl in itertools.product(range(5, 9), LOW_LEVELS):
        dt = ("int64", "float64", "uint64", "float32")[r % 4] if fl == FL30 else ("float16", "int64")[r % 2]
        if fl == FL30 and dt == "float32":
            dt = "int64"
        tag = f"r{r}_{dt}_{_fl(fl)}"
        for axis in (0, r // 2, r - 1):
            shape = _shape(rng, r, low=1)
            shape = (*shape[:axis], int(rng.integers(2, 4)), *shape[axis + 1 :])
            q = 1 if r == 8 else int(rng.integers(1, 3))
            if max(r, r + q - 1) <= 8:
                yield gather(
                    f"w_rank_gather_{tag}_a{axis}_q{q}", shape, _shape(rng, q), axis, dt, "int64", fl, rng
                )
            ishape = (*shape[:axis], int(rng.integers(1, 4)), *shape[axis + 1 :])
            yield gather_elements(f"w_rank_ge_{tag}_a{axis}", shape, ishape, axis, dt, "int64", fl, rng)
            ishape = (*shape[:axis], int(rng.integers(1, shape[axis] + 1)), *shape[axis + 1 :])
            yield scatter_elements(f"w_rank_se_{tag}_a{axis}", shape, ishape, axis, dt, "int64", fl, rng)
        shape = _shape(rng, r, low=2)
        for k in (1, r // 2, r):
            yield gather_nd(f"w_rank_gnd_{tag}_k{k}", shape, (2,), k, 0, dt, fl, rng)
            yield scatter_nd(f"w_rank_snd_{tag}_k{k}", shape, 2, k, dt, fl, rng)


def _axes_and_ones(rng: np.random.Generator) -> Iterator[SweepCase]:
    """Every Gather axis with 1 to 3 index dimensions, size-1 dimensions in every position, broadcast-like
    index shapes; levels and types cycle."""
    levels = (TOP, FL30, FL21, FL41)
    types = ("float32", "int8", "uint16", "int64", "float16", "bool", "uint32", "int16")
    count = itertools.count()
    for r in range(1, 9):
        for axis in range(r):
            for q in (1, 2, 3):
                if r + q - 1 > 8:
                    continue
                c = next(count)
                fl, dt = levels[c % len(levels)], types[c % len(types)]
                one_at = int(rng.integers(0, r))
                shape = _shape(rng, r, one_at if one_at != axis else None)
                ishape = [int(rng.integers(1, 4)) for _ in range(q)]
                ishape[int(rng.integers(0, q))] = 1  # a broadcast-like index shape
                onnx_axis = axis - r if c % 2 else axis
                it = ("int32", "int64")[c % 2]
                name = f"w_axis_gather_r{r}_a{axis}_q{q}_{dt}_{_fl(fl)}"
                case = gather(name, shape, ishape, axis, dt, it, fl, rng)
                yield SweepCase(name, case.op_type, case.opset, case.inputs, {"axis": onnx_axis}, fl)
            c = next(count)
            fl, dt = levels[c % len(levels)], types[c % len(types)]
            one_at = int(rng.integers(0, r))
            shape = _shape(rng, r, one_at)
            ishape = tuple(1 if d == one_at else s for d, s in enumerate(shape))
            ishape = (*ishape[:axis], int(rng.integers(1, 4)), *ishape[axis + 1 :])
            yield gather_elements(
                f"w_ones_ge_r{r}_a{axis}_{dt}_{_fl(fl)}", shape, ishape, axis, dt, "int64", fl, rng
            )
            ishape = (*shape[:axis], int(rng.integers(1, shape[axis] + 1)), *shape[axis + 1 :])
            yield scatter_elements(
                f"w_ones_se_r{r}_a{axis}_{dt}_{_fl(fl)}", shape, ishape, axis, dt, "int32", fl, rng
            )


def _batches(rng: np.random.Generator) -> Iterator[SweepCase]:
    """GatherND with 0 to r - 1 batch dimensions, tuples of 1 to r - b coordinates, several index dims."""
    c = 0
    for r in range(2, 7):
        for b in range(0, r):
            for k in sorted({1, r - b}):
                c += 1
                fl = (FL30, FL21, TOP)[c % 3]
                dt = ("float32", "int64", "uint8", "float16")[c % 4]
                lead = _shape(rng, int(rng.integers(0, 3)))
                shape = _shape(rng, r, int(rng.integers(0, r)) if c % 2 else None)
                shape = tuple(max(s, 2) if b <= d < b + k else s for d, s in enumerate(shape))
                yield gather_nd(
                    f"w_batch_gnd_r{r}_b{b}_k{k}_l{len(lead)}_{dt}_{_fl(fl)}", shape, lead, k, b, dt, fl, rng
                )


def _windows(rng: np.random.Generator) -> Iterator[SweepCase]:
    """GatherElements/ScatterElements indices narrower than data on some non-axis dimensions."""
    levels = (TOP, FL30, FL21)
    c = 0
    for r in range(2, 7):
        for axis in range(r):
            c += 1
            fl = levels[c % 3]
            dt = ("float32", "int64", "uint8", "int16", "float64")[c % 5]
            shape = _shape(rng, r, low=2)
            narrow = [d for d in range(r) if d != axis and rng.random() < 0.6] or [(axis + 1) % r]
            ishape = tuple(int(rng.integers(1, s)) if d in narrow else s for d, s in enumerate(shape))
            ge = (*ishape[:axis], int(rng.integers(1, 5)), *ishape[axis + 1 :])
            se = (*ishape[:axis], int(rng.integers(1, shape[axis] + 1)), *ishape[axis + 1 :])
            tag = f"r{r}_a{axis}_{dt}_{_fl(fl)}"
            yield gather_elements(f"w_window_ge_{tag}", shape, ge, axis, dt, "int64", fl, rng)
            yield scatter_elements(f"w_window_se_{tag}", shape, se, axis, dt, "int64", fl, rng)


def _opsets(rng: np.random.Generator) -> Iterator[SweepCase]:
    """The older opsets of each op, at the top level and 2_1."""
    for fl in (TOP, FL21):
        t = _fl(fl)
        yield gather(f"w_opset_gather1_{t}", (4, 3), (2, 2), 0, "float32", "int64", fl, rng, opset=1)
        yield gather(f"w_opset_gather11_{t}", (4, 3, 2), (3,), 1, "int32", "int32", fl, rng, opset=11)
        yield gather_elements(f"w_opset_ge11_{t}", (4, 3), (2, 3), 0, "int8", "int32", fl, rng, opset=11)
        yield gather_nd(f"w_opset_gnd11_{t}", (4, 3, 2), (3,), 2, 0, "uint16", fl, rng, opset=11)
        yield gather_nd(f"w_opset_gnd12_{t}", (2, 3, 4), (2,), 1, 1, "float16", fl, rng, opset=12)
        yield scatter_nd(f"w_opset_snd11_{t}", (4, 3, 2), 2, 2, "int64", fl, rng, opset=11)
        yield scatter_nd(f"w_opset_snd13_{t}", (4, 3), 2, 1, "bool", fl, rng, opset=13)
        yield scatter_nd(f"w_opset_snd18_{t}", (4, 3, 2), 3, 1, "uint8", fl, rng, opset=18)
        yield scatter_elements(f"w_opset_se11_{t}", (4, 3), (2, 3), 0, "int16", "int64", fl, rng, opset=11)
        yield scatter_elements(f"w_opset_se13_{t}", (4, 3), (4, 2), 1, "float64", "int32", fl, rng, opset=13)
        yield scatter_elements(f"w_opset_se18_{t}", (4, 3), (4, 2), 1, "uint64", "int64", fl, rng, opset=18)
        yield scatter_elements(
            f"w_opset_scatter9_{t}", (4, 3), (2, 3), 0, "float16", "int64", fl, rng, op="Scatter", opset=9
        )


def _large(rng: np.random.Generator) -> Iterator[SweepCase]:
    """About a million elements per node: many thread groups; 8/16-bit data sharing 32-bit words."""
    yield gather("w_large_gather_f32", (1024, 1024), (1024,), 1, "float32", "int64", TOP, rng)
    yield gather("w_large_gather_u8_fl2_1", (16, 4096, 16), (2048,), 1, "uint8", "int64", FL21, rng)
    yield gather("w_large_gather_i64_fl3_0", (512, 2048), (700,), 0, "int64", "int32", FL30, rng)
    yield gather_elements("w_large_ge_f16", (1024, 1024), (1024, 1024), 0, "float16", "int64", TOP, rng)
    yield gather_elements("w_large_ge_i8_window", (1000, 1100), (999, 1000), 1, "int8", "int32", TOP, rng)
    yield gather_nd("w_large_gnd_u16", (1024, 1024), (1024, 1024), 2, 0, "uint16", TOP, rng)
    yield gather_nd("w_large_gnd_b1_fl2_1", (64, 128, 128), (128,), 1, 1, "float32", FL21, rng)
    yield scatter_elements("w_large_se_u8", (1024, 1024), (1024, 1024), 1, "uint8", "int64", TOP, rng)
    yield scatter_elements(
        "w_large_se_f16_fl3_0", (1024, 1024), (700, 1024), 0, "float16", "int64", FL30, rng
    )
    yield scatter_elements("w_large_se_i64_fl3_0", (1024, 512), (1024, 300), 1, "int64", "int32", FL30, rng)
    yield scatter_nd("w_large_snd_i8_rows", (1024, 1024), 1000, 1, "int8", TOP, rng)
    yield scatter_nd("w_large_snd_f16_elems", (1024, 1024), 300_000, 2, "float16", TOP, rng)
    yield scatter_nd("w_large_snd_bool_fl2_1", (512, 2048), 100_000, 2, "bool", FL21, rng)


def _duplicates(rng: np.random.Generator) -> Iterator[SweepCase]:
    """Duplicate writes (observations): ScatterND rows and elements, 8-bit data, 64-bit pairs."""
    yield scatter_nd("w_dup_snd_rows_f32", (6, 5), 4, 1, "float32", TOP, rng, duplicates=5)
    yield scatter_nd("w_dup_snd_elems_u8", (6, 5), 10, 2, "uint8", TOP, rng, duplicates=10)
    yield scatter_nd("w_dup_snd_i64_fl3_0", (6, 5), 4, 1, "int64", FL30, rng, duplicates=4)
    yield scatter_nd("w_dup_snd_lead_f16", (4, 3, 2), 6, 2, "float16", TOP, rng, duplicates=6, lead=(3, 4))
    yield scatter_nd("w_dup_snd_large_f32", (256, 256), 20_000, 2, "float32", TOP, rng, duplicates=20_000)
    for dt, fl in (("uint8", TOP), ("int64", FL30), ("float64", FL21), ("int16", TOP)):
        yield scatter_elements(
            f"w_dup_se_{dt}_{_fl(fl)}", (6, 5), (4, 5), 0, dt, "int64", fl, rng, kind=DUPLICATES
        )


HIGH_INDICES = (2**32 + 1, 2**32 - 1, 2**31, -(2**31) - 1, -(2**32) + 1, 2**40 + 2, 1)
"""int64 indices outside every dimension whose low 32 bits address one (2**32 + 1, 2**40 + 2)."""


def high_index_bits(seed: int = 2024) -> list[SweepCase]:
    """Observations: int64 indices beyond 32 bits, for each op (DirectML reads the low word; see
    docs/semantics.md). Out of range, so the expected output is dmlshim's clamping stand-in."""
    rng = np.random.default_rng(seed + WIDE_SEED_OFFSET + 2)
    data = _values(rng, (4, 3), "float32")
    big = np.array(HIGH_INDICES, np.int64)
    pair = np.array([[2**32 + 1, 2**32 + 2, 1]], np.int64)
    rows = np.array([[2**32 + 1], [2**32 + 2]], np.int64)
    return [
        SweepCase("w_oor_high_gather", "Gather", 13, (data, big), {"axis": 0}, kind=OUT_OF_RANGE),
        SweepCase("w_oor_high_ge", "GatherElements", 13, (data, pair), {"axis": 0}, kind=OUT_OF_RANGE),
        SweepCase(
            "w_oor_high_gnd",
            "GatherND",
            13,
            (data, np.array([[2**32 + 1, 0], [1, 2**32 + 2]])),
            kind=OUT_OF_RANGE,
        ),
        SweepCase(
            "w_oor_high_se",
            "ScatterElements",
            16,
            (data, pair, _values(rng, (1, 3), "float32")),
            {"axis": 0},
            kind=OUT_OF_RANGE,
        ),
        SweepCase(
            "w_oor_high_snd",
            "ScatterND",
            16,
            (data, rows, _values(rng, (2, 3), "float32")),
            kind=OUT_OF_RANGE,
        ),
    ]


def wide_cases(seed: int = 2024) -> list[SweepCase]:
    """The wide set (see the module docstring), drawn from ``seed + WIDE_SEED_OFFSET``."""
    rng = np.random.default_rng(seed + WIDE_SEED_OFFSET)
    return [
        *_types_low(rng),
        *_high_ranks_low_levels(rng),
        *_axes_and_ones(rng),
        *_batches(rng),
        *_windows(rng),
        *_opsets(rng),
        *_large(rng),
        *_duplicates(rng),
        *float_specials(seed),
        *high_index_bits(seed),
    ]


def wide_sweep(seed: int = 2024, *, quick: bool = False) -> list[SweepCase]:
    """The default sweep's cases with the wide set added after them (``quick`` as in ``sweep_cases``)."""
    return sweep_cases(seed, quick=quick, extra=wide_cases(seed))


def special_floats(dt: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` values of float type ``dt`` mixing ordinary values with the bit patterns a shader may
    change: quiet and signalling NaNs with payloads, both infinities, -0 and subnormals."""
    bits = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}[dt]
    width = np.dtype(bits).itemsize * 8
    mant = {16: 10, 32: 23, 64: 52}[width]
    exp_all = ((1 << (width - 1 - mant)) - 1) << mant
    sign = 1 << (width - 1)
    patterns = [
        exp_all | (1 << (mant - 1)),  # the quiet NaN
        exp_all | (1 << (mant - 1)) | 0x15,  # quiet NaN with a payload
        exp_all | 1,  # signalling NaN
        sign | exp_all | 0x2A,  # negative signalling NaN with a payload
        exp_all,  # +inf
        sign | exp_all,  # -inf
        sign,  # -0
        1,  # the smallest subnormal
        sign | ((1 << mant) - 1),  # the largest negative subnormal
        (1 << mant) >> 1,  # a subnormal in the middle
    ]
    out = rng.standard_normal(size).astype(dt)
    raw = out.view(bits)
    picks = rng.integers(0, len(patterns), size)
    mask = rng.random(size) < 0.7
    raw[mask] = np.array(patterns, dtype=np.uint64)[picks[mask]].astype(bits)
    return out


def float_specials(seed: int = 2024) -> list[SweepCase]:
    """NaN payloads, signalling NaNs, infinities, -0 and subnormals through every op, at 6_4 and 2_1."""
    rng = np.random.default_rng(seed + WIDE_SEED_OFFSET + 1)
    out: list[SweepCase] = []
    for dt, fl in itertools.product(("float16", "float32", "float64"), (TOP, FL30, FL21)):
        t = f"{dt}_{_fl(fl)}"
        made = [
            gather(f"w_bits_gather_{t}", (6, 5), (4, 3), 1, dt, "int64", fl, rng),
            gather_elements(f"w_bits_ge_{t}", (6, 5), (7, 5), 0, dt, "int64", fl, rng),
            gather_nd(f"w_bits_gnd_{t}", (6, 5), (4,), 1, 0, dt, fl, rng),
            scatter_elements(f"w_bits_se_{t}", (6, 5), (3, 5), 0, dt, "int64", fl, rng),
            scatter_nd(f"w_bits_snd_{t}", (6, 5), 3, 1, dt, fl, rng),
        ]
        for case in made:
            data = special_floats(dt, case.inputs[0].size, rng).reshape(case.inputs[0].shape)
            inputs = (data, *case.inputs[1:])
            if len(inputs) == 3:
                inputs = (data, inputs[1], special_floats(dt, inputs[2].size, rng).reshape(inputs[2].shape))
            out.append(dataclasses.replace(case, inputs=inputs))
    return out
