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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ...errors import DmlShimError, IndexOutOfRangeError
from ...graph import display_names
from ...model.ort_witness import no_session_coming, session_built
from ...model.weightless import tensor_nbytes, without_weights
from ...translate import TensorInfo, infer_shapes
from ...translate.shapes_info import tensor_infos
from ...translate.translator import model_opsets
from ..engine import EngineConfig
from ..plan.checks import EmulatedIO, check_outputs_defined, check_static_sizes
from ..plan.cpu_step import CpuStep, RunState, Values
from ..plan.fallback import has_deprecated_scatter, note_scatter_as_scatter_elements
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
    name_index_error,
    ort_run_error,
    subgraph_paths,
    terminated,
)
from ..plan.step_list import make_steps
from ..plan.steps import (
    REASON_CPU_PREFERRED,
    REASON_NOT_EMULATED,
    REASON_RUNTIME_FALLBACK,
    TRANSLATION_CACHE_SIZE,
    EmulatedStep,
)
from ..proofs.gather_given import feed_shapes, lean_gathers
from ..record import PATH_CPU, RunRecord
from ..weights.shared import SharedWeights
from ..weights.values import initializer_value
from .path_choice import PATH_CHECK, PATH_PARTITIONED, PathChooser, chooser_for_check, gathers_given
from .plain_model import plain_model_step, run_plain
from .whole_model import PendingCheck, WholeModelCheck, start_whole_model_check, whole_model_builder

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


class PartitionedEngine:
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

    name = "partitioned"

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
            inferred = infer_shapes(without_weights(model))
        except DmlShimError as exc:
            logger.warning("shape inference failed (%s); translating gather/scatter nodes at run time", exc)
            inferred = model
        infos = tensor_infos(inferred.graph)
        external = {t.name for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
        # Refuses static sizes no machine could hold; nothing before it allocates by them, so it runs
        # while onnxruntime builds the check's session (below).
        check_sizes = functools.partial(check_static_sizes, inferred.graph, infos, names, mapped=external)
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
            shared = SharedWeights(init_protos, model_path=config.model_path)
        if shared is not None:
            shared.adopt(self._static_values)
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
        # below MIN_SEGMENTS_FOR_CHECK, the check pays only while its gathers are given
        given_only = built_segments < MIN_SEGMENTS_FOR_CHECK and not check_always
        given_only = given_only and gathers_given(emulated_io, config)
        lean: dict[str, tuple[np.dtype[Any], np.dtype[Any]]] = {}
        shapes_from_feeds = None
        if (
            config.whole_model_check
            and not reference
            and (built_segments >= MIN_SEGMENTS_FOR_CHECK or check_always or given_only)
        ):
            # onnxruntime builds the check's session on another thread while the steps are made here.
            outputs = frozenset(io.output for io in emulated_io)
            make = functools.partial(whole_model_builder, model, config, outputs, shared)
            if not config.full_check:
                lean = lean_gathers(emulated_io, infos, graph, init_protos)
                shapes_from_feeds = feed_shapes(emulated_io, lean, infos, model, init_protos)
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
            check_sizes()
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
                step.lean_dtypes = lean.get(step.output)
            self._check = pending.finish(emulated_steps)
            if given_only:
                self._given_only = tuple(emulated_steps)
            if self._check is not None:
                self._witness(model, config)  # the check's session (outputs added) accepts the model
        if self._check is not None:
            self._chooser = chooser_for_check(config, sum(tensor_nbytes(t) for t in init_protos.values()))
        else:
            for cpu_step in self._steps:
                if isinstance(cpu_step, CpuStep):
                    _ = cpu_step.session  # built now, so that a segment onnxruntime refuses fails here
        if shared is not None:
            shared.release()  # segments built later (if ever) make their arrays again
        self._finish_init()

    def _witness(self, model: onnx.ModelProto, config: EngineConfig) -> None:
        """onnxruntime built a session of ``model`` itself (no Scatter rewritten) with its default
        options: that stands for its acceptance of the model (:mod:`dmlshim.model.ort_witness`)."""
        if config.sess_options is None and config.own_options is None and not self._scatter_as_elements:
            session_built(model)

    def _finish_init(self) -> None:
        self._last_record: tuple[tuple[Any, ...], str, RunRecord] | None = None
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

    step_observer: Callable[[Callable[[Values, RunState], None], Values, RunState], None] | None = None
    """Called as ``observe(step, values, state)`` in place of each ``step(values, state)`` (profiling)."""

    def ort_sessions(self) -> list[tuple[str, ort.InferenceSession]]:
        """Every onnxruntime session built so far (CPU partitions, then one-node fallbacks), labelled."""
        found: list[tuple[str, ort.InferenceSession]] = []
        for step in self._steps:
            if isinstance(step, CpuStep):
                found.append((step.label, step.session))
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

    def run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord]:
        """Run the model; return the named outputs and the run's record (see :meth:`_run`)."""
        try:
            return self._run(output_names, feeds, run_options=run_options)
        except IndexOutOfRangeError as exc:
            # onnxruntime's words name a node by its own name: its indices tensor and path added
            name_index_error(exc, self._indices, self._paths)
            raise

    def _run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord]:
        """Run the model; return the named outputs and the run's record.

        With the whole-model check (``EngineConfig.whole_model_check``), the answer comes from one
        whole-model onnxruntime run when every kernel reproduces onnxruntime's values; otherwise, and
        always without it, every step runs as :meth:`run_traced` runs them.
        """
        check, chooser = self._check, self._chooser
        if check is None or self.step_observer is not None:
            results, record, _ = self.run_traced(output_names, feeds, run_options=run_options)
            return results, record
        path, number = chooser.next_path()
        start = chooser.clock() if number >= 0 else 0.0  # timed during the trial only
        answer = self._by_check(check, output_names, feeds, run_options) if path == PATH_CHECK else None
        for step in self._given_only if answer is not None else ():
            if step.computed_after_proof:
                # A gather the check must still compute after its proved runs (negative indices, a CPU
                # placement, new shapes): the partitioned steps, which compute it alone, cost less.
                chooser.settle(PATH_PARTITIONED)
                break
        if answer is not None and number < 0:  # the path is chosen: nothing to observe
            if chooser.chosen == PATH_PARTITIONED:
                self._check = None  # its session (and its copy of the weights) goes
            return answer
        if answer is None and path == PATH_CHECK and check.given_up:
            chooser.settle(PATH_PARTITIONED)
        if answer is None:
            try:
                results, record, _ = self.run_traced(output_names, feeds, run_options=run_options)
            except DmlShimError:
                # Trying the partitions failed (a segment onnxruntime refuses, say): the check keeps
                # answering, as it did before the trial, when it can answer this run.
                if (
                    path != PATH_PARTITIONED
                    or chooser.chosen is not None
                    or (answer := self._by_check(check, output_names, feeds, run_options)) is None
                ):
                    raise
                chooser.settle(PATH_CHECK)
                return answer
            answer = results, record
        answered = answer[1].path
        chosen = chooser.observe(path, answered, chooser.clock() - start, number)
        if chosen == PATH_PARTITIONED or chooser.chosen == PATH_PARTITIONED:
            self._check = None  # its session (and its copy of the weights) goes
        elif chosen == PATH_CHECK:
            for step in self._steps:
                if isinstance(step, CpuStep):
                    step.unload()  # built for the trial; rebuilt if a kernel ever disagrees
        return answer

    def _by_check(
        self,
        check: WholeModelCheck,
        output_names: Sequence[str],
        feeds: Mapping[str, np.ndarray],
        run_options: Any,
    ) -> tuple[list[Any], RunRecord] | None:
        """The run answered by the whole-model check, or None when the check cannot answer it."""
        state = RunState(self._template.copy(), run_options)
        values = dict(self._static_values)
        values.update(feeds)
        checked = check.run(output_names, values, state, run_options)
        if checked is None:
            return None
        return self._owned(output_names, checked), self._record(state, PATH_CHECK)

    def _owned(self, output_names: Sequence[str], results: list[Any]) -> list[Any]:
        """``results`` with a copy of each output that is a graph input or an initializer: the caller owns
        what a run returns, and the check hands such values back as the feed or static array itself (or,
        in onnxruntime 1.24, as a view of the feed's memory)."""
        copy = self._copy_on_output
        if not copy:
            return results
        return [
            np.array(r, copy=True) if n in copy and isinstance(r, np.ndarray) else r
            for n, r in zip(output_names, results, strict=True)
        ]

    def run_checked(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray]
    ) -> tuple[list[Any], RunRecord, Mapping[str, Any]] | None:
        """Answer from the whole-model check alone: the named outputs, the run's record and the value
        table (the feeds, the static values, and every emulated node's inputs and output as onnxruntime
        computed them and its kernel reproduced them bit for bit), or None when there is no check or it
        could not answer (a kernel disagreed, onnxruntime refused the run)."""
        check = self._check
        if check is None:
            return None
        state = RunState(self._template.copy(), None)
        values = dict(self._static_values)
        values.update(feeds)
        checked = check.run(output_names, values, state, None)
        if checked is None:
            return None
        return checked, self._record(state, PATH_CHECK), values

    def drop_check(self) -> None:
        """Forget the whole-model check (its onnxruntime session, and its copy of the weights, go)."""
        self._check = None

    def run_traced(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord, Mapping[str, Any]]:
        """Run every step (never the whole-model check); return the named outputs, the run's record and
        the value table: every value that crossed a step boundary (the inputs and output of every
        emulated node among them). Its arrays must not be modified."""
        state = RunState(self._template.copy(), run_options)
        if self._whole_model:
            values: Values = dict(self._default_feeds)
            values.update(feeds)
            step = self._steps[0]
            assert isinstance(step, CpuStep)
            results = run_plain(step, values, output_names, run_options)
            values.update(zip(output_names, results, strict=True))
        else:
            values = dict(self._static_values)
            values.update(feeds)
            observe = self.step_observer
            for run_step in self._steps:
                stop = terminated(run_options)
                if stop is not None:
                    raise stop  # set while the run was under way: onnxruntime stops between nodes too
                if observe is None:
                    run_step(values, state)
                else:
                    observe(run_step, values, state)
            results = [
                np.array(values[n], copy=True) if n in self._copy_on_output else values[n]
                for n in output_names
            ]
        # with nothing to emulate the model ran whole, as the cpu engine runs it
        return results, self._record(state, PATH_CPU if self._whole_model else PATH_PARTITIONED), values

    def _record(self, state: RunState, path: str = PATH_PARTITIONED) -> RunRecord:
        nodes = tuple(filter(None, state.records))  # NodeRecords are always true
        last = self._last_record
        if last is not None and last[0] == nodes and last[1] == path and not state.translations_computed:
            return last[2]  # the previous run's record, when nothing in it changed (it is frozen)
        raw = nodes
        if self._scatter_as_elements:
            nodes = note_scatter_as_scatter_elements(nodes)
        record = RunRecord(
            engine=self.name,
            feature_level=self._fl_name,
            nodes=nodes,
            cpu_partitions=self._cpu_partitions,
            translations_computed=state.translations_computed,
            path=path,
        )
        self._last_record = (raw, path, record) if not state.translations_computed else None
        return record
