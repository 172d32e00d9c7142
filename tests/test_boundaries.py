"""Partition boundaries carry what onnxruntime produced (issue 19, item 3).

Values crossing from one CPU partition to the next declare onnxruntime's own inferred type (outputs of
ai.onnx.ml operators that ONNX's inference leaves untyped), values numpy cannot hold (bfloat16) cross as
OrtValues, stale If annotations do not refuse a run, and ``run -o`` stores what an .npz holds and names
the rest. Expected values come from onnxruntime CPU, single-threaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.cli.main import main
from dmlshim.model.ort_view import ort_value_types, type_from_ort
from tests.test_session_models import assert_bitwise

X = np.arange(12, dtype=np.float32).reshape(4, 3) * 1.5 - 4.0
IDX = np.array([3, 1], dtype=np.int64)


def single_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return so


def save(
    tmp_path: Path, name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> tuple[Path, Path]:
    path, npz = tmp_path / f"{name}.onnx", tmp_path / f"{name}.npz"
    onnx.save(model, str(path))
    np.savez(npz, **feeds)  # type: ignore[arg-type]
    return path, npz


def reference(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(
        ort.InferenceSession(str(path), single_thread(), providers=["CPUExecutionProvider"]).run(None, feeds)
    )


def model(nodes: list[onnx.NodeProto], outputs: list[onnx.ValueInfoProto], **kw: object) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [2]),
        ],
        outputs,
        **kw,  # type: ignore[arg-type]
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
        ir_version=10,
    )


def validate_exit(path: Path, npz: Path | None, capsys: pytest.CaptureFixture[str]) -> int:
    code = main(["validate", str(path), *(["--inputs", str(npz)] if npz else [])])
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    return code


def bfloat16_model() -> onnx.ModelProto:
    """xb (bfloat16) is made before the emulated Gather and read after it: it crosses a boundary."""
    return model(
        [
            helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16, name="to_bf16"),
            helper.make_node("Gather", ["x", "idx"], ["g"], axis=0, name="gather"),
            helper.make_node("Cast", ["g"], ["gb"], to=TensorProto.BFLOAT16, name="g_bf16"),
            helper.make_node("Concat", ["xb", "gb"], ["cb"], axis=0, name="cat"),
            helper.make_node("Cast", ["cb"], ["y"], to=TensorProto.FLOAT, name="to_float"),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 3])],
    )


def test_bfloat16_crosses_a_partition_boundary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    feeds = {"x": X, "idx": IDX}
    path, npz = save(tmp_path, "bf16", bfloat16_model(), feeds)
    sess = dmlshim.InferenceSession(str(path), sess_options=single_thread())
    assert_bitwise(sess.run(None, feeds), reference(path, feeds))
    record = sess.last_run_record
    assert record is not None and record.cpu_partitions == 2
    assert [n.placement for n in record.nodes] == ["dml"]
    assert validate_exit(path, npz, capsys) == 0
    assert validate_exit(path, None, capsys) == 0


ML_OPS = [
    ("Scaler", {"offset": [1.0], "scale": [2.0]}),
    ("Normalizer", {"norm": "MAX"}),
    ("LinearRegressor", {"coefficients": [1.0, 2.0, 3.0], "intercepts": [0.5]}),
    ("Imputer", {"imputed_value_floats": [0.0], "replaced_value_float": 1.5}),
]


def ml_model(op: str, attrs: dict[str, object]) -> onnx.ModelProto:
    """An ai.onnx.ml output (untyped by ONNX's inference) crosses the boundary around the Gather."""
    return model(
        [
            helper.make_node(op, ["x"], ["s"], domain="ai.onnx.ml", name="ml", **attrs),
            helper.make_node("Gather", ["x", "idx"], ["g"], axis=0, name="gather"),
            helper.make_node("ReduceSum", ["s"], ["rs"], keepdims=0, name="sum_s"),
            helper.make_node("ReduceSum", ["g"], ["rg"], keepdims=0, name="sum_g"),
            helper.make_node("Add", ["rs", "rg"], ["y"], name="add"),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )


@pytest.mark.parametrize(("op", "attrs"), ML_OPS, ids=[op for op, _ in ML_OPS])
def test_ai_onnx_ml_output_crosses_a_boundary(
    op: str, attrs: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = ml_model(op, attrs)
    inferred = onnx.shape_inference.infer_shapes(m)
    assert "rs" not in {v.name for v in inferred.graph.value_info}  # ONNX gives no type: the old failure
    assert ort_value_types(m)["rs"].tensor_type.elem_type == TensorProto.FLOAT
    feeds = {"x": X, "idx": IDX}
    path, npz = save(tmp_path, op, m, feeds)
    got = dmlshim.InferenceSession(str(path), sess_options=single_thread()).run(None, feeds)
    assert_bitwise(got, reference(path, feeds))
    assert validate_exit(path, npz, capsys) == 0
    assert validate_exit(path, None, capsys) == 0


def stale_if_model(as_output: bool) -> onnx.ModelProto:
    """A legacy export: the If's output is annotated [1, 3] (traced with one row); it computes [n, 3]."""
    then = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", 1, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", 1, None)]
    )
    stale = helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 3])
    nodes = [
        helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other, name="if"),
        helper.make_node("Gather", ["r", "idx"], ["y"], axis=0, name="gather"),
        helper.make_node("ReduceSum", ["r"], ["r2"], keepdims=1, name="sum"),
        helper.make_node("Add", ["y", "r2"], ["z"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "legacy_if",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]), *([stale] if as_output else [])],
        value_info=[] if as_output else [stale],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6)


@pytest.mark.parametrize("as_output", [False, True], ids=["value_info", "graph_output"])
def test_legacy_if_with_stale_static_shape_validates(
    as_output: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = {"c": np.array(True), "x": X, "idx": IDX}
    path, npz = save(tmp_path, "legacy_if", stale_if_model(as_output), feeds)
    got = dmlshim.InferenceSession(str(path), sess_options=single_thread()).run(None, feeds)
    assert_bitwise(got, reference(path, feeds))
    assert validate_exit(path, npz, capsys) == 0
    assert validate_exit(path, None, capsys) == 0


def sequence_model() -> onnx.ModelProto:
    """A tensor output, a sequence of tensors, and a ZipMap-like sequence of maps."""
    return model(
        [
            helper.make_node("Gather", ["x", "idx"], ["gx"], axis=0, name="gather"),
            helper.make_node("SequenceConstruct", ["gx", "x"], ["seq"], name="seq"),
            helper.make_node("ZipMap", ["x"], ["probs"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2]),
        ],
        [
            helper.make_tensor_value_info("gx", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None),
            helper.make_value_info(
                "probs",
                helper.make_sequence_type_proto(
                    helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(1, None))
                ),
            ),
        ],
    )


def test_run_output_file_leaves_out_sequences_and_maps_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = {"x": X, "idx": IDX}
    path, npz = save(tmp_path, "seq", sequence_model(), feeds)
    expected = reference(path, feeds)
    out = tmp_path / "out.npz"
    assert main(["run", str(path), "--inputs", str(npz), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    notes = [line for line in captured.err.splitlines() if "leaves out" in line]
    assert len(notes) == 1 and "'seq' is a sequence of 2 tensors" in notes[0]
    assert "'probs' is a sequence of 4 maps" in notes[0]
    with np.load(out, allow_pickle=False) as data:
        assert data.files == ["gx"]
        assert_bitwise([data["gx"]], expected[:1])
    # --json still reports every output.
    assert main(["run", str(path), "--inputs", str(npz), "-o", str(out), "--overwrite", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_name = {o["name"]: o for o in doc["outputs"]}
    assert by_name["gx"] == {"name": "gx", "shape": [2, 3], "dtype": "float32"}
    assert by_name["seq"]["stored"] is False and by_name["seq"]["value"]["kind"] == "sequence"
    assert [e["shape"] for e in by_name["seq"]["value"]["elements"]] == [[2, 3], [4, 3]]
    assert by_name["probs"]["value"]["length"] == 4
    # The session's outputs are onnxruntime's.
    got = dmlshim.InferenceSession(str(path), sess_options=single_thread()).run(None, feeds)
    assert_bitwise([got[0]], expected[:1])
    assert all(np.array_equal(a, b) for a, b in zip(got[1], expected[1], strict=True))
    assert got[2] == expected[2]
    assert validate_exit(path, npz, capsys) == 0


def test_type_from_ort_reads_onnxruntime_type_strings() -> None:
    tp = type_from_ort("seq(map(int64,tensor(float)))")
    assert tp is not None
    value = tp.sequence_type.elem_type.map_type
    assert value.key_type == TensorProto.INT64 and value.value_type.tensor_type.elem_type == TensorProto.FLOAT
    tensor = type_from_ort("tensor(bfloat16)", ["n", 3, None])
    assert tensor is not None and tensor.tensor_type.elem_type == TensorProto.BFLOAT16
    dims = tensor.tensor_type.shape.dim
    assert [d.dim_param for d in dims] == ["n", "", ""] and dims[1].dim_value == 3
    assert not dims[2].HasField("dim_value")
    assert type_from_ort("tensor(") is None


def test_validate_compares_a_bfloat16_graph_output(tmp_path: Path) -> None:
    # A tester's finding: a bfloat16 graph output ended validate in a numpy traceback.
    from onnx import TensorProto, helper

    from dmlshim.cli.main import main as cli

    g = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "i"], ["g"], axis=0),
            helper.make_node("Cast", ["g"], ["y"], to=TensorProto.BFLOAT16),
        ],
        "bf16_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3])],
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    path = tmp_path / "bf16_out.onnx"
    path.write_bytes(model.SerializeToString())
    np.savez(tmp_path / "in.npz", x=np.arange(12, dtype=np.float32).reshape(4, 3), i=np.array([3, 0]))
    assert cli(["validate", str(path), "--inputs", str(tmp_path / "in.npz"), "-q"]) == 0
