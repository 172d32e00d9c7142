"""The partitioned engine's model-level checks, made once when it is built: every graph output is
defined, and no statically shaped value exceeds the memory limit; and what an emulated node reads and
writes in the engine's value table (:class:`EmulatedIO`)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from ...errors import BadModelError, DmlShimError, TooLargeError
from ...graph import node_path, subgraph_prefix, subgraphs
from ...limits import check_static_values, static_dims, unfeedable_inputs
from ...translate import TensorInfo

__all__ = ["EmulatedIO", "check_outputs_defined", "check_static_sizes", "refuse_static_sizes"]

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
    model: onnx.ModelProto | None = None,
    folds: bool = True,
    given: Collection[str] | None = None,
) -> None:
    """Refuse, before any allocation, a graph in which a statically shaped value cannot fit in memory
    (``mapped``: weights read from the model's files where they are needed, never allocated whole;
    ``folds``: onnxruntime's session folds constants, :func:`folds_constants`).

    Graph inputs are the caller's feeds, not allocated here. A graph input no feed could ever match (its
    static shape exceeds the memory limit) means no run can reach a node: the model loads, as in
    onnxruntime, and every run is refused for its feed's shape.

    ``model`` (the model ``graph`` was inferred from): a shape only its graph outputs or ``value_info``
    declare is the model's word, which onnxruntime does not take (it warns when a run's shape differs);
    such a value is refused only when inference without those declarations finds it as large. A Gather
    output declared ``[10000000000, 4]`` was refused on every machine though onnxruntime runs it.

    ``given``: the values left unchecked instead of the graph inputs (a part of a model,
    :mod:`.changed_sizes`); a value of the part over the limit is then raised as it is, and the caller
    checks the whole model."""
    if given is not None:
        fed = set(given)
    else:
        unfeedable = unfeedable_inputs(graph)
        if unfeedable:
            logger.info(
                "graph input(s) %s can never be fed on this machine; sizes left unchecked", unfeedable
            )
            return
        fed = {v.name for v in graph.input} - {t.name for t in graph.initializer}
    # values inside If branches and Loop/Scan bodies: onnxruntime allocates them when the branch runs
    inner, inner_producers = _subgraph_values(graph)
    folded, outer, holders = None, False, set()
    if model is not None:
        from ...model.outer_constants import outer_constant_holders
        from .folded_sizes import folded_copy_at

        holders = outer_constant_holders(model)  # (one walk: whether any, and which)
        folded, outer = folded_copy_at(model, graph), bool(holders)
    outer_found: dict[str, tuple[Sequence[int], int]] = {}
    if outer and folded is None:  # sized from an enclosing graph's constants, as onnxruntime sizes them
        # (with a folded copy, its pass below infers the outer constants too: one inference, not two)
        assert model is not None
        outer_found = _outer_sized(model)

    def sized(unallocated: set[str]) -> dict[str, tuple[Sequence[int], int]]:
        shapes = {
            n: (i.static_shape, i.elem_type)
            for n, i in infos.items()
            if i.is_static and n not in mapped and n not in unallocated
        }
        for name, found in inner.items():
            shapes.setdefault(name, found)
        for name, found in outer_found.items():
            shapes.setdefault(name, found)
        return shapes

    @functools.cache
    def producers() -> dict[str, tuple[str, str]]:  # only a refusal names the node: looked up then
        found = {out: (names[i], node.op_type) for i, node in enumerate(graph.node) for out in node.output}
        found.pop("", None)
        for name, found_by in inner_producers.items():
            found.setdefault(name, found_by)
        return found

    shapes = sized(fed)
    try:
        check_static_values(shapes, producers=producers)
    except TooLargeError:
        if given is not None:  # a part of a model: the whole model decides
            raise
        # The values only ``Shape`` reads are never allocated where onnxruntime folds constants (with
        # folding off it computes a Shape's input too). Leaving them out can only spare a value, so they
        # are looked for (a walk of every node, then the folded values' walk) only once some value is over
        # the limit: the same refusal, or none, as when they were left out first.
        if folds:
            shapes = sized(fed | _shape_only(graph))
        _check_undeclared(shapes, producers, graph, model)
    if folded is not None:
        copy, roots = folded
        if not _check_folded_part(copy, roots | holders, graph, names, mapped, folds, outer):
            _check_folded(copy, names, mapped, folds, outer)


def _check_undeclared(
    shapes: dict[str, tuple[Sequence[int], int]],
    producers: Any,
    graph: onnx.GraphProto,
    model: onnx.ModelProto | None,
) -> None:
    """:func:`check_static_values` on ``shapes``, where a refused value whose size the model's declarations
    gave (:func:`declared_values`, and what inference carried on from them) is sized again without them."""
    try:
        check_static_values(shapes, producers=producers)
    except TooLargeError as exc:
        declared = declared_values(model.graph) if model is not None else set()
        declared |= downstream_of(graph, declared)  # a size inference carried on from a declared one
        if exc.tensor not in declared:
            raise
        assert model is not None
        # A declared shape flows into the values computed from it (a Relu of a Gather whose value_info
        # lies): those sizes are taken again from inference without the declarations, and a value only
        # the declarations sized counts for nothing (onnxruntime runs it at the shapes inputs give).
        undeclared = _undeclared_shapes(model)
        for name in declared & shapes.keys():
            if name in undeclared:
                shapes[name] = undeclared[name]
            else:
                del shapes[name]
        check_static_values(shapes, producers=producers)


def _check_folded_part(
    copy: onnx.ModelProto,
    roots: set[int],
    first: onnx.GraphProto,
    names: Sequence[str],
    mapped: Collection[str],
    folds: bool,
    outer: bool,
) -> bool:
    """:func:`_check_folded` on the part of ``copy`` its changes can reach (:mod:`.changed_sizes`;
    ``roots``: the top-level nodes folded, holding a folded node, or holding outer constants), the rest
    typed as ``first`` (the first inference) typed it. False when the part says nothing for sure (it
    refuses a value, a ``Shape``'s input included, or cannot be inferred): the whole model is checked
    then."""
    from ...model.data_prop import infer_with_data_prop
    from ...model.last_inference import infer_shapes
    from ...model.outer_constants import with_outer_constants
    from ...translate.shapes_info import tensor_infos
    from .changed_sizes import changed_part

    try:
        found = changed_part(copy, first, roots)
        if found is None:
            return False
        part, kept = found
        part = with_outer_constants(part) or part
        inferred = infer_with_data_prop(part) if outer else infer_shapes(part, remember=False)
        given = {v.name for v in inferred.graph.input}
        infos = tensor_infos(inferred.graph)
        check_static_sizes(
            inferred.graph, infos, [names[i] for i in kept], mapped=mapped, folds=folds, given=given
        )
    except Exception as exc:  # a refusal or a failure of the part alone: the whole model decides
        logger.debug("the changed part says nothing for sure (%s): the whole model is inferred again", exc)
        return False
    return True


def _check_folded(
    copy: onnx.ModelProto, names: Sequence[str], mapped: Collection[str], folds: bool, outer: bool
) -> None:
    """The static sizes again where inference, once small constant arithmetic is computed, sizes more
    values (``copy``: the model with a ``Range`` to ``Mul(a, b)`` computed, :mod:`.folded_sizes`);
    ``outer``: subgraphs' size-making nodes read outer-scope constants, which this pass sizes for
    :func:`_outer_sized` too (inferred with data propagation, as that pass infers them)."""
    from ...model.data_prop import infer_with_data_prop
    from ...model.last_inference import infer_shapes
    from ...model.outer_constants import with_outer_constants
    from ...translate.shapes_info import tensor_infos

    # a branch's folded value may meet outer constants at its size-making node (Range(z, Mul(a, b), one))
    copy = with_outer_constants(copy) or copy
    try:
        inferred = infer_with_data_prop(copy) if outer else infer_shapes(copy, remember=False)
    except Exception as exc:  # onnx's errors share no useful base; the plain pass already checked
        logger.debug("no sizes checked after folding constants: %s", exc)
        return
    check_static_sizes(inferred.graph, tensor_infos(inferred.graph), names, mapped=mapped, folds=folds)


def folds_constants(sess_options: Any) -> bool:
    """Whether onnxruntime folds constants in a session built with ``sess_options``: at every graph
    optimization level but ``ORT_DISABLE_ALL`` (its default folds)."""
    import onnxruntime as ort

    level = getattr(sess_options, "graph_optimization_level", None)
    try:
        return level is None or int(level) != int(ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    except (TypeError, ValueError):
        return True


def refuse_static_sizes(model: onnx.ModelProto, sess_options: Any = None) -> None:
    """:func:`check_static_sizes` on ``model`` as onnx's plain inference finds it (on the weightless copy:
    the model check's pass, remembered), for what builds or runs no partitioned engine: the cpu, custom-op
    and directml engines before their onnxruntime session is built (onnxruntime folds a top-level
    ``ConstantOfShape`` of constants when it loads the model, and allocates a branch's when a run takes
    it), and input generation before its first trial run. A model onnx cannot infer is left to
    onnxruntime, as the partitioned engine leaves it.

    Raises:
        TooLargeError: a value whose shape follows from the model alone (in a subgraph too) exceeds the
            memory limit, naming the node, its op, the value and its size.
    """
    from ...graph import display_names
    from ...model.data_prop import infer_with_data_prop
    from ...model.weightless import without_fed_defaults, without_weights
    from ...translate.shapes_info import tensor_infos

    try:
        # an initializer a caller may feed over sizes nothing (onnxruntime folds no value it reads); the
        # values propagated as the partitioned engine's inference propagates them (a ConstantOfShape of
        # a Mul of constants, which onnxruntime folds when it loads the model)
        inferred = infer_with_data_prop(without_fed_defaults(without_weights(model)))
    except Exception as exc:  # onnx's errors share no useful base; the session's own checks report them
        logger.debug("no static sizes checked: %s", exc)
        return
    external = {t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    names = display_names(list(model.graph.node))
    infos = tensor_infos(inferred.graph)
    folds = folds_constants(sess_options)
    check_static_sizes(inferred.graph, infos, names, mapped=external, model=model, folds=folds)


def _shape_only(graph: onnx.GraphProto) -> set[str]:
    """Top-level values only ``Shape`` nodes read (no graph output, no subgraph): onnxruntime's constant
    folding (every optimization level above disabled, its default) replaces a ``Shape`` of a static shape
    by a constant and drops the dead producer, so such a value is never allocated (an ``Expand`` of a feed
    to 10^10 elements read by ``Shape`` alone: 75 MB in onnxruntime). A value onnxruntime folds is not
    among them: it computes it first (a ``ConstantOfShape`` of a constant is allocated); which values those
    are is :func:`~dmlshim.execute.weights.folded_reads.folded_values`' answer, shared with validate's
    DirectML attribution (a random draw or a ``DequantizeLinear`` is not folded, so not allocated)."""
    from ..weights.folded_reads import folded_values

    readers: dict[str, set[str]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
        for _, sub in subgraphs(node):
            for name in _read_names(sub):
                readers.setdefault(name, set()).add("")
    outputs = {v.name for v in graph.output}
    candidates = {name for name, ops in readers.items() if ops == {"Shape"} and name not in outputs}
    if not candidates:
        return candidates  # (no Shape reads a value alone: the folded values are not looked for)
    return candidates - folded_values(graph, with_sources=True)


def _read_names(graph: onnx.GraphProto) -> set[str]:
    names = {name for node in graph.node for name in node.input}
    names |= {v.name for v in graph.output}
    for node in graph.node:
        for _, sub in subgraphs(node):
            names |= _read_names(sub)
    return names


def _subgraph_values(
    graph: onnx.GraphProto,
) -> tuple[dict[str, tuple[Sequence[int], int]], dict[str, tuple[str, str]]]:
    """The statically shaped values computed inside ``graph``'s subgraphs (their ``value_info`` and
    outputs, as inference left them), and the node computing each."""
    shapes: dict[str, tuple[Sequence[int], int]] = {}
    producers: dict[str, tuple[str, str]] = {}

    def walk(g: onnx.GraphProto, prefix: str) -> None:
        for i, node in enumerate(g.node):
            for attr_name, sub in subgraphs(node):
                label = subgraph_prefix(node_path(prefix, node, i), attr_name)
                given = {v.name for v in sub.input} | {t.name for t in sub.initializer}
                for j, inner in enumerate(sub.node):
                    for out in inner.output:
                        if out:
                            producers[out] = (node_path(label, inner, j), inner.op_type)
                for value in (*sub.value_info, *sub.output):
                    dims = static_dims(value)
                    if dims is not None and value.name not in given:
                        shapes[value.name] = (dims, value.type.tensor_type.elem_type)
                walk(sub, label)

    walk(graph, "")
    return shapes, producers


def _outer_sized(model: onnx.ModelProto) -> dict[str, tuple[Sequence[int], int]]:
    """The static shapes of subgraph values that onnx's inference sizes once the outer-scope constants
    their size-making nodes read are visible to it (:mod:`dmlshim.model.outer_constants`; empty when no
    such node reads one, or inference fails). A ``ConstantOfShape`` in an If branch whose shape is a
    main-graph initializer: onnxruntime reads the outer value and allocates the output."""
    from ...model.data_prop import infer_with_data_prop
    from ...model.outer_constants import with_outer_constants

    copy = with_outer_constants(model)
    if copy is None:
        return {}
    try:
        inferred = infer_with_data_prop(copy)
    except Exception as exc:  # onnx's errors share no useful base; the session's own checks report them
        logger.debug("no outer-scope constants resolved: %s", exc)
        return {}
    found, _ = _subgraph_values(inferred.graph)
    return found


def declared_values(graph: onnx.GraphProto, *, nested: bool = True) -> set[str]:
    """The values whose shape the model declares (graph outputs, ``value_info``; in subgraphs too unless
    ``nested`` is False): onnx's inference keeps such a declaration and carries it on, while onnxruntime
    runs the model whatever shape the value has."""
    found = {v.name for v in (*graph.output, *graph.value_info) if v.type.tensor_type.HasField("shape")}
    if nested:
        for node in graph.node:
            for _, sub in subgraphs(node):
                found |= declared_values(sub)
    return found


def downstream_of(graph: onnx.GraphProto, declared: Collection[str]) -> set[str]:
    """The values of ``graph``'s nodes that read, directly or not, a value in ``declared``."""
    reached: set[str] = set()
    if not declared:
        return reached
    seen = set(declared)  # ``declared`` and ``reached`` together: one set test per node
    for node in graph.node:
        if not seen.isdisjoint(node.input):
            made = [name for name in node.output if name]
            reached.update(made)
            seen.update(made)
    return reached


def _undeclared_shapes(model: onnx.ModelProto) -> dict[str, tuple[Sequence[int], int]]:
    """The static shapes (and element types) of ``model``'s values as inference finds them without the
    shapes the model declares for outputs and in ``value_info`` (empty when inference fails)."""
    from ...model.outer_constants import with_outer_constants
    from ...model.weightless import without_declared_shapes
    from ...translate import infer_shapes
    from ...translate.shapes_info import tensor_infos

    light = without_declared_shapes(model)
    try:
        inferred = infer_shapes(with_outer_constants(light) or light)
    except DmlShimError as exc:
        logger.info("no shapes inferred without the declared ones (%s)", exc)
        return {}
    found, _ = _subgraph_values(inferred.graph)
    for name, info in tensor_infos(inferred.graph).items():
        if info.is_static:
            found[name] = (info.static_shape, info.elem_type)
    return found
