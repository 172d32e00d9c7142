"""A new user's optimum seq2seq export (newuser-49): Constant nodes that share a name with another node.

optimum-onnx's merged decoder (``decoder_model_merged.onnx``: an If choosing between the no-past and the
with-past decoders) holds Constant nodes named like another node of the same branch. onnxruntime makes every
ai.onnx Constant node an initializer before it checks that node names are unique, so it loads and runs such
a model (1.24.4 and 1.32 alike), while two other nodes of one name are refused. dmlshim refused the model
("two nodes are named 'Constant_1096'"); it now follows onnxruntime. Expected values come from onnxruntime
CPU.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.runtime.exceptions import BadModelError

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def _const(out: str, name: str) -> helper.NodeProto:
    return helper.make_node("Constant", [], [out], name=name, value=helper.make_tensor("v", I64, [2], [2, 0]))


def _body(clash: str) -> list[helper.NodeProto]:
    """A Gather whose indices come from a Constant named ``shared``; ``clash`` names the other node called
    ``shared``: a second Constant, the Gather after it, or a Neg before it."""
    data = "x"
    nodes = []
    if clash == "op_first":
        nodes.append(helper.make_node("Neg", ["x"], ["xn"], name="shared"))
        data = "xn"
    nodes.append(_const("idx", "shared"))
    if clash == "constant":
        nodes.append(_const("idx2", "shared"))
        nodes.append(helper.make_node("Gather", [data, "idx2"], ["g2"], name="gather_b", axis=0))
    gather_name = "shared" if clash == "gather" else "gather_a"
    nodes.append(helper.make_node("Gather", [data, "idx"], ["g"], name=gather_name, axis=0))
    tail = ["g", "g2"] if clash == "constant" else ["g", "g"]
    nodes.append(helper.make_node("Add", tail, ["y"], name="add"))
    return nodes


def _model(clash: str, where: str) -> bytes:
    nodes = _body(clash)
    x = helper.make_tensor_value_info("x", F32, [3, 4])
    y = helper.make_tensor_value_info("y", F32, [2, 4])
    if where == "top":
        graph = helper.make_graph(nodes, "g", [x], [y])
    else:

        def branch(tag: str) -> helper.GraphProto:
            body = copy.deepcopy(nodes)
            body.append(helper.make_node("Identity", ["y"], [f"y_{tag}"], name=f"out_{tag}"))
            return helper.make_graph(body, tag, [], [helper.make_tensor_value_info(f"y_{tag}", F32, [2, 4])])

        cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
        node = helper.make_node(
            "If", ["c"], ["y"], name="if", then_branch=branch("t"), else_branch=branch("e")
        )
        graph = helper.make_graph([node], "g", [x, cond], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def _feeds(where: str) -> dict[str, np.ndarray]:
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5}
    if where == "if":
        feeds["c"] = np.array(True)
    return feeds


def _ort(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("engine", ["partitioned", "customop"])
@pytest.mark.parametrize("where", ["top", "if"])
@pytest.mark.parametrize("clash", ["constant", "gather", "op_first"])
def test_a_constant_may_share_its_name_as_in_onnxruntime(engine: str, where: str, clash: str) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model = _model(clash, where)
    feeds = _feeds(where)
    expected = _ort(model, feeds)
    sess = dmlshim.InferenceSession(
        model, providers=["DmlExecutionProvider", "CPUExecutionProvider"], engine=engine
    )
    for _ in range(4):  # past the third run, where answers may come from onnxruntime with a proof
        got = sess.run(None, feeds)
        assert [g.tobytes() for g in got] == [e.tobytes() for e in expected]


@pytest.mark.parametrize("where", ["top", "if"])
def test_two_other_nodes_of_one_name_are_still_refused_as_onnxruntime_refuses_them(where: str) -> None:
    nodes = [
        helper.make_node("Neg", ["x"], ["n"], name="dup"),
        helper.make_node("Gather", ["n", "i"], ["y"], name="dup", axis=0),
    ]
    x = helper.make_tensor_value_info("x", F32, [3, 4])
    i = helper.make_tensor_value_info("i", I64, [2])
    y = helper.make_tensor_value_info("y", F32, [2, 4])
    if where == "top":
        graph = helper.make_graph(nodes, "g", [x, i], [y])
    else:
        branch = helper.make_graph(
            [*nodes, helper.make_node("Identity", ["y"], ["yb"])],
            "b",
            [],
            [helper.make_tensor_value_info("yb", F32, [2, 4])],
        )
        cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
        node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
        graph = helper.make_graph([node], "g", [x, i, cond], [y])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8
    ).SerializeToString()
    with pytest.raises(Exception, match="same node name"):
        onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(BadModelError, match="two nodes are named 'dup'"):
        dmlshim.InferenceSession(model, providers=["DmlExecutionProvider", "CPUExecutionProvider"])


def test_validate_and_inspect_accept_the_model(tmp_path: Path) -> None:
    path = tmp_path / "merged_like.onnx"
    path.write_bytes(_model("gather", "if"))
    for command in (["inspect"], ["validate", "--engine", "customop"], ["validate"]):
        if "customop" in command:
            pytest.importorskip("onnxruntime_extensions")
        proc = subprocess.run(
            [sys.executable, "-m", "dmlshim", *command, str(path), "-q"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])


def test_optimum_merged_marian_decoder_runs_as_in_onnxruntime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The form as optimum writes it: a tiny MarianMT (random weights, no model hub) exported by
    ``main_export``; its merged decoder, with and without past, against onnxruntime CPU. At 3 layers
    optimum-onnx 0.1.0 names the empty Constant it adds for each missing ``present.*.encoder.*`` output
    ``Constant_<node count + 1>``, which is also the name of one of the exporter's Constants (at 6 layers
    and real width, ``Constant_1096``)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    exporters = pytest.importorskip("optimum.exporters.onnx")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    config = transformers.MarianConfig(
        vocab_size=96, d_model=32, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=95, eos_token_id=0, decoder_start_token_id=95,
    )  # fmt: skip
    transformers.MarianMTModel(config).eval().save_pretrained(tmp_path / "hf")
    exporters.main_export(
        str(tmp_path / "hf"),
        output=str(tmp_path / "onnx"),
        task="text2text-generation-with-past",
        do_validation=False,
    )
    path = str(tmp_path / "onnx" / "decoder_model_merged.onnx")
    ort = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(path, providers=["DmlExecutionProvider", "CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for use_past, past in ((False, 1), (True, 3)):
        feeds = {}
        for info in ort.get_inputs():
            if info.name == "use_cache_branch":
                feeds[info.name] = np.array([use_past])
            elif info.name == "input_ids":
                feeds[info.name] = rng.integers(0, 96, (2, 1 if use_past else 4), dtype=np.int64)
            elif info.name == "encoder_attention_mask":
                feeds[info.name] = np.ones((2, 5), np.int64)
            elif info.name == "encoder_hidden_states":
                feeds[info.name] = rng.standard_normal((2, 5, 32), dtype=np.float32)
            else:  # past_key_values.<i>.<decoder|encoder>.<key|value>
                length = 5 if ".encoder." in info.name else past
                feeds[info.name] = rng.standard_normal((2, 4, length, 8), dtype=np.float32)
        expected = ort.run(None, feeds)
        for _ in range(4):
            got = ours.run(None, feeds)
            assert [g.tobytes() for g in got] == [e.tobytes() for e in expected]
