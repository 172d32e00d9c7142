"""Why real DirectML's outputs differ: its gather/scatter nodes, or its float arithmetic in other ops.

``validate --engine directml`` compares real DirectML's whole-model run with onnxruntime CPU within each
float dtype's tolerance. When an output still differs, the model runs on real DirectML once more with
every top-level gather/scatter node's inputs and output added as graph outputs; dmlshim's kernel then runs
each node on DirectML's own inputs and its output is compared with DirectML's own output of that node
(exactly for integer and bool values, within the dtype's tolerance for floats). When every node
reproduces DirectML, the gather/scatter nodes did what dmlshim emulates and the difference comes from
DirectML's float arithmetic in the other ops (a Softmax one ulp off, a Conv summed in another order),
which dmlshim does not emulate: the verdict is a match, and the report says so.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..dml.enums import FeatureLevel
from ..errors import DmlShimError
from ..graph import constant_node_value, is_gather_scatter, node_path, walk_nodes
from ..kernels.options import IndexMode
from ..text import names_text
from ..translate.plan import Status, TensorInfo, elem_type_of
from ..translate.runner import run_translation
from ..translate.translator import model_opsets, node_since_version, translate_node
from .results import CAUSE_OTHER_NODES, CAUSE_UNEXPLAINED, ValidationReport
from .value_kinds import fitting_tolerance, is_array

logger = logging.getLogger(__name__)

_REFUSED = "dmlshim refused DirectML's inputs"


@dataclass(frozen=True)
class NodeCheck:
    """One gather/scatter node run by dmlshim's kernel on real DirectML's inputs of that node.

    Attributes:
        node: the node's path.
        op_type: its ONNX op.
        reproduced: dmlshim's output equals DirectML's (floats within the dtype's tolerance); None when
            the node was not checked.
        detail: what was compared, or why not.
    """

    node: str
    op_type: str
    reproduced: bool | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op_type": self.op_type,
            "reproduced": self.reproduced,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class DirectMLNodeCheck:
    """The attribution of real DirectML's differing outputs (see the module docstring).

    Attributes:
        nodes: one check per top-level gather/scatter node, in graph order.
        first_output: the first output that differs from onnxruntime CPU beyond tolerance.
        max_abs_diff: its largest absolute difference (None: shape or dtype).
        error: why the attribution run could not be made, else None.
        nested: gather/scatter nodes inside subgraphs (not checked: DirectML's run cannot expose them).
    """

    nodes: tuple[NodeCheck, ...]
    first_output: str
    max_abs_diff: float | None
    error: str | None = None
    nested: int = 0

    @property
    def failing(self) -> tuple[NodeCheck, ...]:
        """The nodes whose dmlshim output differs from DirectML's on DirectML's inputs."""
        return tuple(n for n in self.nodes if n.reproduced is False)

    @property
    def reproduced(self) -> bool:
        """Every checked node reproduced DirectML and the run could be made."""
        return self.error is None and not self.failing

    @property
    def text(self) -> str:
        """The report's line."""
        diff = f"max |diff| {self.max_abs_diff:.3g}" if self.max_abs_diff is not None else "shape or dtype"
        if self.error is not None:
            return f"real DirectML's differing outputs could not be attributed: {self.error}"
        checked = sum(n.reproduced is not None for n in self.nodes)
        skipped = len(self.nodes) - checked
        unchecked = [f"{skipped} not checked: --json says why"] if skipped else []
        unchecked += [f"{self.nested} inside subgraphs not checked"] if self.nested else []
        also = f" ({'; '.join(unchecked)})" if unchecked else ""
        if self.failing:
            named = names_text([n.node for n in self.failing], 12)
            return (
                f"real DirectML differs from onnxruntime CPU ({self.first_output}: {diff}) and "
                f"{len(self.failing)} of {checked} gather/scatter node(s) given DirectML's own inputs do not "
                f"reproduce DirectML's output: {named}"
            )
        return (
            f"MATCH for the gather/scatter nodes: each of the {checked} gather/scatter node(s) checked, "
            f"run by dmlshim on real DirectML's own inputs, reproduces DirectML's output{also}; the outputs "
            f"differ through DirectML's float arithmetic in other ops (first: {self.first_output}, {diff})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": "match" if self.reproduced else "mismatch",
            "first_output": self.first_output,
            "max_abs_diff": self.max_abs_diff,
            "error": self.error,
            "nested_not_checked": self.nested,
            "text": self.text,
            "nodes": [n.to_json() for n in self.nodes],
        }


def _loaded_model(report: ValidationReport, proto: onnx.ModelProto | None) -> Any:
    """The model as validate read it (``report.loaded``), else ``proto``, else the report's model file
    read again by dmlshim's careful reader (without its weights: they are read once, for the run)."""
    from ..execute.weights.model_source import load_model

    if report.loaded is not None:
        return report.loaded
    if proto is not None:
        return load_model(proto)
    if report.model == "<in-memory model>":
        raise OSError("the model is not a file and no ModelProto was given")
    return load_model(report.model, weightless=True)


def _folded(graph: onnx.GraphProto) -> frozenset[str]:
    """The values onnxruntime's constant folding (every optimization level but ``disabled``) computes
    when it builds the session, so that they are initializers there (a Gather of a constant table at
    constant indices): :func:`~dmlshim.execute.weights.folded_reads.folded_values`, the answer the static
    size check uses too."""
    from ..execute.weights.folded_reads import folded_values

    return folded_values(graph)


def _node_values(
    graph: onnx.GraphProto, opt_level: str = "disabled"
) -> tuple[list[tuple[str, onnx.NodeProto]], list[str]]:
    """The top-level gather/scatter nodes and the node-produced values they read and write.

    Only values computed by nodes become extra outputs: an initializer or a Constant node's output
    (onnxruntime makes Constants initializers) made a graph output comes back from onnxruntime-directml
    as freed memory, or kills the process (docs/directml-linux.md, "Initializers as graph outputs"), and
    the model holds their values anyway; feeds are the report's. Above ``disabled`` a value onnxruntime
    folds to a constant is such an initializer too (asking for it killed the host): it is not fetched,
    and a node reading or writing one is not checked (onnxruntime computed it on the CPU)."""
    produced = {o for n in graph.node if n.op_type != "Constant" for o in n.output if o}
    produced -= {t.name for t in graph.initializer} | {v.name for v in graph.input}
    if opt_level != "disabled":
        produced -= _folded(graph)
    nodes, wanted = [], []
    for i, node in enumerate(graph.node):
        if not is_gather_scatter(node):
            continue
        nodes.append((node_path("", node, i), node))
        wanted += [v for v in (*node.input, *node.output[:1]) if v in produced]
    return nodes, list(dict.fromkeys(wanted))


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The values of the top-level Constant nodes (every form, :func:`dmlshim.graph.constant_node_value`)."""
    found = {}
    for node in graph.node:
        value = constant_node_value(node)
        if value is not None:
            found[node.output[0]] = value
    return found


def _real_directml_values(
    model: onnx.ModelProto, names: list[str], feeds: Mapping[str, Any], level: FeatureLevel, opt_level: str
) -> dict[str, Any]:
    """Run ``model`` on real DirectML with ``names`` added as graph outputs; their values by name."""
    from ..execute.engines.whole_model import augmented_model
    from ..ort.ortvalues import strings_decoded
    from ..ort.session import InferenceSession
    from .references import session_options

    present = {o.name for o in model.graph.output}
    payload = augmented_model(model, [n for n in names if n not in present])
    session = InferenceSession(payload, session_options(opt_level), feature_level=level, engine="directml")
    values = strings_decoded(session._run_values(names, dict(feeds), None))
    return dict(zip(names, values, strict=True))


def _check_node(
    name: str,
    node: onnx.NodeProto,
    since: int,
    values: Mapping[str, Any],
    level: FeatureLevel,
    index_mode: IndexMode,
    folded: frozenset[str] = frozenset(),
) -> NodeCheck:
    arrays = [values.get(v) if v else None for v in node.input]
    want = values.get(node.output[0]) if node.output else None
    if node.output and node.output[0] in folded:
        return NodeCheck(
            name,
            node.op_type,
            None,
            "onnxruntime folds it to a constant at this optimization level: DirectML never runs it "
            "(not checked)",
        )
    if want is None or any(v and values.get(v) is None for v in node.input):
        return NodeCheck(name, node.op_type, None, "DirectML's run did not give its values (not checked)")
    if any(v and not is_array(values.get(v)) for v in node.input) or not is_array(want):
        return NodeCheck(name, node.op_type, None, "a value numpy cannot hold (not checked)")
    infos = [TensorInfo(tuple(a.shape), elem_type_of(a.dtype)) if a is not None else None for a in arrays]
    t = translate_node(node, since, infos, level, name=name)
    if t.status is not Status.DML:
        return NodeCheck(
            name,
            node.op_type,
            None,
            f"not emulated (status {t.status.value}): onnxruntime runs it on the CPU",
        )
    try:
        got = run_translation(t, arrays, index_mode=index_mode).output
    except DmlShimError as exc:
        return NodeCheck(name, node.op_type, False, f"{_REFUSED}: {exc}")
    want = np.asarray(want)
    from .verdict import compare_arrays

    if want.dtype.kind in "fc":
        rtol, atol = fitting_tolerance(want)
        c = compare_arrays(got, want, rtol, atol)
        how = f"within rtol={rtol:g} atol={atol:g}"
    else:
        c = compare_arrays(got, want, exact=True)
        how = "exactly"
    if c.match:
        return NodeCheck(name, node.op_type, True, f"reproduces DirectML's output {how}")
    where = c.problem or f"{c.mismatches} element(s) differ, max |diff| {c.max_abs_diff}"
    return NodeCheck(name, node.op_type, False, f"differs from DirectML's output {how}: {where}")


def check_directml_nodes(
    report: ValidationReport, proto: onnx.ModelProto | None = None, index_mode: IndexMode = IndexMode.ERROR
) -> DirectMLNodeCheck | None:
    """Attribute real DirectML's differing outputs (None: the report is not a directml one, or matches).

    The model is the one validate read (``report.loaded``), else ``proto``, else ``report.model`` read
    again; its weights are read into the extra run's copy only.
    """
    if report.engine != "directml" or report.match:
        return None
    differing = [o for o in report.outputs if not o.match]
    if not differing:
        return None
    first = differing[0]
    opt_level = dict(report.optimization_levels).get("dmlshim", "disabled")
    try:
        loaded = _loaded_model(report, proto)
        model = loaded.proto
        nodes, names = _node_values(model.graph, opt_level)
        full = loaded.with_weights()
        values = _real_directml_values(full, names, dict(report.feeds), report.feature_level, opt_level)
    except (DmlShimError, OSError, ValueError) as exc:
        logger.info("real DirectML's extra run failed: %s", exc)
        return DirectMLNodeCheck((), first.name, first.max_abs_diff, error=str(exc))
    read = {n for _, node in nodes for n in node.input}
    values = {**dict(report.feeds), **_constants(model.graph), **values}
    for t in full.graph.initializer:
        if t.name in read and t.name not in values:
            values[t.name] = numpy_helper.to_array(t)
    del full
    opsets = model_opsets(model)
    folded = frozenset(_folded(model.graph)) if opt_level != "disabled" else frozenset()
    checks = tuple(
        _check_node(
            name, node, node_since_version(node, opsets), values, report.feature_level, index_mode, folded
        )
        for name, node in nodes
    )
    nested = sum(is_gather_scatter(n) for _, n in walk_nodes(model.graph)) - len(nodes)
    impossible = [c for c in checks if c.detail.startswith(_REFUSED)]
    if impossible:
        # DirectML ran these nodes, yet the inputs handed back are invalid for them (indices hundreds of
        # millions past the axis): the extra outputs are not the values its nodes computed, so no node's
        # comparison can be trusted (seen on Keypoint R-CNN before the engine fetched around empty
        # outputs, dmlshim.directml.empty_fetch; kept as a guard: docs/directml-linux.md)
        error = (
            f"real DirectML's extra run handed back inputs {len(impossible)} of its own gather/scatter "
            f"node(s) could not have run on (first: {impossible[0].node}: {impossible[0].detail}), so its "
            "extra outputs are not the values its nodes computed and no node is blamed"
        )
        logger.info("%s", error)
        return DirectMLNodeCheck(checks, first.name, first.max_abs_diff, error=error, nested=nested)
    return DirectMLNodeCheck(checks, first.name, first.max_abs_diff, nested=nested)


def attribute_directml(
    report: ValidationReport, proto: onnx.ModelProto | None = None, index_mode: IndexMode = IndexMode.ERROR
) -> ValidationReport:
    """The report with :func:`check_directml_nodes`'s result attached; a match when every node
    reproduced DirectML given DirectML's own inputs."""
    check = check_directml_nodes(report, proto, index_mode)
    if check is None:
        return report
    logger.info("%s", check.text)
    outputs = report.outputs
    if check.reproduced:
        # Every node reproduced DirectML: what the whole model differs by is the other ops' float math.
        outputs = tuple(
            dataclasses.replace(o, whole_model=dataclasses.replace(o.whole_model, cause=CAUSE_OTHER_NODES))
            if o.whole_model is not None and o.whole_model.cause == CAUSE_UNEXPLAINED
            else o
            for o in outputs
        )
    return dataclasses.replace(report, outputs=outputs, directml_nodes=check, match=check.reproduced)
