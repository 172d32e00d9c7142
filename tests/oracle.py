"""The external oracle for tests: onnxruntime's CPU provider, single-threaded, on one-node ONNX models.

Expected values in tests come from here (or from the seeds, the ONNX backend suite and the WebNN cases),
never from dmlshim's own kernels.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

IR_VERSION = 10  # onnxruntime 1.31 reads IR <= 13; onnx 1.23's make_model would write 14.


def make_node_model(
    op_type: str,
    inputs: Mapping[str, np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    opset: int = 13,
    *,
    output_names: Sequence[str] = ("output",),
    domain: str = "",
) -> onnx.ModelProto:
    """A model holding one node whose inputs are graph inputs (None = an omitted optional input)."""
    graph_inputs = []
    node_inputs = []
    for name, arr in inputs.items():
        if arr is None:
            node_inputs.append("")
            continue
        node_inputs.append(name)
        elem = helper.np_dtype_to_tensor_dtype(np.asarray(arr).dtype)
        graph_inputs.append(helper.make_tensor_value_info(name, elem, list(np.asarray(arr).shape)))
    node = helper.make_node(op_type, node_inputs, list(output_names), domain=domain, **dict(attrs or {}))
    # Output types are left for onnxruntime to infer.
    outputs = [onnx.ValueInfoProto(name=n) for n in output_names]
    graph = helper.make_graph([node], f"{op_type}_test", graph_inputs, outputs)
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def ort_session(
    model: onnx.ModelProto | bytes | str | os.PathLike[str], *, quiet: bool = False
) -> ort.InferenceSession:
    """A CPU session with one intra-op thread (onnxruntime's ScatterND is racy on duplicates otherwise).

    ``model`` is a ModelProto, serialized bytes or a path; ``quiet`` keeps onnxruntime's warnings out of
    the test log (for models whose declared shapes it corrects).
    """
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    if quiet:
        so.log_severity_level = 3
    if isinstance(model, onnx.ModelProto):
        payload: bytes | str = model.SerializeToString()
    elif isinstance(model, os.PathLike):
        payload = os.fspath(model)
    else:
        payload = model
    return ort.InferenceSession(payload, so, providers=["CPUExecutionProvider"])


def ort_run(
    model: onnx.ModelProto | bytes | str | os.PathLike[str],
    feeds: Mapping[str, np.ndarray],
    *,
    quiet: bool = False,
) -> list[np.ndarray]:
    """Run a model on onnxruntime CPU, single-threaded; all outputs. A model holding a ScatterND with empty
    index tuples runs in ONNX's reference implementation instead where the installed onnxruntime crashes on
    that node (:func:`ort_crashes_on_zero_depth_scatternd`): newer onnxruntime gives the same values."""
    if (
        isinstance(model, onnx.ModelProto)
        and has_zero_depth_scatternd(model)
        and ort_crashes_on_zero_depth_scatternd()
    ):
        return onnx_reference_run(model, feeds)
    return list(ort_session(model, quiet=quiet).run(None, dict(feeds)))


def onnx_reference_run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """All outputs of ``model`` from ONNX's reference implementation (``onnx.reference``), its ScatterND
    as the operator's specification writes it: onnx 1.17's reference indexes ``output[indices[i]]`` with
    an array, which for an empty index tuple selects no row (max/min reductions then fail to broadcast)."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class ScatterND(OpRun):  # type: ignore[misc]
        op_domain = ""

        def _run(self, data, indices, updates, reduction=None):  # type: ignore[no-untyped-def]
            combine = {
                None: lambda a, b: b, "none": lambda a, b: b, "add": np.add, "mul": np.multiply,
                "max": np.maximum, "min": np.minimum,
            }[reduction]  # fmt: skip
            output = np.copy(data)
            for i in np.ndindex(indices.shape[:-1]):
                at = tuple(indices[i])
                output[at] = combine(output[at], updates[i])
            return (output,)

    return [np.asarray(v) for v in ReferenceEvaluator(model, new_ops=[ScatterND]).run(None, dict(feeds))]


def has_zero_depth_scatternd(model: onnx.ModelProto) -> bool:
    """Whether ``model``'s main graph has a ScatterND whose indices' last dimension is declared 0 (an
    initializer, or a graph input or value of that declared shape)."""
    dims = {t.name: list(t.dims) for t in model.graph.initializer}
    for v in (*model.graph.input, *model.graph.value_info):
        shape = v.type.tensor_type.shape
        dims.setdefault(v.name, [d.dim_value if d.HasField("dim_value") else -1 for d in shape.dim])
    return any(n.op_type == "ScatterND" and (dims.get(n.input[1]) or [-1])[-1] == 0 for n in model.graph.node)


def ort_node(
    op_type: str,
    inputs: Mapping[str, np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    opset: int = 13,
) -> np.ndarray:
    """The output of one ONNX node as onnxruntime CPU computes it."""
    model = make_node_model(op_type, inputs, attrs, opset)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    return ort_run(model, feeds)[0]


_ZERO_DEPTH_PROBE = """
import numpy as np, onnxruntime as ort
from onnx import TensorProto, helper
g = helper.make_graph(
    [helper.make_node("ScatterND", ["x", "i", "u"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
     helper.make_tensor_value_info("i", TensorProto.INT64, [1, 0]),
     helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 2])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
s.run(None, {"x": np.zeros(2, np.float32), "i": np.zeros((1, 0), np.int64), "u": np.ones((1, 2), np.float32)})
"""


@functools.cache
def ort_crashes_on_zero_depth_scatternd() -> bool:
    """True when the installed onnxruntime kills the process (SIGFPE) running a ScatterND whose indices'
    last dimension is 0 — onnxruntime 1.22 and 1.24 do; 1.32 replaces the whole tensor. Probed once, in a
    child process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _ZERO_DEPTH_PROBE], capture_output=True, timeout=120)
    return done.returncode < 0


ZERO_DEPTH_SCATTERND_CRASH = (
    f"onnxruntime {ort.__version__} crashes the process (SIGFPE) on a ScatterND whose indices' last "
    "dimension is 0; newer onnxruntime runs it"
)


def tamper_with_check(session: Any, name: str, change: Callable[[np.ndarray], None]) -> None:
    """Make ``session``'s whole-model check see onnxruntime's value ``name`` altered by ``change`` (on a
    copy): what a kernel must catch."""
    check = session.engine._check
    real, position = check._session, check._position[name]

    class Tampering:
        def run(self, names: Any, feeds: Any, options: Any = None) -> list[Any]:
            fetched = list(real.run(names, feeds, options))
            fetched[position] = fetched[position].copy()
            change(fetched[position])
            return fetched

    check._session = Tampering()


def binding_with_inputs(session: Any, values: Mapping[str, Any]) -> Any:
    """``session.io_binding()`` (onnxruntime's or dmlshim's) with every OrtValue of ``values`` bound as the
    input of its name; the caller binds the outputs."""
    binding = session.io_binding()
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
    return binding


def assert_same_bits(got: Sequence[Any], want: Sequence[Any]) -> None:
    """Every output of ``got`` is ``want``'s bit for bit: dtype, shape and bytes (objects: as lists)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype == object:
            assert g.tolist() == w.tolist()
        else:
            assert g.tobytes() == w.tobytes()


def same_bits(got: Sequence[Any], want: Sequence[Any]) -> bool:
    """Whether every output of ``got`` is ``want``'s bit for bit (dtype, shape, bytes): the question
    :func:`assert_same_bits` asserts, for tests that also expect a difference."""
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype or g.tobytes() != w.tobytes():
            return False
    return True


def node_notes(session: Any) -> list[list[str]]:
    """The note codes of each gather/scatter node in a dmlshim session's last run record."""
    return [[code for code, _ in n.notes] for n in session.last_run_record.nodes]
