"""Free-dimension overrides (``SessionOptions.add_free_dimension_override_by_name`` / ``_by_denotation``)
in the input and output shapes a session reports, as onnxruntime reports them.

onnxruntime's ``SessionOptions`` does not give its overrides back, so onnxruntime itself is asked: a model
made of the graph's inputs alone (each passed through ``Identity``) is loaded with the caller's options,
and the shapes onnxruntime reports for it are the shapes it would report for the whole model. The output
shapes follow by shape inference from the fixed inputs, as onnxruntime infers them once it has fixed them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import onnx
from onnx import helper

from ..execute.feeds import NodeArg, node_arg
from ..runtime.real import OrtInferenceSession, options_held

logger = logging.getLogger(__name__)


def _symbolic(arg: NodeArg) -> bool:
    return arg.is_tensor and any(not isinstance(d, int) for d in arg.dims)


def _interface_model(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    wanted = set(names)
    inputs = [vi for vi in model.graph.input if vi.name in wanted]
    nodes = [helper.make_node("Identity", [vi.name], [vi.name + "__out"]) for vi in inputs]
    outputs = [helper.make_value_info(vi.name + "__out", onnx.TypeProto()) for vi in inputs]
    for out, vi in zip(outputs, inputs, strict=True):
        out.type.tensor_type.elem_type = vi.type.tensor_type.elem_type
    graph = helper.make_graph(nodes, "dmlshim_inputs", inputs, outputs)
    opsets = [o for o in model.opset_import if o.domain in ("", "ai.onnx")] or [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=model.ir_version)


@contextlib.contextmanager
def _with_supplied(probe: onnx.ModelProto, model: onnx.ModelProto, supplied: frozenset[str]) -> Iterator[Any]:
    """``probe``'s bytes; with ``supplied``, the path of ``probe`` carrying stand-ins for them (graph
    outputs, so that onnxruntime keeps them to replace), saved beside an empty data file in a folder of
    its own (removed after)."""
    if not supplied:
        yield probe.SerializeToString()
        return
    from ..execute.weights.added_initializers import probe_folder, stand_in

    tensors = [t for t in model.graph.initializer if t.name in supplied]
    probe.graph.initializer.extend(stand_in(t, True) for t in tensors)
    probe.graph.output.extend(helper.make_tensor_value_info(t.name, t.data_type, None) for t in tensors)
    with probe_folder() as folder:
        path = folder / "inputs.onnx"
        onnx.save(probe, str(path))
        yield str(path)


@contextlib.contextmanager
def _writing_nothing(so: Any) -> Iterator[None]:
    """``so`` with profiling and ``optimized_model_filepath`` off for the block, then as it was."""
    profiling, optimized = so.enable_profiling, so.optimized_model_filepath
    if not profiling and not optimized:
        yield
        return
    with options_held(so):  # no other thread's session reads them while they are off
        so.enable_profiling, so.optimized_model_filepath = False, ""
        try:
            yield
        finally:
            so.enable_profiling, so.optimized_model_filepath = profiling, optimized


def with_free_dimension_overrides(
    model: onnx.ModelProto,
    inputs: tuple[NodeArg, ...],
    sess_options: Any,
    supplied: frozenset[str] = frozenset(),
) -> tuple[NodeArg, ...]:
    """``inputs`` with the free dimensions ``sess_options`` overrides fixed, as onnxruntime reports them.

    Unchanged when there are no options, no symbolic dimension, or when onnxruntime refuses the
    inputs-only model. Options that would write a file of their own (profiling, ``optimized_model_filepath``)
    are asked with those two switched off for the probe: the overrides cannot be copied to new options.
    ``supplied``: the initializers the options supply (``add_external_initializers``): onnxruntime refuses
    options holding one the model lacks, so the inputs-only model carries them too, as external data it
    replaces and never reads (before, the overrides were then lost: a feed onnxruntime refuses ran).
    """
    if sess_options is None:
        return inputs
    symbolic = [a.name for a in inputs if _symbolic(a)]
    if not symbolic:
        return inputs
    try:
        probe = _interface_model(model, symbolic)
        with _writing_nothing(sess_options), _with_supplied(probe, model, supplied) as source:
            session = OrtInferenceSession(source, sess_options, providers=["CPUExecutionProvider"])
        shapes = {a.name: a.shape for a in session.get_inputs()}
    except Exception as exc:  # any refusal: keep the model's own shapes
        logger.debug("free dimension overrides not read back: %s", exc)
        return inputs
    out = []
    for arg in inputs:
        shape = shapes.get(arg.name)
        if shape is not None and len(shape) == len(arg.dims):
            dims = tuple(d if isinstance(d, int) else (d if d else None) for d in shape)
            arg = dataclasses.replace(arg, dims=dims)
        out.append(arg)
    return tuple(out)


def overrides_by_name(model: onnx.ModelProto, inputs: Sequence[NodeArg]) -> dict[str, int] | None:
    """The free-dimension overrides by name that fix in ``model``'s graph inputs exactly what ``inputs``
    (as :func:`with_free_dimension_overrides` gives them) fixes: ``{"batch": 3}``, ``{}`` when nothing is
    fixed, None when no such overrides exist (a fixed dimension with no name or with a denotation, one
    name fixed to two sizes or left free elsewhere: an override by denotation).

    A new ``SessionOptions`` given these behaves as the caller's does for the model's inputs, which is
    where onnxruntime applies overrides.
    """
    given = {a.name: a.dims for a in inputs}
    fixed: dict[str, int] = {}
    named: list[tuple[str, bool]] = []
    for vi in model.graph.input:
        dims = given.get(vi.name)
        if dims is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        for dim, value in zip(vi.type.tensor_type.shape.dim, dims, strict=False):
            if dim.HasField("dim_value"):
                continue
            now_fixed = isinstance(value, int)
            if dim.HasField("dim_param") and dim.dim_param:
                named.append((dim.dim_param, now_fixed))
            if not isinstance(value, int):
                continue
            if not dim.dim_param or dim.denotation or fixed.setdefault(dim.dim_param, value) != value:
                return None
    if any(name in fixed and not now_fixed for name, now_fixed in named):
        return None
    return fixed


def outputs_for_inputs(
    model: onnx.ModelProto,
    inputs: Sequence[NodeArg],
    describe: Callable[..., Sequence[onnx.ValueInfoProto]],
    overridden: Callable[[tuple[NodeArg, ...]], tuple[NodeArg, ...] | None] | None = None,
) -> tuple[NodeArg, ...]:
    """The graph outputs ``describe`` reports for ``model`` once the dimensions ``inputs`` fix (free-dimension
    overrides) are fixed in its graph inputs too: ``[3, 4]`` rather than ``["batch", 4]`` after
    ``add_free_dimension_override_by_name("batch", 3)``, as onnxruntime reports them.

    onnxruntime resolves the graph as the model declares it first, then fixes the overridden dimensions and
    resolves it again, each output's type now merged into the first answer (a dimension that answer left
    unknown, declared ``[2, 3]`` and inferred ``["N", 4]``, takes the fixed inference, ``[2, 4]`` for
    ``N`` = 2): so is ``describe`` asked twice, the outputs declared as it first answered the second time.
    The model's input and output declarations are changed for the call only and restored before
    returning; ``describe`` is told whether an input was overridden (``overridden=``). ``overridden``,
    when an input was: asked first, with the first answer, for the outputs as onnxruntime itself reports
    them with the overrides (None: ``describe`` is asked again).
    """
    fixed = {a.name: a.dims for a in inputs}
    changes: list[tuple[onnx.TensorShapeProto.Dimension, int]] = []
    for vi in model.graph.input:
        dims = fixed.get(vi.name)
        if dims is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        shape = vi.type.tensor_type.shape
        for dim, value in zip(shape.dim, dims, strict=False):
            if isinstance(value, int) and not dim.HasField("dim_value"):
                changes.append((dim, value))
    first = describe(model, overridden=False)
    if not changes:
        return tuple(node_arg(v) for v in first)
    answered_by_onnxruntime = overridden(tuple(node_arg(v) for v in first)) if overridden else None
    if answered_by_onnxruntime is not None:
        return answered_by_onnxruntime
    restore = [(dim, dim.dim_param if dim.HasField("dim_param") else None) for dim, _ in changes]
    saved: list[onnx.TypeProto | None] = []
    for out in model.graph.output:
        saved.append(onnx.TypeProto() if out.HasField("type") else None)
        if saved[-1] is not None:
            saved[-1].CopyFrom(out.type)
    answered = {v.name: v.type for v in first}
    try:
        for dim, value in changes:
            dim.dim_value = value
        for out in model.graph.output:
            if out.name in answered:
                out.type.CopyFrom(answered[out.name])
        return tuple(node_arg(v) for v in describe(model, overridden=True))
    finally:
        for dim, param in restore:
            if param is None:
                dim.ClearField("dim_value")  # its denotation kept
            else:
                dim.dim_param = param
        for out, tp in zip(model.graph.output, saved, strict=True):
            if tp is None:
                out.ClearField("type")
            else:
                out.type.CopyFrom(tp)
