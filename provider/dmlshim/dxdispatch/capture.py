"""Capture the actual inputs of a model's gather/scatter nodes, inside If/Loop/Scan bodies too.

Top-level values come from one onnxruntime CPU run of a copy of the model whose graph outputs also list
them. A node inside control flow is reached by stepping through it the way ONNX defines it: the branch the
captured condition selects, or the body run iteration by iteration, up to the requested one, with the
loop-carried values the previous iteration produced. Each body runs in onnxruntime as a model of its own:
its inputs are the body's formal inputs and the values it reads from enclosing graphs, its outputs the
body's own and every value its gather/scatter nodes (and nested control flow) read.

Nothing here uses dmlshim's execution engines: the values are onnxruntime's, with graph optimisations off,
so they are what each node really reads.

Weights are never copied for the capture: the model onnxruntime loads holds its large initializers as
references to the model's files or as arrays handed to it
(:class:`~dmlshim.execute.weights.shared.SharedWeights`, as the run engines do), and a node input that
is an initializer is not asked of onnxruntime but kept as a :class:`ModelWeight`, read from the model
when the node is exported (:attr:`CapturedNode.arrays`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..errors import BadInputError, DmlShimError
from ..execute.plan.fallback import for_onnxruntime
from ..execute.plan.partition import outer_scope_inputs
from ..execute.weights.shared import SharedWeights, light_copy
from ..graph import is_gather_scatter, node_path, subgraph_prefix, subgraphs, walk_nodes
from ..translate.translator import model_opsets, node_since_version
from .capture_run import CaptureRunner
from .captured import Capture, CapturedNode, ModelWeight, Uncaptured, model_value, resolve

log = logging.getLogger(__name__)

__all__ = ["Capture", "CapturedNode", "ModelWeight", "Uncaptured", "capture_nodes", "capture_values"]

BODY_IR_VERSION = 10
"""IR version of the models built for control-flow bodies (onnxruntime reads up to 13)."""


def _holds_gather_scatter(node: onnx.NodeProto) -> bool:
    return any(is_gather_scatter(n) for _, sub in subgraphs(node) for _, n in walk_nodes(sub))


def _wanted(graph: onnx.GraphProto) -> set[str]:
    """The values a graph's own gather/scatter nodes and control-flow nodes holding some read or write."""
    names: set[str] = set()
    for node in graph.node:
        if is_gather_scatter(node):
            names.update(n for n in node.input if n)
            names.update(node.output[:1])
        elif _holds_gather_scatter(node):
            names.update(n for n in node.input if n)
            names |= outer_scope_inputs(node)
    names.discard("")
    return names


def _forget_declared_shapes(graph: onnx.GraphProto) -> None:
    """Clear the shapes declared on ``graph``'s outputs and on every control-flow body's outputs.

    Exporters declare them stale (PyTorch's TorchScript exporter gives both branches of an If the shape
    of one); onnxruntime's default session folds such an If away, but the capture runs unoptimised and
    onnxruntime then refuses a branch whose value differs from its declaration. Values never depend on it.
    """
    for out in graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                _forget_declared_shapes(sub)


def capture_values(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    names: set[str],
    *,
    weights_path: str | None = None,
) -> dict[str, Any]:
    """The values of ``names`` (tensors of the top-level graph) in one onnxruntime CPU run.

    Initializers among ``names`` are not asked of onnxruntime: small ones are arrays, large ones
    :class:`ModelWeight`. ``weights_path``: a path whose folder the external-data references of
    ``model`` are relative to (``LoadedModel.weights_path``); onnxruntime reads those weights there.
    """
    graph = model.graph
    folder = os.path.dirname(os.path.abspath(weights_path)) if weights_path is not None else None
    values: dict[str, Any] = {k: v for k, v in feeds.items() if k in names}
    for init in graph.initializer:
        if init.name in names and init.name not in values:
            values[init.name] = model_value(init, folder)
    wanted = sorted(names - set(values))
    if not wanted:
        # An empty output list would make onnxruntime return every graph output instead.
        return values
    # The large weights are neither copied nor serialized: the session reads them from the model's
    # files, or is handed them as arrays (the run engines' sessions do the same).
    shared = SharedWeights({t.name: t for t in graph.initializer}, model_path=weights_path, graph=graph)
    light = light_copy(model, shared) if shared.names else model
    copy = for_onnxruntime(light)
    if copy is model:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
    declared = {o.name for o in copy.graph.output}
    typed = {v.name: v for v in (*copy.graph.value_info, *copy.graph.output)}
    for name in wanted:
        if name in declared:
            continue
        # onnxruntime infers the type of an output declared by name only.
        copy.graph.output.append(typed[name] if name in typed else onnx.ValueInfoProto(name=name))
    _forget_declared_shapes(copy.graph)
    try:
        results = CaptureRunner(copy, wanted, shared if shared.names else None).run(feeds)
    except Exception as exc:  # onnxruntime raises its own exception types
        raise BadInputError(f"onnxruntime could not run the model to capture node inputs: {exc}") from exc
    for name, value in zip(wanted, results, strict=True):
        values[name] = np.asarray(value)
    return values


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    if isinstance(value, list):
        if not value:
            raise BadInputError(f"{name!r} is an empty sequence; its element type is unknown", tensor=name)
        elem = int(helper.np_dtype_to_tensor_dtype(np.asarray(value[0]).dtype))
        return helper.make_tensor_sequence_value_info(name, elem, None)
    arr = np.asarray(value)
    elem = int(helper.np_dtype_to_tensor_dtype(arr.dtype))
    return helper.make_tensor_value_info(name, elem, [None] * arr.ndim)


class _Capturer:
    """Walks a model's graphs, stepping into control flow, collecting node inputs."""

    def __init__(self, model: onnx.ModelProto, iteration: int, folder: str | None = None) -> None:
        self.model = model
        self.iteration = iteration
        self.folder = folder
        self.opsets = model_opsets(model)
        self.nodes: list[CapturedNode] = []
        self.missed: list[Uncaptured] = []
        self._sessions: dict[tuple[Any, ...], CaptureRunner] = {}

    # --- graphs -------------------------------------------------------------------------------------

    def graph(
        self,
        graph: onnx.GraphProto,
        prefix: str,
        values: Mapping[str, Any],
        position: int | None,
        iterations: tuple[tuple[str, int | None], ...],
    ) -> None:
        for i, node in enumerate(graph.node):
            name = node_path(prefix, node, i)
            pos = i if position is None else position
            if is_gather_scatter(node):
                arrays = tuple(_input(values.get(n)) if n else None for n in node.input)
                output = _array(resolve(values.get(node.output[0]))) if node.output else None
                self.nodes.append(CapturedNode(pos, name, node, arrays, output, iterations))
            elif _holds_gather_scatter(node):
                try:
                    self.control(node, name, pos, values, iterations)
                except DmlShimError as exc:
                    self.miss_all(
                        node, name, pos, "CAPTURE_FAILED", f"its inputs could not be captured: {exc}"
                    )

    def miss_all(self, node: onnx.NodeProto, name: str, position: int, code: str, reason: str) -> None:
        """Every gather/scatter node under ``node`` (already captured ones excepted) as not captured."""
        done = {c.name for c in self.nodes}
        for nested, inner in _nested(node, name):
            if nested not in done:
                self.missed.append(Uncaptured(position, nested, inner.op_type, code, reason))

    # --- control flow -------------------------------------------------------------------------------

    def control(
        self,
        node: onnx.NodeProto,
        name: str,
        position: int,
        scope: Mapping[str, Any],
        iterations: tuple[tuple[str, int | None], ...],
    ) -> None:
        op = node.op_type if node.domain in ("", "ai.onnx") else ""
        if op == "If":
            self.if_node(node, name, position, scope, iterations)
        elif op == "Loop":
            self.loop_node(node, name, position, scope, iterations)
        elif op == "Scan" and node_since_version(node, self.opsets) >= 9:
            self.scan_node(node, name, position, scope, iterations)
        else:
            what = f"{node.op_type}-{node_since_version(node, self.opsets)}" if op == "Scan" else node.op_type
            self.miss_all(
                node,
                name,
                position,
                "SUBGRAPH_NODE",
                f"the node is inside a {what} body, which dmlshim export does not step through "
                "(it steps through If, Loop and Scan from opset 9)",
            )

    def if_node(
        self,
        node: onnx.NodeProto,
        name: str,
        position: int,
        scope: Mapping[str, Any],
        iterations: tuple[tuple[str, int | None], ...],
    ) -> None:
        cond = bool(np.asarray(_required(scope, node.input[0])).reshape(-1)[0])
        taken = "then_branch" if cond else "else_branch"
        for attr in node.attribute:
            if attr.name not in ("then_branch", "else_branch"):
                continue
            prefix = subgraph_prefix(name, attr.name)
            if attr.name != taken:
                for nested, inner in _walk_gather_scatter(attr.g, prefix):
                    self.missed.append(
                        Uncaptured(
                            position,
                            nested,
                            inner.op_type,
                            "BRANCH_NOT_TAKEN",
                            f"the condition of If {name!r} was {cond} in this run, so its {attr.name} did "
                            "not run",
                        )
                    )
                continue
            values = self.run_body(node, attr.g, {}, scope)
            self.graph(attr.g, prefix, values, position, (*iterations, (name, None)))

    def loop_node(
        self,
        node: onnx.NodeProto,
        name: str,
        position: int,
        scope: Mapping[str, Any],
        iterations: tuple[tuple[str, int | None], ...],
    ) -> None:
        body = helper.get_attribute_value(next(a for a in node.attribute if a.name == "body"))
        inputs = list(node.input)
        trip = inputs[0] if inputs else ""
        limit = int(np.asarray(_required(scope, trip)).reshape(-1)[0]) if trip else None
        cond_name = inputs[1] if len(inputs) > 1 else ""
        cond = bool(np.asarray(_required(scope, cond_name)).reshape(-1)[0]) if cond_name else True
        carried = [_required(scope, n) for n in inputs[2:]]
        formal = [v.name for v in body.input]
        it = 0
        while (limit is None or it < limit) and cond:
            bound = dict(zip(formal, [np.array(it, dtype=np.int64), np.array(cond), *carried], strict=False))
            target = it == self.iteration
            values = self.run_body(node, body, bound, scope, nested=target)
            if target:
                self.graph(body, subgraph_prefix(name, "body"), values, position, (*iterations, (name, it)))
                return
            outs = [resolve(values[o.name]) for o in body.output]
            cond = bool(np.asarray(outs[0]).reshape(-1)[0])
            carried = outs[1 : 1 + len(carried)]
            it += 1
        self.miss_all(
            node,
            name,
            position,
            "ITERATION_NOT_REACHED",
            f"Loop {name!r} ran {it} iteration(s) in this run; iteration {self.iteration} was not reached",
        )

    def scan_node(
        self,
        node: onnx.NodeProto,
        name: str,
        position: int,
        scope: Mapping[str, Any],
        iterations: tuple[tuple[str, int | None], ...],
    ) -> None:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        body: onnx.GraphProto = attrs["body"]
        num_scan = int(attrs["num_scan_inputs"])
        n_states = len(node.input) - num_scan
        axes = list(attrs.get("scan_input_axes", [0] * num_scan))
        directions = list(attrs.get("scan_input_directions", [0] * num_scan))
        states = [_required(scope, n) for n in node.input[:n_states]]
        xs = [np.asarray(_required(scope, n)) for n in node.input[n_states:]]
        length = int(xs[0].shape[axes[0] % xs[0].ndim]) if xs else 0
        formal = [v.name for v in body.input]
        for t in range(min(length, self.iteration + 1)):
            slices = [
                np.take(x, t if d == 0 else length - 1 - t, axis=a % x.ndim)
                for x, a, d in zip(xs, axes, directions, strict=True)
            ]
            bound = dict(zip(formal, [*states, *slices], strict=True))
            target = t == self.iteration
            values = self.run_body(node, body, bound, scope, nested=target)
            if target:
                self.graph(body, subgraph_prefix(name, "body"), values, position, (*iterations, (name, t)))
                return
            states = [resolve(values[o.name]) for o in body.output[:n_states]]
        self.miss_all(
            node,
            name,
            position,
            "ITERATION_NOT_REACHED",
            f"Scan {name!r} ran {length} iteration(s) in this run; iteration {self.iteration} was not "
            "reached",
        )

    # --- one body run -------------------------------------------------------------------------------

    def run_body(
        self,
        owner: onnx.NodeProto,
        body: onnx.GraphProto,
        bound: Mapping[str, Any],
        scope: Mapping[str, Any],
        *,
        nested: bool = True,
    ) -> dict[str, Any]:
        """One run of ``body`` in onnxruntime: the enclosing values, the body's formal inputs, its outputs
        and (``nested``) everything its own gather/scatter and control-flow nodes read."""
        outer = sorted(n for n in outer_scope_inputs(owner) if n not in bound)
        values: dict[str, Any] = dict(scope)
        values.update(bound)
        feeds = {n: resolve(values[n]) for n in (*bound, *outer) if n in values}
        missing = [n for n in outer if n not in values]
        if missing:
            raise BadInputError(f"the values {missing} the body reads from outside were not captured")
        initializers = {t.name for t in body.initializer}
        wanted = [o.name for o in body.output] + (sorted(_wanted(body)) if nested else [])
        ask = list(dict.fromkeys(n for n in wanted if n not in feeds and n not in initializers))
        for init in body.initializer:
            if init.name in wanted:
                values[init.name] = model_value(init, self.folder)
        if not ask:
            return values
        signature = tuple((n, _signature(v)) for n, v in feeds.items())
        key = (id(body), signature, tuple(ask))
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = self._session(body, feeds, ask)
        try:
            results = session.run(feeds)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise BadInputError(f"onnxruntime could not run the body: {exc}") from exc
        values.update(zip(ask, results, strict=True))
        return values

    def _session(
        self, body: onnx.GraphProto, feeds: Mapping[str, Any], outputs: Sequence[str]
    ) -> CaptureRunner:
        graph = onnx.GraphProto(name=f"{body.name or 'body'}_capture")
        graph.node.extend(body.node)
        graph.initializer.extend(body.initializer)
        graph.sparse_initializer.extend(body.sparse_initializer)
        graph.input.extend(_value_info(n, v) for n, v in feeds.items())
        graph.output.extend(onnx.ValueInfoProto(name=n) for n in outputs)
        model = onnx.ModelProto(ir_version=BODY_IR_VERSION, producer_name="dmlshim", graph=graph)
        model.opset_import.extend(self.model.opset_import)
        model.functions.extend(self.model.functions)
        model = for_onnxruntime(model)
        try:
            return CaptureRunner(model, outputs)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise BadInputError(f"onnxruntime cannot load the body as a model: {exc}") from exc


def _signature(value: Any) -> tuple[Any, ...]:
    if isinstance(value, list):
        return ("seq", *(str(np.asarray(v).dtype) for v in value[:1]))
    arr = np.asarray(value)
    return (str(arr.dtype), arr.ndim)


def _array(value: Any) -> np.ndarray | None:
    return None if value is None or isinstance(value, list) else np.asarray(value)


def _input(value: Any) -> np.ndarray | ModelWeight | None:
    """A captured node input: a model weight stays a reference until the node is exported."""
    return value if isinstance(value, ModelWeight) else _array(value)


def _required(scope: Mapping[str, Any], name: str) -> Any:
    if name not in scope:
        raise BadInputError(f"the value {name!r} was not captured", tensor=name)
    return resolve(scope[name])


def _walk_gather_scatter(graph: onnx.GraphProto, prefix: str) -> Iterator[tuple[str, onnx.NodeProto]]:
    return ((n, node) for n, node in walk_nodes(graph, prefix) if is_gather_scatter(node))


def _nested(node: onnx.NodeProto, name: str) -> Iterator[tuple[str, onnx.NodeProto]]:
    for attr_name, sub in subgraphs(node):
        yield from _walk_gather_scatter(sub, subgraph_prefix(name, attr_name))


def capture_nodes(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    iteration: int = 0,
    weights_path: str | None = None,
) -> Capture:
    """The inputs every gather/scatter node of ``model`` read in one onnxruntime CPU run on ``feeds``.

    Args:
        model: the model.
        feeds: a value for every graph input.
        iteration: which iteration of each Loop/Scan body to capture (0 = the first).
        weights_path: for a model read without its weights (``load_model(weightless=True)``), a path
            whose folder its external-data references are relative to (``LoadedModel.weights_path``).

    Returns:
        The captured nodes and, for nodes inside control flow, the ones not captured with a reason
        (``BRANCH_NOT_TAKEN``, ``ITERATION_NOT_REACHED``, ``SUBGRAPH_NODE``, ``CAPTURE_FAILED``).

    Raises:
        BadInputError: onnxruntime cannot run the model on ``feeds``.
    """
    if iteration < 0:
        raise BadInputError(f"the iteration to capture must be >= 0, not {iteration}", value=iteration)
    folder = os.path.dirname(os.path.abspath(weights_path)) if weights_path is not None else None
    capturer = _Capturer(model, iteration, folder)
    values = capture_values(model, feeds, _wanted(model.graph), weights_path=weights_path)
    capturer.graph(model.graph, "", values, None, ())
    order = {name: k for k, (name, _) in enumerate(walk_nodes(model.graph))}
    nodes = sorted(capturer.nodes, key=lambda c: order.get(c.name, len(order)))
    missed = sorted(capturer.missed, key=lambda m: order.get(m.name, len(order)))
    log.debug("captured %d gather/scatter node(s), %d not captured", len(nodes), len(missed))
    return Capture(tuple(nodes), tuple(missed))
