"""The UTF-8 check of every string field (``check_well_formed``): its one-pass detection finds a bad field
wherever it is, and the refusal names that field."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim.errors import BadModelError
from dmlshim.model.wellformed import _any_bad_string, check_well_formed


def _model() -> onnx.ModelProto:
    then = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"], name="QQQQ")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["RRRR"])],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n"])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
            helper.make_node("Gather", ["y", "idx"], ["z"], name="AAAA", axis=0, doc_string="DDDD"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
        initializer=[helper.make_tensor("IIII", TensorProto.INT64, [2], [0, 1]),
                     helper.make_tensor("TTTT", TensorProto.FLOAT, [1], [0.0])],
    )  # fmt: skip
    graph.node[1].input[1] = "IIII"
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


@pytest.mark.parametrize(
    ("marker", "field"),
    [
        (b"AAAA", "model.graph.node[1].name"),
        (b"DDDD", "model.graph.node[1].doc_string"),
        (b"IIII", "model.graph.node[1].input"),  # nodes come first in the bytes: all occurrences damaged
        (b"QQQQ", "model.graph.node[0].attribute[1].g.node[0].name"),
        (b"TTTT", "model.graph.initializer[1].name"),  # a tensor: its raw bytes are not read
        (b"RRRR", "model.graph.node[0].attribute[1].g.output[0].type.tensor_type.shape.dim[0].dim_param"),
    ],
)
def test_bad_string_found_and_named(marker: bytes, field: str) -> None:
    payload = _model().SerializeToString()
    assert payload.count(marker) >= 1
    damaged = onnx.ModelProto.FromString(payload.replace(marker, b"\xff\xfe" + marker[2:]))
    assert _any_bad_string(damaged)
    with pytest.raises(BadModelError, match="UTF-8") as caught:
        check_well_formed(damaged)
    assert f"the field {field} is not valid UTF-8" in str(caught.value)


def test_clean_model_passes() -> None:
    model = _model()
    assert not _any_bad_string(model)
    check_well_formed(model)


def _with_weight(marker: str) -> onnx.ModelProto:
    """The model with a weight large enough to be left out of the weightless copy (64 KiB and more)."""
    model = _model()
    weight = helper.make_tensor(marker, TensorProto.FLOAT, [1, 20000], bytes(80000), raw=True)
    weight.doc_string = "WWWW"
    model.graph.initializer.append(weight)
    return model


@pytest.mark.parametrize(
    ("marker", "field"),
    [(b"HHHH", "model.graph.initializer[2].name"), (b"WWWW", "model.graph.initializer[2].doc_string")],
)
def test_bad_string_in_a_weight_found_and_named(marker: bytes, field: str) -> None:
    # The parser's check reads the weightless copy: the weights it leaves out are walked.
    damaged = onnx.ModelProto.FromString(
        _with_weight("HHHH").SerializeToString().replace(marker, b"\xff\xfe" + marker[2:])
    )
    with pytest.raises(BadModelError, match="UTF-8") as caught:
        check_well_formed(damaged)
    assert f"the field {field} is not valid UTF-8" in str(caught.value)
    check_well_formed(_with_weight("HHHH"))


@pytest.mark.parametrize(
    "spelled",
    [b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xc3\xa9", b"\xf0\x9f\x98\x80"],
)
def test_parser_and_python_agree_on_utf8(spelled: bytes) -> None:
    # Python's own decoder is the reference: a surrogate, an overlong form, a code point past U+10FFFF and
    # a cut sequence are bad; an accented letter and an emoji are fine.
    from dmlshim.model.utf8_parse import strings_valid

    try:
        spelled.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    payload = _model().SerializeToString().replace(b"AAAA", (spelled + b"AAAA")[:4])  # same length
    damaged = onnx.ModelProto.FromString(payload)
    assert (strings_valid(damaged) is not None) is valid
    assert _any_bad_string(damaged) is not valid
