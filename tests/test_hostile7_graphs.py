"""Hostile pass h7 (issue 35), graph structure: hostile node names, duplicate names, outputs that are
inputs or initializers, odd opset imports, attributes of the wrong type, control flow around gathers.
Every case is asked of onnxruntime CPU (one thread, tests/oracle.py) in the test; dmlshim returns its
bits or refuses with its class (all found consistent in h7, kept so they stay so)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from .test_hostile7_models import ENGINES, _model, _same_as_onnxruntime, _vi

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
A = np.arange(12, dtype=np.float32).reshape(3, 4)
FEEDS = {"d": A, "i": np.array([2, -1])}
INPUTS = [_vi("d", F, [3, 4]), _vi("i", I64, [2])]


def _gather(name: str = "g", **kw: Any) -> bytes:
    return _model(
        [helper.make_node("Gather", ["d", "i"], ["o"], name=name)], INPUTS, [_vi("o", F, None)], **kw
    )


def _attr(mutate: Callable[[Any], None]) -> bytes:
    node = helper.make_node("Gather", ["d", "i"], ["o"], name="g")
    mutate(node)
    return _model([node], INPUTS, [_vi("o", F, None)])


def _raw_axis(node: Any) -> None:
    a = node.attribute.add()
    a.name, a.i = "axis", 1  # no type


def _axis_with_float(node: Any) -> None:
    a = node.attribute.add()
    a.name, a.type, a.i, a.f = "axis", AttributeProto.INT, 1, 2.0


_K = numpy_helper.from_array(np.array([1, 0], np.int64), "k")
_IF_THEN = helper.make_graph(
    [helper.make_node("Gather", ["d", "i"], ["t"], name="tg", axis=1)], "t", [], [_vi("t", F, None)]
)
_IF_ELSE = helper.make_graph(
    [helper.make_node("GatherElements", ["d", "j"], ["e"], name="eg")], "e", [], [_vi("e", F, None)]
)
_LOOP = helper.make_graph(
    [
        helper.make_node("Gather", ["acc", "i"], ["g2"], name="bg"),
        helper.make_node("Identity", ["c"], ["c2"]),
    ],
    "body",
    [_vi("it", I64, []), _vi("c", B, []), _vi("acc", F, None)],
    [_vi("c2", B, []), _vi("g2", F, None)],
)

CASES: dict[str, tuple[bytes, dict[str, Any]]] = {
    **{
        f"name_{k}": (_gather(n), FEEDS)
        for k, n in {
            "newline": "a\nb",
            "separators": "a/b\\c",
            "dotdot": "../../etc/passwd",
            "10k": "x" * 10240,
            "empty": "",
            "nul": "g\x00z",
            "bidi": "\u202e\u0645",
            "device": "con",
        }.items()
    },
    "duplicate_node_names": (
        _model(
            [
                helper.make_node("Gather", ["d", "i"], ["t"], name="g"),
                helper.make_node("Gather", ["t", "i"], ["o"], name="g"),
            ],
            INPUTS,
            [_vi("o", F, None)],
        ),
        FEEDS,
    ),
    "duplicate_value_writers": (
        _model(
            [
                helper.make_node("Gather", ["d", "i"], ["o"], name="a"),
                helper.make_node("Gather", ["d", "i"], ["o"], name="b"),
            ],
            INPUTS,
            [_vi("o", F, None)],
        ),
        FEEDS,
    ),
    "duplicate_graph_inputs": (
        _model(
            [helper.make_node("Gather", ["d", "i"], ["o"], name="g")],
            [*INPUTS, _vi("i", I64, [2])],
            [_vi("o", F, None)],
        ),
        FEEDS,
    ),
    "outputs_are_inputs": (
        _model(
            [helper.make_node("Gather", ["d", "i"], ["o"], name="g")],
            INPUTS,
            [_vi("i", I64, [2]), _vi("o", F, None), _vi("d", F, [3, 4])],
        ),
        FEEDS,
    ),
    "output_listed_twice": (
        _model(
            [helper.make_node("Gather", ["d", "i"], ["o"], name="g")],
            INPUTS,
            [_vi("o", F, None), _vi("o", F, None)],
        ),
        FEEDS,
    ),
    "output_is_initializer": (
        _model(
            [helper.make_node("Gather", ["d", "k"], ["o"], name="g")],
            INPUTS[:1],
            [_vi("o", F, None), _vi("k", I64, [2])],
            inits=(_K,),
        ),
        {"d": A},
    ),
    "output_is_fed_initializer": (
        _model(
            [helper.make_node("Gather", ["d", "k"], ["o"], name="g")],
            [INPUTS[0], _vi("k", I64, [2])],
            [_vi("o", F, None), _vi("k", I64, [2])],
            inits=(_K,),
        ),
        {"d": A, "k": np.array([2, 2])},
    ),
    "output_declared_wrong_type": (
        _model([helper.make_node("Gather", ["d", "i"], ["o"], name="g")], INPUTS, [_vi("o", I64, [2, 4])]),
        FEEDS,
    ),
    "output_declared_wrong_shape": (
        _model([helper.make_node("Gather", ["d", "i"], ["o"], name="g")], INPUTS, [_vi("o", F, [5, 5])]),
        FEEDS,
    ),
    "opset_1": (_gather(opsets=[helper.make_opsetid("", 1)]), FEEDS),
    "opset_99": (_gather(opsets=[helper.make_opsetid("", 99)]), FEEDS),
    "ml_domain_only": (_gather(opsets=[helper.make_opsetid("ai.onnx.ml", 3)]), FEEDS),
    "ai_onnx_spelled": (_gather(opsets=[helper.make_opsetid("ai.onnx", 18)]), FEEDS),
    "default_domain_twice": (
        _gather(opsets=[helper.make_opsetid("", 18), helper.make_opsetid("", 11)]),
        FEEDS,
    ),
    "no_opset": (_gather(opsets=[]), FEEDS),
    "axis_float": (_attr(lambda n: n.attribute.extend([helper.make_attribute("axis", 1.0)])), FEEDS),
    "axis_ints": (_attr(lambda n: n.attribute.extend([helper.make_attribute("axis", [1])])), FEEDS),
    "axis_twice": (_attr(lambda n: n.attribute.extend([helper.make_attribute("axis", 0)] * 2)), FEEDS),
    "axis_untyped": (_attr(_raw_axis), FEEDS),
    "axis_int_with_float_field": (_attr(_axis_with_float), FEEDS),
    "unknown_attribute": (_attr(lambda n: n.attribute.extend([helper.make_attribute("bogus", 3)])), FEEDS),
    **{
        f"if_{c}_{k}": (
            _model(
                [helper.make_node("If", ["c"], ["o"], name="if", then_branch=_IF_THEN, else_branch=_IF_ELSE)],
                [_vi("c", B, []), _vi("d", F, [3, 4]), _vi("i", I64, None), _vi("j", I64, None)],
                [_vi("o", F, None)],
            ),
            {"c": np.array(c), "d": A, "i": np.array([[i]]), "j": np.array([[j, 0, 1, -1]])},
        )
        for c in (True, False)
        for k, i, j in (("ok", -4, 2), ("out_of_range", 4, 3))
    },
    **{
        f"loop_{n}_{len(i)}_indices": (
            _model(
                [helper.make_node("Loop", ["n", "", "d"], ["o"], name="loop", body=_LOOP)],
                [_vi("n", I64, []), _vi("d", F, None), _vi("i", I64, None)],
                [_vi("o", F, None)],
            ),
            {"n": np.array(n), "d": A, "i": np.array(i)},
        )
        for n, i in ((0, [2, -1]), (3, [2, -1, 0]), (3, [2, -1, 2, 1]))
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("engine", ENGINES)
def test_hostile_graphs_follow_onnxruntime(case: str, engine: str) -> None:
    model, feeds = CASES[case]
    _same_as_onnxruntime(model, feeds, engine)
