"""The CPU side of an emulated step: a node run alone in onnxruntime's CPU provider (the reference run, an
input neither numpy nor DirectML holds, a translation that is no DirectML operator at a run's shapes),
and the records of those runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ...model.zero_depth_scatternd import CRASH_NOTE, ort_crashes, scatter_nd_empty_tuples
from ...translate import NodeTranslation, Status
from ..proofs.scatter_given import overwritten_writes
from ..record import PLACEMENT_CPU, NodeRecord
from .cpu_step import RunState, Values, run_session
from .segments import single_node_model, value_elem_and_rank
from .sessions import ORT_ERRORS, cpu_session, ort_run_error

REASON_NOT_EMULATED = "not_emulated"
REASON_CPU_PREFERRED = "ort_cpu_preferred"
REASON_RUNTIME_FALLBACK = "runtime_fallback"
REASON_REFERENCE = "reference_run"


def reasons_of(t: NodeTranslation) -> tuple[tuple[str, str], ...]:
    """A translation's reasons as ``(code, message)`` pairs, as records hold them."""
    return tuple((r.code, r.message) for r in t.reasons)


class CpuFallback:
    """Running an :class:`dmlshim.execute.plan.steps.EmulatedStep`'s node in onnxruntime, which sets the
    attributes below."""

    __slots__ = ()
    name: str
    node: onnx.NodeProto
    inputs: tuple[str, ...]
    output: str
    fallback_sessions: dict[tuple[Any, ...], ort.InferenceSession]
    _attrs: dict[str, Any]
    _model: onnx.ModelProto
    _sess_options: Any

    def _run_reference(self, values: Values, arrays: list[Any], state: RunState) -> NodeRecord:
        values[self.output] = self._run_on_cpu(arrays, state)
        return NodeRecord(
            name=self.name,
            op_type=self.node.op_type,
            placement=PLACEMENT_CPU,
            status=REASON_REFERENCE,
            reasons=((REASON_REFERENCE, "the reference run: onnxruntime ran this node alone"),),
        )

    def _cpu_record(self, t: NodeTranslation, arrays: list[Any]) -> NodeRecord:
        """The record of a run whose translation at these shapes and types is no DirectML operator."""
        return NodeRecord(
            name=self.name,
            op_type=self.node.op_type,
            placement=PLACEMENT_CPU,
            status=t.status.value,
            duplicate_indices=overwritten_writes(self.node.op_type, self._attrs, arrays),
            reasons=(
                *reasons_of(t),
                (
                    REASON_RUNTIME_FALLBACK,
                    "the translation for this run's shapes and types is not a DirectML operator; "
                    + (
                        CRASH_NOTE.format(version=ort.__version__)
                        if self._empty_tuples(arrays)
                        else "the node ran in onnxruntime's CPU provider"
                    ),
                ),
            ),
            ort_placement=t.ort_placement,
        )

    def _run_ortvalues(self, values: Values, arrays: list[Any], state: RunState) -> NodeRecord:
        """An input numpy cannot hold (a bfloat16 OrtValue, say): DirectML cannot hold it either, so the
        node runs in onnxruntime's CPU provider, on the OrtValues as they are."""
        values[self.output] = self._run_on_cpu(arrays, state)
        kinds = sorted({a.data_type() for a in arrays if isinstance(a, ort.OrtValue)})
        return NodeRecord(
            name=self.name,
            op_type=self.node.op_type,
            placement=PLACEMENT_CPU,
            status=Status.FALLBACK.value,
            reasons=(
                (
                    REASON_RUNTIME_FALLBACK,
                    f"an input is a {', '.join(kinds)}, which neither numpy nor DirectML holds; the node ran "
                    "in onnxruntime's CPU provider",
                ),
            ),
        )

    def _empty_tuples(self, arrays: Sequence[Any]) -> bool:
        """Whether this run is a ScatterND with empty index tuples on an onnxruntime it would kill."""
        return (
            self.node.op_type == "ScatterND"
            and len(arrays) > 2
            and all(isinstance(a, np.ndarray) for a in arrays[:3])
            and arrays[1].ndim >= 1
            and arrays[1].shape[-1] == 0
            and ort_crashes()
        )

    def _run_on_cpu(self, arrays: Sequence[Any], state: RunState) -> Any:
        if self._empty_tuples(arrays):
            reduction = self._attrs.get("reduction", "none")
            if isinstance(reduction, bytes):
                reduction = reduction.decode()
            return scatter_nd_empty_tuples(arrays[0], arrays[1], arrays[2], str(reduction))
        # One graph input per name: a node reading one tensor twice (ScatterElements(i, i, i)) would
        # otherwise declare it twice, which onnxruntime refuses.
        present = list({n: a for n, a in zip(self.inputs, arrays, strict=False) if a is not None}.items())
        key = tuple((elem, len(dims)) for elem, dims in (value_elem_and_rank(a) for _, a in present))
        session = self.fallback_sessions.get(key)
        if session is None:
            session = self.fallback_sessions[key] = cpu_session(
                single_node_model(self._model, self.node, present), self._sess_options, f"node {self.name!r}"
            )
        try:
            (out,) = run_session(session, [self.output], dict(present), state.run_options)
        except ORT_ERRORS as exc:
            raise ort_run_error(exc, "onnxruntime failed", node=self.name, op_type=self.node.op_type) from exc
        return out
