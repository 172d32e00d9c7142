"""Build the hand-written models in ``onnx_models/`` that no current converter emits.

* ``scatter_deprecated_opset10``: the deprecated ``Scatter`` op (opset 10), as found in models exported
  years ago; newer exporters write ScatterElements instead.
* ``gathernd_batch_dims1`` / ``2`` / ``3``: ``GatherND`` with ``batch_dims`` 1-3 (opset 13). The PyTorch
  exporter always writes batch_dims 0, while TensorFlow converters use the batched form.
* ``loop_scatternd``: a ``Loop`` whose body gathers one row per iteration and writes it with
  ``ScatterND`` into a loop-carried buffer, so executors must handle gather/scatter inside subgraphs.

Only onnx, numpy and onnxruntime are needed (no torch)::

    python onnx_models/build_handmade.py

The IR version of each model is set explicitly to the one that goes with its opset (IR 5 for opset 10,
IR 7 for opset 13): ``onnx.helper.make_model`` from onnx 1.23 would otherwise write IR 14, which
onnxruntime 1.31 cannot load. Each model gets a sample input ``<name>.npz`` (keys = graph input names,
no pickles), and the script checks onnxruntime's result against a small numpy reference.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent

#: IR version that goes with each opset used here (see onnx's versioning table).
IR_FOR_OPSET: dict[int, int] = {10: 5, 13: 7}


def save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays like :func:`numpy.savez`, but with fixed zip timestamps so re-runs are byte-identical."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for key, value in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(value), allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buf.getvalue())


def _value(
    name: str, array_or_type: np.ndarray | int, shape: list[int | str] | None = None
) -> onnx.ValueInfoProto:
    """A tensor value-info from a sample array (dtype and shape) or an explicit element type and shape."""
    if isinstance(array_or_type, np.ndarray):
        elem = helper.np_dtype_to_tensor_dtype(array_or_type.dtype)
        return helper.make_tensor_value_info(name, elem, list(array_or_type.shape))
    return helper.make_tensor_value_info(name, array_or_type, shape)


def _finish(graph: onnx.GraphProto, opset: int, doc: str) -> onnx.ModelProto:
    """Wrap a graph into a checked model with an explicit, onnxruntime-readable IR version."""
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="dmlshim-handmade"
    )
    model.ir_version = IR_FOR_OPSET[opset]
    model.doc_string = doc
    onnx.checker.check_model(model, full_check=True)
    return model


# --------------------------------------------------------------------------------------------------
# Models: each builder returns (model, sample inputs, numpy reference outputs)
# --------------------------------------------------------------------------------------------------

Built = tuple[onnx.ModelProto, dict[str, np.ndarray], list[np.ndarray]]


def build_scatter_opset10(rng: np.random.Generator) -> Built:
    """Deprecated ``Scatter`` (opset 10, axis 1) writing two columns per row of a [4, 6] tensor."""
    data = rng.standard_normal((4, 6)).astype(np.float32)
    # Two distinct columns per row: no duplicate targets, so the result is well defined.
    indices = np.stack([rng.choice(6, size=2, replace=False) for _ in range(4)]).astype(np.int64)
    updates = rng.standard_normal((4, 2)).astype(np.float32)
    node = helper.make_node("Scatter", ["data", "indices", "updates"], ["output"], name="scatter", axis=1)
    graph = helper.make_graph(
        [node],
        "scatter_deprecated_opset10",
        [_value("data", data), _value("indices", indices), _value("updates", updates)],
        [_value("output", TensorProto.FLOAT, [4, 6])],
    )
    expected = data.copy()
    np.put_along_axis(expected, indices, updates, axis=1)
    inputs = {"data": data, "indices": indices, "updates": updates}
    return _finish(graph, 10, "Deprecated Scatter (opset 10), axis=1"), inputs, [expected]


def _gathernd_reference(data: np.ndarray, indices: np.ndarray, batch_dims: int) -> np.ndarray:
    """Plain-loop GatherND: for each batch and index tuple, take the addressed slice of ``data``."""
    batch_shape = data.shape[:batch_dims]
    k = indices.shape[-1]
    out_shape = indices.shape[:-1] + data.shape[batch_dims + k :]
    out = np.empty(out_shape, dtype=data.dtype)
    for b in np.ndindex(*batch_shape):
        sub_data = data[b]
        sub_idx = indices[b]
        for pos in np.ndindex(*sub_idx.shape[:-1]):
            out[b + pos] = sub_data[tuple(int(i) for i in sub_idx[pos])]
    return out


def _build_gathernd(
    rng: np.random.Generator, batch_dims: int, data_shape: tuple[int, ...], index_shape: tuple[int, ...]
) -> Built:
    """GatherND (opset 13) with the given batch_dims; indices drawn in range, some of them negative."""
    data = rng.standard_normal(data_shape).astype(np.float32)
    k = index_shape[-1]
    bounds = np.array(data_shape[batch_dims : batch_dims + k])
    raw = rng.integers(0, bounds, size=index_shape)
    # Write about a third of the indices in their negative form (-d <= i < 0), which GatherND allows.
    negative = rng.random(index_shape) < 0.33
    indices = np.where(negative, raw - bounds, raw).astype(np.int64)
    expected = _gathernd_reference(data, indices, batch_dims)
    name = f"gathernd_batch_dims{batch_dims}"
    node = helper.make_node(
        "GatherND", ["data", "indices"], ["output"], name="gathernd", batch_dims=batch_dims
    )
    graph = helper.make_graph(
        [node],
        name,
        [_value("data", data), _value("indices", indices)],
        [_value("output", TensorProto.FLOAT, list(expected.shape))],
    )
    doc = f"GatherND (opset 13), batch_dims={batch_dims}"
    return _finish(graph, 13, doc), {"data": data, "indices": indices}, [expected]


def build_gathernd_batch_dims1(rng: np.random.Generator) -> Built:
    """Per-batch lookup of rows: data [3, 5, 4], indices [3, 2, 1] -> [3, 2, 4]."""
    return _build_gathernd(rng, 1, (3, 5, 4), (3, 2, 1))


def build_gathernd_batch_dims2(rng: np.random.Generator) -> Built:
    """Two batch axes, full-element indices: data [2, 3, 4, 5], indices [2, 3, 4, 2] -> [2, 3, 4]."""
    return _build_gathernd(rng, 2, (2, 3, 4, 5), (2, 3, 4, 2))


def build_gathernd_batch_dims3(rng: np.random.Generator) -> Built:
    """Three batch axes: data [2, 2, 3, 4, 5], indices [2, 2, 3, 2, 1] -> [2, 2, 3, 2, 5]."""
    return _build_gathernd(rng, 3, (2, 2, 3, 4, 5), (2, 2, 3, 2, 1))


def build_loop_scatternd(rng: np.random.Generator) -> Built:
    """A Loop (opset 13) that copies row ``i`` of ``rows`` into row ``perm[i]`` of a carried buffer.

    Body per iteration: Gather(rows, i) and Gather(perm, i) (outer-scope values), then ScatterND of the
    row into the buffer. ``perm`` is a permutation prefix, so no two iterations write the same row.
    """
    n_rows, width, buf_rows = 5, 4, 7
    rows = rng.standard_normal((n_rows, width)).astype(np.float32)
    perm = rng.permutation(buf_rows)[:n_rows].astype(np.int64)
    buffer = np.zeros((buf_rows, width), dtype=np.float32)

    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
            helper.make_node("Gather", ["rows", "i"], ["row"], name="gather_row", axis=0),
            helper.make_node("Gather", ["perm", "i"], ["target"], name="gather_target", axis=0),
            helper.make_node("Reshape", ["target", "index_shape"], ["index"], name="as_index"),
            helper.make_node("Reshape", ["row", "update_shape"], ["update"], name="as_update"),
            helper.make_node("ScatterND", ["buf_in", "index", "update"], ["buf_out"], name="scatter_row"),
        ],
        "loop_body",
        [
            _value("i", TensorProto.INT64, []),
            _value("cond_in", TensorProto.BOOL, []),
            _value("buf_in", TensorProto.FLOAT, [buf_rows, width]),
        ],
        [_value("cond_out", TensorProto.BOOL, []), _value("buf_out", TensorProto.FLOAT, [buf_rows, width])],
        initializer=[
            helper.make_tensor("index_shape", TensorProto.INT64, [2], [1, 1]),
            helper.make_tensor("update_shape", TensorProto.INT64, [2], [1, width]),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["perm"], ["perm_shape"], name="perm_shape"),
            helper.make_node("Squeeze", ["perm_shape"], ["trip_count"], name="trip_count"),
            helper.make_node("Loop", ["trip_count", "", "buffer"], ["output"], name="loop", body=body),
        ],
        "loop_scatternd",
        [_value("rows", rows), _value("perm", perm), _value("buffer", buffer)],
        [_value("output", TensorProto.FLOAT, [buf_rows, width])],
    )
    expected = buffer.copy()
    expected[perm] = rows
    inputs = {"rows": rows, "perm": perm, "buffer": buffer}
    doc = "Loop (opset 13) whose body holds Gather and ScatterND"
    return _finish(graph, 13, doc), inputs, [expected]


@dataclass(frozen=True)
class HandmadeSpec:
    """One hand-built model: file stem, builder and seed."""

    name: str
    build: Callable[[np.random.Generator], Built]
    seed: int


SPECS: tuple[HandmadeSpec, ...] = (
    HandmadeSpec("scatter_deprecated_opset10", build_scatter_opset10, 201),
    HandmadeSpec("gathernd_batch_dims1", build_gathernd_batch_dims1, 202),
    HandmadeSpec("gathernd_batch_dims2", build_gathernd_batch_dims2, 203),
    HandmadeSpec("gathernd_batch_dims3", build_gathernd_batch_dims3, 204),
    HandmadeSpec("loop_scatternd", build_loop_scatternd, 205),
)


def _check_with_onnxruntime(path: Path, inputs: Mapping[str, np.ndarray], expected: list[np.ndarray]) -> None:
    """Run the saved model in onnxruntime CPU (one thread) and compare with the numpy reference."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(inputs))
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_array_equal(g, e, err_msg=f"{path.name} output {i}")


def main(out_dir: Path = HERE) -> int:
    """Build, save and check every hand-made model."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for spec in SPECS:
        model, inputs, expected = spec.build(np.random.default_rng(spec.seed))
        path = out_dir / f"{spec.name}.onnx"
        onnx.save(model, path)
        save_npz(out_dir / f"{spec.name}.npz", inputs)
        _check_with_onnxruntime(path, inputs, expected)
        opset = model.opset_import[0].version
        print(f"{path.name:40s} {path.stat().st_size:7d} B  IR {model.ir_version}  opset {opset}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
