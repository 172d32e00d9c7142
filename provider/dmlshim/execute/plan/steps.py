"""The steps a partitioned run walks: a CPU segment (one onnxruntime session) or one gather/scatter node
run from its DirectML descriptor (or, in a reference run, by onnxruntime alone)."""

from __future__ import annotations

import dataclasses
import logging
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
    NOTE_GATHER_GIVEN,
    GivenShape,
    constant_indices_given,
    given_message,
    given_shape,
)
from ..proofs.proved_again import StandIns
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
from .step_fast import FastRun, proved_fast_run
from .step_given import (  # noqa: F401 (read from here too)
    NOTE_UNTOUCHED_GIVEN,
    PROVE_RUNS,
    TRANSLATION_CACHE_SIZE,
    UNTOUCHED_GIVEN_MESSAGE,
    GivenRuns,
)
from .step_keys import arrays_key, shape_note, shapes_key

logger = logging.getLogger(__name__)

VERIFIED_OPS = SCATTERS
"""Nodes whose output the whole-model check verifies instead of computing (:meth:`EmulatedStep.verify`)."""

GATHER_GIVEN_MESSAGE = given_message(PROVE_RUNS)

VERIFY_MIN_BYTES = 512 * 1024
"""Scatter outputs smaller than this are computed and compared whole on their first proved runs, then
taken from onnxruntime when their indices prove them (:meth:`EmulatedStep._verify_small_scatter`; gathers
of any size go to :meth:`EmulatedStep._verify_gather`), never verified: below about this size the verify's
extra calls cost what it saves (measured: a 12-row ScatterND, 192 KiB 0.11 vs 0.12 ms, 768 KiB 0.19 vs 0.18
ms, 3 MiB 0.58 vs 0.42 ms, 12 MiB 4.0 vs 2.1 ms for computing and comparing vs verifying)."""


class EmulatedStep(GivenRuns):
    """One gather/scatter node: run from its DirectML descriptor, or on the CPU when its translation for
    the actual shapes says so. With ``reference`` set, onnxruntime runs the node alone instead (the
    like-for-like reference of ``dmlshim validate``)."""

    __slots__ = (
        "_agreed_shape",
        "_attrs",
        "_cache",
        "_fast_at",
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
        # the run plan of the last inputs' shapes and dtypes the kernel ran (step_fast), its clean record
        self._fast_at: tuple[tuple[Any, ...], FastRun | None, NodeRecord] | None = None
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

    def run_planned(self, values: Values, state: RunState) -> None:
        """A step of a partitioned run: as a call, except that a run with the inputs' shapes and dtypes of
        the kernel's last run, whose indices DirectML and ONNX read alike, is answered by that run's plan
        (:mod:`.step_fast`). The whole-model check calls the step itself (the kernel computes what it
        compares with onnxruntime)."""
        if self.reference:
            self(values, state)
            return
        arrays = [values[n] if n else None for n in self.inputs]
        fast = self._fast_at
        if fast is not None and fast[1] is not None and arrays_key(arrays) == fast[0]:
            done = fast[1](arrays)
            if done is not None:
                out = values[self.output] = done[0]
                self._finish(self._marked_record(fast[2], done[1], done[2]), out, state)
                return
        self._finish(self._run(values, arrays, state, planned=True), values[self.output], state)

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
            return self._cpu_given(values, state, theirs, arrays, t, None)
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
        if clean is None:
            return self._cpu_given(values, state, theirs, arrays, entry[0], None)
        if not scatter_output_is_given(self.node.op_type, self._attrs, arrays, theirs):
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
        if clean is None:
            return self._cpu_given(values, state, theirs, arrays, entry[0], key)
        expected = given_shape(self.node.op_type, self._attrs, arrays)
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

    def _run(self, values: Values, arrays: list[Any], state: RunState, planned: bool = False) -> NodeRecord:
        """The step run through its translation and the kernel (or on the CPU); ``planned``: then make the
        run plan of these inputs' shapes and dtypes (see :meth:`run_planned`)."""
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
        negative = has_negative(arrays[1])
        if planned and key is not None and not self._full_check:
            fast = self._fast_at
            if fast is None or fast[0] != key:
                made = proved_fast_run(self.node.op_type, self._attrs, arrays, t, result, negative)
                if made is not False:
                    self._fast_at = (key, made, clean)
        return self._marked_record(clean, result.duplicate_indices, negative)

    def _dml_record(self, clean: NodeRecord, duplicates: int, arrays: list[Any]) -> NodeRecord:
        """The record of a run from the descriptor: ``clean`` with the run's duplicate writes and whether
        it saw negative indices."""
        return self._marked_record(clean, duplicates, has_negative(arrays[1]))

    def _marked_record(self, clean: NodeRecord, duplicates: int, negative: bool) -> NodeRecord:
        """``clean`` with a run's duplicate writes and whether it saw negative indices."""
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
