"""Whether onnxruntime's level-1 folding (:mod:`.ort_folding`) can remove no node of a graph, answered
without building its graph model.

:func:`.ort_folding.optimized_away` removes a top-level node only when one of its rules starts somewhere:

* constant folding folds a ``Shape`` (of a static shape), or a node every input of which is a constant:
  an initializer, a sparse initializer or a ``Constant`` output at first, a folded node's output later,
  so nothing folds later unless something folds first; the names its inputs are read under change only
  by ``Identity`` elimination (a reader of an ``Identity`` then reads its input), the sharing of
  one-element constants (a constant's name becomes another constant's) and twins merged (an output's
  name becomes its twin's, an output too);
* the reshape fusion starts at a ``Reshape``;
* a merged twin is removed only with the twin it merges into; the rounds with folded values
  (:mod:`.ort_folded_shapes`) start only where a ``Shape`` stays.

So a graph without ``Shape``, ``Reshape`` and ``Identity`` nodes (of any domain), without subgraphs,
where no node other than a ``Constant`` reads only constants (a node reading nothing counts as reading only
constants), loses no node: :func:`nothing_folds`. Any other graph goes through the whole model (a rule
added to :mod:`.ort_folding` must be added here too; ``tests/test_ort_fold_gate.py`` checks the answer
against it). On a chain of 20,000 nodes this costs a walk reading each node's inputs (about 15 ms) where
the whole model cost about 80 ms.
"""

from __future__ import annotations

import onnx

from ..model.graph_columns import flat_ops

__all__ = ["nothing_folds"]

_STARTS = frozenset({"Shape", "Reshape", "Identity"})
"""Op types where a rule may start without a constant input (any domain: a superset)."""


def nothing_folds(graph: onnx.GraphProto) -> bool:
    """True only when onnxruntime's level-1 folding removes no top-level node of ``graph`` (see the
    module); False when it may."""
    ops = flat_ops(graph)
    if ops is None or not ops[0].isdisjoint(_STARTS):
        return False  # a subgraph, a graph too large to read as columns, or an op where a rule starts
    constant = {t.name for t in graph.initializer}  # overridable ones included: a superset
    constant.update(t.values.name for t in graph.sparse_initializer)
    nodes = graph.node
    if "Constant" in ops[0]:
        for node in nodes:
            if node.op_type == "Constant":
                constant.update(node.output)
    constant.discard("")
    for node in nodes:
        for name in node.input:
            if name and name not in constant:
                break
        else:  # every input a constant (or none read)
            if node.op_type != "Constant":
                return False
    return True
