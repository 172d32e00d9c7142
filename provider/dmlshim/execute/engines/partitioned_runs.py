"""Running the partitioned engine (:mod:`dmlshim.execute.engines.partitioned` builds it): a run answered
by the whole-model check or by the steps, the outputs the caller owns, and the run's record."""

from __future__ import annotations

import mmap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import DmlShimError, IndexOutOfRangeError
from ..feeds import feed_key
from ..plan.cpu_step import CpuStep, RunState, Values, needs_ort_values, ort_run_of
from ..plan.fallback import note_scatter_as_scatter_elements
from ..plan.sessions import ORT_ERRORS, name_index_error, ort_run_error, terminated
from ..plan.steps import EmulatedStep
from ..record import PATH_CPU, RunRecord
from ..weights.layout_views import drop_pages
from .path_choice import PATH_CHECK, PATH_PARTITIONED, PathChooser
from .plain_model import run_plain
from .steady_lane import SteadyLane, steady_lane
from .whole_model import WholeModelCheck


def owned_outputs(
    output_names: Sequence[str], results: list[Any], copy: frozenset[str], *, arrays_only: bool = True
) -> list[Any]:
    """``results`` with a copy of each output named in ``copy`` (the graph outputs that are graph inputs
    or initializers): the caller owns what a run returns, never the feed or static array itself, which
    the check and the steps hand back as they are (onnxruntime 1.24's check, as a view of the feed's
    memory). ``arrays_only``: only numpy arrays are copied, other values (an OrtValue) returned as they
    are, as the check's answers are; otherwise every such value is made an array, as the steps' are."""
    if not copy:
        return results
    return [_owned(r, arrays_only) if n in copy else r for n, r in zip(output_names, results, strict=True)]


def _owned(value: Any, arrays_only: bool) -> Any:
    """One output made the caller's own: an array copied; a sequence (a list of arrays, as onnxruntime
    returns a sequence-typed output) or a map element by element, never made one ragged array."""
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, (list, tuple)):
        return [_owned(v, True) for v in value]
    if isinstance(value, dict):
        return {k: _owned(v, True) for k, v in value.items()}
    return value if arrays_only else np.array(value, copy=True)


class PartitionedRuns:
    """The run side of :class:`dmlshim.execute.engines.partitioned.PartitionedEngine`, whose build sets
    the attributes below."""

    name = "partitioned"
    _check: WholeModelCheck | None
    _chooser: PathChooser
    _given_only: tuple[EmulatedStep, ...]
    _steps: list[Callable[[Values, RunState], None]]
    _static_values: Values
    _view_maps: tuple[mmap.mmap, ...] = ()
    """Maps of the model's files beneath static values read through views (:mod:`..weights.layout_views`)."""
    _default_feeds: Values
    _template: list[Any]
    _copy_on_output: frozenset[str]
    _whole_model: bool
    _scatter_as_elements: bool
    _fl_name: str
    builds_from_callers_options: bool
    _cpu_partitions: int
    _indices: Mapping[str, str]
    _paths: Mapping[str, str]
    _last_record: tuple[tuple[Any, ...], str, RunRecord] | None = None
    """The previous run's nodes (before any note), path and record, reused while they stay the same."""

    step_observer: Callable[[Callable[[Values, RunState], None], Values, RunState], None] | None = None
    """Called as ``observe(step, values, state)`` in place of each ``step(values, state)`` (profiling)."""

    _planned: tuple[Callable[[Values, RunState], None], ...] = ()
    """The steps of a partitioned run without run options or an observer (:meth:`_plan_steps`)."""

    _plain: Callable[[Sequence[str], Mapping[str, Any]], tuple[list[Any], RunRecord]] | bool | None = None
    """A steady run of a model with nothing to emulate (:meth:`_plain_runner`; None: not made yet)."""

    _steady: SteadyLane | None = None
    """The steady lane made from the last lean run (:mod:`.steady_lane`), while nothing else ran since."""

    def run_steady(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], feed_key: tuple[Any, ...]
    ) -> tuple[list[Any], RunRecord] | None:
        """A run answered by the steady lane: the named outputs and the run's record, or None when the
        lane does not answer it (no lane, other feed dtypes or shapes, a proof that does not hold): then
        :meth:`run` answers it. ``feed_key``: :func:`dmlshim.execute.feeds.feed_key` of ``feeds``, which
        the caller validated; no run options."""
        lane, check = self._steady, self._check
        if check is None:
            # the partitioned steps answer every run: the session's feed checks were its checks
            if self.step_observer is not None:
                return None
            if self._whole_model:
                plain = self._plain if self._plain is not None else self._plain_runner()
                if plain:
                    return plain(output_names, feeds)
            return self.run(output_names, feeds)
        if lane is None or lane.feed_key != feed_key:
            return None
        answer = lane.answer(output_names, feeds)
        if answer is None:
            return None
        check.agreements += 1
        check.lean_runs += 1
        copy = self._copy_on_output
        return (owned_outputs(output_names, answer, copy) if copy else answer), lane.record

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
        finally:
            if self._view_maps:
                drop_pages(self._view_maps)

    def _run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord]:
        """Run the model; return the named outputs and the run's record.

        With the whole-model check (``EngineConfig.whole_model_check``), the answer comes from one
        whole-model onnxruntime run when every kernel reproduces onnxruntime's values; otherwise, and
        always without it, every step runs as :meth:`run_traced` runs them.
        """
        self._steady = None  # this run may change what the lane rests on; a lean run makes it again
        check, chooser = self._check, self._chooser
        if check is None:  # profiled too: the check is built only where partitioned runs differ
            results, record, _ = self.run_traced(output_names, feeds, run_options=run_options)
            return results, record
        path, number = chooser.next_path()
        start = chooser.clock() if number >= 0 else 0.0  # timed during the trial only
        answer = self._by_check(check, output_names, feeds, run_options) if path == PATH_CHECK else None
        # a profiled run computes every gather (each is timed): the check keeps answering
        for step in self._given_only if answer is not None and self.step_observer is None else ():
            if step.computed_after_proof:
                # A gather the check must still compute after its proved runs (negative indices, a CPU
                # placement, new shapes): the partitioned steps, which compute it alone, cost less.
                chooser.settle(PATH_PARTITIONED)
                break
        if answer is not None and number < 0:  # the path is chosen: nothing to observe
            if chooser.chosen == PATH_PARTITIONED:
                self._check = None  # its session (and its copy of the weights) goes
                self._steady = None
            return answer
        self._steady = None  # made only once the check is the chosen path
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
        elif chosen == PATH_CHECK and not self.builds_from_callers_options:
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
        answer = self._check_run(check, output_names, feeds, run_options)
        if answer is None:
            return None
        checked, record, _ = answer
        return owned_outputs(output_names, checked, self._copy_on_output), record

    def _check_run(
        self,
        check: WholeModelCheck,
        output_names: Sequence[str],
        feeds: Mapping[str, np.ndarray],
        run_options: Any,
        *,
        lean: bool = True,
    ) -> tuple[list[Any], RunRecord, Mapping[str, Any]] | None:
        """The check's outputs as it hands them back, the run's record and the value table; None when
        the check cannot answer. ``lean``: the lean check may answer (its value table then holds the
        feeds and static values only)."""
        state = RunState(self._template.copy(), run_options)
        values = dict(self._static_values)
        values.update(feeds)
        checked = check.run(output_names, values, state, run_options, lean, observe=self.step_observer)
        if checked is None:
            return None
        record = self._record(state, PATH_CHECK)
        if (
            state.lean_fetched is not None
            and run_options is None
            and self._chooser.chosen == PATH_CHECK
            and self.step_observer is None
        ):
            key = feed_key(feeds)
            if key is not None:
                self._steady = steady_lane(check, state.lean_fetched, feeds, key, self._static_values, record)
        return checked, record, values

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
        return self._check_run(check, output_names, feeds, None, lean=False)

    def drop_check(self) -> None:
        """Forget the whole-model check (its onnxruntime session, and its copy of the weights, go)."""
        self._check = None
        self._steady = None

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
            if observe is None and run_options is None:
                for run_step in self._planned or self._plan_steps():
                    run_step(values, state)
            else:
                for run_step in self._steps:
                    stop = terminated(run_options) if run_options is not None else None
                    if stop is not None:
                        raise stop  # set while the run was under way: onnxruntime stops between nodes too
                    if observe is None:
                        run_step(values, state)
                    else:
                        observe(run_step, values, state)
            results = owned_outputs(
                output_names, [values[n] for n in output_names], self._copy_on_output, arrays_only=False
            )
        # with nothing to emulate the model ran whole, as the cpu engine runs it
        return results, self._record(state, PATH_CPU if self._whole_model else PATH_PARTITIONED), values

    def _plain_runner(
        self,
    ) -> Callable[[Sequence[str], Mapping[str, Any]], tuple[list[Any], RunRecord]] | bool:
        """A model with nothing to emulate, run as :meth:`run_traced` runs it when the feeds are all the
        session takes (no initializer default to add): onnxruntime's compiled run where its Python layer
        would only repeat the session's feed checks (:func:`~dmlshim.execute.plan.cpu_step.ort_run_of`),
        and the record of every such run. False when its outputs need OrtValues (:meth:`run` answers)."""
        step = self._steps[0]
        assert isinstance(step, CpuStep)
        session = step.session
        if self._default_feeds or needs_ort_values(session):
            self._plain = False
            return False
        ort_run = ort_run_of(session, {})
        record = self._record(RunState(self._template.copy(), None), PATH_CPU)

        def run(output_names: Sequence[str], feeds: Mapping[str, Any]) -> tuple[list[Any], RunRecord]:
            try:
                return list(ort_run(output_names, feeds, None)), record
            except ORT_ERRORS as exc:
                error = ort_run_error(exc, "onnxruntime failed running the model")
                if isinstance(error, IndexOutOfRangeError):  # named as :meth:`run` names it
                    name_index_error(error, self._indices, self._paths)
                raise error from exc

        self._plain = run
        return run

    def _plan_steps(self) -> tuple[Callable[[Values, RunState], None], ...]:
        """The steps a partitioned run walks: the gathers and scatters by their run plans
        (:meth:`~dmlshim.execute.plan.steps.EmulatedStep.run_planned`), the CPU segments by onnxruntime's
        compiled run (:meth:`~dmlshim.execute.plan.cpu_step.CpuStep.run_planned`)."""
        planned = tuple(s.run_planned if isinstance(s, (EmulatedStep, CpuStep)) else s for s in self._steps)
        self._planned = planned
        return planned

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
