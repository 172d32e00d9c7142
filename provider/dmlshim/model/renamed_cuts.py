"""Whether two plans of data propagation's cuts differ only by the names onnx generates for unknown
dimensions (``unk__N``): :func:`~dmlshim.model.data_prop.infer_with_data_prop` then stops its cut passes,
each later one repeating the last under another naming."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from .data_cuts import UNKNOWN as _UNKNOWN
from .data_cuts import GraphPath, Site
from .data_cuts import each as _each

__all__ = ["renamed_only"]


def _dims(tp: onnx.TypeProto) -> Iterator[onnx.TensorShapeProto.Dimension]:
    """Every dimension a type declares (element types of sequences, optionals and maps included)."""
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        yield from getattr(tp, kind).shape.dim
    elif kind in ("sequence_type", "optional_type"):
        yield from _dims(getattr(tp, kind).elem_type)
    elif kind == "map_type":
        yield from _dims(tp.map_type.value_type)


def _symbols(model: onnx.ModelProto, paths: list[GraphPath]) -> set[str]:
    """The dimension names the model itself declares, in any of its graphs."""
    return {
        d.dim_param
        for _, graph in _each(model, paths)
        for value in (*graph.input, *graph.value_info, *graph.output)
        for d in _dims(value.type)
        if d.dim_param
    }


def renamed_only(
    plan: dict[Site, tuple[str, bytes]],
    again: dict[Site, tuple[str, bytes]],
    model: onnx.ModelProto,
    paths: list[GraphPath],
) -> bool:
    """Whether ``again`` makes ``plan``'s "unknown" cuts, their declared types the same up to a one-to-one
    renaming of the dimension names the model does not declare (those onnx generated, ``unk__N``).

    Why the loop may stop there: the cut copies of the two plans are then the same model up to that
    renaming (the fresh inputs' types carry the only names that differ), and onnx's inference of a
    renamed model is the renamed inference (names are only compared for equality; the names it generates
    are fresh in both). So the next pass's types are this pass's renamed, its cuts (which sites, what kind;
    a verdict reads dimension values and ranks, never names) are these again, and so on for every pass
    left: the loop would end on these same "unknown" cuts, i.e. on the uncut pass.
    """
    if plan.keys() != again.keys() or any(kind != _UNKNOWN for kind, _ in again.values()):
        return False
    if any(plan[site][0] != _UNKNOWN for site in plan):
        return False
    own = _symbols(model, paths)
    read: dict[bytes, tuple[bytes, tuple[str | None, ...]]] = {}

    def form(declared: bytes, names: dict[str, int]) -> tuple[bytes, tuple[object, ...]]:
        # The type without its dimension names, and the names in order: the model's own as they are,
        # the others by order of first appearance over the plan.
        if declared not in read:
            tp = onnx.TypeProto.FromString(declared)
            params: list[str | None] = []
            for d in _dims(tp):
                params.append(d.dim_param if d.HasField("dim_param") else None)
                d.ClearField("dim_param")
            read[declared] = (tp.SerializeToString(deterministic=True), tuple(params))
        bare, params_ = read[declared]
        return bare, tuple(
            None if p is None else ("own", p) if p in own else ("new", names.setdefault(p, len(names)))
            for p in params_
        )

    before: dict[str, int] = {}
    after: dict[str, int] = {}
    return all(form(plan[site][1], before) == form(again[site][1], after) for site in plan)
