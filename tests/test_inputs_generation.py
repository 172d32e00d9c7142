"""Generated inputs that run: related symbolic dimensions (a GPT-2-style KV cache), symbol names in
--input-shape in every command, 0-d inputs, run without --inputs, and the error when nothing runs.

The expected sizes come from the model's own definition (``total = past + seq`` is what the Concat and the
Add require), and every candidate is checked by running onnxruntime CPU, not dmlshim.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

from dmlshim import BadInputError
from dmlshim.inputs import generate, generate_inputs
from dmlshim.validate import validate_model
from tests.fuzz_settings import assert_cli_error, run_cli
from tests.oracle import ort_run

IR_VERSION = 10
VOCAB, POSITIONS, HEADS, HEAD_DIM = 50, 16, 2, 4


def kv_cache_model(total: str = "total_sequence_length", step: bool = False) -> onnx.ModelProto:
    """One GPT-2-style attention step with a KV cache.

    input_ids/position_ids [batch, sequence_length] -> embeddings -> key [batch, 2, seq, 4];
    present = Concat(past_key [batch, 2, past, 4], key) along the sequence; the scores [.., seq, past+seq]
    get the mask [batch, total] added (so total must equal past + seq); ``last_key`` gathers position
    total - 1 of ``present`` (valid only when total <= past + seq). With ``step`` the key is reshaped to
    [batch, 1, 2, 4], so the model runs only with sequence_length = 1 (one decoding step).
    """
    rng = np.random.default_rng(0)
    inits = [
        nh.from_array(rng.standard_normal((VOCAB, HEADS * HEAD_DIM)).astype(np.float32), "wte"),
        nh.from_array(rng.standard_normal((POSITIONS, HEADS * HEAD_DIM)).astype(np.float32), "wpe"),
        nh.from_array(np.array([0, 1 if step else 0, HEADS, HEAD_DIM], np.int64), "kshape"),
        nh.from_array(np.array([1, 2], np.int64), "maskaxes"),
        nh.from_array(np.array(1, np.int64), "one"),
    ]
    nodes = [
        helper.make_node("Gather", ["wte", "input_ids"], ["tok"], name="embed"),
        helper.make_node("Gather", ["wpe", "position_ids"], ["pos"], name="pos_embed"),
        helper.make_node("Add", ["tok", "pos"], ["h"], name="add_pos"),
        helper.make_node("Reshape", ["h", "kshape"], ["k4"], name="split_heads"),
        helper.make_node("Transpose", ["k4"], ["key"], perm=[0, 2, 1, 3], name="heads_first"),
        helper.make_node("Concat", ["past_key", "key"], ["present"], axis=2, name="append_kv"),
        helper.make_node("Transpose", ["present"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
        helper.make_node("MatMul", ["key", "kt"], ["scores"], name="scores"),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=T.FLOAT, name="mask_float"),
        helper.make_node("Unsqueeze", ["maskf", "maskaxes"], ["mask4"], name="mask4"),
        helper.make_node("Add", ["scores", "mask4"], ["logits"], name="masked"),
        helper.make_node("Shape", ["attention_mask"], ["mshape"], name="mask_shape"),
        helper.make_node("Gather", ["mshape", "one"], ["total"], axis=0, name="mask_len"),
        helper.make_node("Sub", ["total", "one"], ["last"], name="last_pos"),
        helper.make_node("Gather", ["present", "last"], ["last_key"], axis=2, name="last_key"),
    ]
    graph = helper.make_graph(
        nodes,
        "kv_step",
        [
            helper.make_tensor_value_info("input_ids", T.INT64, ["batch", "sequence_length"]),
            helper.make_tensor_value_info("position_ids", T.INT64, ["batch", "sequence_length"]),
            helper.make_tensor_value_info("attention_mask", T.INT64, ["batch", total]),
            helper.make_tensor_value_info(
                "past_key", T.FLOAT, ["batch", HEADS, "past_sequence_length", HEAD_DIM]
            ),
        ],
        [
            helper.make_tensor_value_info("logits", T.FLOAT, None),
            helper.make_tensor_value_info("last_key", T.FLOAT, None),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


@pytest.fixture(scope="module")
def kv_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kv") / "kv_step.onnx"
    onnx.save(kv_cache_model(), path)
    return path


def _relation_holds(shapes: dict[str, tuple[int, ...]]) -> None:
    batch, seq = shapes["input_ids"]
    assert shapes["position_ids"] == (batch, seq)
    past = shapes["past_key"][2]
    assert shapes["past_key"] == (batch, HEADS, past, HEAD_DIM)
    assert shapes["attention_mask"] == (batch, past + seq)


@pytest.mark.parametrize("total", ["total_sequence_length", "past_sequence_length + sequence_length"])
def test_kv_cache_symbols_are_related(total: str) -> None:
    model = kv_cache_model(total)
    generated = generate(model, seed=3)
    _relation_holds(generated.shapes)
    assert generated.checked
    feeds = generated.feeds
    assert feeds["input_ids"].max() < VOCAB and feeds["input_ids"].min() >= 0
    # attention mask 0/1 (all attended); positions 0, 1, .. along the sequence
    assert set(np.unique(feeds["attention_mask"]).tolist()) == {1}
    seq = feeds["position_ids"].shape[1]
    np.testing.assert_array_equal(
        feeds["position_ids"], np.broadcast_to(np.arange(seq), feeds["position_ids"].shape)
    )
    ort_run(model, feeds)  # onnxruntime itself accepts them
    if total.startswith("total"):
        assert generated.symbols["total_sequence_length"] == (
            generated.symbols["past_sequence_length"] + generated.symbols["sequence_length"]
        )


def test_decoding_step_needs_two_symbols_changed() -> None:
    model = kv_cache_model(step=True)
    generated = generate(model)
    _relation_holds(generated.shapes)
    assert generated.shapes["input_ids"][1] == 1 and generated.tries > 2
    ort_run(model, generated.feeds)
    report = validate_model(model)
    assert report.match and dict(report.input_symbols)["sequence_length"] == 1


def test_kv_cache_validates_with_random_inputs(kv_path: Path) -> None:
    report = validate_model(kv_path)
    assert report.match and report.inputs_source == "random"
    _relation_holds(dict(report.input_shapes))
    symbols = dict(report.input_symbols)
    assert symbols["total_sequence_length"] == symbols["past_sequence_length"] + symbols["sequence_length"]
    r = run_cli("validate", kv_path)
    assert r.code == 0, r.err
    assert "inputs: generated (seed 0)" in r.out and "total_sequence_length=" in r.out
    r = run_cli("validate", kv_path, "--json")
    doc = json.loads(r.out)
    assert doc["inputs"]["source"] == "random" and doc["match"]
    assert doc["inputs"]["symbols"]["total_sequence_length"] == doc["inputs"]["shapes"]["attention_mask"][1]


@pytest.mark.parametrize(
    ("given", "expect"),
    [
        (["input_ids=1,5"], {"input_ids": (1, 5)}),
        (["past_sequence_length=7"], {"past": 7}),
        (["batch=3", "sequence_length=1"], {"batch": 3, "seq": 1}),
        (["total_sequence_length=3"], {"total": 3}),
    ],
)
def test_input_shape_by_symbol_or_input_in_validate(kv_path: Path, given: list[str], expect: dict) -> None:
    args: list[object] = ["validate", kv_path, "--json"]
    for g in given:
        args += ["--input-shape", g]
    r = run_cli(*args)
    assert r.code == 0, r.err
    shapes = {k: tuple(v) for k, v in json.loads(r.out)["inputs"]["shapes"].items()}
    _relation_holds(shapes)
    if "input_ids" in expect:
        assert shapes["input_ids"] == expect["input_ids"]
    if "past" in expect:
        assert shapes["past_key"][2] == expect["past"]
    if "batch" in expect:
        assert shapes["input_ids"] == (expect["batch"], expect["seq"])
    if "total" in expect:
        assert shapes["attention_mask"][1] == expect["total"]


def test_input_shape_symbol_in_run_export_inspect_lower(kv_path: Path, tmp_path: Path) -> None:
    r = run_cli("run", kv_path, "--input-shape", "past_sequence_length=5", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["inputs"]["source"] == "random"
    assert doc["inputs"]["shapes"]["past_key"][2] == 5
    assert doc["inputs"]["shapes"]["attention_mask"][1] == 5 + doc["inputs"]["shapes"]["input_ids"][1]

    out = tmp_path / "export"
    r = run_cli("export", kv_path, "-o", out, "--input-shape", "past_sequence_length=5", "--json")
    assert r.code == 0, r.err
    index = json.loads((out / "index.json").read_text())
    assert index["input_shapes"]["past_key"][2] == 5

    sizes = ["batch=1", "sequence_length=3", "past_sequence_length=4", "total_sequence_length=7"]
    args: list[object] = ["inspect", kv_path, "--json"]
    for s in sizes:
        args += ["--input-shape", s]
    r = run_cli(*args)
    assert r.code == 0, r.err
    nodes = {n["name"]: n for n in json.loads(r.out)["nodes"]}
    assert all(n["status"] == "dml" for n in nodes.values()), nodes
    without = json.loads(run_cli("inspect", kv_path, "--json").out)["nodes"]
    # Without the sizes the nodes are described from ranks, their Sizes by name; the sizes made them static.
    assert any("SIZES_SYMBOLIC" in [r["code"] for r in n["reasons"]] for n in without)
    assert not any("SIZES_SYMBOLIC" in [r["code"] for r in n["reasons"]] for n in nodes.values())

    lowered = tmp_path / "lowered.onnx"
    args = ["lower", kv_path, "-o", lowered]
    for s in sizes:
        args += ["--input-shape", s]
    r = run_cli(*args)
    assert r.code == 0, r.err
    dims = {
        i.name: [
            d.dim_value if d.HasField("dim_value") else d.dim_param for d in i.type.tensor_type.shape.dim
        ]
        for i in onnx.load(lowered).graph.input
    }
    assert dims["past_key"] == [1, HEADS, 4, HEAD_DIM] and dims["attention_mask"] == [1, 7]


@pytest.mark.parametrize("command", ["validate", "run", "inspect"])
def test_unknown_input_shape_name_is_a_usage_error(kv_path: Path, command: str) -> None:
    r = run_cli(command, kv_path, "--input-shape", "past_len=3")
    assert_cli_error(r.code, r.err, "past_len", "past_sequence_length")


def test_symbol_given_two_sizes_is_an_error(kv_path: Path) -> None:
    r = run_cli("validate", kv_path, "--input-shape", "batch=2", "--input-shape", "input_ids=3,4")
    assert_cli_error(r.code, r.err, "batch=3", "batch=2")
    r = run_cli("validate", kv_path, "--input-shape", "batch=2,3")
    assert_cli_error(r.code, r.err, "batch", "one size")


def test_run_without_inputs_generates_and_says_so(kv_path: Path) -> None:
    r = run_cli("run", kv_path)
    assert r.code == 0, r.err
    assert "inputs: generated (seed 0): input_ids [" in r.out
    assert "past_sequence_length=" in r.out
    r2 = run_cli("run", kv_path, "--seed", "4", "--json")
    assert json.loads(r2.out)["inputs"]["seed"] == 4


def _bool_cond_model() -> onnx.ModelProto:
    """If on a 0-d bool graph input; each branch gathers a different row of a table."""
    table = nh.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")

    def branch(name: str, row: int) -> onnx.GraphProto:
        idx = nh.from_array(np.array(row, np.int64), f"{name}_row")
        node = helper.make_node(
            "Gather", ["table", f"{name}_row"], [f"{name}_out"], axis=0, name=f"{name}_gather"
        )
        return helper.make_graph(
            [node], name, [], [helper.make_tensor_value_info(f"{name}_out", T.FLOAT, [3])], [idx]
        )

    node = helper.make_node(
        "If", ["cond"], ["y"], then_branch=branch("then", 1), else_branch=branch("else", 3), name="choose"
    )
    graph = helper.make_graph(
        [node],
        "cond_model",
        [helper.make_tensor_value_info("cond", T.BOOL, [])],
        [helper.make_tensor_value_info("y", T.FLOAT, [3])],
        [table],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def test_zero_d_bool_input_is_a_0d_array(tmp_path: Path) -> None:
    model = _bool_cond_model()
    seen = set()
    for seed in range(8):
        cond = generate_inputs(model, seed=seed)["cond"]
        assert type(cond) is np.ndarray and cond.shape == () and cond.dtype == np.bool_
        seen.add(bool(cond))
        row = 1 if cond else 3
        np.testing.assert_array_equal(
            ort_run(model, {"cond": cond})[0], np.arange(12, dtype=np.float32)[row * 3 : row * 3 + 3]
        )
    assert seen == {True, False}
    path = tmp_path / "cond.onnx"
    onnx.save(model, path)
    for command in ("validate", "run"):
        r = run_cli(command, path)
        assert r.code == 0, r.err
    r = run_cli("export", path, "-o", tmp_path / "exp")
    assert r.code == 0, r.err


def test_no_candidate_runs_names_shapes_and_fix(tmp_path: Path) -> None:
    """x [n] reshaped to [3, 1367] runs only with n = 4101, which no candidate reaches (neither a small
    size nor a size read from the constants: 3 and 1367 are, their product is above the largest hint)."""
    shape = nh.from_array(np.array([3, 1367], np.int64), "shape")
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("Gather", ["r", "i"], ["y"], axis=1, name="g"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", T.FLOAT, ["n"]),
            helper.make_tensor_value_info("i", T.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    with pytest.raises(BadInputError) as info:
        generate(model)
    text = str(info.value)
    assert "x [2]" in text and "(n=2)" in text and "--inputs FILE.npz" in text and "--input-shape" in text
    path = tmp_path / "reshape4101.onnx"
    onnx.save(model, path)
    for command in ("validate", "run", "export"):
        extra: list[object] = ["-o", tmp_path / f"out_{command}"] if command == "export" else []
        r = run_cli(command, path, *extra, "--json")
        assert_cli_error(r.code, r.err, "x [2]", "--inputs FILE.npz", "--input-shape")
        doc = json.loads(r.out)
        assert doc["error"]["type"] == "BadInputError" and "x [2]" in doc["error"]["message"]
    assert run_cli("validate", path, "--input-shape", "n=4101").code == 0


def test_indices_through_cast_and_unsqueeze_follow_the_chosen_sizes() -> None:
    """int32 ids -> Cast -> Unsqueeze -> GatherElements on data [n, 4]: every id < n, whatever n is."""
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids64"], to=T.INT64, name="cast"),
        helper.make_node("Unsqueeze", ["ids64", "axes"], ["col"], name="unsqueeze"),
        helper.make_node("Concat", ["col", "col", "col", "col"], ["idx"], axis=1, name="widen"),
        helper.make_node("GatherElements", ["data", "idx"], ["y"], axis=0, name="pick"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("data", T.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("ids", T.INT32, ["k"]),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [nh.from_array(np.array([1], np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    for n, k in [(3, 40), (7, 5), (1, 9)]:
        for seed in range(3):
            feeds = generate_inputs(model, input_shapes={"n": n, "k": k}, seed=seed)
            assert feeds["ids"].dtype == np.int32 and feeds["ids"].shape == (k,)
            assert feeds["ids"].min() >= 0 and feeds["ids"].max() < n
            want = feeds["data"][feeds["ids"]]  # numpy's own indexing as the reference
            np.testing.assert_array_equal(ort_run(model, feeds)[0], want)
    assert validate_model(model, input_shapes={"n": 3, "k": 40}).match
