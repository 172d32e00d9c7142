"""The partitioned engine (the default): gather/scatter nodes run from their DirectML descriptors through
dmlshim's kernels; everything else runs in onnxruntime CPU sessions, one per connected CPU partition.

Everything that can be decided once is decided when the engine is built: shape inference, the static
translation of every gather/scatter node, the partition of the graph, one onnxruntime session per CPU
segment, and the step list a run walks. A run then only moves arrays between steps. Nodes whose shapes are
symbolic are translated at run time and cached by (shapes, dtypes); if such a translation says the node
cannot run as a DirectML operator (an empty tensor, say), the node runs in a cached one-node onnxruntime
session instead.

Built with ``reference=True``, the engine makes the same decisions and the same CPU segments but runs each
emulated node alone in onnxruntime instead of through the kernels: the like-for-like reference that
``dmlshim validate`` compares against, differing from a normal run only in what the gather/scatter nodes
computed.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ...errors import DmlShimError
from ...graph import display_names
from ...model.ort_witness import no_session_coming, session_built
from ...model.random_ops import draws_random
from ...model.weightless import tensor_nbytes
from ...runtime.real import is_callers_options
from ...translate import TensorInfo, infer_shapes
from ...translate.shapes_info import tensor_infos
from ...translate.translator import model_opsets
from ..engine import EngineConfig
from ..plan.checks import EmulatedIO, check_outputs_defined, check_static_sizes, folds_constants
from ..plan.cpu_step import CpuStep, RunState, Values
from ..plan.fallback import has_deprecated_scatter
from ..plan.nodes import plan_nodes
from ..plan.partition import (
    CpuSegment,
    EmulatedNode,
    nested_gather_scatter,
    partition_graph,
)
from ..plan.segments import (
    SEGMENT_IR_VERSION,
    folded_constants,
    tensor_type,
    type_protos,
)
from ..plan.sessions import (
    ORT_ERRORS,
    cpu_session,
    indices_tensors,
    ort_run_error,
    subgraph_paths,
)
from ..plan.step_list import make_steps
from ..plan.steps import (
    REASON_CPU_PREFERRED,
    REASON_NOT_EMULATED,
    REASON_RUNTIME_FALLBACK,
    TRANSLATION_CACHE_SIZE,
    EmulatedStep,
)
from ..proofs.gather_given import feed_shapes, lean_gathers, shape_outputs_clash
from ..weights.layout_views import layout_views, mapped_bases
from ..weights.shared import SharedWeights
from ..weights.values import initializer_value
from .lean_check import (
    KEEP_FULL_MAX_BYTES,
    LeanCheckSpec,
    given_input_shapes,
    lean_after_proof,
    lean_outputs,
    with_dims,
)
from .partitioned_runs import PartitionedRuns
from .path_choice import PathChooser, chooser_for_check, gathers_given
from .plain_model import plain_model_step
from .whole_model import WholeModelCheck
from .whole_model_start import PendingCheck, start_whole_model_check, whole_model_builder

__all__ = [
    "ORT_ERRORS",
    "REASON_CPU_PREFERRED",
    "REASON_NOT_EMULATED",
    "REASON_RUNTIME_FALLBACK",
    "SEGMENT_IR_VERSION",
    "TRANSLATION_CACHE_SIZE",
    "EmulatedIO",
    "PartitionedEngine",
    "ort_run_error",
]

logger = logging.getLogger(__name__)

_session = cpu_session  # the name execute.cpu_engine imports

MIN_SEGMENTS_FOR_CHECK = 2
"""CPU segments from which the whole-model check pays: with one, a partitioned run already makes one
onnxruntime call."""


def _session_now(
    make: Callable[[list[str]], Callable[[], ort.InferenceSession]],
    shared: SharedWeights | None,
    extra: list[str],
) -> ort.InferenceSession:
    """The whole-model check's session with ``extra`` outputs, built now (the lean check's, or the full
    one again); the weights' arrays made for it are dropped once onnxruntime has its copy."""
    try:
        return make(extra)()
    finally:
        if shared is not None:
            shared.release()


class PartitionedEngine(PartitionedRuns):
    """The default engine. See the module docstring.

    Args:
        model: the model (not modified).
        config: feature level, index mode and onnxruntime session options.
        ort_cpu_preference: place gather/scatter nodes that onnxruntime's DirectML provider would run on
            the CPU (shape computations over CPU tensors) on the CPU too, as that provider does.
        reference: run every emulated node alone in onnxruntime instead of through dmlshim's kernels,
            keeping every other decision (the like-for-like reference of ``dmlshim validate``).
        segments_from: an engine of the same model and options whose CPU segments' sessions this one
            uses instead of building its own (validate's reference run: the same segments, one copy of
            the weights in onnxruntime).
        check_always: build the whole-model check (when ``config.whole_model_check``) whatever the number
            of CPU segments (validate answers from it alone when every kernel agrees).
        while_building: the caller's own work, called once while onnxruntime builds the check's session
            (validate's static translation), or at the end when there is no such session.
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        config: EngineConfig,
        *,
        ort_cpu_preference: bool = True,
        reference: bool = False,
        segments_from: PartitionedEngine | None = None,
        check_always: bool = False,
        while_building: Callable[[], object] | None = None,
    ) -> None:
        self.config = config
        self.reference = reference
        self.builds_from_callers_options = is_callers_options(config.sess_options)
        """The onnxruntime sessions are built from the program's own options object: each is built at
        construction and kept (a session built later would read what the program changed since)."""
        self._scatter_as_elements = has_deprecated_scatter(model)
        self._fl_name = config.feature_level.dml_name
        graph = model.graph
        nodes = list(graph.node)
        names = display_names(nodes)
        opsets = model_opsets(model)
        nested = nested_gather_scatter(nodes, names)
        self._indices = indices_tensors([*nodes, *(n.node for n in nested)])
        self._paths = subgraph_paths(nested)
        if config.providers and any(
            (p if isinstance(p, str) else p[0]) not in ("CPUExecutionProvider", "DmlShimExecutionProvider")
            for p in config.providers
        ):
            logger.warning(
                "the partitioned engine runs non-emulated nodes on CPUExecutionProvider; "
                "providers %s ignored",
                list(config.providers),
            )

        check_outputs_defined(graph)
        try:
            inferred = infer_shapes(model)  # of the weightless copy, which it makes (not made twice)
        except DmlShimError as exc:
            logger.warning("shape inference failed (%s); translating gather/scatter nodes at run time", exc)
            inferred = model
        infos = tensor_infos(inferred.graph)
        external = {t.name for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
        # Refuses static sizes no machine could hold, before any onnxruntime session of the model is built:
        # onnxruntime 1.24 allocates an If branch's constant value while it builds one (4 GB under a 100 MB
        # limit when this ran beside the check's session).
        check_sizes = functools.partial(
            check_static_sizes,
            inferred.graph,
            infos,
            names,
            mapped=external,
            model=model,
            folds=folds_constants(config.sess_options),
        )
        types = type_protos(inferred.graph)
        constants = folded_constants(graph)
        for name, tensor in constants.items():
            infos.setdefault(name, TensorInfo(tuple(int(d) for d in tensor.dims), int(tensor.data_type)))
            types.setdefault(name, tensor_type(int(tensor.data_type), tensor.dims))

        # the model's shape inference goes to the plan too, so that it does not run twice
        known = inferred if inferred is not model else None
        plan = plan_nodes(model, nodes, names, opsets, infos, types, config, ort_cpu_preference, known)
        template, slot_of, candidates = plan.template, plan.slot_of, plan.candidates

        self._template = template
        self._check: WholeModelCheck | None = None
        self._given_only: tuple[EmulatedStep, ...] = ()
        """The gathers of a check built only because they are given (:func:`gathers_given`)."""
        self._chooser = PathChooser()
        self._steps: list[Callable[[Values, RunState], None]] = []
        self._static_values: Values = {}
        graph_inputs = [v.name for v in graph.input]
        init_names = {t.name for t in graph.initializer}
        folder = os.path.dirname(os.path.abspath(config.model_path)) if config.model_path else None
        self._emulated_io: tuple[EmulatedIO, ...] = ()
        if not candidates:
            check_sizes()
            # Nothing to emulate: the model runs as it is, in one onnxruntime session.
            step, self._default_feeds = plain_model_step(model, config, folder)
            self._witness(model, config)  # onnxruntime accepts the model: no session of its own for that
            self._steps.append(step)
            self._cpu_partitions = 1
            self._whole_model = True
            self._copy_on_output: frozenset[str] = frozenset()
            if while_building is not None:
                while_building()
            self._finish_init()
            return
        self._whole_model = False
        self._default_feeds = {}
        check_sizes()

        partition = partition_graph(graph, candidates, available=graph_inputs, constants=constants)
        init_protos = {t.name: t for t in graph.initializer}
        init_protos.update(constants)
        emulated_reads = {
            n
            for step in partition.steps
            if isinstance(step, EmulatedNode)
            for n in nodes[step.node].input
            if n
        }
        graph_outputs = {o.name for o in graph.output}
        overridable = init_names & set(graph_inputs)
        for name in ((emulated_reads | graph_outputs) & set(init_protos)) | overridable:
            # Weights a model read without them keeps in its files are mapped from there, not copied.
            self._static_values[name] = initializer_value(init_protos[name], folder)
        # With onnxruntime's default options, large weights are never serialized for its sessions: they
        # read them from the model's files, or are handed arrays.
        shared = None
        if config.sess_options is None:
            shared = SharedWeights(init_protos, model_path=config.model_path, graph=model.graph)
        if shared is not None:
            shared.adopt(self._static_values)
        # A weight an emulated node reads transposed is a view of it, never fetched from the check (the
        # array handed to onnxruntime, or the map of the model's file: no second copy).
        views = layout_views(
            graph,
            emulated_reads - set(self._static_values),
            init_protos,
            graph_inputs,
            lambda t: (
                shared.held(t.name)
                if shared is not None and t.name in shared
                else initializer_value(t, folder)
            ),
        )
        self._static_values.update(views)
        self._view_maps = mapped_bases(views)
        self._copy_on_output = frozenset(graph_outputs & (set(graph_inputs) | set(self._static_values)))

        emulated_io = self._emulated_io = tuple(
            EmulatedIO(
                names[step.node],
                nodes[step.node].op_type,
                tuple(nodes[step.node].input),
                nodes[step.node].output[0],
            )
            for step in partition.steps
            if isinstance(step, EmulatedNode)
        )
        built_segments = sum(1 for s in partition.steps if isinstance(s, CpuSegment) and s.outputs)
        pending: PendingCheck | None = None
        # whether the model names a value like a shape output: asked by the lean gathers and the lean
        # session, answered once (a serialization of the graph; the graph does not change meanwhile)
        clash = functools.cache(functools.partial(shape_outputs_clash, graph))
        # below MIN_SEGMENTS_FOR_CHECK, the check pays only while its gathers are given
        given_only = built_segments < MIN_SEGMENTS_FOR_CHECK and not check_always
        given_only = given_only and gathers_given(emulated_io, config)
        lean: dict[str, tuple[np.dtype[Any], np.dtype[Any]]] = {}
        lean_after: dict[str, tuple[np.dtype[Any], np.dtype[Any]]] = {}  # lean in the lean session
        shapes_from_feeds = None
        # A model that draws random values keeps to the partitioned steps (validate's check aside): each
        # random node then lives in one onnxruntime session for good, so that a seeded one goes on drawing
        # onnxruntime's sequence from run to run; the check's session, its lean one and the trial's
        # switches would each start the sequence again (a seeded RandomUniformLike's run 5 gave run 1's).
        draws = draws_random(model) and not check_always
        if (
            config.whole_model_check
            and not reference
            and not draws
            and (built_segments >= MIN_SEGMENTS_FOR_CHECK or check_always or given_only)
        ):
            # onnxruntime builds the check's session on another thread while the steps are made here.
            outputs = frozenset(io.output for io in emulated_io)
            make = functools.partial(
                whole_model_builder, model, config, outputs, shared, arrays=self._static_values, clash=clash
            )
            if not (config.full_check or config.profiling):
                lean = lean_gathers(emulated_io, infos, graph, init_protos, clash)
                shapes_from_feeds = feed_shapes(emulated_io, lean, infos, model, init_protos)
                lean_after, after_dims = lean_after_proof(emulated_io, lean, infos, graph, init_protos)
                shapes_from_feeds = with_dims(shapes_from_feeds, after_dims, graph)
            pending = start_whole_model_check(
                model,
                emulated_io,
                set(graph_inputs),
                make,
                ORT_ERRORS,
                self._static_values,
                frozenset(lean),
                shapes_from_feeds,
            )
        if pending is None:
            no_session_coming()  # onnxruntime's acceptance session is built beside the steps
        try:
            self._steps, self._cpu_partitions = make_steps(
                model,
                partition,
                names,
                candidates,
                slot_of,
                infos,
                types,
                graph_inputs,
                init_protos,
                config,
                shared,
                reference,
                segments_from.cpu_step if segments_from is not None else None,
            )
            if while_building is not None:
                while_building()
        except BaseException:
            if pending is not None:
                pending.wait()
            raise
        if pending is not None:
            emulated_steps = [s for s in self._steps if isinstance(s, EmulatedStep)]
            for step in emulated_steps:
                step.lean_dtypes = lean.get(step.output) or lean_after.get(step.output)
                indices = self._static_values.get(step.inputs[1]) if len(step.inputs) > 1 else None
                if isinstance(indices, np.ndarray):
                    indices.flags.writeable = False  # the engine's own constant: nothing writes it
                    step.constant_indices = indices
            spec = None
            # The lean session (and the full one built again) are built runs after the session: from a
            # program's own options object, which onnxruntime reads only when a session is built, they
            # would take whatever the program changed in it since (another Gelu, a file to write).
            late_builds_safe = not self.builds_from_callers_options
            if not (config.full_check or config.profiling) and late_builds_safe and not clash():
                static = set(graph_inputs) | set(self._static_values)
                lean_in_lean = {**lean, **lean_after}
                from_feeds = given_input_shapes(emulated_io, lean_in_lean, infos, graph, static)
                extra = lean_outputs(
                    emulated_io,
                    static,
                    [o.name for o in graph.output],
                    lean_in_lean,
                    shapes_from_feeds.dims if shapes_from_feeds is not None else (),
                    # a small gather lean in the lean session only: its indices' values are fetched (cheaper
                    # for onnxruntime than a Shape node), never proved (the graph proves them)
                    (
                        *(shapes_from_feeds.indices if shapes_from_feeds is not None else ()),
                        *(io.inputs[1] for io in emulated_io if io.output in lean_after),
                    ),
                    from_feeds.dims,
                )
                weights = sum(tensor_nbytes(t) for t in init_protos.values())
                make_now = functools.partial(_session_now, make, shared)
                spec = LeanCheckSpec(
                    make_now, tuple(extra), from_feeds, weights <= KEEP_FULL_MAX_BYTES, frozenset(lean_after)
                )
            self._check = pending.finish(emulated_steps, spec)
            if given_only:
                self._given_only = tuple(emulated_steps)
            if self._check is not None:
                self._witness(model, config)  # the check's session (outputs added) accepts the model
        if self._check is not None:
            self._chooser = chooser_for_check(config, sum(tensor_nbytes(t) for t in init_protos.values()))
        # Built now: so that a segment onnxruntime refuses fails here; and, from the program's own options
        # object (a copy cannot carry what it holds), before the program can change it for its next
        # session (onnxruntime reads it once, when the session is built).
        if self._check is None or self.builds_from_callers_options:
            for cpu_step in self._steps:
                if isinstance(cpu_step, CpuStep):
                    _ = cpu_step.session
        if shared is not None:
            shared.release()  # segments built later (if ever) make their arrays again
        self._finish_init()

    def _witness(self, model: onnx.ModelProto, config: EngineConfig) -> None:
        """onnxruntime built a session of ``model`` itself (no Scatter rewritten) with its default
        options: that stands for its acceptance of the model (:mod:`dmlshim.model.ort_witness`)."""
        if config.sess_options is None and config.own_options is None and not self._scatter_as_elements:
            session_built(model)

    def _finish_init(self) -> None:
        logger.info(
            "partitioned engine: %d steps, %d CPU partitions, %d emulated nodes",
            len(self._steps),
            self._cpu_partitions,
            sum(isinstance(s, EmulatedStep) for s in self._steps),
        )

    def cpu_step(self, label: str, inputs: Sequence[str], outputs: Sequence[str]) -> CpuStep | None:
        """This engine's CPU segment of that label, inputs and outputs (None when it has none)."""
        for step in self._steps:
            if (
                isinstance(step, CpuStep)
                and step.label == label
                and step.inputs == tuple(inputs)
                and step.outputs == list(outputs)
            ):
                return step
        return None

    @property
    def cpu_partitions(self) -> int:
        """How many onnxruntime CPU sessions run the graph's non-emulated nodes."""
        return self._cpu_partitions

    @property
    def emulated_nodes(self) -> tuple[str, ...]:
        """Names of the nodes planned to run from their DirectML descriptors."""
        return tuple(s.name for s in self._steps if isinstance(s, EmulatedStep))

    def ort_sessions(self) -> list[tuple[str, ort.InferenceSession]]:
        """Every onnxruntime session built so far (the whole-model check's, CPU partitions, then one-node
        fallbacks), labelled; none is built here."""
        found: list[tuple[str, ort.InferenceSession]] = []
        if self._check is not None:
            found.extend(self._check.sessions())
        for step in self._steps:
            if isinstance(step, CpuStep):
                if step.built is not None:
                    found.append((step.label, step.built))
            elif isinstance(step, EmulatedStep):
                found.extend((f"node {step.name!r} on the CPU", s) for s in step.fallback_sessions.values())
        return found

    @property
    def emulated_io(self) -> tuple[EmulatedIO, ...]:
        """The emulated nodes in run order, with the values each reads and writes."""
        return self._emulated_io

    def get_providers(self) -> list[str]:
        if self._whole_model:
            return ["CPUExecutionProvider"]
        return ["DmlShimExecutionProvider", "CPUExecutionProvider"]
