"""Which value of an initializer replaced by ``SessionOptions.add_initializer`` each node reads, as in
onnxruntime.

onnxruntime applies ``add_initializer`` values when it saves the session's initialized tensors, after its
graph optimizations ran: its constant folding (from ``ORT_ENABLE_BASIC``) computes the nodes whose inputs
are all constant initializers with the model's own values, and only the nodes left read the added value.
``Relu(w)`` feeding a Gather is folded with the model's ``w``, while a Gather reading ``w`` itself gets the
added one. (``add_external_initializers`` replaces the tensors before the optimizations: every node reads
its values.) dmlshim puts the added values into the model every engine runs, so the nodes onnxruntime
folds are pointed at a copy of the model's own value instead (:func:`keep_model_values_where_folded`).
Identity nodes are eliminated before folding: a node reading ``Identity(w)`` reads ``w`` (the added value,
unless that node is folded). A gather or scatter whose constant indices leave their axis (the model's own
values) is not folded where this onnxruntime skips folding it instead of refusing the session (1.32): the
node is left to run, reading the added value, as is every node after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence

import onnx

from ...graph import value_names
from ...model.random_ops import RANDOM_OPS
from ...model.weightless import graph_shell, model_shell
from .cpu_kernels import has_cpu_kernel

logger = logging.getLogger(__name__)

MODEL_VALUE_SUFFIX = "__dmlshim_model_value"
"""Appended to an initializer's name for the copy of the model's own value the folded nodes read."""

NOT_FOLDED = RANDOM_OPS | {"DequantizeLinear", "Dropout"}
"""Operators onnxruntime's constant folding leaves to run (random values, Dropout, which onnxruntime counts
as non-deterministic whatever its mode; QDQ's DequantizeLinear)."""

_SUBGRAPH = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def folded_nodes(graph: onnx.GraphProto, outer: frozenset[str] = frozenset()) -> set[int]:
    """The positions of the nodes of ``graph`` (in any order) onnxruntime's constant folding
    computes at session creation: every input a constant initializer (one that is no graph input), a
    Constant's output, or the output of a folded node; ``outer``: the constants of the enclosing graphs
    (for a subgraph)."""
    return _folded(graph, outer)[0]


def folded_values(graph: onnx.GraphProto, *, with_sources: bool = False) -> frozenset[str]:
    """The values of ``graph`` onnxruntime's constant folding computes when it builds
    a session (every optimization level but disabled): the outputs of :func:`folded_nodes` (and of the
    Identity nodes eliminated on constants, whose readers then read a constant). ``with_sources``: also the
    constants they start from (initializers no feed overrides, Constant outputs), i.e. every value that is
    a constant in onnxruntime's optimized graph.

    The one answer for every reader (the static size check's values read by ``Shape`` alone, validate's
    DirectML attribution, the nodes reading an added initializer): measured against onnxruntime 1.32, a
    random draw and a ``DequantizeLinear`` of constants are not folded (a 200 MB one read by ``Shape``
    alone is never allocated), a ``ConstantOfShape`` or ``Expand`` of constants is."""
    constant = _folded(graph, frozenset())[1]
    if with_sources:
        return constant
    fed = {v.name for v in graph.input}
    sources = {t.name for t in graph.initializer if t.name not in fed}
    sources.update(
        o
        for node in graph.node
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx")
        for o in node.output
    )
    return constant - sources


def _folded(
    graph: onnx.GraphProto,
    outer: frozenset[str],
    unfoldable: Callable[[onnx.NodeProto], bool] | None = None,
    types: Mapping[str, int] | None = None,
) -> tuple[set[int], frozenset[str]]:
    """:func:`folded_nodes` and the constants of ``graph`` after them (what its subgraphs see);
    ``unfoldable``: the nodes of constant inputs onnxruntime's folding fails on (left to run)."""
    fed = {v.name for v in graph.input}
    constant = (set(outer) - fed) | {t.name for t in graph.initializer if t.name not in fed}
    folded: set[int] = set()
    pending = list(enumerate(graph.node))
    while pending:  # one pass on a sorted graph; more for nodes listed out of data order
        waiting: list[tuple[int, onnx.NodeProto]] = []
        for position, node in pending:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                constant.update(o for o in node.output if o)
                continue
            inputs = [i for i in node.input if i]
            if not inputs or node.op_type in NOT_FOLDED or any(a.type in _SUBGRAPH for a in node.attribute):
                continue
            if not all(i in constant for i in inputs):
                waiting.append((position, node))
                continue
            if unfoldable is not None and unfoldable(node):
                continue
            folded.add(position)
            constant.update(o for o in node.output if o)
        ready = any(all(not i or i in constant for i in node.input) for _, node in waiting)
        pending = waiting if ready else []
    return _without_eliminated_identities(graph, folded, types), frozenset(constant)


def _without_eliminated_identities(
    graph: onnx.GraphProto, folded: set[int], types: Mapping[str, int] | None = None
) -> set[int]:
    """``folded`` without the nodes onnxruntime's level-1 rules remove first (all but those making a graph
    output): their readers read the node's input itself (:func:`identity_roots`). Identity nodes; with
    ``types`` (the constants' element types) also a Cast to the input's own type."""
    outputs = {o.name for o in graph.output}
    roots = identity_roots(graph, types)
    return {k for k in folded if not graph.node[k].output or graph.node[k].output[0] not in roots
            or set(graph.node[k].output) & outputs}  # fmt: skip


def identity_roots(graph: onnx.GraphProto, types: Mapping[str, int] | None = None) -> dict[str, str]:
    """The value each output of ``graph``'s eliminated nodes stands for once they are eliminated: Identity
    outputs; with ``types``, also those of a Cast to its input's own type, as onnxruntime's
    CastElimination removes it (measured against onnxruntime 1.24 and 1.32,
    ``tests/test_hostile50_added_folding.py``)."""
    roots: dict[str, str] = {}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or not node.input or not node.input[0] or not node.output:
            continue
        root = roots.get(node.input[0], node.input[0])
        if node.op_type == "Identity" or (types is not None and _same_type_cast(node, types.get(root))):
            roots[node.output[0]] = root
    return roots


def _same_type_cast(node: onnx.NodeProto, source: int | None) -> bool:
    """A Cast to ``source``, its input's element type (CastLike has no CPU kernel: it is never folded)."""
    if node.op_type != "Cast" or source is None:
        return False
    to = next((a.i for a in node.attribute if a.name == "to"), None)
    return to is not None and int(to) == source


def keep_model_values_where_folded(
    model: onnx.ModelProto, original: onnx.ModelProto, added: Collection[str], folding: bool
) -> onnx.ModelProto:
    """``model`` (``original`` with the ``add_initializer`` values ``added`` in it) with every node
    onnxruntime folds reading a copy of ``original``'s value of those initializers, as it does; ``model``
    itself when no such node reads one (or ``folding`` is off: optimization level ``ORT_DISABLE_ALL``,
    or ConstantFolding disabled).
    """
    names = set(added)
    if not folding or not names:
        return model
    opsets = {o.domain: int(o.version) for o in model.opset_import}
    plan = _plan(model.graph, frozenset(), {}, names, (original.graph,), opsets)
    reads = {r for _, _, found in plan for r in found.values()}
    if not reads:
        return model
    copies = copy_names(model.graph, sorted(reads))
    out = model_shell(model)
    graph_shell(model.graph, out.graph)
    _point(out.graph, (), plan, copies)
    out.graph.initializer.extend(model.graph.initializer)
    add_model_copies(out.graph, original.graph, copies)
    logger.debug("nodes onnxruntime folds read the model's own %s, not the added values", sorted(reads))
    return out


Plan = list[tuple[tuple[tuple[int, str, int], ...], int, dict[int, str]]]
"""(path of (node position, attribute name, graph index) to a subgraph, folded node position there, the
added names it reads by input position)."""


def _plan(
    graph: onnx.GraphProto,
    outer: frozenset[str],
    roots: dict[str, str],
    names: set[str],
    enclosing: tuple[onnx.GraphProto, ...],
    opsets: Mapping[str, int],
    path: tuple[tuple[int, str, int], ...] = (),
) -> Plan:
    """Every folded node of ``graph`` and its subgraphs reading an added name (through Identity nodes
    too, which onnxruntime eliminates first). ``enclosing``: the model's own graphs down to ``graph``'s
    (the main graph with the model's values, where its folding reads them). A node the CPU provider has
    no kernel for at its constants' types is not folded (:mod:`.cpu_kernels`)."""
    types = _constant_types(enclosing)

    def unfoldable(node: onnx.NodeProto) -> bool:
        return not has_cpu_kernel(node, opsets, types) or _folding_fails(node, enclosing)

    folded, constant = _folded(graph, outer, unfoldable, types)
    roots = {**roots, **identity_roots(graph, types)}
    plan: Plan = []
    for k, node in enumerate(graph.node):
        if k in folded:
            found = {j: roots.get(i, i) for j, i in enumerate(node.input) if roots.get(i, i) in names}
            if found:
                plan.append((path, k, found))
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for n, sub in enumerate(subs):
                plan += _plan(
                    sub, constant, roots, names, (*enclosing, sub), opsets, (*path, (k, attr.name, n))
                )
    return plan


def _constant_types(enclosing: tuple[onnx.GraphProto, ...]) -> dict[str, int]:
    """The element types of the initializers and Constant outputs of ``enclosing`` (innermost wins)."""
    types: dict[str, int] = {}
    for graph in enclosing:
        types.update((t.name, int(t.data_type)) for t in graph.initializer)
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
                value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
                if value is not None:
                    types[node.output[0]] = int(value.data_type)
    return types


def _folding_fails(node: onnx.NodeProto, enclosing: Sequence[onnx.GraphProto]) -> bool:
    """Whether onnxruntime's constant folding fails on ``node`` (all its inputs constant): a gather or
    scatter whose indices (the model's own values, read where small and inline) leave the data's axis.
    Where this onnxruntime refuses such a session instead, the session was refused before this is asked
    (:func:`dmlshim.translate.folding_refusal.folding_refusal`)."""
    from ...translate.constant_indices import first_out_of_range  # translation, on demand
    from ...translate.ep_refusals import constant_value
    from ...translate.folding_refusal import FOLDED_OPS

    if node.op_type not in FOLDED_OPS or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return False
    shape = _constant_dims(enclosing, node.input[0])
    if shape is None:
        return False
    return first_out_of_range(node, shape, constant_value(enclosing, node.input[1])) is not None


def _constant_dims(enclosing: Sequence[onnx.GraphProto], name: str) -> tuple[int, ...] | None:
    """The dims of the constant ``name`` (an initializer's, read from its proto, or a small Constant's)."""
    from ...translate.ep_refusals import constant_value

    for graph in reversed(enclosing):
        for init in graph.initializer:
            if init.name == name:
                return tuple(int(d) for d in init.dims)
    value = constant_value(enclosing, name)
    return None if value is None else tuple(value.shape)


def _point(graph: onnx.GraphProto, path: tuple, plan: Plan, copies: dict[str, str]) -> None:
    """Point the planned inputs at the copies (``graph`` is the rewritten model's main graph)."""
    for where, k, found in plan:
        g = graph
        for position, attr_name, n in where:
            attr = next(a for a in g.node[position].attribute if a.name == attr_name)
            g = attr.g if attr.type == onnx.AttributeProto.GRAPH else attr.graphs[n]
        for j, root in found.items():
            g.node[k].input[j] = copies[root]


def add_model_copies(graph: onnx.GraphProto, original: onnx.GraphProto, copies: Mapping[str, str]) -> None:
    """Append to ``graph`` each initializer of ``original`` named in ``copies``, under its copy's name."""
    for tensor in original.initializer:
        if tensor.name in copies:
            copy = graph.initializer.add()
            copy.CopyFrom(tensor)
            copy.name = copies[tensor.name]


def copy_names(graph: onnx.GraphProto, names: list[str]) -> dict[str, str]:
    """A name for the copy of each initializer in ``names``, :data:`MODEL_VALUE_SUFFIX` appended (then a
    number) until no value of the model, in any graph, has it: the model may use any name."""
    taken = value_names(graph)
    copies: dict[str, str] = {}
    for name in names:
        fresh, k = name + MODEL_VALUE_SUFFIX, 1
        while fresh in taken:
            k += 1
            fresh = f"{name}{MODEL_VALUE_SUFFIX}{k}"
        taken.add(fresh)
        copies[name] = fresh
    return copies
