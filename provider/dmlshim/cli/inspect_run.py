"""``dmlshim inspect --inputs X.npz`` / ``--input-shape``: the shapes a run gives, for the translation.

The model runs once on onnxruntime CPU (one thread, onnxruntime's default optimisation level, as
``dmlshim run`` runs it) on the given inputs, or on the inputs ``run`` would generate for the given
``--input-shape`` sizes, and the shape of every value a top-level gather/scatter node reads is fetched
(a ``Shape`` node each, so no tensor is copied out). inspect then translates those nodes at the run's
shapes: a GatherND whose index depth is computed (unknown to static inference) gets the operator the run
gives it. The gather/scatter nodes inside If, Loop and Scan bodies are recorded in the same run
(:mod:`dmlshim.cli.inspect_bodies`): each execution's input shapes, translated per distinct shape with
the worst verdict kept (:mod:`dmlshim.translate.run_cases`). A body that did not run (the If branch not
taken, a Loop of no iteration) keeps static shapes, inferred from the run's input sizes and the run's
shapes of the top-level values it reads.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from ..errors import BadModelError, DmlShimError
from ..execute.engines.whole_model import augmented_model
from ..execute.plan.sessions import ORT_ERRORS
from ..execute.proofs.gather_given import shape_output, shape_outputs_clash
from ..execute.weights.model_source import LoadedModel, load_model
from ..execute.weights.shared import SharedWeights, light_copy
from ..graph import is_gather_scatter, node_path, subgraph_prefix, subgraphs, walk_nodes
from ..translate.run_cases import Execution
from .inspect_bodies import BodyRecords, instrument_bodies, node_executions, parse_records

logger = logging.getLogger(__name__)

_RECORDING_ERRORS: tuple[type[BaseException], ...] = (*ORT_ERRORS, BadModelError)


@dataclass(frozen=True)
class RunShapes:
    """What a run on real inputs told inspect.

    Attributes:
        source: where the inputs came from (the ``.npz`` path, or ``generated (seed N): ...``).
        value_shapes: the run's shape of every graph input and of every value a top-level gather/scatter
            node reads.
        nodes: the gather/scatter nodes translated at the run's shapes (their translation names).
        error: why the run failed (then ``value_shapes`` holds the feeds' shapes only), else None.
        constant: the top-level gather/scatter nodes that read only initializers (their static shapes
            are exact; the run adds nothing).
        executions: for gather/scatter nodes inside If/Loop/Scan bodies, the input shapes of each of
            their executions in the run (:data:`dmlshim.translate.run_cases.Execution`).
        not_run: the body gather/scatter nodes the run gave no shapes, with why (their verdicts are
            static).
    """

    source: str
    value_shapes: Mapping[str, tuple[int, ...]]
    nodes: frozenset[str]
    error: str | None = None
    constant: frozenset[str] = frozenset()
    executions: Mapping[str, Sequence[Execution]] = field(default_factory=dict)
    not_run: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "source": self.source,
            "nodes_at_run_shapes": sorted(self.nodes),
            "error": self.error,
        }
        if self.not_run:
            out["nodes_not_run"] = dict(sorted(self.not_run.items()))
        return out

    def used(self, translated: Mapping[str, object]) -> RunShapes:
        """These shapes with ``nodes`` the top-level ones and the body nodes the translation took at
        the run's shapes (``translated``: its ``run_cases``)."""
        top = {n for n in self.nodes if n not in self.executions}
        return replace(self, nodes=frozenset(top | set(translated)))


def _options() -> object:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    return so


def _read_nodes(graph: onnx.GraphProto) -> list[tuple[str, onnx.NodeProto]]:
    return [(node_path("", n, i), n) for i, n in enumerate(graph.node) if is_gather_scatter(n)]


def run_shapes(
    model_path: str,
    *,
    inputs: str | None,
    input_shapes: Mapping[str, Sequence[int]] | None,
    seed: int,
) -> RunShapes:
    """Run the model on ``inputs`` (an ``.npz``) or on generated inputs and read the shapes.

    Raises:
        BadInputError, BadModelError, TooLargeError: the ``.npz`` cannot be read or does not fit the model.
        (Generated inputs that onnxruntime refuses leave ``error`` set instead.)
    """
    from ..inputs import generate
    from ..validate.references import feeds_for
    from ..validate.value_kinds import feed_shape

    # read without the large weights, which stay in the model's files: onnxruntime reads them there for
    # the run (a whole load, serialized for the session, held the weights three times at once)
    loaded = load_model(model_path, weightless=True, own_weights=False)
    if inputs:
        # checked as run and validate check them (names, dtypes, ranks, static sizes): a file that does
        # not fit the model gives no run's shapes, even where no node's input needs fetching
        feeds = feeds_for(loaded, inputs, input_shapes=None, seed=seed)[0]
        source = inputs
    else:
        try:
            generated = generate(loaded, input_shapes=input_shapes, seed=seed)
        except DmlShimError as exc:  # no inputs onnxruntime accepts: the static verdicts stand
            return RunShapes("generated inputs", {}, frozenset(), exc.message.strip().splitlines()[0])
        feeds, source = dict(generated.feeds), f"generated (seed {seed}): {generated.describe()}"
    shapes = {n: tuple(int(d) for d in feed_shape(v)) for n, v in feeds.items()}
    graph = loaded.proto.graph  # prepared as onnxruntime prepares it (load_model)
    produced = {o for n in graph.node for o in n.output if o}
    initializers = {t.name for t in graph.initializer}
    nodes = _read_nodes(graph)
    inner = _body_nodes(graph)
    # The top-level values body nodes read: a branch that does not run still reads them at these shapes.
    wanted = sorted({i for n in (*(n for _, n in nodes), *inner.values()) for i in n.input if i in produced})
    error: str | None = None
    executions: dict[str, list[Execution]] = {}
    records = BodyRecords()
    unrecorded: str | None = None
    found: list[Any] = []
    cut: set[str] = set()
    if inner:
        try:
            found, records = _fetch(loaded, wanted, feeds, instrument=True)
            ran, cut = parse_records(records, found[len(wanted) :])
            executions = node_executions(records, ran, cut)
        except _RECORDING_ERRORS as exc:  # run again without the records' nodes
            unrecorded = _first_line(exc)
            logger.warning("the run recording control-flow bodies failed: %s", unrecorded)
    if (wanted and not inner) or unrecorded is not None:
        try:
            found, _ = _fetch(loaded, wanted, feeds, instrument=False)
        except ORT_ERRORS as exc:
            error = _first_line(exc)
            logger.warning("onnxruntime could not run the model on these inputs: %s", error)
    if wanted and not error:
        shapes.update({n: tuple(int(d) for d in s) for n, s in zip(wanted, found, strict=False)})
    known = shapes.keys() | initializers
    at_run = frozenset(
        name
        for name, n in nodes
        if all(not i or i in known for i in n.input) and any(i in shapes for i in n.input)
    )
    constant = frozenset(
        name for name, n in nodes if name not in at_run and all(not i or i in initializers for i in n.input)
    )
    if error:
        return RunShapes(source, shapes, frozenset(), error, constant)
    if unrecorded is not None:
        not_run = {name: f"recording the bodies made the run fail ({unrecorded})" for name in inner}
    else:
        not_run = {name: _why_not(name, records, cut) for name in inner if name not in executions}
    return RunShapes(source, shapes, at_run | frozenset(executions), None, constant, executions, not_run)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _fetch(
    loaded: LoadedModel, wanted: Sequence[str], feeds: Mapping[str, object], *, instrument: bool
) -> tuple[list[Any], BodyRecords]:
    """One onnxruntime run fetching the shapes of ``wanted`` and (``instrument``) the bodies' records.

    The session's model holds the large weights as references to the model's files (or placeholders whose
    arrays are handed to onnxruntime), as the run engines' sessions do: none is read or serialized here.
    """
    proto = loaded.proto
    shared = SharedWeights(
        {t.name: t for t in proto.graph.initializer}, model_path=loaded.weights_path, graph=proto.graph
    )
    if shared.names:
        full = light_copy(proto, shared)
    else:
        full = onnx.ModelProto()
        full.CopyFrom(proto)  # instrumented below: the loaded model stays as it was
    records = instrument_bodies(full) if instrument else BodyRecords()
    # where the model names a value like a shape output, the values themselves are fetched
    whole = shape_outputs_clash(full.graph)
    fetched = [*(n if whole else shape_output(n) for n in wanted), *records.outputs]
    options = _options()
    shared.attach(options, full)
    session: Any = _session(augmented_model(full, fetched), options)
    del full
    shared.release()
    found = list(session.run(fetched, dict(feeds)))
    if whole:
        found[: len(wanted)] = [np.array(np.shape(v), np.int64) for v in found[: len(wanted)]]
    return found, records


def _body_nodes(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """The gather/scatter nodes inside control-flow bodies, by path name."""
    found: dict[str, onnx.NodeProto] = {}
    for i, owner in enumerate(graph.node):
        for attr_name, sub in subgraphs(owner):
            prefix = subgraph_prefix(node_path("", owner, i), attr_name)
            found.update((name, n) for name, n in walk_nodes(sub, prefix) if is_gather_scatter(n))
    return found


def _why_not(name: str, records: BodyRecords, cut: set[str]) -> str:
    """Why the run gave a body node no shapes."""
    recorded = records.nodes.get(name)
    if recorded is None:
        return "its body is not one inspect records (only ai.onnx If, Loop and Scan of opset 9 and later)"
    if any(recorded[0].startswith(c) for c in cut):
        return "the record of its body in the run was longer than the row inspect sized for it (rank > 16)"
    owner, attr, _holder = records.graphs[recorded[0]]
    if attr in ("then_branch", "else_branch"):
        return f"the {attr} of If {owner!r} did not run on these inputs"
    return f"the body of {owner!r} ran no iteration on these inputs"


def _session(payload: bytes, options: object) -> object:
    from ..runtime.real import OrtInferenceSession

    try:
        return OrtInferenceSession(payload, options, providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        raise BadModelError(f"onnxruntime cannot load the model: {exc}") from exc
