"""Every value's size at the shapes of the inputs a command runs with, checked before the first run.

``dmlshim run``, ``validate`` and ``export`` know their inputs (generated or read from a file) before they
run anything; a value those shapes make larger than the memory limit (a Gather of a small table by
twenty million indices) is refused then, naming the node, op, value and size, rather than allocated by
onnxruntime's run (or by the export's expected output) and noticed afterwards, if at all. onnx's shape
inference is asked at those shapes, without the shapes the model declares (onnxruntime runs each node at
the shapes its inputs give) and without the large weights (read where they lie, never allocated by a
run); a model onnx cannot infer is left to the run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from ..errors import TooLargeError

logger = logging.getLogger(__name__)

__all__ = ["feed_shapes", "refuse_run_sizes", "refuse_sizes_at"]


def feed_shapes(feeds: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor feed (numpy arrays and onnxruntime ``OrtValue``s); others are left out."""
    from ..execute.proofs.symbol_shapes import value_shape

    shapes: dict[str, tuple[int, ...]] = {}
    for name, value in feeds.items():
        try:
            shape = value_shape(value)
        except Exception:  # onnxruntime's RuntimeError for an OrtValue that is no tensor, a shape of non-ints
            continue
        if shape is not None:
            shapes[name] = shape
    return shapes


def refuse_sizes_at(
    model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], *, path: str | None = None
) -> None:
    """Refuse a run of ``model`` with inputs of ``shapes`` in which some value would not fit in memory.

    Raises:
        TooLargeError: a value exceeds the memory limit at these input shapes (see the module docstring).
    """
    from ..execute.plan.checks import check_static_sizes
    from ..graph import display_names
    from ..model.data_prop import infer_with_data_prop
    from ..model.weightless import without_declared_shapes
    from ..translate.shapes_info import tensor_infos

    light = without_declared_shapes(model)
    for vi in light.graph.input:
        shape = shapes.get(vi.name)
        if shape is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        tensor_type = vi.type.tensor_type
        tensor_type.ClearField("shape")
        tensor_type.shape.SetInParent()
        for d in shape:
            tensor_type.shape.dim.add().dim_value = int(d)
    try:
        inferred = infer_with_data_prop(light)
    except Exception as exc:  # onnx's errors share no useful base; the run reports what it must
        logger.debug("no sizes checked at the input shapes: %s", exc)
        return
    graph = inferred.graph
    external = {t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    try:
        check_static_sizes(graph, tensor_infos(graph), display_names(list(graph.node)), mapped=external)
    except TooLargeError as exc:
        if exc.path is None:
            exc.path = path
        raise


def refuse_run_sizes(model: onnx.ModelProto, feeds: Mapping[str, Any], *, path: str | None = None) -> None:
    """Refuse a run of ``model`` on ``feeds`` some value of which would not fit in memory: every value at
    the feeds' shapes (:func:`refuse_sizes_at`), then the sizes the feeds' *values* set (a fed shape or
    bound, the gathers and Loop scans resting on one: :class:`dmlshim.execute.plan.fed_sizes.FedSizes`),
    before onnxruntime or an export runs anything (an export of ``Gather(table, Expand(7, [n]))`` with
    ``n`` fed 10^7 ran the model at 14.4 GB peak under a 100 MB limit and wrote 2.5 GB before).

    Raises:
        TooLargeError: naming the node, op, value and size.
    """
    from ..execute.plan.fed_sizes import FedSizes

    refuse_sizes_at(model, feed_shapes(feeds), path=path)
    try:
        FedSizes.of(model).check(feeds)
    except TooLargeError as exc:
        if exc.path is None:
            exc.path = path
        raise
