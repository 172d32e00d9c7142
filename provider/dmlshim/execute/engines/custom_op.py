"""The custom-op engine: the whole model in one onnxruntime session, gather/scatter nodes as Python ops.

The model is lowered (:mod:`dmlshim.execute.lowering.lower`): every translated gather/scatter node, including
those inside If/Loop/Scan bodies, becomes a node of the ``ai.onnx.contrib`` domain whose kernel
(:mod:`dmlshim.execute.custom_ops.kernel`), registered with onnxruntime-extensions
(:mod:`dmlshim.execute.custom_ops.bridge`), executes the DirectML descriptor through
:func:`dmlshim.kernels.execute` (``descriptor`` mode), runs the node's whole translation plan, translating
at run time when the shapes were not static (``translate`` mode), or runs it on element tags so that
onnxruntime moves float elements bit for bit (``tags`` mode).

Tensors cross onnxruntime-extensions' bridge as numpy arrays, one buffer copy each way (dmlshim replaces
the extension's dispatcher, which returned Python lists, for its own ops: :mod:`.custom_op_bridge`).
Shape computations onnxruntime's DirectML provider runs on the CPU stay onnxruntime nodes, as in the
partitioned engine. The engine's point is that it covers nodes inside control flow and that the lowered
model can be inspected; each custom-op call costs Python time, so it stays slower than the partitioned
engine where it emulates nodes that engine leaves to onnxruntime.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ...dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ...errors import BadInputError, BadModelError
from ...kernels.options import IndexMode
from ...limits import check_tensor
from ...model.weightless import is_external
from ...runtime.options_copy import FOLDER_KEY
from ...runtime.real import OrtInferenceSession
from ...translate import Status
from ...translate.placement import CPU_PREFERRED_MESSAGE
from ...translate.placement import REASON_CPU_PREFERRED as EP_CPU_PREFERRED
from ...translate.plan import np_dtype_of
from ..custom_ops.bridge import extensions, library_path, register_custom_ops, session_options_with_custom_ops
from ..custom_ops.kernel import RunState, active_run, node_attributes, prepared
from ..custom_ops.notes import layout_note
from ..custom_ops.types import CUSTOM_DOMAIN, MODE_DESCRIPTOR
from ..engine import EngineConfig
from ..lowering.body_outputs import BodyOutputs, body_output_types
from ..lowering.lower import LoweredModel, LoweredNode, lower_model
from ..plan.checks import refuse_static_sizes
from ..plan.cpu_step import run_session
from ..plan.fallback import has_deprecated_scatter, note_scatter_as_scatter_elements
from ..plan.sessions import ort_run_error
from ..plan.step_fallback import reasons_of
from ..plan.steps import REASON_CPU_PREFERRED
from ..record import PATH_CUSTOM_OP, PLACEMENT_CPU, PLACEMENT_DML, NodeRecord, RunRecord
from ..weights.shared import SharedWeights, light_copy
from .fed_rank import (
    FedRanks,
    declared_again,
    fed_ranks,
    rank_zero_inputs,
    shapeless_initializers,
    with_fed_ranks,
)

logger = logging.getLogger(__name__)

__all__ = [
    "CustomOpEngine",
    "create_engine",
    "library_path",
    "register_custom_ops",
    "session_options_with_custom_ops",
]

ENGINE_NAME = "customop"
REASON_RUNTIME_TRANSLATION = "runtime_translation"
REASON_RUNTIME_FALLBACK = "runtime_fallback"
REASON_NOT_LOWERED = "not_lowered"
_ORT_RESHAPE_SHAPES = re.compile(r"Input shape:\{([^}]*)\}, *requested shape:\{([^}]*)\}")
"""The input and requested shapes onnxruntime's Reshape quotes when it refuses (a numpy guard's refusal)."""


def _template_record(node: LoweredNode) -> NodeRecord:
    t = node.translation
    if not node.lowered and node.reason == CPU_PREFERRED_MESSAGE:
        # As the partitioned engine records a shape computation onnxruntime's DirectML provider keeps on
        # the CPU.
        return NodeRecord(
            name=node.name,
            op_type=node.op_type,
            placement=PLACEMENT_CPU,
            status=t.status.value,
            reasons=(
                *((c, m) for c, m in reasons_of(t) if c != EP_CPU_PREFERRED),
                (REASON_CPU_PREFERRED, CPU_PREFERRED_MESSAGE),
            ),
            ort_placement=t.ort_placement,
        )
    if not node.lowered:
        return NodeRecord(
            name=node.name,
            op_type=node.op_type,
            placement=PLACEMENT_CPU,
            status=t.status.value,
            reasons=(*reasons_of(t), (REASON_NOT_LOWERED, node.reason or "not lowered")),
            ort_placement=t.ort_placement,
        )
    if node.dynamic:
        return NodeRecord(
            name=node.name,
            op_type=node.op_type,
            placement=PLACEMENT_DML,
            status=Status.DML.value,
            reasons=(
                (
                    REASON_RUNTIME_TRANSLATION,
                    "the shapes are not static; the custom op translates the node from the actual inputs",
                ),
            ),
        )
    assert t.operator is not None
    return NodeRecord(
        name=node.name,
        op_type=node.op_type,
        placement=PLACEMENT_DML,
        status=t.status.value,
        operator=t.operator.operator_type.dml_name,
        reasons=reasons_of(t),
        ort_placement=t.ort_placement,
    )


def _custom_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        if node.domain == CUSTOM_DOMAIN:
            yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _custom_nodes(attr.g)
            for g in attr.graphs:
                yield from _custom_nodes(g)


def _refuse_copied_weights(graph: onnx.GraphProto) -> None:
    """Every input of a custom op crosses onnxruntime-extensions' bridge as a copy on each run: a weight
    past the memory limit that one reads (a Gather of a 1 GiB embedding table: 1073 MB peak under a 100 MB
    limit before issue 35's round 54) is refused when the session is built.

    Raises:
        TooLargeError: naming the node, the weight and the bytes the copy would need.
    """
    weights = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.domain != CUSTOM_DOMAIN:
            continue
        for name in node.input:
            tensor = weights.get(name)
            if tensor is not None:
                check_tensor(
                    [int(d) for d in tensor.dims],
                    int(tensor.data_type),
                    tensor=name,
                    node=node.name,
                    op_type=node.op_type,
                    what="input (the custom-op engine copies it on every run)",
                )


class CustomOpEngine:
    """Runs a lowered model in one onnxruntime session; gather/scatter nodes run as Python custom ops.

    Built once: the model is lowered, the custom op types it needs are registered, static translations
    are cached, and one onnxruntime CPU session is created.

    Args:
        model: the model (not modified).
        feature_level: the DirectML feature level emulated.
        index_mode: the out-of-range policy (``IndexMode.ERROR`` raises ``IndexOutOfRangeError``).
        sess_options: onnxruntime ``SessionOptions`` to copy (threads, optimization level, logging);
            never modified.
        providers: accepted for the Engine interface; the session always uses ``CPUExecutionProvider``.
        input_shapes: concrete shapes for graph inputs with symbolic dims (the session then accepts only
            those shapes).
        ort_cpu_preference: leave to onnxruntime the top-level gather/scatter nodes that onnxruntime's
            DirectML provider runs on the CPU (shape computations), as the partitioned engine does;
            False lowers them too.
        model_path: the file the model was read from. Initializers it keeps as external data (a model
            read without its weights: ``dmlshim.execute.weights.model_source.load_model``) stay
            references, read by onnxruntime from the files in this file's folder; only its own session
            holds them.
        declarations: the caller's declarations of inputs that ``model`` (a :func:`with_fed_ranks` copy)
            declares at their fed rank: onnxruntime's session of the lowered model declares them so again.
        body_outputs: for such a copy, what onnxruntime sees for the caller's model's If, Loop and Scan
            body outputs (:func:`dmlshim.execute.lowering.body_outputs.body_output_types`; by default
            ``model``'s own): the body outputs a custom op computes are declared so.

    Raises:
        EngineUnavailableError: onnxruntime-extensions is not installed.
        BadModelError: onnxruntime cannot load the lowered model.
    """

    name = ENGINE_NAME

    def __init__(
        self,
        model: onnx.ModelProto,
        feature_level: FeatureLevel = DEFAULT_FEATURE_LEVEL,
        *,
        index_mode: IndexMode = IndexMode.ERROR,
        sess_options: Any = None,
        providers: Sequence[Any] | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        ort_cpu_preference: bool = True,
        model_path: str | None = None,
        declarations: Sequence[onnx.ValueInfoProto] = (),
        body_outputs: BodyOutputs | None = None,
    ) -> None:
        extensions()
        # before lowering and onnxruntime's session: onnxruntime folds a ConstantOfShape of constants when
        # it loads the model, and allocates a branch's value when a run takes it
        refuse_static_sizes(model, sess_options)
        self._model = model
        self._args: dict[str, Any] = {
            "index_mode": index_mode,
            "sess_options": sess_options,
            "providers": providers,
            "input_shapes": input_shapes,
            "ort_cpu_preference": ort_cpu_preference,
            "model_path": model_path,
        }
        self._rank_zero = rank_zero_inputs(model)
        self._shapeless = shapeless_initializers(model)
        self._at_fed_rank: dict[FedRanks, CustomOpEngine] = {}
        self._body_outputs = body_output_types(model) if body_outputs is None else body_outputs
        self._feature_level = FeatureLevel(feature_level)
        self._index_mode = IndexMode(index_mode)
        if providers and any(
            (p if isinstance(p, str) else p[0]) not in ("CPUExecutionProvider", "DmlShimExecutionProvider")
            for p in providers
        ):
            logger.warning(
                "the custom-op engine runs on CPUExecutionProvider; providers %s ignored", providers
            )
        self._lowered = lower_model(
            model,
            self._feature_level,
            input_shapes=input_shapes,
            index_mode=self._index_mode,
            ort_cpu_preference=ort_cpu_preference,
            body_outputs=self._body_outputs,
            numpy_guards=not declarations,
        )
        _refuse_copied_weights(self._lowered.model.graph)
        # a copy lowered at fed ranks: onnxruntime sees the rank-0 declarations (its folds follow them)
        declared_again(self._lowered.model, declarations)
        register_custom_ops()
        self._prime_static_translations()
        # Scatter nodes kept (lowering rewrote them), or handed to onnxruntime at run time, run as
        # ScatterElements there.
        self._scatter_as_elements = has_deprecated_scatter(model)
        options = session_options_with_custom_ops(sess_options)
        level_all = options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        note = layout_note(self._lowered.model.graph, level_all, self._lowered.lowered_count)
        self._notes = (note,) if note is not None else ()
        light, shared = self._payload(options, model_path)
        try:
            self._session = OrtInferenceSession(
                light.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise BadModelError(f"onnxruntime cannot load the lowered model: {exc}") from exc
        finally:
            shared.release()
        self._template = tuple(_template_record(n) for n in self._lowered.nodes)
        logger.info(
            "custom-op engine: %d of %d gather/scatter nodes lowered",
            self._lowered.lowered_count,
            len(self._lowered.nodes),
        )

    def _payload(self, options: Any, model_path: str | None) -> tuple[onnx.ModelProto, SharedWeights]:
        """The lowered model as onnxruntime gets it, with ``options`` (dmlshim's own) told where its
        weights are. Initializers kept as external data (a model read without its weights) stay
        references: onnxruntime reads them from the model's files, relative to the model's folder. Large
        ones held in the model (a model from bytes, values the caller's options added) reach onnxruntime
        as arrays, not serialized into the payload a second time."""
        lowered_model = self._lowered.model
        initializers = lowered_model.graph.initializer
        if any(is_external(t) for t in initializers):
            if model_path is None:
                raise BadModelError(
                    "the model keeps initializers in external data but no model file is known to read "
                    "them from",
                    rule="external data is relative to the model file's folder",
                )
            options.add_session_config_entry(FOLDER_KEY, os.path.dirname(os.path.abspath(model_path)))
        shared = SharedWeights(
            {t.name: t for t in initializers if not is_external(t)}, graph=lowered_model.graph
        )
        light = light_copy(lowered_model, shared) if shared.names else lowered_model
        shared.attach(options, light)
        return light, shared

    @classmethod
    def from_config(cls, model: onnx.ModelProto, config: EngineConfig) -> CustomOpEngine:
        """The engine for ``InferenceSession(engine="customop")`` (an ``EngineFactory``)."""
        return cls(
            model,
            config.feature_level,
            index_mode=config.index_mode,
            sess_options=config.sess_options,
            providers=config.providers,
            model_path=config.model_path,
        )

    def _prime_static_translations(self) -> None:
        """Seed the kernels' caches with the translations made while lowering, so runs at the static shapes
        count no new translations."""
        static = {n.name: n.translation for n in self._lowered.nodes if n.lowered and not n.dynamic}
        for node in _custom_nodes(self._lowered.model.graph):
            attrs = node_attributes(node)
            t = static.get(str(attrs.get("node_name")))
            if t is None or attrs.get("mode") == MODE_DESCRIPTOR:
                continue
            prep = prepared(attrs)
            key = tuple(
                (b.onnx_shape, np_dtype_of(b.onnx_elem_type))
                for b in sorted(t.inputs, key=lambda b: b.onnx_index)
            )
            prep.translations.setdefault(key, t)

    def ort_sessions(self) -> list[tuple[str, ort.InferenceSession]]:
        """The one onnxruntime session, running the lowered model (for profiling)."""
        return [("the lowered model", self._session)]

    @property
    def lowered(self) -> LoweredModel:
        """The lowered model and what happened to each gather/scatter node."""
        return self._lowered

    @property
    def feature_level(self) -> FeatureLevel:
        return self._feature_level

    def get_providers(self) -> list[str]:
        if self._lowered.lowered_count:
            return ["DmlShimExecutionProvider", "CPUExecutionProvider"]
        return ["CPUExecutionProvider"]

    def run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord]:
        """Run the lowered model; return the named outputs and the run's record.

        Raises:
            IndexOutOfRangeError: an index out of range in a lowered node (index mode ``error``).
            DmlShimError: any other error a custom op raised, naming the node.
            BadInputError: onnxruntime failed on these inputs for another reason.
        """
        follow = self._rank_zero or self._shapeless
        ranks = fed_ranks(self._rank_zero, feeds, self._shapeless) if follow else ()
        if ranks:
            return self._engine_at(ranks).run(output_names, feeds, run_options=run_options)
        state = RunState()
        with active_run(state):
            try:
                # bfloat16 (float8, int4) values go in and come out as OrtValues, as onnxruntime's
                # run_with_ort_values returns them; run() refuses such outputs afterwards.
                results = run_session(self._session, output_names, feeds, run_options)
            except Exception as exc:
                # A custom op's failure can make a later onnxruntime node fail; the custom op's is the cause.
                if state.error is not None:
                    # keep the custom op's own cause (onnxruntime's message naming the model's node), not
                    # the later failure of a node the lowering added (a Reshape named after the output)
                    raise state.error from (state.error.__cause__ or exc)
                # The same classes as the other engines: an index onnxruntime rejects (a node left to
                # onnxruntime: string or empty data, a function body) is IndexOutOfRangeError.
                refused = self._guard_refusal(exc)
                if refused is not None:
                    raise refused from exc
                raise ort_run_error(exc, "onnxruntime failed running the lowered model") from exc
        if state.error is not None:
            raise state.error
        return list(results), self._record(state)

    def _guard_refusal(self, exc: Exception) -> BadInputError | None:
        """A numpy guard's refusal (:mod:`dmlshim.execute.lowering.numpy_guard`) as the BadInputError
        naming the model's node, or None when ``exc`` is another failure."""
        text = str(exc)
        found = _ORT_RESHAPE_SHAPES.search(text)
        requested = set(found.group(2).split(",")) if found else set()
        for n in self._lowered.nodes:
            if not n.guards:
                continue
            *reshapes, code = n.guards
            if any(f"'{g}'" in text for g in reshapes) or requested == {code}:
                shape = f"[{found.group(1)}]" if found else None
                return BadInputError(
                    f"node {n.name!r} ({n.op_type}): an input of shape {shape or '(unknown)'} is empty, "
                    "but numpy (which "
                    "the custom-op engine hands it to through onnxruntime-extensions) cannot represent "
                    "that shape (its non-zero dimensions times the item size reach 2**63); run this "
                    "model with --engine cpu",
                    rule="numpy-shape",
                    value=shape,
                    node=n.name,
                    op_type=n.op_type,
                )
        return None

    def _engine_at(self, ranks: FedRanks) -> CustomOpEngine:
        """The engine for feeds giving rank-0 inputs at other ranks (onnxruntime runs them at that rank),
        built on first use from the model with those inputs declared at the fed rank."""
        engine = self._at_fed_rank.get(ranks)
        if engine is None:
            logger.info("custom-op engine: lowering again for rank-0 inputs fed at ranks %s", dict(ranks))
            engine = CustomOpEngine(
                with_fed_ranks(self._model, ranks),
                self._feature_level,
                **self._args,
                declarations=[v for v in self._model.graph.input if v.name in dict(ranks)],
                body_outputs=self._body_outputs,
            )
            self._at_fed_rank[ranks] = engine
        return engine

    def _record(self, state: RunState) -> RunRecord:
        records: list[NodeRecord] = []
        for template in self._template:
            run = state.nodes.get(template.name)
            if run is None or not run.calls:
                records.append(template)
            elif run.fallback:
                records.append(
                    NodeRecord(
                        name=template.name,
                        op_type=template.op_type,
                        placement=PLACEMENT_CPU,
                        status=run.status,
                        reasons=(
                            *run.reasons,
                            (
                                REASON_RUNTIME_FALLBACK,
                                "the translation for this run's shapes and types is not a DirectML "
                                "operator; the custom op computed the node with onnxruntime's CPU provider",
                            ),
                        ),
                        ort_placement=template.ort_placement,
                    )
                )
            else:
                records.append(
                    NodeRecord(
                        name=template.name,
                        op_type=template.op_type,
                        placement=PLACEMENT_DML,
                        status=run.status,
                        operator=run.operator or template.operator,
                        reasons=run.reasons or template.reasons,
                        duplicate_indices=run.duplicate_indices,
                        negative_indices=run.negative_indices,
                        ort_placement=template.ort_placement,
                    )
                )
        nodes = tuple(records)
        if self._scatter_as_elements:
            nodes = note_scatter_as_scatter_elements(nodes)
        return RunRecord(
            engine=self.name,
            feature_level=self._feature_level.dml_name,
            nodes=nodes,
            cpu_partitions=1,
            translations_computed=state.translations_computed,
            notes=self._notes,
            path=PATH_CUSTOM_OP,
        )


def create_engine(model: onnx.ModelProto, config: EngineConfig) -> CustomOpEngine:
    """The ``EngineFactory`` of the custom-op engine (register it as ``"customop"``)."""
    return CustomOpEngine.from_config(model, config)
