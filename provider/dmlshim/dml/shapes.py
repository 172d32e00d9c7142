"""The Sizes formulas of the DirectML reference pages, shared by validation, translation and kernels.

Every function works on already right-aligned Sizes of one shared DimensionCount and returns the
expected Sizes (also right-aligned), or raises ValueError naming the formula that cannot be met.
"""

from __future__ import annotations

from collections.abc import Sequence


def _fit(sizes: list[int], dimension_count: int, what: str) -> tuple[int, ...]:
    # DirectML right-aligns results: leading 1s are dropped when the concatenation is longer than
    # DimensionCount, and prepended when it is shorter.
    while len(sizes) > dimension_count:
        if sizes[0] != 1:
            raise ValueError(
                f"{what} has {len(sizes)} meaningful dimensions, more than DimensionCount {dimension_count}"
            )
        sizes = sizes[1:]
    return (1,) * (dimension_count - len(sizes)) + tuple(sizes)


def gather_output_sizes(
    input_sizes: Sequence[int], indices_sizes: Sequence[int], axis: int, index_dimensions: int
) -> tuple[int, ...]:
    """DML_GATHER: {Input.Sizes[0..Axis], Indices.Sizes[D-IndexDimensions..D], Input.Sizes[Axis+1..D]}."""
    d = len(input_sizes)
    if not 0 <= axis < d:
        raise ValueError(f"Axis {axis} is outside [0, {d})")
    if not 0 <= index_dimensions <= len(indices_sizes):
        raise ValueError(f"IndexDimensions {index_dimensions} is outside [0, {len(indices_sizes)}]")
    tail = list(indices_sizes[len(indices_sizes) - index_dimensions :]) if index_dimensions else []
    sizes = list(input_sizes[:axis]) + tail + list(input_sizes[axis + 1 :])
    return _fit(sizes, d, "the DML_GATHER output")


def gather_nd_output_sizes(
    input_sizes: Sequence[int],
    indices_sizes: Sequence[int],
    input_dimension_count: int,
    indices_dimension_count: int,
    batch_dimension_count: int = 0,
) -> tuple[int, ...]:
    """DML_GATHER_ND / ND1 OutputTensor.Sizes (also DML_SCATTER_ND UpdatesTensor.Sizes with no batch).

    {Indices.Sizes[D-IndicesDimensionCount .. D-1], Input.Sizes[D-InputDimensionCount+Batch+tuple .. D]},
    right-aligned. The reference page writes the input slice as ``Sizes[D - indexTupleSize .. D]``; its own
    worked example ({3,4,5,6,7} with 3-tuples gives {6,7}) shows the slice starts after the tuple's
    dimensions of the *meaningful* input, which is what is computed here.
    """
    d = len(input_sizes)
    if len(indices_sizes) != d:
        raise ValueError(f"IndicesTensor has {len(indices_sizes)} dimensions, InputTensor {d}")
    if not 1 <= input_dimension_count <= d:
        raise ValueError(f"InputDimensionCount {input_dimension_count} is outside [1, {d}]")
    if not 1 <= indices_dimension_count <= d:
        raise ValueError(f"IndicesDimensionCount {indices_dimension_count} is outside [1, {d}]")
    tuple_size = indices_sizes[-1]
    if batch_dimension_count + tuple_size > input_dimension_count:
        raise ValueError(
            f"index tuple size {tuple_size} plus BatchDimensionCount {batch_dimension_count} exceeds "
            f"InputDimensionCount {input_dimension_count}"
        )
    lead = list(indices_sizes[d - indices_dimension_count : d - 1])
    start = d - input_dimension_count + batch_dimension_count + tuple_size
    sizes = lead + list(input_sizes[start:])
    return _fit(sizes, d, "the DML_GATHER_ND output")


scatter_nd_updates_sizes = gather_nd_output_sizes
"""DML_SCATTER_ND UpdatesTensor.Sizes: the same formula as the GATHER_ND output (BatchDimensionCount 0)."""
