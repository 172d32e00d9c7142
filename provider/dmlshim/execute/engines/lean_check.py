"""The lean check: the whole-model check's session once every emulated node is given (issue 36, item 2).

The whole-model check (:mod:`dmlshim.execute.engines.whole_model`) lists every emulated node's inputs
and output as extra graph outputs, so that it can compute and compare them. Each extra output is a value
onnxruntime must keep and hand back, and a value no fusion may swallow: on the corpus the check's session
costs up to 1.2-1.8x onnxruntime's plain one. Once a run of the check has taken every non-lean node's
output from onnxruntime on the proof of its indices (a gather past its proved runs, a scatter whose indices
prove it: :meth:`dmlshim.execute.plan.steps.EmulatedStep.given_on`), the next runs need of each node only
what that proof reads: its indices' values and the shapes of its other computed inputs. The lean check
runs the model with only those as extra outputs (:func:`lean_outputs`) and proves each node again
(:meth:`~dmlshim.execute.plan.steps.EmulatedStep.given_again`); the lean gathers read what they read in
the full check. When a node's proof does not hold on a run (new shapes, a negative or repeated index, an
OrtValue), the run is answered by the full check exactly as before, and the lean check waits until a
full run has every node given again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from ...model.nonnegative import nonnegative_prover
from ...translate import TensorInfo
from ..proofs.gather_given import LEAN_OPS, numpy_dtype, shape_output
from ..proofs.symbol_shapes import FeedShapes, input_symbols, shared_symbols

logger = logging.getLogger(__name__)

KEEP_FULL_MAX_BYTES = 16 * 2**20
"""Models whose initializers weigh at most this keep the full check's session beside the lean one (a run
the lean proofs cannot answer goes straight to it). Heavier ones hold one session at a time: the full
session is released before the lean one is built, and rebuilt (the lean one released first) the first
time a run needs it, after which that session stays on the full check (peak memory stays that of one
session; see docs/performance.md). So do sessions whose full run fetched more than this many bytes
(outputs and extra outputs): onnxruntime's memory arena of the full session holds at least that much
after its runs, which beside the lean session's doubled a GNN's peak memory (issue 36)."""


_ABSENT, _FETCHED, _HELD, _SHAPE, _FROM_FEEDS = range(5)
"""Where a lean run finds a non-lean step's input (:attr:`LeanSession.given_plan`)."""


def input_source(kind: int) -> str:
    """A :attr:`LeanSession.given_plan` kind by name: absent, fetched, held, shape or feeds."""
    return ("absent", "fetched", "held", "shape", "feeds")[kind]


@dataclass(frozen=True)
class LeanCheckSpec:
    """What the whole-model check needs to run a lean check.

    Attributes:
        make_session: builds onnxruntime's session of the model with the extra outputs it is given.
        extra: the lean session's extra outputs (:func:`lean_outputs`).
        from_feeds: the non-lean nodes' inputs whose shapes follow from the feeds'.
        keep_full: keep the full check's session beside the lean one (:data:`KEEP_FULL_MAX_BYTES`).
        lean_after: the outputs of the gathers that are lean in the lean session only
            (:func:`lean_after_proof`).
    """

    make_session: Callable[[list[str]], Any]
    extra: tuple[str, ...]
    from_feeds: FeedShapes
    keep_full: bool
    lean_after: frozenset[str] = frozenset()
    """Gathers the lean session takes by their inputs' shapes once their proved runs are behind them
    (:func:`lean_after_proof`)."""


def given_input_shapes(
    steps: Sequence[Any],
    lean: Collection[str],
    infos: Mapping[str, TensorInfo],
    graph: onnx.GraphProto,
    static: Collection[str],
) -> FeedShapes:
    """The computed inputs of the non-lean emulated nodes whose shapes follow from the feeds' alone (every
    dim a size, or a name some graph input declares), as onnx's shape inference worked them out from the
    operators: no ``Shape`` output is added for them (each costs onnxruntime a node, an output and often
    a fusion: measured, such outputs took back most of what leaving the values out saved). A value whose
    shape the model itself declares (``value_info``, which exporters sometimes leave stale) is not
    among them."""
    symbols = input_symbols(graph)
    declared = {v.name for v in graph.value_info}
    dims: dict[str, tuple[int | str | None, ...]] = {}
    for step in steps:
        if step.output in lean:
            continue
        for name in (n for i, n in enumerate(step.inputs) if i != 1):
            info = infos.get(name) if name and name not in static and name not in declared else None
            if info is None or info.shape is None:
                continue
            if all(isinstance(d, int) or d in symbols for d in info.shape):
                dims[name] = tuple(info.shape)
    return FeedShapes(dims, symbols, shared=shared_symbols(graph))


def _fed_values(graph: onnx.GraphProto) -> set[str]:
    """The top-level values computed from a graph input that is no initializer (a feed): onnxruntime
    cannot fold them to constants (values reached only through a subgraph are left out: fewer proofs)."""
    initializers = {t.name for t in graph.initializer}
    fed = {v.name for v in graph.input if v.name not in initializers}
    reads = fed - {""}  # an omitted input ("") reads nothing: one set test per node
    for node in graph.node:
        if not reads.isdisjoint(node.input):
            made = [o for o in node.output if o]
            fed.update(made)
            reads.update(made)
    return fed


def lean_after_proof(
    emulated: Sequence[Any],
    lean: Collection[str],
    infos: Mapping[str, TensorInfo],
    graph: onnx.GraphProto,
    constants: Mapping[str, onnx.TensorProto],
) -> tuple[dict[str, tuple[np.dtype[Any], np.dtype[Any]]], dict[str, tuple[int | str | None, ...]]]:
    """The small gathers (not in ``lean``, see :func:`dmlshim.execute.proofs.gather_given.lean_gathers`)
    that the lean session takes by their inputs' shapes, as lean gathers are, once the full check has
    computed and compared them on their proved runs: their indices are computed from the feeds and proved
    non-negative by the graph (:func:`dmlshim.model.nonnegative.nonnegative_prover`: TopK's indices, an
    ArgMax, ...), so on any run onnxruntime completes they are in ``[0, dim)`` (its CPU gathers refuse
    any other index) and ONNX and DirectML select the same elements. The proof holds for every run from
    the graph alone: nothing of it is fetched or proved per run. Not taken: indices that are a constant
    or computed from constants only (onnxruntime may fold them, and its gather into a Slice, which
    refuses nothing), a Range's output (a Range -> Gather may become a Slice), a graph input or an
    initializer a caller can override (the prover proves neither).

    Returns the gathers' data and indices dtypes by output name, and the static dims of their computed
    inputs whose shapes follow from the feeds' (each dim a size, or a name a graph input declares: no
    ``Shape`` output is added for them; a value the model declares in ``value_info`` is not among them)."""
    found: dict[str, tuple[np.dtype[Any], np.dtype[Any]]] = {}
    dims: dict[str, tuple[int | str | None, ...]] = {}
    candidates = [
        io
        for io in emulated
        if io.op_type in LEAN_OPS and io.output not in lean and len(io.inputs) > 1 and all(io.inputs[:2])
    ]
    if not candidates:
        return found, dims
    fed = _fed_values(graph)
    producer = {out: node.op_type for node in graph.node for out in node.output if out}
    symbols = input_symbols(graph)
    declared = {v.name for v in graph.value_info}
    static = {v.name for v in graph.input} | set(constants)
    proved: Callable[[str], bool] | None = None
    for io in candidates:
        indices = io.inputs[1]
        if indices in static or indices not in fed or producer.get(indices) in (None, "Range", "Constant"):
            continue
        data_info, indices_info = (infos.get(n) for n in io.inputs[:2])
        if data_info is None or indices_info is None or not data_info.elem_type or not indices_info.elem_type:
            continue
        dtypes = numpy_dtype(data_info.elem_type), numpy_dtype(indices_info.elem_type)
        if dtypes[0] is None or dtypes[1] is None or dtypes[1].kind not in "iu":
            continue
        if proved is None:
            proved = nonnegative_prover(graph, constants, {n: i.elem_type for n, i in infos.items()})
        if not proved(indices):
            continue
        found[io.output] = (dtypes[0], dtypes[1])
        for name, info in ((io.inputs[0], data_info), (indices, indices_info)):
            if name in static or name in declared or info.shape is None:
                continue
            if all(isinstance(d, int) or d in symbols for d in info.shape):
                dims[name] = tuple(info.shape)
    return found, dims


def with_dims(
    shapes: FeedShapes | None, dims: Mapping[str, tuple[int | str | None, ...]], graph: onnx.GraphProto
) -> FeedShapes | None:
    """``shapes`` (the lean gathers' inputs whose shapes follow from the feeds') with ``dims`` added
    (:func:`lean_after_proof`'s), symbols resolved by ``graph``'s inputs."""
    if not dims:
        return shapes
    symbols = {**input_symbols(graph), **(shapes.symbols if shapes is not None else {})}
    shared = shared_symbols(graph)
    if shapes is None:
        return FeedShapes(dict(dims), symbols, shared=shared)
    return FeedShapes({**dims, **shapes.dims}, symbols, shapes.skeleton, shapes.indices, shared)


def lean_outputs(
    steps: Sequence[Any],
    static: Collection[str],
    graph_outputs: Collection[str],
    lean: Collection[str],
    shaped: Collection[str],
    by_values: Collection[str],
    from_feeds: Collection[str] = (),
) -> list[str]:
    """The lean session's extra outputs: for each emulated node that is not a lean gather, its computed
    indices' values and a ``Shape`` of each other computed input; for each lean gather, what the full
    check fetches of it (the shapes of its computed inputs, none for those in ``shaped``, whose shapes
    follow from the feeds'), values where a proof reads them. ``static``: the graph inputs and the
    values the run holds (initializers, folded constants); ``by_values``: lean gathers' indices proved in
    range from their values; ``from_feeds``: the non-lean nodes' inputs whose shapes follow from the
    feeds' (:func:`given_input_shapes`), for which no ``Shape`` is added."""
    read = set(by_values)
    for step in steps:
        if step.output not in lean and len(step.inputs) > 1 and step.inputs[1]:
            read.add(step.inputs[1])
    seen = set(graph_outputs) | set(static)
    names: list[str] = []

    def add(name: str) -> None:
        if name not in seen:
            seen.add(name)
            names.append(name)

    for step in steps:
        is_lean = step.output in lean
        for name in step.inputs[:2] if is_lean else step.inputs:
            if not name or name in seen:
                continue
            if name in read:
                add(name)
            elif not (name in shaped if is_lean else name in from_feeds):
                add(shape_output(name))
        if step.output in read:
            add(step.output)
    return names


class LeanSession:
    """The lean check's onnxruntime session and what a run reads from it.

    Args:
        session: the session of the model with ``extra`` added to its outputs.
        graph_outputs: the model's output names.
        extra: :func:`lean_outputs`.
        steps: the emulated steps, in graph order.
        lean: the outputs of the lean gathers.
        from_feeds: the non-lean steps' inputs whose shapes follow from the feeds'
            (:func:`given_input_shapes`).
    """

    def __init__(
        self,
        session: Any,
        graph_outputs: Sequence[str],
        extra: Sequence[str],
        steps: Sequence[Any],
        lean: Collection[str],
        from_feeds: FeedShapes,
    ) -> None:
        self.session = session
        self._from_feeds = from_feeds
        self.fetch = [*graph_outputs, *extra]
        self.graph_outputs = len(graph_outputs)
        """How many of :attr:`fetch` are the model's outputs (its first)."""
        position = self.position = {name: i for i, name in enumerate(self.fetch)}
        # Per non-lean step: per input, where its run finds it (decided once): absent, a fetched value,
        # a held value (a graph input, an initializer), a fetched shape, or a shape from the feeds'.
        plan: dict[str, tuple[tuple[int, str, int], ...]] = {}
        self._recipes: dict[str, tuple[Any, ...]] = {}
        for step in steps:
            if step.output in lean:
                continue
            where = []
            for n in step.inputs:
                if not n:
                    where.append((_ABSENT, "", 0))
                elif n in position:
                    where.append((_FETCHED, n, position[n]))
                elif shape_output(n) in position:
                    where.append((_SHAPE, n, position[shape_output(n)]))
                elif n in from_feeds.dims:
                    where.append((_FROM_FEEDS, n, 0))
                    # each dim a size, or (the feed, the axis) that declares its name; a name several
                    # inputs declare is read by FeedShapes.resolve, which holds their feeds to one size
                    if not any(d in from_feeds.shared for d in from_feeds.dims[n]):
                        self._recipes[n] = tuple(
                            d if isinstance(d, int) else from_feeds.symbols[d]  # type: ignore[index]
                            for d in from_feeds.dims[n]
                        )
                else:
                    where.append((_HELD, n, 0))
            plan[step.output] = tuple(where)
        self.given_plan = plan

    @property
    def from_feeds(self) -> FeedShapes:
        """The non-lean nodes' inputs whose shapes follow from the feeds'."""
        return self._from_feeds

    def run(self, feeds: dict[str, Any], run_options: Any) -> list[Any]:
        """onnxruntime's run of the lean model."""
        return self.session.run(self.fetch, feeds, run_options)  # type: ignore[no-any-return]

    def inputs_of(
        self, output: str, fetched: list[Any], values: dict[str, Any], added: list[str]
    ) -> list[Any] | None:
        """A non-lean step's inputs as its lean proof takes them: fetched or held values, shapes (tuples)
        of the others; None when one is neither. Values fetched go to ``values`` (their names to
        ``added``)."""
        inputs: list[Any] = []
        for kind, name, at in self.given_plan[output]:
            if kind == _FETCHED:
                value = values.get(name)
                if value is None:
                    value = values[name] = fetched[at]
                    added.append(name)
                inputs.append(value)
            elif kind == _SHAPE:
                inputs.append(tuple(fetched[at].tolist()))  # a Shape's int64s
            elif kind == _HELD:
                value = values.get(name)
                if value is None:
                    return None
                inputs.append(value)
            elif kind == _FROM_FEEDS:
                try:  # the feeds' plain arrays: their dims read directly
                    shape = tuple(
                        d if type(d) is int else values[d[0]].shape[d[1]] for d in self._recipes[name]
                    )
                except (AttributeError, IndexError, KeyError, TypeError):
                    shape = self._from_feeds.resolve(name, values)  # an OrtValue, say
                if shape is None:
                    return None
                inputs.append(shape)
            else:
                inputs.append(None)
        return inputs


def build_lean(
    make_session: Callable[[list[str]], Any],
    graph_outputs: Sequence[str],
    extra: Sequence[str],
    steps: Sequence[Any],
    lean: Collection[str],
    from_feeds: FeedShapes,
) -> LeanSession | None:
    """The lean session, or None when onnxruntime cannot build it (the full check goes on)."""
    try:
        session = make_session(list(extra))
    except Exception as exc:  # onnxruntime refuses the model with these outputs: keep the full check
        logger.debug("lean check unavailable: %s", exc)
        return None
    return LeanSession(session, graph_outputs, extra, steps, lean, from_feeds)
