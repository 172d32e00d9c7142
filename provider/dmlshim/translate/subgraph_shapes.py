"""Shapes inside control-flow bodies that ONNX shape inference leaves unknown, and why the others stay so.

ONNX's inference of a Loop gives the body's loop-carried inputs no shape (a carried value may change its
sizes from one iteration to the next), so every gather/scatter node reading one had no rank. onnxruntime
knows them when it runs: the first iteration reads the Loop's initial values, later ones what the body
gave back. :func:`type_loop_states` types them statically: a carried input takes the initial value's type;
after inference, every dimension that the body's output for it does not keep becomes a symbol of its own
(``loop/body:state[0]``), until nothing changes. A carried value whose rank the body changes (or leaves
unknown) stays of unknown rank.

:func:`unknown_rank_origins` says where an unknown rank comes from, for the ``SHAPE_UNKNOWN`` reason of a
node: the If whose branches give outputs of different ranks (onnxruntime knows which branch runs only when
it runs), the loop-carried value whose rank the body changes, or the first node whose output ONNX's
inference leaves without a rank.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import onnx

from ..graph import node_path, subgraph_prefix, subgraphs
from .plan import TensorInfo

__all__ = ["UnknownOrigin", "type_loop_states", "unknown_rank_origins"]

logger = logging.getLogger(__name__)

_MAX_PASSES = 4


def _graphs(graph: onnx.GraphProto, prefix: str = "") -> Iterator[tuple[str, onnx.GraphProto, list[str]]]:
    """Every graph with its path prefix and the path names of its nodes (subgraphs after their owner)."""
    names = [node_path(prefix, node, i) for i, node in enumerate(graph.node)]
    yield prefix, graph, names
    for node, name in zip(graph.node, names, strict=True):
        for attr_name, sub in subgraphs(node):
            yield from _graphs(sub, subgraph_prefix(name, attr_name))


def _declared(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    return {v.name: v.type for v in (*graph.input, *graph.value_info, *graph.output) if v.name}


def _rank(tp: onnx.TypeProto | None) -> int | None:
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return len(tp.tensor_type.shape.dim)


def _dim_key(dim: onnx.TensorShapeProto.Dimension) -> int | str | None:
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    if dim.HasField("dim_param"):
        return dim.dim_param
    return None


_Lookup = Callable[[str], "onnx.TypeProto | None"]


def _loops(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.NodeProto, _Lookup]]:
    """Every Loop node with its path name and a lookup of the types its enclosing graphs declare."""

    def visit(
        graph: onnx.GraphProto, prefix: str, outer: Callable[[str], onnx.TypeProto | None]
    ) -> Iterator[tuple[str, onnx.NodeProto, Callable[[str], onnx.TypeProto | None]]]:
        here: list[dict[str, onnx.TypeProto]] = []  # read at the first lookup: most graphs have no Loop

        def lookup(name: str) -> onnx.TypeProto | None:
            if not here:
                here.append(_declared(graph))
            found = here[0].get(name)
            return found if found is not None else outer(name)

        for index, node in enumerate(graph.node):
            name = node_path(prefix, node, index)
            if node.op_type == "Loop" and node.domain in ("", "ai.onnx"):
                yield name, node, lookup
            for attr_name, sub in subgraphs(node):
                yield from visit(sub, subgraph_prefix(name, attr_name), lookup)

    yield from visit(model.graph, "", lambda _name: None)


def _body(node: onnx.NodeProto) -> onnx.GraphProto | None:
    for a in node.attribute:
        if a.name == "body" and a.type == onnx.AttributeProto.GRAPH:
            return a.g
    return None


_Typing = dict[tuple[str, int], onnx.TypeProto | None]
"""(Loop path name, carried input position) -> the type given to that body input (None: given up)."""


def _apply(model: onnx.ModelProto, typing: _Typing) -> None:
    for loop_name, node, _lookup in _loops(model):
        body = _body(node)
        if body is None:
            continue
        for j in range(2, len(body.input)):
            chosen = typing.get((loop_name, j), None)
            if chosen is not None:
                body.input[j].type.CopyFrom(chosen)


def _step(model: onnx.ModelProto, typing: _Typing) -> bool:
    """From the inferred ``model``: type the loop-carried inputs not typed yet, widen the dims the body does
    not keep, give up on a rank the body changes; True when ``typing`` changed."""
    changed = False
    for loop_name, node, lookup in _loops(model):
        body = _body(node)
        if body is None:
            continue
        outputs = _declared(body)
        for j, initial in enumerate(node.input[2:], start=2):
            if j >= len(body.input) or j - 1 >= len(body.output):
                break
            key = (loop_name, j)
            state = body.input[j]
            if key not in typing:
                start = lookup(initial) if initial else None
                if _rank(state.type) is not None or start is None or _rank(start) is None:
                    continue
                if not start.tensor_type.elem_type:
                    continue
                typing[key] = onnx.TypeProto()
                typing[key].CopyFrom(start)  # type: ignore[union-attr]
                changed = True
                continue
            chosen = typing[key]
            if chosen is None:
                continue  # given up already
            back = outputs.get(body.output[j - 1].name)
            rank = _rank(chosen)
            if back is None or _rank(back) != rank:
                # The body gives back another rank (or one ONNX cannot tell): later iterations may not
                # have the first one's rank.
                typing[key] = None
                changed = True
                continue
            dims = chosen.tensor_type.shape.dim
            for axis, (mine, theirs) in enumerate(zip(dims, back.tensor_type.shape.dim, strict=True)):
                if _dim_key(mine) != _dim_key(theirs) and not mine.dim_param.startswith(f"{loop_name}:"):
                    mine.Clear()
                    mine.dim_param = f"{loop_name}:{state.name}[{axis}]"
                    changed = True
    return changed


def type_loop_states(
    model: onnx.ModelProto, infer: Callable[[onnx.ModelProto], onnx.ModelProto]
) -> onnx.ModelProto:
    """``model`` (already inferred) with the loop-carried body inputs of its Loops typed (see the module
    doc), inferred again with ``infer``. Each pass starts from ``model`` itself, whose inferred types were
    derived from untyped carried inputs and so never contradict the types given here."""
    typing: _Typing = {}
    current = model
    for _ in range(_MAX_PASSES):
        if not _step(current, typing):
            break
        fresh = onnx.ModelProto()
        fresh.CopyFrom(model)
        _apply(fresh, typing)
        current = infer(fresh)
    else:
        if _step(current, typing):  # no fixed point: keep ONNX's own (untyped) answer
            logger.debug("loop-carried types did not settle in %d passes; left untyped", _MAX_PASSES)
            return model
    if current is not model:
        logger.debug("loop-carried inputs typed: %s", sorted(k for k, v in typing.items() if v is not None))
    return current


@dataclass(frozen=True)
class UnknownOrigin:
    """Why a value's rank is unknown statically: the node where the unknown rank starts and the reason."""

    node: str
    message: str
    advice: str = (
        "give --input-shape for the symbolic model inputs it depends on, or run the model (run and validate "
        "translate the node with the real shapes)"
    )


def _if_branches(node: onnx.NodeProto, k: int) -> str | None:
    """``then_branch gives rank 3, else_branch rank 4`` when the branches' k-th outputs disagree in rank."""
    ranks: dict[str, int | None] = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH and k < len(a.g.output):
            out = a.g.output[k]
            ranks[a.name] = _rank(_declared(a.g).get(out.name) or out.type)
    if len(ranks) != 2:
        return None
    known = [r for r in ranks.values() if r is not None]
    if len(known) == 2 and known[0] != known[1]:
        return " and ".join(f"{branch} gives rank {r}" for branch, r in sorted(ranks.items(), reverse=True))
    return None


def unknown_rank_origins(
    model: onnx.ModelProto, infos: Callable[[str, str], TensorInfo | None]
) -> Callable[[str, str], UnknownOrigin | None]:
    """A lookup ``(graph prefix, value name) -> UnknownOrigin`` for values of unknown rank.

    Args:
        model: the inferred model.
        infos: the TensorInfo a graph (by its path prefix) sees for a name (outer scopes included).
    """
    producers: dict[tuple[str, str], tuple[str, onnx.NodeProto]] = {}
    owners: dict[str, str] = {}  # graph prefix -> the prefix of the graph that holds its owner
    for prefix, graph, names in _graphs(model.graph):
        for node, name in zip(graph.node, names, strict=True):
            for out in node.output:
                if out:
                    producers[(prefix, out)] = (name, node)
            for attr_name, _sub in subgraphs(node):
                owners[subgraph_prefix(name, attr_name)] = prefix
    loop_states = {
        (subgraph_prefix(loop_name, "body"), state.name): loop_name
        for loop_name, node, _lookup in _loops(model)
        if (body := _body(node)) is not None
        for state in body.input[2:]
    }

    from ..model.ort_errors import REGISTER_HOW, unknown_operators

    unknown = {u.node: u for u in unknown_operators(model)}

    def unranked(prefix: str, name: str) -> bool:
        found = infos(prefix, name)
        return found is None or found.shape is None

    def origin(prefix: str, name: str, depth: int = 0) -> UnknownOrigin | None:
        scope: str | None = prefix
        while scope is not None:  # the graph that defines the name: this one or an enclosing one
            if (scope, name) in producers or (scope, name) in loop_states:
                break
            scope = owners.get(scope)
        if scope is None:
            return None
        loop = loop_states.get((scope, name))
        if loop is not None:
            return UnknownOrigin(
                loop,
                f"{name!r} is carried from one iteration of Loop {loop!r} to the next and the body changes "
                "its rank (or ONNX shape inference cannot tell it), so only the run knows it",
                "run the model (run and validate translate the node with the real shapes)",
            )
        node_name, node = producers[(scope, name)]
        if node_name in unknown:
            # nothing to infer from: only the custom op's library knows the shapes it produces
            return UnknownOrigin(
                node_name,
                f"{name!r} is an output of {node_name!r}, of operator {unknown[node_name].qualified}, which "
                "ONNX and onnxruntime do not define (a custom op): no shape inference knows its shapes",
                "its shapes are known only when it runs: register the library that defines it "
                f"({REGISTER_HOW}) and run the model",
            )
        if depth < 200:
            for i in node.input:
                if i and unranked(scope, i):
                    found = origin(scope, i, depth + 1)
                    if found is not None:
                        return found
        if node.op_type == "If":
            k = list(node.output).index(name)
            branches = _if_branches(node, k)
            if branches is not None:
                return UnknownOrigin(
                    node_name,
                    f"output {k} of If {node_name!r} has no static rank: {branches}; which branch runs is "
                    f"decided by the condition {node.input[0]!r} at run time",
                    "--input-shape helps only where the sizes decide that condition before the run (inspect "
                    "then takes the branch that runs); run the model (run and validate translate the node "
                    "with the real shapes)",
                )
        return UnknownOrigin(
            node_name, f"ONNX shape inference gives the output of {node.op_type} {node_name!r} no rank"
        )

    return origin
