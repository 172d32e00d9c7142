"""Two facts about onnxruntime's level-1 graph that decide which twin its common-subexpression elimination
keeps (:mod:`.ort_folding` merges twins as it does):

* ``EliminateIdentity`` (a rewrite rule, run before the other level-1 transformers) removes an ai.onnx
  ``Identity`` whose output is no graph output (nor read inside a subgraph), its readers reading its input;
  and one whose output is a graph output no node reads, of a node's output no other node reads and no graph
  output, its producer then writing that graph output. Nodes reading through an Identity become twins of
  nodes reading its input, and the graph's edges (so the order below) change.
* ``CommonSubexpressionElimination`` keeps the first of twins in the order onnxruntime's ``GraphViewer``
  gives the nodes (``GetNodesInTopologicalOrder``): a depth-first walk up the input edges from the leaves
  (nodes no node reads), the last leaf first and, at each node, its producers of highest position first,
  a node placed once all its producers are; not the file's order. A node writing a graph output is never
  merged into its twin.

The functions work on lists of the nodes' fields (read once from protobuf by the caller).
"""

from __future__ import annotations

__all__ = ["eliminate_identities", "viewer_order"]


def eliminate_identities(
    ops: list[str],
    onnx_domain: list[bool],
    outs: list[list[str]],
    inputs: list[list[str]],
    graph_outputs: set[str],
    bodies: dict[int, set[str]],
) -> tuple[list[bool], dict[int, str]]:
    """The ``Identity`` nodes onnxruntime removes: (removed, their readers reading the Identity's input
    from now: ``inputs`` is rewritten so; the ones whose producer writes their graph output from now, by
    index, with the producer's output they replace). ``bodies``: the names each subgraph node's bodies
    read from this graph."""
    eliminated = [False] * len(ops)
    renamed: dict[int, str] = {}
    if "Identity" not in ops:
        return eliminated, renamed
    keep = set(graph_outputs)
    reads: dict[str, int] = {}
    for i, names in enumerate(inputs):
        for n in (*names, *bodies.get(i, ())):
            reads[n] = reads.get(n, 0) + 1
    for body in bodies.values():
        keep.update(body)
    made = {o for i, names in enumerate(outs) if not (ops[i] == "Constant" and onnx_domain[i]) for o in names}
    alias: dict[str, str] = {}
    for i, op in enumerate(ops):
        names = inputs[i]
        if op != "Identity" or not onnx_domain[i] or len(names) != 1 or len(outs[i]) != 1:
            continue
        out, source = outs[i][0], alias.get(names[0], names[0])  # nodes sorted: earlier ones resolved
        if out and out not in keep and source:
            alias[out] = source
            eliminated[i] = True
        elif (
            out in graph_outputs
            and not reads.get(out)
            and source in made
            and source not in graph_outputs
            and reads.get(source) == 1
        ):
            renamed[i] = source
    if alias:
        for names in inputs:
            names[:] = [alias.get(n, n) for n in names]
    return eliminated, renamed


def viewer_order(
    absent: list[bool], outs: list[list[str]], inputs: list[list[str]], bodies: dict[int, set[str]]
) -> list[int]:
    """The positions of the nodes not ``absent`` (Constant nodes, initializers there; Identity nodes
    removed) in onnxruntime's graph-viewer order (see the module's description); a body's reads from this
    graph are edges too."""
    n = len(outs)
    producer = {o: i for i, names in enumerate(outs) if not absent[i] for o in names if o}
    preds: list[list[int]] = [[] for _ in range(n)]
    read = [False] * n
    for i, names in enumerate(inputs):
        if absent[i]:
            continue
        found = {
            p for m in (*names, *bodies.get(i, ())) if m and (p := producer.get(m)) is not None and p != i
        }
        preds[i] = sorted(found)  # pushed so, the highest position is walked first
        for p in found:
            read[p] = True
    order: list[int] = []
    visited = [False] * n
    stack: list[tuple[int, bool]] = [(i, False) for i in range(n) if not read[i] and not absent[i]]
    while stack:
        i, leaving = stack.pop()
        if leaving:
            order.append(i)
            continue
        if visited[i]:
            continue
        visited[i] = True
        stack.append((i, True))
        stack.extend((p, False) for p in preds[i] if not visited[p])
    return order
