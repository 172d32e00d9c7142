"""The whole-model check: a faster way for the partitioned engine to reach the same answer.

A partitioned run pays, at every boundary between a CPU segment and an emulated node, for one more
onnxruntime call and for the fusions onnxruntime cannot make across the cut. The whole-model check runs
the model once in onnxruntime with every emulated node's inputs and output added as graph outputs, runs
each emulated node's kernel on the inputs onnxruntime computed for it, and compares the kernel's output
with onnxruntime's bit for bit (a scatter's kernel verifies onnxruntime's output instead: the written
targets computed and compared, the rest proven equal to the input, without copying the input). When every
emulated node agrees, the model's outputs are onnxruntime's (every gather/scatter value in them is one a
DirectML kernel produced, bit for bit) and the run costs about one onnxruntime call plus the kernels. When
any node disagrees, or onnxruntime refuses the inputs, the caller runs the partitioned steps as before, so
the result and the errors are exactly the partitioned engine's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import onnx

from ...comparison import same_bits
from ..proofs.gather_given import add_extra_outputs, shape_output
from ..proofs.symbol_shapes import FeedShapes, value_shape
from .lean_check import KEEP_FULL_MAX_BYTES, LeanCheckSpec, LeanSession, build_lean

logger = logging.getLogger(__name__)

COPY_RUNS = 4  # PROVE_RUNS + 1 (not imported: the plan package would load dmlshim.inputs for inspect)
"""A heavy model's full-check runs that answer with copies when they fetch more than
:data:`KEEP_FULL_MAX_BYTES`: a gather is given at the earliest on the run after its
:data:`dmlshim.execute.plan.step_given.PROVE_RUNS` proved runs, and the lean check takes over after
that run."""

GIVE_UP_AFTER = 3
"""Disagreeing runs, with none agreeing, after which the check is no longer tried (each costs a run)."""


def _copied(value: Any) -> Any:
    """A numpy array copied into memory of its own (not a view of onnxruntime's buffers); other values
    (sequences, maps) as they are."""
    return value.copy() if isinstance(value, np.ndarray) else value


class NodeIO(Protocol):
    """An emulated node's input and output names."""

    @property
    def inputs(self) -> tuple[str, ...]: ...

    @property
    def output(self) -> str: ...


class EmulatedStepLike(Protocol):
    """What the check needs of an emulated step: its input and output names, and running it. A step may
    also have ``verify(values, state, theirs) -> bool | None``: whether onnxruntime's output ``theirs``
    is exactly what running the step would store (recording the step as a run does, and storing
    ``theirs``, when it is), or None to have the step run and its output compared (scatters verify
    their output without computing it, see :mod:`dmlshim.kernels.scatter_verify`); and ``agreed()``,
    called when the step ran and its output was onnxruntime's bit for bit."""

    inputs: tuple[str, ...]
    output: str

    def __call__(self, values: dict[str, Any], state: Any) -> None: ...


CHECK_LABEL = "whole-model check"
"""How a profile names the check's onnxruntime session (``args.partition`` of its events)."""


class _Kernel:
    """One emulated node's kernel in a profiled check: its verify (when it has one) or its run; named as
    the step is, for :meth:`dmlshim.ort.profiling.SessionProfiler.observe_step`."""

    __slots__ = ("_step", "_theirs", "_verify", "agrees", "name", "node", "slot")

    def __init__(self, step: Any, verify: Callable[..., bool | None] | None, theirs: Any) -> None:
        self._step, self._verify, self._theirs = step, verify, theirs
        self.node, self.slot = getattr(step, "node", None), getattr(step, "slot", None)
        self.name = getattr(step, "name", step.output)
        self.agrees: bool | None = None
        """The verify's answer; None: the kernel ran, its output is to be compared."""

    def __call__(self, values: dict[str, Any], state: Any) -> None:
        if self._verify is not None:
            self.agrees = self._verify(values, state, self._theirs)
            if self.agrees:
                values[self._step.output] = self._theirs
                return
            if self.agrees is not None:
                return
        self._step(values, state)


def identical(ours: Any, theirs: Any) -> bool:
    """Same shape, dtype and bits (NaN payloads and signed zeros included), as
    :func:`dmlshim.comparison.same_bits` answers for arrays."""
    return same_bits(np.asarray(ours), np.asarray(theirs))


def captured_names(
    steps: Sequence[NodeIO],
    known: set[str],
    graph_outputs: Sequence[str],
    lean: frozenset[str] = frozenset(),
    shaped: frozenset[str] = frozenset(),
    indices: frozenset[str] = frozenset(),
) -> list[str]:
    """The values to fetch besides the graph outputs: every emulated node's computed inputs and output;
    for a lean gather (its output named in ``lean``, see
    :func:`dmlshim.execute.proofs.gather_given.lean_gathers`) only its computed inputs' shapes (none for
    those in ``shaped``, whose shapes follow from the feeds':
    :func:`dmlshim.execute.proofs.gather_given.feed_shapes`), and its inputs and output where another
    emulated node reads them; the values of ``indices`` (a lean gather's, proved in range from them)."""
    seen = set(graph_outputs) | known
    read = {n for step in steps if step.output not in lean for n in step.inputs if n} | indices
    read |= {n for step in steps for n in step.inputs if n and n in lean}
    names: list[str] = []

    def add(name: str) -> None:
        if name and name not in seen:
            seen.add(name)
            names.append(name)

    for step in steps:
        if step.output not in lean:
            for name in (*step.inputs, step.output):
                add(name)
            continue
        for name in step.inputs[:2]:
            # A graph input, initializer or value fetched already gives its shape; so do the feeds for
            # those in ``shaped``.
            if name not in seen and (name in read or name not in shaped):
                add(name if name in read else shape_output(name))
        if step.output in read:
            add(step.output)
    return names


def augmented_model(
    model: onnx.ModelProto, extra_outputs: Sequence[str], clash: Callable[[], bool] | None = None
) -> bytes:
    """``model`` serialized with ``extra_outputs`` appended to its graph outputs, a ``Shape`` node making
    each shape output among them (``model`` is left as it was: the outputs and nodes are added, serialized
    and removed, so its weights are never copied). ``clash``: as for
    :func:`~dmlshim.execute.proofs.gather_given.add_extra_outputs`."""
    graph = model.graph
    before, nodes_before = len(graph.output), len(graph.node)
    try:
        add_extra_outputs(graph, extra_outputs, clash)
        return model.SerializeToString()
    finally:
        del graph.output[before:]
        del graph.node[nodes_before:]


class WholeModelCheck:
    """One onnxruntime session of the whole model that also returns every emulated node's inputs and
    output (see the module docstring).

    Args:
        session: the onnxruntime session of the augmented model.
        steps: the emulated steps, in graph order.
        graph_outputs: the model's output names.
        captured: the extra outputs of the session, as :func:`captured_names` lists them.
        ort_errors: the exception types onnxruntime raises.
        lean: the outputs of the lean gathers (taken by their inputs' shapes, ``step.given_by_shapes``).
        feed_shapes: the lean gathers' inputs whose shapes come from the feeds' (none fetched).
        lean_check: what the lean check needs (:class:`LeanCheckSpec`), or None for none.
    """

    def __init__(
        self,
        session: Any,
        steps: Sequence[EmulatedStepLike],
        graph_outputs: Sequence[str],
        captured: Sequence[str],
        ort_errors: tuple[type[BaseException], ...],
        lean: frozenset[str] = frozenset(),
        feed_shapes: FeedShapes | None = None,
        lean_check: LeanCheckSpec | None = None,
    ) -> None:
        self._session = session
        self._lean = lean
        self._graph_outputs = list(graph_outputs)
        self._feed_shapes = feed_shapes
        self._steps = tuple(steps)
        self._fetch = [*graph_outputs, *captured]
        self._position = {name: i for i, name in enumerate(self._fetch)}
        # The caller's value of an initializer that is also a graph input replaces the model's, as in
        # onnxruntime: those are fed too (get_inputs() leaves them out).
        self._inputs = [i.name for i in (*session.get_inputs(), *session.get_overridable_initializers())]
        self._ort_errors = ort_errors
        # Per step, what a run reads: whether it is lean, its verify (None: run and compare), and the
        # fetched inputs with their positions (worked out once, not on every run).
        position = self._position
        by_values = feed_shapes.indices if feed_shapes is not None else frozenset()
        self._plan = tuple(
            (
                step,
                step.output in lean,
                getattr(step, "verify", None),
                getattr(step, "agreed", None),
                tuple((n, position[n]) for n in step.inputs if n and n in position),
                position.get(step.output),
                # a lean gather: its data and indices (name, fetched at, its shape fetched at), and
                # whether its indices must be held as values (proved in range from them)
                tuple((n, position.get(n), position.get(shape_output(n))) for n in step.inputs[:2]),
                len(step.inputs) > 1 and (step.inputs[1] in self._inputs or step.inputs[1] in by_values),
            )
            for step in self._steps
        )
        self.disagreements = 0
        """Runs in which a kernel's output differed from onnxruntime's (the partitioned run answered)."""
        self.agreements = 0  # runs the check answered
        self.lean_runs = 0
        """Runs of those the lean check answered (:mod:`dmlshim.execute.engines.lean_check`)."""
        # A lean check where it lists fewer values than this one (its own session); where it lists the
        # same, the lean check (and the steady lane, :mod:`.steady_lane`) run this very session.
        worth = lean_check is not None and len(lean_check.extra) < len(captured)
        self._reuse = lean_check is not None and not worth and set(lean_check.extra) == set(captured)
        self._spec = lean_check if (worth or self._reuse) and any(not p[1] for p in self._plan) else None
        self._lean_session: LeanSession | None = None
        self._lean_plan: tuple[tuple[Any, ...], ...] = ()
        self._lean_ready = False  # the last full run had every node given: the lean check answers next
        self._lean_blocked = False  # no lean check in this session (it could not be built, say)
        self._switch = threading.RLock()  # the sessions change under it

    @property
    def ort_errors(self) -> tuple[type[BaseException], ...]:
        """The exception types onnxruntime raises."""
        return self._ort_errors

    @property
    def given_up(self) -> bool:
        """The check is no longer tried (it disagreed :data:`GIVE_UP_AFTER` times and never agreed)."""
        return self.disagreements >= GIVE_UP_AFTER and not self.agreements

    def run(
        self,
        output_names: Sequence[str],
        values: dict[str, Any],
        state: Any,
        run_options: Any,
        lean: bool = True,
        observe: Callable[[Any, dict[str, Any], Any], None] | None = None,
    ) -> list[Any] | None:
        """The outputs named, or None when the partitioned run must answer (a kernel disagreed with
        onnxruntime, or onnxruntime refused the run). ``values`` holds the feeds and static values;
        kernels' records go to ``state``. ``lean``: the lean check may answer (then ``values`` gets
        nothing: False when the caller reads every node's inputs and output from it). ``observe``:
        called as ``observe(kernel, values, state)`` in place of each node's kernel (profiling)."""
        if self.disagreements >= GIVE_UP_AFTER and not self.agreements:
            return None
        if self._lean_ready and lean:
            answer = self._run_lean(output_names, values, state, run_options)
            if answer is not None:
                self.agreements += 1
                self.lean_runs += 1
                return answer
            self._back_to_full()
        feeds = {n: values[n] for n in self._inputs if n in values}
        try:
            fetched = (self._session or self._full_session()).run(self._fetch, feeds, run_options)
        except self._ort_errors as exc:
            logger.debug("whole-model check: onnxruntime refused the run (%s); running the partitions", exc)
            return None
        position = self._position
        for step, is_lean, verify, agreed, fetched_inputs, at, lean_inputs, needs_indices in self._plan:
            if is_lean:
                if not self._given_by_shapes(step, fetched, values, state, lean_inputs, needs_indices, at):
                    self.disagreements += 1
                    return None
                continue
            for name, i in fetched_inputs:
                if name not in values:
                    values[name] = fetched[i]
            theirs = fetched[at]
            if observe is not None:
                kernel = _Kernel(step, verify, theirs)
                observe(kernel, values, state)  # the kernel ran there (or was verified)
                agrees = kernel.agrees
            else:
                agrees = verify(values, state, theirs) if verify is not None else None
            if agrees is None:
                if observe is None:
                    step(values, state)
                agrees = identical(values[step.output], theirs)
                if agrees and agreed is not None:
                    agreed()
            if not agrees:
                self.disagreements += 1
                logger.debug("whole-model check: %r differs from onnxruntime; partitions answer", step.output)
                return None
            values[step.output] = theirs
        self.agreements += 1
        spec = self._spec
        # A light model's full session is released when the lean one takes over after a heavy run, a
        # heavy model's always; what this session hands back keeps its memory arena alive (onnxruntime's
        # arrays are views of its buffers), so such runs answer with copies until then: a heavy model's
        # only on its first COPY_RUNS runs, before the lean check can take over (a caller keeping an
        # earlier run's outputs held that arena beside the lean session's: Mask R-CNN 2.0x onnxruntime's
        # peak), not on every run of a model whose lean check never comes.
        copies = (
            spec is not None
            and (spec.keep_full or self.agreements <= COPY_RUNS)
            and not self._reuse
            and not self._lean_blocked
            and sum(getattr(value, "nbytes", 0) for value in fetched) > KEEP_FULL_MAX_BYTES
        )
        heavy = copies and spec is not None and spec.keep_full
        if (
            lean
            and spec is not None
            and not self._lean_blocked
            and all(plan[1] or plan[0].given_on(state) for plan in self._plan)
        ):
            self._go_lean(heavy)
        if copies:
            return [_copied(fetched[position[n]]) if n in position else values[n] for n in output_names]
        return [fetched[position[n]] if n in position else values[n] for n in output_names]

    def sessions(self) -> list[tuple[str, Any]]:
        """The check's onnxruntime sessions built now (the full one, the lean one), labelled."""
        found = [(CHECK_LABEL, self._session)] if self._session is not None else []
        made = self._lean_session
        if made is not None and made.session is not self._session:
            found.append((f"{CHECK_LABEL} (lean)", made.session))
        return found

    def _go_lean(self, heavy: bool = False) -> None:
        """Every node was given on this run: the next runs go to the lean session (built now, the full
        one released first unless the spec keeps both and the run was not ``heavy``, i.e. fetched more
        than :data:`KEEP_FULL_MAX_BYTES`: onnxruntime's arena of the full session keeps at least that
        much, a second copy of the run's memory beside the lean one's)."""
        spec = self._spec
        assert spec is not None
        with self._switch:
            if self._lean_session is None and not self._lean_blocked:
                if (heavy or not spec.keep_full) and not self._reuse:
                    self._session = None  # one copy of the weights at a time
                made = build_lean(
                    (lambda _: self._session) if self._reuse else spec.make_session,
                    self._graph_outputs,
                    spec.extra,
                    self._steps,
                    self._lean | spec.lean_after,
                    spec.from_feeds,
                )
                if made is None:
                    self._lean_blocked = True
                    self._full_session()
                    return
                position = made.position
                self._lean_plan = tuple(
                    (
                        plan[0],
                        plan[1] or plan[0].output in spec.lean_after,
                        tuple(
                            (n, position.get(n), position.get(shape_output(n))) for n in plan[0].inputs[:2]
                        ),
                        plan[7],
                        position.get(plan[0].output),
                    )
                    for plan in self._plan
                )
                self._lean_session = made
            self._lean_ready = self._lean_session is not None

    def _back_to_full(self) -> None:
        """A run the lean proofs could not answer: it goes to the full check, and so do the next runs until
        one has every node given again. With one session at a time, the full one is built again and
        this session stays on it."""
        self._lean_ready = False
        if self._session is None:
            self._full_session()

    def _full_session(self) -> Any:
        """The full check's session, built again (the lean one released first, and no lean check after)
        when the lean one replaced it."""
        with self._switch:
            if self._session is None:
                assert self._spec is not None
                self._lean_ready = False
                self._lean_blocked = True
                self._lean_session = None  # released before the full one is built
                self._session = self._spec.make_session(self._fetch[len(self._graph_outputs) :])
            return self._session

    def _run_lean(
        self, output_names: Sequence[str], values: dict[str, Any], state: Any, run_options: Any
    ) -> list[Any] | None:
        """A run of the lean session, every node proved again from what it fetched; None when a proof does
        not hold (nothing of the run is kept: the full check answers it)."""
        made = self._lean_session
        if made is None:  # released by a concurrent run going back to the full check
            return None
        feeds = {n: values[n] for n in self._inputs if n in values}
        try:
            fetched = made.run(feeds, run_options)
        except self._ort_errors as exc:
            logger.debug("lean check: onnxruntime refused the run (%s); the full check answers", exc)
            return None
        scratch = dict(values)
        added: list[str] = []
        for step, is_lean, lean_inputs, needs_indices, out_at in self._lean_plan:
            if is_lean:
                ok = self._given_by_shapes(step, fetched, scratch, state, lean_inputs, needs_indices, out_at)
            else:
                inputs = made.inputs_of(step.output, fetched, scratch, added)
                ok = inputs is not None and step.given_again(inputs, state)
            if not ok:
                logger.debug("lean check: %r not proved on this run; the full check answers", step.output)
                return None
        position = made.position
        state.lean_fetched = fetched
        return [fetched[position[n]] if n in position else scratch[n] for n in output_names]

    def lean_parts(
        self,
    ) -> tuple[LeanSession | None, tuple[tuple[Any, ...], ...], list[str], FeedShapes | None]:
        """The lean session (None when there is none or it is not answering), its per-step plan, the
        session's input names and the shapes that follow from the feeds (:mod:`.steady_lane`)."""
        made = self._lean_session if self._lean_ready else None
        return made, self._lean_plan, self._inputs, self._feed_shapes

    def _given_by_shapes(
        self,
        step: Any,
        fetched: list[Any],
        values: dict[str, Any],
        state: Any,
        inputs: tuple[tuple[str, int | None, int | None], ...],
        needs_indices: bool,
        out_at: int | None,
    ) -> bool:
        """A lean gather's run: recorded from its inputs' shapes, its output (where fetched) onnxruntime's.
        ``inputs``: its data and indices with where the run fetched each value or shape (None: not);
        ``needs_indices``: its indices are proved in range from their values, which must be held;
        ``out_at``: where the run fetched its output (None: not fetched)."""
        shapes = []
        for name, at, shape_at in inputs:
            if at is not None and name not in values:
                values[name] = fetched[at]
            known = value_shape(values.get(name))
            if known is not None:
                shapes.append(known)
            elif shape_at is not None:
                shapes.append(tuple(fetched[shape_at].tolist()))  # a Shape's int64s
            else:  # a shape that follows from the feeds' (none fetched)
                resolved = self._feed_shapes.resolve(name, values) if self._feed_shapes else None
                if resolved is None:
                    return False
                shapes.append(resolved)
        indices = values.get(step.inputs[1])
        if needs_indices and not isinstance(indices, np.ndarray):
            return False  # such indices are proved in range from their values
        if not step.given_by_shapes(shapes, state, indices if isinstance(indices, np.ndarray) else None):
            logger.debug("whole-model check: %r is no DirectML operator at these shapes", step.output)
            return False
        if out_at is not None:
            values[step.output] = fetched[out_at]
        return True
