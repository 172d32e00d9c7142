"""The runs of an :class:`~dmlshim.execute.plan.steps.EmulatedStep` whose output is taken as onnxruntime
made it, on a proof of its indices: what such a run rested on (:meth:`GivenRuns.given_on`), the lean
check's proof of the next run (:meth:`GivenRuns.given_again`, :meth:`GivenRuns.given_proof`), and the lean
gathers recorded from their shapes alone (:meth:`GivenRuns.given_by_shapes`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import BadInputError
from ...limits import gather_scatter_output_shape
from ...translate import NodeTranslation
from ..proofs.gather_given import (
    GIVEN_OPS,
    LEAN_MESSAGE,
    NOTE_GATHER_GIVEN,
    GivenShape,
    given_shape,
    lean_indices_in_range,
)
from ..proofs.proved_again import StandIns, proved_again, same_inputs, steady_proof
from ..proofs.scatter_given import scatter_output_is_given
from ..record import NodeRecord
from .cpu_step import RunState
from .step_fallback import CpuFallback
from .step_keys import shapes_key

TRANSLATION_CACHE_SIZE = 64
"""Translations kept per node (one per distinct input shapes and dtypes); the cache restarts when full."""

PROVE_RUNS = 3
"""Verified runs of a scatter (with the same input shapes and dtypes) in which the whole-model check also
proves that every element the scatter does not write is its InputTensor (a scatter whose indices alone
prove its output, :mod:`dmlshim.execute.proofs.scatter_given`, is not verified at all). Later runs take those
elements as onnxruntime copied them (ONNX and DirectML both define them as the data input; only the
written elements can differ, and they are verified on every run): the proof reads the input and the output
in full, 9-31 ms per run of the 24 KV-cache ScatterND of a 652 MB decoder step, where onnxruntime's whole
run takes 30-45 ms. ``EngineConfig.full_check`` (validate, ``DMLSHIM_FULL_CHECK=1``) proves them on every
run."""

NOTE_UNTOUCHED_GIVEN = "untouched_elements_from_onnxruntime"
UNTOUCHED_GIVEN_MESSAGE = (
    "the elements this scatter does not write are onnxruntime's copy of its data input, proved equal to "
    f"it on the session's first {PROVE_RUNS} runs (DMLSHIM_FULL_CHECK=1 proves them on every run); the "
    "written elements were proved against the DirectML kernel"
)


CPU_GIVEN_MESSAGE = (
    "at this run's shapes and types this node runs in onnxruntime's CPU provider (its translation is no "
    "DirectML operator), and the whole-model check's session computed it with the same kernel: its output "
    "is that session's, taken on the proof of its indices (every index in range, and for a scatter none "
    f"written twice; a gather after {PROVE_RUNS} runs computed alone and compared), as for the nodes "
    "DirectML runs (DMLSHIM_FULL_CHECK=1 computes it alone and compares on every run)"
)
"""The record note's text for a node on the CPU whose output the check took from its onnxruntime session."""


class GivenRuns(CpuFallback):
    """The given runs of an emulated step (:class:`~dmlshim.execute.plan.steps.EmulatedStep` holds the
    attributes and the methods named below)."""

    __slots__ = ()
    _given_at: tuple[tuple[Any, ...], GivenShape | None, NodeRecord | None] | None
    _full_check: bool
    _proved_key: tuple[Any, ...] | None
    _cache: dict[tuple[Any, ...], tuple[NodeTranslation, NodeRecord | None]]
    _stand_ins: StandIns
    _lean_runs: dict[tuple[Any, ...], tuple[NodeRecord, np.ndarray]]
    _noted: tuple[NodeRecord, tuple[str, str], NodeRecord] | None
    slot: int
    lean_dtypes: tuple[np.dtype[Any], ...] | None
    _translation: Callable[[list[Any], RunState], tuple[NodeTranslation, NodeRecord | None]]
    _finish: Callable[[NodeRecord, Any, RunState], None]

    def _remember_given(self, key: tuple[Any, ...], expected: GivenShape | None, state: RunState) -> None:
        """Keep what this run's given output rested on: the inputs' shapes and dtypes (while their
        translation is cached), a gather's expectations, and the run's record."""
        self._given_at = (key, expected, state.records[self.slot]) if key in self._cache else None

    def _cpu_given(
        self,
        values: dict[str, Any],
        state: RunState,
        theirs: Any,
        arrays: list[Any],
        t: NodeTranslation,
        key: tuple[Any, ...] | None,
    ) -> bool | None:
        """A run of the whole-model check where this node's translation is no DirectML operator (an empty
        output, say), so that it runs in onnxruntime's CPU provider: ``theirs``, the check session's value,
        is taken as its output when the indices prove it as they prove a DirectML node's (a gather's
        ``key``, its inputs' shapes and dtypes, past its proved runs: every index in ``[0, dim)``; a
        scatter: :func:`~dmlshim.execute.proofs.scatter_given.scatter_output_is_given`), so that the node
        is given and the lean check can take over (the R-CNNs' empty pyramid levels: issue 36). None (run
        alone and compared, as before) otherwise, and always under ``full_check``."""
        op_type = self.node.op_type
        if self._full_check or not isinstance(theirs, np.ndarray):
            self.computed_after_proof = True
            return None
        expected: GivenShape | None = None
        if op_type in GIVEN_OPS:
            expected = given_shape(op_type, self._attrs, arrays)
            if (
                expected is None
                or theirs.dtype != expected.dtype
                or theirs.shape != expected.shape
                or not expected.indices_in_range(arrays[1])
            ):
                self.computed_after_proof = True
                return None
        elif not scatter_output_is_given(op_type, self._attrs, arrays, theirs):
            return None
        values[self.output] = theirs
        self._finish(
            self._given(self._cpu_record(t, arrays), (NOTE_GATHER_GIVEN, CPU_GIVEN_MESSAGE)), theirs, state
        )
        self._remember_given(key if key is not None else shapes_key(arrays), expected, state)
        return True

    def given_on(self, state: RunState) -> bool:
        """This run (``state``) took the output from onnxruntime on the proof of its indices (a gather past
        its proved runs, or a scatter whose indices prove it)."""
        given = self._given_at
        return given is not None and given[2] is not None and state.records[self.slot] is given[2]

    def given_again(self, inputs: Sequence[Any], state: RunState) -> bool:
        """The proof of a run of the lean check (:mod:`dmlshim.execute.engines.lean_check`), which fetches
        of this node only what that proof reads: per input, its values (the indices; graph inputs and
        initializers) or only its shape (a tuple). True, with the record stored, when the inputs have the
        shapes of the last given run (see :meth:`given_on`), its translation still cached, and the
        indices prove the output again exactly as that run's did; False changes nothing (the caller runs
        the full check instead)."""
        given = self._given_at
        if given is None or self._full_check or (given[1] is not None and given[0] != self._proved_key):
            return False
        if not same_inputs(inputs, given[0]) or given[0] not in self._cache:
            return False  # other shapes, an OrtValue, a translation no longer cached: the full check
        holds, self._stand_ins = proved_again(
            self.node.op_type, self._attrs, given[0], given[1], inputs[1], self._stand_ins
        )
        if holds:
            state.records[self.slot] = given[2]
        return holds

    def given_proof(self) -> tuple[tuple[Any, ...], Callable[[np.ndarray], bool]] | None:
        """The proof :meth:`given_again` would make of the next run, for the steady lane
        (:mod:`dmlshim.execute.engines.steady_lane`): the inputs' shapes and dtypes of the last given run
        and the proof of the indices' values; None when :meth:`given_again` would not hold whatever the
        values (no given run, the full check asked for, its translation no longer cached)."""
        given = self._given_at
        if given is None or self._full_check or (given[1] is not None and given[0] != self._proved_key):
            return None
        if given[0] not in self._cache:
            return None
        return given[0], steady_proof(self.node.op_type, self._attrs, given[0], given[1])

    def lean_proof(self, data_shape: Sequence[int]) -> Callable[[np.ndarray], bool]:
        """The range proof of a lean gather's held indices at ``data_shape`` (see :meth:`given_by_shapes`)."""
        return functools.partial(lean_indices_in_range, self.node.op_type, self._attrs, tuple(data_shape))

    def given_by_shapes(
        self, shapes: Sequence[tuple[int, ...]], state: RunState, indices: np.ndarray | None = None
    ) -> bool:
        """Record this run of a lean gather (:attr:`lean_dtypes`) from its data and indices shapes, its
        output being onnxruntime's; False when no output shape follows from them, or when ``indices``
        (the indices' values, when the check holds them: a constant) are not all in range (the check then
        hands the run to the partitioned steps)."""
        if self.lean_dtypes is None:
            return False
        op_type, attrs = self.node.op_type, self._attrs
        if indices is not None and not lean_indices_in_range(op_type, attrs, shapes[0], indices):
            return False
        dtypes = self.lean_dtypes
        key = tuple(zip(map(tuple, shapes), dtypes, strict=True))  # shapes_key of stand-ins
        earlier = self._lean_runs.get(key)
        if earlier is not None and key in self._cache:
            # The shapes of an earlier run, whose translation is still the cached one: the same record
            # (a shape computation's gather sees the same shapes on every run; nothing to redo).
            self._finish(earlier[0], earlier[1], state)
            return True
        # Stand-ins with the shapes and dtypes and no memory: the translation reads nothing else.
        try:
            stand_ins = [np.broadcast_to(np.zeros((), d), s) for d, s in zip(dtypes, shapes, strict=True)]
        except ValueError as exc:  # an empty shape whose other dimensions numpy cannot hold ([0, 2**62])
            raise BadInputError(
                f"an input of shape {[list(s) for s in shapes]} is empty, but numpy cannot hold such an "
                f"array (its non-zero dimensions times the item size reach 2**63 bytes): {exc}",
                rule="a value's non-zero dimensions, times its element size, stay below 2**63 bytes",
                value=[list(s) for s in shapes],
                node=self.name,
                op_type=op_type,
            ) from exc
        t, clean = self._translation(stand_ins, state)
        shape = gather_scatter_output_shape(self.node.op_type, self._attrs, shapes)
        if shape is None:
            return False
        # No DirectML operator at these shapes (an empty selection, say): the partitioned steps would run
        # the node in onnxruntime's CPU provider too, so onnxruntime's output is the answer either way.
        record = (
            self._cpu_record(t, stand_ins)
            if clean is None
            else self._given(clean, (NOTE_GATHER_GIVEN, LEAN_MESSAGE))
        )
        out = np.broadcast_to(np.zeros((), dtypes[0]), shape)
        if len(self._lean_runs) >= TRANSLATION_CACHE_SIZE:
            self._lean_runs.clear()
        self._lean_runs[key] = (record, out)
        self._finish(record, out, state)
        return True

    def _given(
        self, record: NodeRecord, note: tuple[str, str] = (NOTE_UNTOUCHED_GIVEN, UNTOUCHED_GIVEN_MESSAGE)
    ) -> NodeRecord:
        """``record`` noting that the untouched elements (a gather: the output) were taken as onnxruntime
        made them (the last one made is kept: a run's record is usually the previous run's)."""
        last = self._noted
        if last is not None and last[0] is record and last[1] == note:
            return last[2]
        noted = dataclasses.replace(record, notes=(*record.notes, note))
        self._noted = (record, note, noted)
        return noted
