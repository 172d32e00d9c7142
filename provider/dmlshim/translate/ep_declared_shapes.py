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

An intermediate value declared in the main graph's ``value_info`` is held the same way: a node on DirectML
computing it fails; a node on CPU computing it fails in the copy to DirectML (``MemcpyFromHost``) when a
node on DirectML reads it, and runs when only CPU nodes read it (measured). Its run-time shape is not among
a run's outputs: :attr:`DeclaredOutputs.values` names the values to expose (``directml sweep`` runs
onnxruntime CPU with them as extra outputs; a session's run does not, so its notes cover graph outputs).
An output of an If's branch is held to its declaration in the branch that ran (the condition's value and
the If's outputs, exposed the same way). Loop and Scan bodies' declarations are not checked (a Loop body's
fails the same way, measured).
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
    form="a graph output, a main-graph value_info value or an If branch output computed on "
    "DmlExecutionProvider (a value also when computed on CPU and read there) whose declared shape the run "
    "contradicts (a "
    "static dimension of another size, or another rank) where onnx's inference leaves the declaration "
    "standing (the input's dimension symbolic, or its rank unknown); onnxruntime CPU runs it with a warning",
    seen="DirectML 1.15.4 / onnxruntime-directml 1.24: the first run fails at that node, "
    "MLOperatorAuthorImpl.cpp(2853) 80070057 for a dimension, (2844) for a rank: one-node Relu, Cast, "
    "Identity, Shape, Gather, GatherElements, ScatterND and ScatterElements (opset 13) models, Relu -> t "
    "(value_info [1, 2]) -> Neg (at Relu), ScatterND at opset 18 (CPU) -> t -> Neg (at MemcpyFromHost, "
    "MLOperatorAuthorImpl.cpp(2597)), an If's else branch Identity/Relu output declared [d] over a rank-2 "
    "value (the held-out GATConv export), and "
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
    kind: str = "graph output"
    """"graph output", "value" (declared in value_info) or "If 'name' then_branch/else_branch output"."""
    read_by: str = ""
    """For a value computed on CPU: the DirectML node reading it (the copy to DirectML fails), else ""."""

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
        what = self.kind
        how = " in value_info" if self.kind == "value" else ""
        at = f"at that node (MLOperatorAuthorImpl.cpp({line}) 80070057)"
        if self.read_by:
            where = f"it runs on CPU and node {self.read_by!r} reads it on DmlExecutionProvider"
            at = "in the copy to DirectML (MemcpyFromHost, MLOperatorAuthorImpl.cpp(2597) 80070057)"
        return (
            f"{what} {self.output!r} of node {self.node!r} ({self.op_type}) is declared {declared}{how} but "
            f"this run gives {list(self.actual)}; {where}, and onnxruntime-directml fails such a run {at} "
            f"where onnxruntime CPU only warns ({self.code})"
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
        outer = {v.name for v in (*model.graph.input, *model.graph.output)} | {
            t.name for t in model.graph.initializer
        }
        self._values = {
            v.name: dims
            for v in model.graph.value_info
            if v.name not in self._declared
            and v.name not in outer
            and (dims := _dims(v)) is not None
            and v.type.tensor_type.elem_type != onnx.TensorProto.STRING
        }
        # branch output name -> (the main graph's If, its branch, the output's index, declared, producer)
        self._branches = {
            out.name: (node, attr.name, i, dims, producer)
            for node in model.graph.node
            if node.op_type == "If" and not node.domain
            for attr in node.attribute
            if attr.name in ("then_branch", "else_branch")
            for i, out in enumerate(attr.g.output)
            if (dims := _dims(out)) is not None
            and (producer := next((n for n in attr.g.node if out.name in n.output), None)) is not None
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
        self._inferred_values: dict[str, Dims | None] = {}

    @property
    def values(self) -> tuple[str, ...]:
        """The values whose run-time shapes (or, for an If's condition, value) a run's outputs do not give
        and :meth:`contradictions` reads when known: those declared with a shape in the main graph's
        ``value_info``; an If's condition and outputs where one of its branches declares an output shape."""
        graph = self._model.graph
        known = {v.name for v in (*graph.input, *graph.output)} | {t.name for t in graph.initializer}
        ifs = {id(node): node for node, *_ in self._branches.values()}.values()
        extra = (n for node in ifs for n in (node.input[0], *node.output) if n and n not in known)
        return tuple(dict.fromkeys((*self._values, *extra)))

    @property
    def conditions(self) -> frozenset[str]:
        """The names of the conditions of the Ifs whose branches declare an output shape."""
        return frozenset(node.input[0] for node, *_ in self._branches.values())

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
        conditions: Mapping[str, bool] | None = None,
    ) -> tuple[DeclaredShapeContradiction, ...]:
        """The graph outputs among ``shapes`` (output name -> the run's shape) real DirectML would fail on.

        Args:
            shapes: each output's shape in the run.
            placements: node name -> onnxruntime provider where known: dmlshim's prediction for
                gather/scatter nodes, or onnxruntime's placement log; other nodes are assumed on DirectML.
            from_log: ``placements`` is onnxruntime's log of the session (``"*"`` for all nodes), which lists
                the nodes outside DirectML's fused partitions: a node it does not name ran on DirectML.
            conditions: the run's value of each If's condition (:attr:`conditions`), to hold the branch
                that ran to its declared output shapes (the If's outputs' shapes in ``shapes``).
        """
        found = []
        for name, shape in shapes.items():
            output = name in self._declared
            declared = self._declared.get(name) if output else self._values.get(name)
            if declared is None or not _contradicts(declared, shape):
                continue
            node = self._producer(name)
            if node is None or _merge_conflicts(declared, self._inferred_dims(name)):
                continue
            label = node.name or node.op_type
            where, read_by = self._placement(node, placements), ""
            if where == CPU_PROVIDER:
                read_by = "" if output else self._directml_reader(name, placements)
                if not read_by:
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
                    "graph output" if output else "value",
                    read_by,
                )
            )
        for name, (if_node, branch, index, declared, node) in self._branches.items():
            ran = (conditions or {}).get(if_node.input[0])
            shape = shapes.get(if_node.output[index]) if index < len(if_node.output) else None
            if ran is None or ran != (branch == "then_branch") or shape is None:
                continue
            if not _contradicts(declared, shape) or node.op_type in self._refusal.no_check_op_types:
                continue
            if _merge_conflicts(declared, self._inferred_dims(name)):
                continue
            where = self._placement(node, placements)
            if where == CPU_PROVIDER:
                continue
            kind = f"If {if_node.name or if_node.op_type!r} {branch} output"
            placed = where is not None or (from_log and placements is not None)
            shape_ = tuple(int(s) for s in shape)
            label = node.name or node.op_type
            found.append(
                DeclaredShapeContradiction(
                    name, label, node.op_type, declared, shape_, placed, self._refusal, kind
                )
            )
        return tuple(found)

    def _producer(self, name: str) -> onnx.NodeProto | None:
        """The node computing graph output or value ``name``, when the DirectML provider may check it (a
        value's node on CPU is returned too: the copy of its output to DirectML checks the shape)."""
        if self._producers is None:
            wanted = set(self._declared) | set(self._values)
            self._producers = {out: n for n in self._model.graph.node for out in n.output if out in wanted}
        node = self._producers.get(name)
        if node is None or node.op_type == "Constant" or node.op_type in self._refusal.no_check_op_types:
            return None
        return None if node.domain in self._refusal.cpu_domains and name in self._declared else node

    def _placement(self, node: onnx.NodeProto, placements: Mapping[str, str] | None) -> str | None:
        if node.domain in self._refusal.cpu_domains:
            return CPU_PROVIDER
        return (placements or {}).get(node.name or node.op_type, (placements or {}).get("*"))

    def _directml_reader(self, name: str, placements: Mapping[str, str] | None) -> str:
        """The first node reading ``name`` that runs on DirectML, "" when only CPU nodes read it."""
        for node in self._model.graph.node:
            if name in node.input and self._placement(node, placements) != CPU_PROVIDER:
                return node.name or node.op_type
        return ""

    def _inferred_dims(self, name: str) -> Dims | None:
        if name in self._values or name in self._branches:  # each without its own declaration
            if name not in self._inferred_values:
                self._inferred_values[name] = _inferred_without_declarations(self._model, {name}).get(name)
            return self._inferred_values[name]
        if self._inferred is None:
            outputs = {v.name for v in self._model.graph.output}
            self._inferred = _inferred_without_declarations(self._model, outputs)
        return self._inferred.get(name)


def _inferred_without_declarations(model: onnx.ModelProto, names: set[str]) -> dict[str, Dims | None]:
    """The shapes of values ``names`` (graph outputs, value_info values) as onnx's inference gives them
    without their declared shapes (what onnxruntime's inference merges into the declaration); {} when
    inference fails. The value_info of other values stays: onnxruntime's inference reads them upstream
    too (a Relu output declared [3, 2] makes the Neg reading it [3, 2], which then contradicts the output's
    stale [1, 2]: it ran on DirectML)."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    kept = [v for v in stripped.graph.value_info if v.name not in names]
    del stripped.graph.value_info[:]
    stripped.graph.value_info.extend(kept)
    for value in (*stripped.graph.output, *_branch_outputs(stripped.graph)):
        if value.name in names and value.type.HasField("tensor_type"):
            value.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(stripped)
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as exc:
        logger.debug("inference without declarations failed (%s): declared shapes taken as they are", exc)
        return {}
    graph = inferred.graph
    return {
        v.name: _dims(v)
        for v in (*graph.value_info, *graph.output, *_branch_outputs(graph))
        if v.name in names
    }


def _branch_outputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The branch outputs of the graph's Ifs."""
    return [
        out
        for node in graph.node
        if node.op_type == "If"
        for attr in node.attribute
        if attr.name in ("then_branch", "else_branch")
        for out in attr.g.output
    ]


def with_values_as_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs the values ``names`` (their type, no shape), to read
    their run-time shapes from onnxruntime CPU."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    if any(n not in types for n in names):  # an If's condition or outputs, typed by onnx's inference
        inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
        types.update({v.name: v.type.tensor_type.elem_type for v in inferred if v.name not in types})
    exposed.graph.output.extend(onnx.helper.make_tensor_value_info(n, types[n], None) for n in names)
    return exposed
