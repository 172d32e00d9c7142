"""The steps a partitioned run walks: a CPU segment (one onnxruntime session) or one gather/scatter node
run from its DirectML descriptor (or, in a reference run, by onnxruntime alone)."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from ...comparison import same_bits
from ...dml.enums import FeatureLevel
from ...kernels.indices import has_negative
from ...kernels.options import IndexMode
from ...limits import check_tensor, gather_scatter_output_shape
from ...translate import NodeTranslation, Status, TensorInfo, run_translation, translate_node
from ...translate.plan import elem_type_of
from ...translate.runner import verify_translation
from ..proofs.gather_given import (
    GIVEN_OPS,
    LEAN_MESSAGE,
    NOTE_GATHER_GIVEN,
    GivenShape,
    constant_indices_given,
    given_message,
    given_shape,
    lean_indices_in_range,
)
from ..proofs.proved_again import StandIns, proved_again, same_inputs, steady_proof
from ..proofs.scatter_given import (
    SCATTER_GIVEN_MESSAGE,
    SCATTERS,
    scatter_output_is_given,
)
from ..record import PLACEMENT_DML, NodeRecord
from .cpu_step import RunState, Values
from .step_fallback import (  # noqa: F401 (the REASON_ codes are read from here too)
    REASON_CPU_PREFERRED,
    REASON_NOT_EMULATED,
    REASON_REFERENCE,
    REASON_RUNTIME_FALLBACK,
    CpuFallback,
    reasons_of,
)
from .step_keys import arrays_key, shape_note, shapes_key

logger = logging.getLogger(__name__)

TRANSLATION_CACHE_SIZE = 64
"""Translations kept per node (one per distinct input shapes and dtypes); the cache restarts when full."""

VERIFIED_OPS = SCATTERS
"""Nodes whose output the whole-model check verifies instead of computing (:meth:`EmulatedStep.verify`)."""

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

GATHER_GIVEN_MESSAGE = given_message(PROVE_RUNS)

VERIFY_MIN_BYTES = 512 * 1024
"""Scatter outputs smaller than this are computed and compared whole on their first proved runs, then
taken from onnxruntime when their indices prove them (:meth:`EmulatedStep._verify_small_scatter`; gathers
of any size go to :meth:`EmulatedStep._verify_gather`), never verified: below about this size the verify's
extra calls cost what it saves (measured: a 12-row ScatterND, 192 KiB 0.11 vs 0.12 ms, 768 KiB 0.19 vs 0.18
ms, 3 MiB 0.58 vs 0.42 ms, 12 MiB 4.0 vs 2.1 ms for computing and comparing vs verifying)."""


class EmulatedStep(CpuFallback):
    """One gather/scatter node: run from its DirectML descriptor, or on the CPU when its translation for
    the actual shapes says so. With ``reference`` set, onnxruntime runs the node alone instead (the
    like-for-like reference of ``dmlshim validate``)."""

    __slots__ = (
        "_agreed_shape",
        "_attrs",
        "_cache",
        "_full_check",
        "_given_at",
        "_lean_runs",
        "_marked",
        "_model",
        "_noted",
        "_proved",
        "_proved_key",
        "_sess_options",
        "_stand_ins",
        "computed_after_proof",
        "constant_indices",
        "fallback_sessions",
        "feature_level",
        "index_mode",
        "inferred_output",
        "inputs",
        "lean_dtypes",
        "name",
        "node",
        "output",
        "reference",
        "since_version",
        "slot",
        "verifiable",
    )

    def __init__(
        self,
        *,
        node: onnx.NodeProto,
        name: str,
        since_version: int,
        slot: int,
        feature_level: FeatureLevel,
        index_mode: IndexMode,
        model: onnx.ModelProto,
        sess_options: Any,
        static: NodeTranslation | None,
        static_key: tuple[Any, ...] | None,
        inferred_output: TensorInfo | None = None,
        reference: bool = False,
        full_check: bool = False,
    ) -> None:
        self.node = node
        self.name = name
        self.since_version = since_version
        self.slot = slot
        self.feature_level = feature_level
        self.index_mode = index_mode
        self.inputs = tuple(node.input)
        self.output = node.output[0]
        self.inferred_output = inferred_output
        self.reference = reference
        self.verifiable = node.op_type in VERIFIED_OPS
        self.lean_dtypes: tuple[np.dtype[Any], np.dtype[Any]] | None = None
        """A gather the whole-model check takes from onnxruntime by its inputs' shapes alone: their dtypes
        (:func:`dmlshim.execute.proofs.gather_given.lean_gathers`)."""
        self._full_check = full_check
        self.constant_indices: np.ndarray | None = None
        """The indices when they are a constant of the model (the engine's own read-only array; a feed
        that overrides it is another object): see :func:`constant_indices_given`."""
        self.computed_after_proof = False
        """A gather in the check that had to be computed after its proved runs (see :meth:`verify`)."""
        self._proved = 0  # verified runs whose untouched elements were proved too
        self._proved_key: tuple[Any, ...] | None = None  # the shapes and dtypes proved
        # a gather's last given run: its inputs' shapes and dtypes, what they ask of onnxruntime's output
        # and the run's record (reused while the shapes and dtypes, proved, stay the same)
        # (a scatter's: its key and record, no GivenShape)
        self._given_at: tuple[tuple[Any, ...], GivenShape | None, NodeRecord | None] | None = None
        self._noted: tuple[NodeRecord, tuple[str, str], NodeRecord] | None = None
        self._marked: tuple[NodeRecord, int, bool, NodeRecord] | None = None
        # given_by_shapes: (input shapes and dtypes) -> (record, output stand-in) of an earlier run
        self._lean_runs: dict[tuple[Any, ...], tuple[NodeRecord, np.ndarray]] = {}
        self._stand_ins: StandIns | None = None  # given_again's, of a scatter
        self._model = model
        self._sess_options = sess_options
        self._agreed_shape: tuple[int, ...] | None = None
        self._attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self._cache: dict[tuple[Any, ...], tuple[NodeTranslation, NodeRecord | None]] = {}
        self.fallback_sessions: dict[tuple[Any, ...], ort.InferenceSession] = {}
        if static is not None and static_key is not None:
            self._cache[static_key] = (static, self._clean_record(static))

    def _clean_record(self, t: NodeTranslation) -> NodeRecord | None:
        """The record of a run with no duplicates and no negative indices (shared, it is frozen)."""
        if t.status is not Status.DML or t.operator is None:
            return None
        return NodeRecord(
            name=self.name,
            op_type=self.node.op_type,
            placement=PLACEMENT_DML,
            status=t.status.value,
            operator=t.operator.operator_type.dml_name,
            reasons=reasons_of(t),
            ort_placement=t.ort_placement,
        )

    def __call__(self, values: Values, state: RunState) -> None:
        arrays = [values[n] if n else None for n in self.inputs]
        if self.reference:
            record = self._run_reference(values, arrays, state)
        else:
            record = self._run(values, arrays, state)
        self._finish(record, values[self.output], state)

    def _finish(self, record: NodeRecord, out: Any, state: RunState) -> None:
        """Store the run's record, noting an output shape that contradicts shape inference."""
        if type(out) is np.ndarray:
            shape = out.shape
        else:
            shape = tuple(out.shape()) if isinstance(out, ort.OrtValue) else np.shape(out)
        if shape != self._agreed_shape:
            note = shape_note(shape, self.inferred_output)
            if note is not None:
                record = dataclasses.replace(record, notes=(*record.notes, note))
            else:
                self._agreed_shape = shape  # the last shape that agreed with inference: no note
        state.records[self.slot] = record

    def verify(self, values: Values, state: RunState, theirs: Any) -> bool | None:
        """Whether ``theirs`` (onnxruntime's value of the output) is, bit for bit, what running this step
        would store, found without computing the output (a scatter's kernel checks the written targets
        and that the rest is its input, see :mod:`dmlshim.kernels.scatter_verify`). On agreement the step is
        recorded exactly as a run records it, and ``theirs`` becomes the output value.

        Returns:
            The verdict, or None when this step has no such check (a node that runs on the CPU, a
            scatter output under :data:`VERIFY_MIN_BYTES`, a gather on its proved runs or with an index
            out of ``[0, dim)``): the caller runs the step and compares.
        """
        if self.reference:
            return None
        if self.node.op_type in GIVEN_OPS:
            return self._verify_gather(values, state, theirs)
        if not self.verifiable:
            return None
        if getattr(theirs, "nbytes", 0) < VERIFY_MIN_BYTES:
            return self._verify_small_scatter(values, state, theirs)
        arrays = [values[n] if n else None for n in self.inputs]
        if any(isinstance(a, ort.OrtValue) for a in arrays):
            return None
        t, clean = self._translation(arrays, state)
        if clean is None:
            return None
        if not self._full_check and scatter_output_is_given(self.node.op_type, self._attrs, arrays, theirs):
            values[self.output] = theirs
            self._finish(self._given(clean, (NOTE_GATHER_GIVEN, SCATTER_GIVEN_MESSAGE)), theirs, state)
            self._remember_given(shapes_key(arrays), None, state)
            return True
        self._restart_proof_on_new_shapes(arrays)
        prove = self._full_check or self._proved < PROVE_RUNS
        verdict = verify_translation(t, arrays, theirs, index_mode=self.index_mode, prove_untouched=prove)
        if verdict is None:
            return None
        if verdict.agrees:
            values[self.output] = theirs
            record = self._dml_record(clean, verdict.duplicate_indices, arrays)
            if prove:
                self._proved += 1
            else:
                record = self._given(record)
            self._finish(record, theirs, state)
        return verdict.agrees

    def _verify_small_scatter(self, values: Values, state: RunState, theirs: Any) -> bool | None:
        """A scatter under :data:`VERIFY_MIN_BYTES`: computed and compared by the check (None) on the
        session's first :data:`PROVE_RUNS` runs with the same input shapes and dtypes (:meth:`agreed`
        counts them), as gathers are; later runs whose indices prove the output
        (:func:`dmlshim.execute.proofs.scatter_given.scatter_output_is_given`) take ``theirs``, as a
        large scatter's runs do from the first. Every run under ``full_check``."""
        if self._full_check:
            return None
        arrays = [values[n] if n else None for n in self.inputs]
        key = arrays_key(arrays)
        if key is None:  # an OrtValue or a mapped weight: computed and compared
            return None
        if key != self._proved_key:
            self._proved_key, self._proved = key, 0
        if self._proved < PROVE_RUNS:
            return None
        entry = self._cache.get(key) or self._translation(arrays, state)
        clean = entry[1]
        if clean is None or not scatter_output_is_given(self.node.op_type, self._attrs, arrays, theirs):
            return None
        values[self.output] = theirs
        self._finish(self._given(clean, (NOTE_GATHER_GIVEN, SCATTER_GIVEN_MESSAGE)), theirs, state)
        self._remember_given(key, None, state)
        return True

    def agreed(self) -> None:
        """The check ran this scatter (``verify`` said None) and its output was onnxruntime's bit for bit:
        one more proved run of these input shapes and dtypes."""
        if self.verifiable:
            self._proved += 1

    def _restart_proof_on_new_shapes(self, arrays: list[Any]) -> None:
        """Count proved runs afresh when the inputs' shapes or dtypes differ from the proved ones."""
        key = shapes_key(arrays)
        if key != self._proved_key:
            self._proved_key, self._proved = key, 0

    def _verify_gather(self, values: Values, state: RunState, theirs: Any) -> bool | None:
        """A gather in the check, whatever its size (see :mod:`dmlshim.execute.proofs.gather_given`): run
        and compared bit for bit on the first :data:`PROVE_RUNS` runs with the same input shapes and dtypes
        (every run under ``full_check``); later, when every index is in range, ``theirs`` is taken as the
        output and the record notes it. None (run and compare) when the indices or values do not allow
        that."""
        arrays = [values[n] if n else None for n in self.inputs]
        key = arrays_key(arrays)
        given = self._given_at
        if given is not None and key == given[0] == self._proved_key and key in self._cache:
            # The shapes and dtypes of the last given run: its expectations and record hold; only the
            # indices' values are proved again.
            expected = given[1]
            if (
                type(theirs) is np.ndarray
                and theirs.shape == expected.shape
                and theirs.dtype == expected.dtype
                and expected.indices_in_range(arrays[1])
            ):
                values[self.output] = theirs
                state.records[self.slot] = given[2]
                return True
        if key is None:  # an OrtValue (run and compare), or a mapped weight
            if any(isinstance(a, ort.OrtValue) for a in arrays):
                self.computed_after_proof = True
                return None
            key = shapes_key(arrays)
        if key != self._proved_key:  # other shapes or dtypes than the proved ones: prove afresh
            self.computed_after_proof |= self._proved_key is not None
            self._proved_key, self._proved = key, 0
        if self._full_check or self._proved < PROVE_RUNS:
            self(values, state)
            agrees = same_bits(np.asarray(values[self.output]), np.asarray(theirs))
            self._proved += agrees
            return agrees
        entry = self._cache.get(key) or self._translation(arrays, state)
        clean = entry[1]
        expected = given_shape(self.node.op_type, self._attrs, arrays) if clean is not None else None
        if expected is not None and not expected.indices_in_range(arrays[1]):
            expected = constant_indices_given(
                expected, self.node.op_type, self._attrs, arrays, self.constant_indices, self.feature_level
            )
        if (
            expected is None
            or not isinstance(theirs, np.ndarray)
            or theirs.dtype != expected.dtype
            or theirs.shape != expected.shape
            or not expected.indices_in_range(arrays[1])
        ):
            self.computed_after_proof = True
            return None
        assert clean is not None
        values[self.output] = theirs
        record = self._dml_record(clean, 0, arrays)  # negative constant indices noted, as when computed
        self._finish(self._given(record, (NOTE_GATHER_GIVEN, GATHER_GIVEN_MESSAGE)), theirs, state)
        self._remember_given(key, expected, state)
        return True

    def _remember_given(self, key: tuple[Any, ...], expected: GivenShape | None, state: RunState) -> None:
        """Keep what this run's given output rested on: the inputs' shapes and dtypes (while their
        translation is cached), a gather's expectations, and the run's record."""
        self._given_at = (key, expected, state.records[self.slot]) if key in self._cache else None

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
        stand_ins = [np.broadcast_to(np.zeros((), d), s) for d, s in zip(dtypes, shapes, strict=True)]
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

    def _run(self, values: Values, arrays: list[Any], state: RunState) -> NodeRecord:
        # The translation is looked up directly when every input is a plain array (the common case).
        key = arrays_key(arrays)
        if key is None:
            if any(isinstance(a, ort.OrtValue) for a in arrays):
                return self._run_ortvalues(values, arrays, state)
            entry = self._translation(arrays, state)
        else:
            entry = self._cache.get(key) or self._translation(arrays, state)
        t, clean = entry
        if clean is None:
            values[self.output] = self._run_on_cpu(arrays, state)
            return self._cpu_record(t, arrays)
        result = run_translation(t, arrays, index_mode=self.index_mode)
        values[self.output] = result.output
        return self._dml_record(clean, result.duplicate_indices, arrays)

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

    def _dml_record(self, clean: NodeRecord, duplicates: int, arrays: list[Any]) -> NodeRecord:
        """The record of a run from the descriptor: ``clean`` with the run's duplicate writes and whether
        it saw negative indices."""
        negative = has_negative(arrays[1])
        if duplicates or negative:
            last = self._marked
            if last is not None and last[0] is clean and last[1] == duplicates and last[2] == negative:
                return last[3]  # the same record as the previous run's: made once
            marked = dataclasses.replace(clean, duplicate_indices=duplicates, negative_indices=negative)
            self._marked = (clean, duplicates, negative, marked)
            return marked
        return clean

    def _translation(self, arrays: list[Any], state: RunState) -> tuple[NodeTranslation, NodeRecord | None]:
        """The translation for these inputs' shapes and dtypes (cached) and its clean record (None when
        the node runs on the CPU)."""
        key = shapes_key(arrays)
        entry = self._cache.get(key)
        if entry is None:
            # A gather's output can dwarf its inputs (small data, many indices): size it before running.
            shape = gather_scatter_output_shape(
                self.node.op_type, self._attrs, [a.shape if a is not None else None for a in arrays]
            )
            if shape is not None and arrays and arrays[0] is not None:
                check_tensor(
                    shape, arrays[0].dtype, tensor=self.output, node=self.name, op_type=self.node.op_type,
                    what="output",
                )  # fmt: skip
            infos = [
                TensorInfo(tuple(a.shape), elem_type_of(a.dtype)) if a is not None else None for a in arrays
            ]
            t = translate_node(self.node, self.since_version, infos, self.feature_level, name=self.name)
            if len(self._cache) >= TRANSLATION_CACHE_SIZE:
                self._cache.clear()
            entry = self._cache[key] = (t, self._clean_record(t))
            state.translations_computed += 1
        return entry
