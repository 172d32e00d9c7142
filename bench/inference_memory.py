"""Peak memory and time of ``dmlshim inspect`` and ``dmlshim validate`` against onnxruntime on models
whose shape inference used to grow with a value's element count (issue 35).

Usage::

    python bench/inference_memory.py [--json] [--only NAME ...]

Each model is written to a temporary folder; each command runs in its own subprocess under a small
wrapper that reports ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` (``bench/peak.py``), in the same run as
onnxruntime's session creation (and one run, for ``validate``) on the same model. Ratios are ours /
onnxruntime's. The models:

- ``flat_table_1gib``: Gather from a 1 GiB one-dimensional external float initializer (a flattened
  embedding table; the data file is sparse, so it costs no disk), with ``DMLSHIM_MEMORY_LIMIT=100000000``;
- ``gnn_edges_const``: a GNN whose edge list is a [2, 50000] int64 initializer (its rows are 1-D values of
  50,000 elements that Unsqueeze, Expand and Gather read);
- ``cast_chain_1024``: 20,000 Casts of a 1024-element input (data within the per-value bound, past the
  total budget);
- ``gather_chain_20k``: 20,000 Gathers of a [4, 3] tensor (``bench/inspect_scale.py``'s chain).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peak import ORT_RUN, ORT_SESSION, dmlshim, measure, python

TABLE_ELEMENTS = 1 << 28
"""float32 elements of the flattened table: 1 GiB."""


def flat_table_model(folder: Path, elements: int = TABLE_ELEMENTS) -> Path:
    """``y = Gather(table, idx)`` with ``table`` a 1-D float initializer in a sparse external file."""
    table = TensorProto(name="table", data_type=TensorProto.FLOAT, dims=[elements])
    table.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "table.bin"), ("offset", "0"), ("length", str(elements * 4))):
        entry = table.external_data.add()
        entry.key, entry.value = key, value
    with open(folder / "table.bin", "wb") as handle:
        handle.truncate(elements * 4)  # sparse: no disk blocks, reads as zeros
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)],
        "flat_table",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
        initializer=[table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    path = folder / "flat_table.onnx"
    onnx.save(model, path)
    return path


def gnn_edges_model(folder: Path, edges: int = 50_000, nodes: int = 1000) -> Path:
    """Mean aggregation over a constant edge list: x[src] scattered (added) into the rows of dst."""
    rng = np.random.default_rng(0)
    edge_index = rng.integers(0, nodes, (2, edges)).astype(np.int64)
    vi = helper.make_tensor_value_info
    ints = lambda v, n: numpy_helper.from_array(np.array(v, dtype=np.int64), n)  # noqa: E731
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["edge_index", "zero"], ["src"], axis=0),
            helper.make_node("Gather", ["edge_index", "one"], ["dst"], axis=0),
            helper.make_node("Gather", ["x", "src"], ["msg"], axis=0),
            helper.make_node("Unsqueeze", ["dst", "axes1"], ["dst2"]),
            helper.make_node("Shape", ["msg"], ["msg_shape"]),
            helper.make_node("Expand", ["dst2", "msg_shape"], ["dst_idx"]),
            helper.make_node("Cast", ["dst"], ["dst_f"], to=TensorProto.FLOAT),
            helper.make_node("Size", ["dst"], ["count"]),
            helper.make_node("ConstantOfShape", ["x_shape"], ["zeros"]),
            helper.make_node(
                "ScatterElements", ["zeros", "dst_idx", "msg"], ["agg"], axis=0, reduction="add"
            ),
        ],
        "gnn_edges",
        [vi("x", TensorProto.FLOAT, [nodes, 16])],
        [vi("agg", TensorProto.FLOAT, [nodes, 16]), vi("dst_f", TensorProto.FLOAT, [edges]),
         vi("count", TensorProto.INT64, [])],
        initializer=[numpy_helper.from_array(edge_index, "edge_index"), ints(0, "zero"), ints(1, "one"),
                     ints([1], "axes1"), ints([nodes, 16], "x_shape")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    path = folder / "gnn_edges.onnx"
    onnx.save(model, path)
    return path


def cast_chain_model(folder: Path, count: int = 20_000, length: int = 1024) -> Path:
    nodes = [
        helper.make_node("Cast", ["x" if i == 0 else f"c{i - 1}"], [f"c{i}"], to=TensorProto.FLOAT)
        for i in range(count)
    ]
    nodes.append(helper.make_node("Gather", [f"c{count - 1}", "idx"], ["y"], axis=0))
    graph = helper.make_graph(
        nodes,
        "cast_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        initializer=[numpy_helper.from_array(np.array([0, 5, 7], dtype=np.int64), "idx")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    path = folder / "cast_chain.onnx"
    onnx.save(model, path)
    return path


def gather_chain_model(folder: Path, count: int = 20_000) -> Path:
    from bench.inspect_scale import gather_chain

    path = folder / "gather_chain.onnx"
    onnx.save(gather_chain(count), path)
    return path


CASES: dict[str, tuple[Callable[[Path], Path], dict[str, str], dict[str, Any] | None]] = {
    "flat_table_1gib": (flat_table_model, {"DMLSHIM_MEMORY_LIMIT": "100000000"},
                        {"idx": [[0, 5, TABLE_ELEMENTS - 1], "int64"]}),
    "gnn_edges_const": (gnn_edges_model, {}, None),
    "cast_chain_1024": (cast_chain_model, {}, None),
    "gather_chain_20k": (gather_chain_model, {}, None),
}  # fmt: skip
"""name -> (builder, environment of dmlshim's commands, feeds of the validate comparison or None)."""


def bench_case(name: str, folder: Path, provider: str | None = None) -> dict[str, Any]:
    build, env, feeds = CASES[name]
    if provider:  # another checkout's dmlshim (the code before a change)
        env = {**env, "PYTHONPATH": provider}
    path = build(folder)
    ort = measure(python(ORT_SESSION, str(path)))
    inspect = measure(dmlshim("inspect", "-q", str(path)), env)
    row: dict[str, Any] = {
        "model": name,
        "ort_session_mb": round(ort.peak_bytes / 2**20, 1),
        "ort_session_s": round(ort.wall, 2),
        "ort_session_cpu_s": round(ort.cpu, 2),
        "inspect_mb": round(inspect.peak_bytes / 2**20, 1),
        "inspect_s": round(inspect.wall, 2),
        "inspect_cpu_s": round(inspect.cpu, 2),
        "inspect_exit": inspect.code,
        "inspect_mb_ratio": round(inspect.peak_bytes / ort.peak_bytes, 2),
        "inspect_cpu_ratio": round(inspect.cpu / ort.cpu, 2),
    }
    if feeds is not None:
        run = measure(python(ORT_RUN, str(path), json.dumps(feeds)))
        validate = measure(dmlshim("validate", "-q", str(path)), env)
        row.update(
            ort_run_mb=round(run.peak_bytes / 2**20, 1),
            validate_mb=round(validate.peak_bytes / 2**20, 1),
            validate_s=round(validate.wall, 2),
            validate_exit=validate.code,
            validate_mb_ratio=round(validate.peak_bytes / run.peak_bytes, 2),
        )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), default=sorted(CASES))
    parser.add_argument("--provider", help="run dmlshim from this folder (e.g. another worktree's provider/)")
    args = parser.parse_args(argv)
    rows = []
    for name in args.only:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(bench_case(name, Path(tmp), args.provider))
        if not args.json:
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
