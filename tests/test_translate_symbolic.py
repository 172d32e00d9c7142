"""Translation with symbolic sizes: ranks and types decide the descriptor; sizes stay dimension names."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.dml.enums import FeatureLevel
from dmlshim.dml.symbolic import SymDim, describe, differ, placeholder_shape
from dmlshim.translate import translate_model
from tests.oracle import IR_VERSION, ort_session

HIDDEN, VOCAB, POSITIONS = 16, 50, 32


def bert_like_model() -> onnx.ModelProto:
    """An encoder front end as exporters write it, with symbolic batch and sequence:
    word/position/token-type embedding Gathers, a position-id chain through Shape and Range, the
    attention-mask expansion through Unsqueeze, a GatherElements over the sequence and the pooler's Gather
    of the first token, and a ScatterND that masks a token's hidden state."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32), "word_emb"),
        numpy_helper.from_array(rng.standard_normal((POSITIONS, HIDDEN)).astype(np.float32), "pos_emb"),
        numpy_helper.from_array(rng.standard_normal((2, HIDDEN)).astype(np.float32), "type_emb"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
        numpy_helper.from_array(np.array([[0]], dtype=np.int64), "first_row"),
        numpy_helper.from_array(np.zeros((1, HIDDEN), dtype=np.float32), "zeros_row"),
    ]
    nodes = [
        helper.make_node("Gather", ["word_emb", "input_ids"], ["words"], axis=0, name="word_gather"),
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "one"], ["seq_len"], axis=0, name="seq_len_gather"),
        helper.make_node("Range", ["zero", "seq_len", "one"], ["pos_ids"]),
        helper.make_node("Unsqueeze", ["pos_ids", "axes0"], ["pos_ids2"]),
        helper.make_node("Gather", ["pos_emb", "pos_ids2"], ["positions"], axis=0, name="pos_gather"),
        helper.make_node("Gather", ["type_emb", "token_type_ids"], ["types"], axis=0, name="type_gather"),
        helper.make_node("Add", ["words", "positions"], ["sum1"]),
        helper.make_node("Add", ["sum1", "types"], ["hidden"]),
        helper.make_node("GatherElements", ["hidden", "order"], ["reordered"], axis=1, name="reorder"),
        helper.make_node("Gather", ["reordered", "zero"], ["cls"], axis=1, name="cls_gather"),
        helper.make_node("ScatterND", ["cls", "first_row", "zeros_row"], ["pooled"], name="mask_first"),
    ]
    graph = helper.make_graph(
        nodes,
        "bert_like",
        [
            helper.make_tensor_value_info("input_ids", T.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("token_type_ids", T.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("order", T.INT64, ["batch", "sequence", HIDDEN]),
        ],
        [helper.make_tensor_value_info("pooled", T.FLOAT, ["batch", HIDDEN])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def test_bert_like_dynamic_model_has_no_shape_unknown() -> None:
    model = bert_like_model()
    # The model is valid and runs in onnxruntime with any batch and sequence (the external check).
    feeds = {
        "input_ids": np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64),
        "token_type_ids": np.array([[0, 0, 1], [0, 1, 1]], dtype=np.int64),
        "order": np.zeros((2, 3, HIDDEN), dtype=np.int64),
    }
    assert ort_session(model).run(None, feeds)[0].shape == (2, HIDDEN)

    mt = translate_model(model)
    by_name = {n.name: n for n in mt.nodes}
    assert set(by_name) == {
        "word_gather",
        "seq_len_gather",
        "pos_gather",
        "type_gather",
        "reorder",
        "cls_gather",
        "mask_first",
    }
    assert all("SHAPE_UNKNOWN" not in n.reason_codes for n in mt.nodes)
    assert all(n.status.value == "dml" for n in mt.nodes), [(n.name, n.reasons) for n in mt.nodes]

    # Gather of a [VOCAB, HIDDEN] table by [batch, sequence] ids (facts §5: D = max(r, q, r+q-1) = 3,
    # Axis = 0 + (3 - 2) = 1, IndexDimensions = q = 2).
    word = by_name["word_gather"].to_json()
    desc = word["operator"]["desc"]
    assert word["operator"]["type"] == "DML_OPERATOR_GATHER"
    assert desc["InputTensor"]["Sizes"] == [1, VOCAB, HIDDEN]
    assert desc["IndicesTensor"]["Sizes"] == [1, "batch", "sequence"]
    assert desc["OutputTensor"]["Sizes"] == ["batch", "sequence", HIDDEN]
    assert desc["OutputTensor"]["TotalTensorSizeInBytes"] is None  # depends on runtime sizes
    assert desc["InputTensor"]["TotalTensorSizeInBytes"] == VOCAB * HIDDEN * 4
    assert (desc["Axis"], desc["IndexDimensions"]) == (1, 2)
    assert word["min_feature_level"] == "DML_FEATURE_LEVEL_1_0"
    assert "SIZES_SYMBOLIC" in by_name["word_gather"].reason_codes

    # GatherElements: D = r = 3, Axis = 1. onnx names the broadcast of sequence and the Range length
    # unk__N: one size without a name from the model, shown as "?".
    reorder = by_name["reorder"].to_json()["operator"]["desc"]
    assert reorder["InputTensor"]["Sizes"] == ["batch", "?", HIDDEN]
    assert reorder["Axis"] == 1
    # ScatterND of updates [1, HIDDEN] at index [[0]] into [batch, HIDDEN]: D = 2, counts 2 and 2.
    scatter = by_name["mask_first"].to_json()["operator"]["desc"]
    assert scatter["InputTensor"]["Sizes"] == ["batch", HIDDEN]
    assert (scatter["InputDimensionCount"], scatter["IndicesDimensionCount"]) == (2, 2)

    # The Range output has a dimension no name describes: shown as "?".
    pos = by_name["pos_gather"].to_json()["operator"]["desc"]
    assert pos["IndicesTensor"]["Sizes"][-2:] == [1, "?"]

    # Shape -> Gather runs on the CPU under onnxruntime's DirectML provider (a shape computation).
    assert by_name["seq_len_gather"].ort_placement == "CPUExecutionProvider"


def test_bert_like_model_with_concrete_shapes_translates_exactly() -> None:
    mt = translate_model(bert_like_model(), input_shapes={"input_ids": (2, 3), "token_type_ids": (2, 3),
                                                          "order": (2, 3, HIDDEN)})  # fmt: skip
    word = {n.name: n for n in mt.nodes}["word_gather"]
    assert not word.symbolic
    assert word.operator is not None
    assert word.operator.output_tensor.sizes == (2, 3, HIDDEN)


def test_feature_levels_decided_from_ranks() -> None:
    # Below FL 3_0 every tensor has exactly 4 dimensions and indices are UINT32 (facts §3).
    mt = translate_model(bert_like_model(), FeatureLevel.FL_2_1)
    desc = {n.name: n for n in mt.nodes}["word_gather"].to_json()["operator"]["desc"]
    assert desc["OutputTensor"]["Sizes"] == [1, "batch", "sequence", HIDDEN]
    assert desc["IndicesTensor"]["DataType"] == "DML_TENSOR_DATA_TYPE_UINT32"


def test_unknown_rank_is_still_shape_unknown() -> None:
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, None), helper.make_tensor_value_info("i", T.INT64, [2])],
        [onnx.ValueInfoProto(name="y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    (t,) = translate_model(model).nodes
    assert t.reason_codes[0] == "SHAPE_UNKNOWN"


def test_placeholders() -> None:
    batch, other = placeholder_shape(("batch", None), 0)
    assert isinstance(batch, SymDim) and batch.name == "batch" and describe(other) == "?"
    assert placeholder_shape(("batch",), 3)[0] == batch  # one placeholder per name
    assert describe(batch * 768) == "768*batch" and describe(12) == 12
    assert not differ(batch, 5) and differ(4, 5) and not differ(batch, batch)


def test_placeholder_primality_is_exact() -> None:
    from dmlshim.dml.symbolic import _is_prime

    # The first primes above 10^9 (published tables of primes), then every n in a window checked
    # against plain trial division, and Carmichael numbers and strong pseudoprimes to base 2.
    known = [1000000007, 1000000009, 1000000021, 1000000033, 1000000087, 1000000093, 1000000097, 1000000103]
    assert [n for n in range(1000000000, 1000000104) if _is_prime(n)] == known

    def trial(n: int) -> bool:
        return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))

    assert all(_is_prime(n) == trial(n) for n in range(0, 3000))
    assert all(_is_prime(n) == trial(n) for n in range(1_000_150_000, 1_000_150_400))
    for composite in (561, 1105, 1729, 2047, 3277, 4033, 25326001, 3215031751, 2152302898747):
        assert not _is_prime(composite), composite
    assert _is_prime(2**61 - 1) and not _is_prime((2**61 - 1) * 3)
