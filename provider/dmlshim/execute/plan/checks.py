"""The partitioned engine's model-level checks, made once when it is built: every graph output is
defined, and no statically shaped value exceeds the memory limit; and what an emulated node reads and
writes in the engine's value table (:class:`EmulatedIO`)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import onnx

from ...errors import BadModelError
from ...limits import check_static_values, unfeedable_inputs
from ...translate import TensorInfo

__all__ = ["EmulatedIO", "check_outputs_defined", "check_static_sizes"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmulatedIO:
    """An emulated node's place in the value table: what it reads and what it writes.

    Attributes:
        name: the node's display name.
        op_type: its op.
        inputs: its input value names ("" for an omitted optional input).
        output: its output value name.
    """

    name: str
    op_type: str
    inputs: tuple[str, ...]
    output: str


def check_outputs_defined(graph: onnx.GraphProto) -> None:
    """Every graph output must be computed by a node or be an input or initializer of the graph."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for node in graph.node for o in node.output if o}
    for out in graph.output:
        if out.name not in defined:
            raise BadModelError(
                f"graph output {out.name!r} is computed by no node and is no graph input or initializer",
                tensor=out.name,
                rule="every graph output must be defined in the graph",
            )


def check_static_sizes(
    graph: onnx.GraphProto,
    infos: Mapping[str, TensorInfo],
    names: Sequence[str],
    mapped: Collection[str] = (),
) -> None:
    """Refuse, before any allocation, a graph in which a statically shaped value cannot fit in memory
    (``mapped``: weights read from the model's files where they are needed, never allocated whole).

    Graph inputs are the caller's feeds, not allocated here. A graph input no feed could ever match (its
    static shape exceeds the memory limit) means no run can reach a node: the model loads, as in
    onnxruntime, and every run is refused for its feed's shape."""
    unfeedable = unfeedable_inputs(graph)
    if unfeedable:
        logger.info("graph input(s) %s can never be fed on this machine; sizes left unchecked", unfeedable)
        return
    fed = {v.name for v in graph.input} - {t.name for t in graph.initializer}
    producers = {
        out: (names[i], node.op_type) for i, node in enumerate(graph.node) for out in node.output if out
    }
    check_static_values(
        {
            n: (i.static_shape, i.elem_type)
            for n, i in infos.items()
            if i.is_static and n not in mapped and n not in fed
        },
        producers=producers,
    )
