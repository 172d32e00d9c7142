"""Large values an emulated node reads that are a weight moved, not computed: ``Transpose`` or ``Identity``
of an initializer (the tied embedding of onnxruntime-genai's Llama builder gathers rows of
``Transpose(lm_head.MatMul.weight)``). The engine takes them as numpy views of the initializer's array (a
memory map of the model's external data, or the array it holds anyway), so the whole-model check never
fetches them from onnxruntime.

Fetched, such a value cost a copy of the weight on every checked run (onnxruntime's output, then its numpy
copy), and its node could not be constant-folded by onnxruntime (a graph output is never folded): on the
198 MB int4 SmolLM model, +236 MB peak RSS over onnxruntime's. A view is exact (a transpose moves bytes,
never rounds), costs no memory, and onnxruntime's session folds the node as its own session does.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Callable, Collection, Mapping

import numpy as np
import onnx

from ...model.weightless import tensor_nbytes
from .shared import SHARE_MIN_BYTES

LAYOUT_OPS = frozenset({"Transpose", "Identity"})
"""Operators whose output is their input's elements moved (exact in any engine)."""


def layout_views(
    graph: onnx.GraphProto,
    wanted: Collection[str],
    initializers: Mapping[str, onnx.TensorProto],
    graph_inputs: Collection[str],
    value_of: Callable[[onnx.TensorProto], np.ndarray],
    min_bytes: int = SHARE_MIN_BYTES,
) -> dict[str, np.ndarray]:
    """The values of ``wanted`` that a ``Transpose``/``Identity`` (in the default domain) makes from a
    constant initializer of ``graph`` (none a program may feed: not in ``graph_inputs``), each at least
    ``min_bytes``, as views of ``value_of(initializer)``. Smaller values and any other producer: left out
    (the check fetches them as before)."""
    producer = {out: node for node in graph.node for out in node.output if out}
    found: dict[str, np.ndarray] = {}
    for name in wanted:
        node = producer.get(name)
        if node is None or node.op_type not in LAYOUT_OPS or node.domain not in ("", "ai.onnx"):
            continue
        if len(node.input) != 1 or len(node.output) != 1:
            continue
        source = initializers.get(node.input[0])
        if source is None or source.name in graph_inputs or tensor_nbytes(source) < min_bytes:
            continue
        value = value_of(source)
        if node.op_type == "Transpose":
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            if perm is not None and sorted(perm) != list(range(value.ndim)):
                continue  # onnxruntime refuses it: left to onnxruntime's own error
            value = np.transpose(value, perm)
        view = np.asarray(value).view()  # a plain ndarray view (a memory map stays mapped beneath)
        view.flags.writeable = False  # read through its strides by the kernels, never copied
        found[name] = view
    return found


def mapped_bases(views: Mapping[str, np.ndarray]) -> tuple[mmap.mmap, ...]:
    """The memory maps of the model's files beneath ``views`` (those of external data)."""
    found: dict[int, mmap.mmap] = {}
    for value in views.values():
        base: object = value
        while isinstance(base, np.ndarray):
            base = base.base
        if isinstance(base, mmap.mmap):
            found[id(base)] = base
    return tuple(found.values())


def drop_pages(maps: tuple[mmap.mmap, ...]) -> None:
    """Unmap the file pages a run read through ``maps`` (the next read maps them again from the page cache).

    A gather of a transposed weight reads one element per row of the weight, each in another page, and the
    kernel maps the cached pages around each one it reads (fault-around: 16 pages): two tokens of the
    198 MB int4 SmolLM model mapped 65 MB, held until the process ended and counted in its RSS.
    """
    flag = getattr(mmap, "MADV_DONTNEED", None)
    if flag is None:
        return
    for mapped in maps:
        with contextlib.suppress(OSError, ValueError):
            mapped.madvise(flag)
