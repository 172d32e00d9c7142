"""onnxruntime-directml's run-time refusal of a graph output whose declared shape the run contradicts, as
data beside :data:`dmlshim.translate.ep_refusals.EP_REFUSALS` (``docs/directml-linux.md``).

The DirectML provider's kernels (``AbiOpKernel`` in ``MLOperatorAuthorImpl.cpp``) infer each output's shape
from the input shapes and then check it against the shape onnxruntime holds for that value: the graph
output's declaration, merged with onnx's inference as onnxruntime merges them. A static dimension (or a
rank) the run contradicts fails the run (``80070057``), where onnxruntime CPU only logs a warning
(``VerifyOutputSizes``). Whether the shapes disagree is known only from a run's values, so the check is made
on each run's outputs (:class:`DeclaredOutputs`), not by ``inspect``.

onnxruntime's merge (``Graph::MergeShapeInfo``) keeps the declaration where onnx's inference agrees with it
or knows less (a symbolic or unknown dimension, an unknown rank); where inference knows a different rank or
a different static dimension, the lenient merge keeps only the dimensions both agree on, so no declared
dimension the run could contradict is left: that form runs on DirectML (measured).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from . import CPU_PROVIDER

logger = logging.getLogger(__name__)

Dims = tuple[int | None, ...]
"""A shape: a number per static dimension, None for a symbolic or unknown one."""


@dataclass(frozen=True)
class EpDeclaredShapeRefusal:
    """A form the DirectML provider fails at run time, decided from the run's output shapes.

    Attributes:
        code: reason code (``EP_*``), as the rows of ``EP_REFUSALS``.
        form: the form, in words.
        seen: what onnxruntime-directml said on real DirectML (version, message, models).
        when: when it fails.
        no_check_op_types: ops seen to run such an output on real DirectML: their output shape comes from
            the data (NonZero on DML), or the provider has no kernel for them and onnxruntime runs them on
            CPU, which only warns (control flow, the window ops, Unique, Compress, NonMaxSuppression).
        cpu_domains: op domains the DirectML provider has no kernel for (the node runs on CPU).
    """

    code: str
    form: str
    seen: str
    when: str
    no_check_op_types: frozenset[str]
    cpu_domains: frozenset[str]


EP_DECLARED_SHAPE_REFUSAL = EpDeclaredShapeRefusal(
    code="EP_FAILS_OUTPUT_CONTRADICTING_DECLARED_SHAPE",
    form="a graph output computed on DmlExecutionProvider whose declared shape the run contradicts (a "
    "static dimension of another size, or another rank) where onnx's inference leaves the declaration "
    "standing (the input's dimension symbolic, or its rank unknown); onnxruntime CPU runs it with a warning",
    seen="DirectML 1.15.4 / onnxruntime-directml 1.24: the first run fails at that node, "
    "MLOperatorAuthorImpl.cpp(2853) 80070057 for a dimension, (2844) for a rank: one-node Relu, Cast, "
    "Identity, Shape, Gather, GatherElements, ScatterND and ScatterElements (opset 13) models, and "
    "onnx_models/ecosystem/mlt_lgbm_classifier.onnx (label declared [1], 7 rows, Cast on DML); NonZero on "
    "DML and nodes on CPU (ai.onnx.ml Scaler, ScatterND/ScatterElements at opset 18, If, Loop, Scan, Unique, "
    "Compress, NonMaxSuppression, HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix) run such "
    "an output; a string output has no DirectML form (its node runs on CPU)",
    when="run",
    no_check_op_types=frozenset(
        {
            "NonZero",
            "If",
            "Loop",
            "Scan",
            "Unique",
            "Compress",
            "NonMaxSuppression",
            "HannWindow",
            "HammingWindow",
            "BlackmanWindow",
            "MelWeightMatrix",
        }
    ),
    cpu_domains=frozenset({"ai.onnx.ml"}),
)
"""The one row: docs/directml-linux.md, "onnxruntime-directml's refusals seen on real DirectML"."""


@dataclass(frozen=True)
class DeclaredShapeContradiction:
    """One graph output whose declared shape the run contradicts, computed by a node the DirectML
    provider checks.

    Attributes:
        output: the graph output.
        node: the node computing it (its name, or its op type when unnamed).
        op_type: that node's op.
        declared: the declared shape (None for a symbolic dimension).
        actual: the run's shape.
        placement_known: whether onnxruntime's placement of the node is known (its log, or dmlshim's
            prediction for a gather/scatter node); else the node is assumed on DmlExecutionProvider.
        refusal: the refusal row.
    """

    output: str
    node: str
    op_type: str
    declared: Dims
    actual: tuple[int, ...]
    placement_known: bool
    refusal: EpDeclaredShapeRefusal = EP_DECLARED_SHAPE_REFUSAL

    @property
    def code(self) -> str:
        return self.refusal.code

    def message(self) -> str:
        """One sentence naming the output, the node, both shapes and the code."""
        declared = "[" + ", ".join("?" if d is None else str(d) for d in self.declared) + "]"
        where = (
            "it runs on DmlExecutionProvider"
            if self.placement_known
            else "dmlshim assumes it runs on DmlExecutionProvider (onnxruntime's placement of this op is "
            "not predicted)"
        )
        line = "2844" if len(self.declared) != len(self.actual) else "2853"
        return (
            f"graph output {self.output!r} of node {self.node!r} ({self.op_type}) is declared {declared} but "
            f"this run gives {list(self.actual)}; {where}, and onnxruntime-directml fails such a run at that "
            f"node (MLOperatorAuthorImpl.cpp({line}) 80070057) where onnxruntime CPU only warns ({self.code})"
        )


def _dims(value: onnx.ValueInfoProto) -> Dims | None:
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)


def _contradicts(declared: Dims, actual: Sequence[int]) -> bool:
    return len(declared) != len(actual) or any(
        d is not None and d != a for d, a in zip(declared, actual, strict=False)
    )


def _merge_conflicts(declared: Dims, inferred: Dims | None) -> bool:
    """Whether onnxruntime's strict merge of onnx's inferred shape into the declaration fails (then its
    lenient merge keeps no dimension the inference does not know: nothing left to contradict)."""
    if inferred is None:
        return False
    return len(inferred) != len(declared) or any(
        i is not None and d is not None and i != d for i, d in zip(inferred, declared, strict=True)
    )


class DeclaredOutputs:
    """The declared shapes of a model's graph outputs and the nodes computing them, to check each run's
    output shapes against (:meth:`contradictions`). onnx's inference of the model without its
    declarations runs only when a run contradicts one (once per model)."""

    def __init__(self, model: onnx.ModelProto, refusal: EpDeclaredShapeRefusal = EP_DECLARED_SHAPE_REFUSAL):
        self._model = model
        self._refusal = refusal
        # a string tensor has no DirectML form: the node making it runs on CPU, which only warns
        self._declared = {
            v.name: dims
            for v in model.graph.output
            if (dims := _dims(v)) is not None and v.type.tensor_type.elem_type != onnx.TensorProto.STRING
        }
        # name -> (the shape when every size is declared, else None; rank; ((axis, size), ...)): what a
        # run's shape is held to, read on every run (a whole static shape is one tuple comparison)
        self._held = {
            name: (
                dims if None not in dims else None,
                len(dims),
                tuple((i, d) for i, d in enumerate(dims) if d is not None),
            )
            for name, dims in self._declared.items()
        }
        self._producers: dict[str, onnx.NodeProto] | None = None  # found at the first contradiction
        self._inferred: dict[str, Dims | None] | None = None

    @property
    def empty(self) -> bool:
        """No graph output could be refused so: every run's check is skipped."""
        return not self._declared

    def may_contradict(self, names: Sequence[str], outputs: Sequence[Any]) -> bool:
        """Whether a run's outputs (numpy arrays, OrtValues...) may contradict a declaration: False only
        when every numpy output fits its declared shape (the check made on every run, kept cheap)."""
        held = self._held
        if not held:
            return False
        i = -1
        for name in names:  # indexing, not zip: this loop runs on every run of every session
            i += 1
            entry = held.get(name)
            if entry is None:
                continue
            value = outputs[i]
            shape = value.shape if type(value) is np.ndarray else getattr(value, "shape", None)
            if type(shape) is not tuple:
                return True  # an OrtValue, whose shape is a call away: the full check reads it
            whole, rank, sizes = entry
            if whole is not None:
                if shape != whole:
                    return True
                continue
            if len(shape) != rank:
                return True
            for axis, d in sizes:  # not ``i``: that indexes the outputs
                if shape[axis] != d:
                    return True
        return False

    def contradictions(
        self,
        shapes: Mapping[str, Sequence[int]],
        placements: Mapping[str, str] | None = None,
        *,
        from_log: bool = False,
    ) -> tuple[DeclaredShapeContradiction, ...]:
        """The graph outputs among ``shapes`` (output name -> the run's shape) real DirectML would fail on.

        Args:
            shapes: each output's shape in the run.
            placements: node name -> onnxruntime provider where known: dmlshim's prediction for
                gather/scatter nodes, or onnxruntime's placement log; other nodes are assumed on DirectML.
            from_log: ``placements`` is onnxruntime's log of the session (``"*"`` for all nodes), which lists
                the nodes outside DirectML's fused partitions: a node it does not name ran on DirectML.
        """
        found = []
        for name, shape in shapes.items():
            declared = self._declared.get(name)
            if declared is None or not _contradicts(declared, shape):
                continue
            node = self._producer(name)
            if node is None or _merge_conflicts(declared, self._inferred_dims(name)):
                continue
            label = node.name or node.op_type
            where = (placements or {}).get(label, (placements or {}).get("*"))
            if where == CPU_PROVIDER:
                continue
            found.append(
                DeclaredShapeContradiction(
                    name,
                    label,
                    node.op_type,
                    declared,
                    tuple(int(s) for s in shape),
                    where is not None or (from_log and placements is not None),
                    self._refusal,
                )
            )
        return tuple(found)

    def _producer(self, name: str) -> onnx.NodeProto | None:
        """The node computing graph output ``name``, when the DirectML provider may run it and check it."""
        if self._producers is None:
            wanted = set(self._declared)
            self._producers = {out: n for n in self._model.graph.node for out in n.output if out in wanted}
        node = self._producers.get(name)
        if node is None or node.op_type == "Constant" or node.op_type in self._refusal.no_check_op_types:
            return None
        return None if node.domain in self._refusal.cpu_domains else node

    def _inferred_dims(self, name: str) -> Dims | None:
        if self._inferred is None:
            self._inferred = _inferred_without_declarations(self._model)
        return self._inferred.get(name)


def _inferred_without_declarations(model: onnx.ModelProto) -> dict[str, Dims | None]:
    """Each graph output's shape as onnx's inference gives it without the outputs' declared shapes (what
    onnxruntime's inference merges into the declaration); {} when inference fails. The value_info of
    other values stays: onnxruntime's inference reads them upstream of the output too (a Relu output
    declared [3, 2] makes the Neg reading it [3, 2], which then contradicts the output's stale [1, 2]: it
    ran on DirectML)."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    outputs = {v.name for v in model.graph.output}
    kept = [v for v in stripped.graph.value_info if v.name not in outputs]
    del stripped.graph.value_info[:]
    stripped.graph.value_info.extend(kept)
    for value in stripped.graph.output:
        if value.type.HasField("tensor_type"):
            value.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(stripped)
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as exc:
        logger.debug("inference without declarations failed (%s): declared shapes taken as they are", exc)
        return {}
    return {v.name: _dims(v) for v in inferred.graph.output}
