"""``dmlshim inspect --inputs X.npz`` / ``--input-shape``: the shapes a run gives, for the translation.

The model runs once on onnxruntime CPU (one thread, onnxruntime's default optimisation level, as
``dmlshim run`` runs it) on the given inputs, or on the inputs ``run`` would generate for the given
``--input-shape`` sizes, and the shape of every value a top-level gather/scatter node reads is fetched
(a ``Shape`` node each, so no tensor is copied out). inspect then translates those nodes at the run's
shapes: a GatherND whose index depth is computed (unknown to static inference) gets the operator the run
gives it. Nodes inside control-flow bodies keep the shapes static inference gives them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from ..errors import BadModelError, DmlShimError
from ..execute.engines.whole_model import augmented_model
from ..execute.plan.sessions import ORT_ERRORS
from ..execute.proofs.gather_given import shape_output
from ..execute.weights.model_source import load_model
from ..graph import is_gather_scatter, node_path

logger = logging.getLogger(__name__)


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
    """

    source: str
    value_shapes: Mapping[str, tuple[int, ...]]
    nodes: frozenset[str]
    error: str | None = None
    constant: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source,
            "nodes_at_run_shapes": sorted(self.nodes),
            "error": self.error,
        }


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
    from ..execute.feeds import load_npz
    from ..inputs import generate
    from ..inputs.narrow_floats import narrow_feeds
    from ..validate.value_kinds import feed_shape

    loaded = load_model(model_path, weightless=True)
    if inputs:
        feeds = narrow_feeds(loaded.proto.graph, load_npz(inputs))
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
    wanted = sorted({i for _, n in nodes for i in n.input if i in produced})
    error: str | None = None
    if wanted:
        full = load_model(model_path).proto  # onnxruntime needs the weights: the values come from them
        try:
            session = _session(augmented_model(full, [shape_output(n) for n in wanted]))
            del full
            found = session.run([shape_output(n) for n in wanted], dict(feeds))
            shapes.update({n: tuple(int(d) for d in s) for n, s in zip(wanted, found, strict=True)})
        except ORT_ERRORS as exc:
            error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            logger.warning("onnxruntime could not run the model on these inputs: %s", error)
    known = shapes.keys() | initializers
    at_run = frozenset(
        name
        for name, n in nodes
        if all(not i or i in known for i in n.input) and any(i in shapes for i in n.input)
    )
    constant = frozenset(
        name for name, n in nodes if name not in at_run and all(not i or i in initializers for i in n.input)
    )
    return RunShapes(source, shapes, frozenset() if error else at_run, error, constant)


def _session(payload: bytes) -> object:
    from ..runtime.real import OrtInferenceSession

    try:
        return OrtInferenceSession(payload, _options(), providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        raise BadModelError(f"onnxruntime cannot load the model: {exc}") from exc
