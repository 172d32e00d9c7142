"""onnxruntime-directml's failure on an intermediate value whose declared ``value_info`` shape a run
contradicts (``EP_FAILS_OUTPUT_CONTRADICTING_DECLARED_SHAPE``, docs/directml-linux.md's variants table).

``x`` (declared ``[n, 2]``, fed ``[3, 2]``) -> Relu -> ``t`` declared in ``value_info`` -> Neg -> ``y``.
Real DirectML fails the first run at the node computing ``t`` on DirectML when onnx's inference leaves the
declaration standing (``[1, 2]``, ``[1, m]``, ``[6]`` over an ``x`` of no shape), and in ``MemcpyFromHost``
when a CPU node (ScatterND at opset 18) computes ``t`` and a DirectML node reads it; it runs when inference
overrules the declaration (``[1, 5]``, ``[6]`` over ``x: [n, 2]``), when it fits, and when only CPU nodes
touch ``t``. ``directml sweep`` predicts exactly the failing forms from onnxruntime CPU's run of a copy that
outputs ``t``. The same holds for an If's branch output (the held-out GATConv export's stale rank,
``tests/test_ep_stale_output_rank.py``'s model): the branch that ran (the condition's value, from onnxruntime
CPU) is held to its declarations. Shapes come from onnxruntime CPU; the real DirectML tests are skipped
without the stack.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import InferenceSession
from dmlshim.directml.stack import stack_available
from dmlshim.directml.sweep import cpu_values, declared_shape_findings
from dmlshim.errors import DmlShimError
from dmlshim.translate import CPU_PROVIDER
from dmlshim.translate.ep_declared_shapes import EP_DECLARED_SHAPE_REFUSAL, DeclaredOutputs
from tests.directml_sweeps import sweep_built
from tests.oracle import IR_VERSION, ort_run
from tests.test_ep_stale_output_rank import FEEDS as IF_FEEDS
from tests.test_ep_stale_output_rank import _model as if_model

CODE = EP_DECLARED_SHAPE_REFUSAL.code
F = TensorProto.FLOAT
X = np.array([[1, -2], [3, -4], [-5, 6]], dtype=np.float32)  # 3 rows

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)

_IDX = numpy_helper.from_array(np.array([[0]], np.int64), "idx")
_UPD = numpy_helper.from_array(np.array([[9, 9]], np.float32), "upd")


def _relu() -> onnx.NodeProto:
    return helper.make_node("Relu", ["x"], ["t"], name="relu")


def _scatter() -> onnx.NodeProto:
    return helper.make_node("ScatterND", ["x", "idx", "upd"], ["t"], name="scatter")


def _neg() -> onnx.NodeProto:
    return helper.make_node("Neg", ["t"], ["y"], name="neg")


def _scaler() -> onnx.NodeProto:
    return helper.make_node(
        "Scaler", ["t"], ["y"], name="scaler", domain="ai.onnx.ml", offset=[0.0, 0.0], scale=[2.0, 2.0]
    )


def _model(
    first: onnx.NodeProto,
    second: onnx.NodeProto,
    t_declared: list[int | str],
    x_dims: list[int | str] | None = None,
    *,
    y_declared: list[int | str] | None = None,
    opset: int = 18,
    unshaped: bool = False,
) -> onnx.ModelProto:
    x_dims = None if unshaped else (x_dims or ["n", 2])
    inits = [_IDX, _UPD] if first.op_type == "ScatterND" else []
    graph = helper.make_graph(
        [first, second], "declared_value", [helper.make_tensor_value_info("x", F, x_dims)],
        [helper.make_tensor_value_info("y", F, y_declared)], inits,
        value_info=[helper.make_tensor_value_info("t", F, t_declared)],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", opset)]
    if second.domain:
        opsets.append(helper.make_opsetid(second.domain, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


# name -> (model, onnxruntime's CPU nodes, the node real DirectML fails at, or "" when it runs)
FORMS: dict[str, tuple[onnx.ModelProto, dict[str, str], str]] = {
    "t_1_2": (_model(_relu(), _neg(), [1, 2], y_declared=["n", 2]), {}, "relu"),
    "t_1_2_y_undeclared": (_model(_relu(), _neg(), [1, 2]), {}, "relu"),
    "t_1_m": (_model(_relu(), _neg(), [1, "m"]), {}, "relu"),
    "t_m_2": (_model(_relu(), _neg(), ["m", 2]), {}, ""),
    "t_fits_3_2": (_model(_relu(), _neg(), [3, 2]), {}, ""),
    "t_inference_overrules_1_5": (_model(_relu(), _neg(), [1, 5]), {}, ""),
    "t_rank_6_unshaped_x": (_model(_relu(), _neg(), [6], unshaped=True), {}, "relu"),
    "t_rank_6_inference_knows_rank": (_model(_relu(), _neg(), [6]), {}, ""),
    "t_by_dml_scatternd_opset13": (_model(_scatter(), _neg(), [1, 2], opset=13), {}, "scatter"),
    "t_by_cpu_scatternd_read_on_dml": (
        _model(_scatter(), _neg(), [1, 2]),
        {"scatter": CPU_PROVIDER},
        "Memcpy",
    ),
    "t_read_only_by_cpu_scaler": (_model(_relu(), _scaler(), [1, 2]), {}, "relu"),
    "t_only_cpu_nodes": (_model(_scatter(), _scaler(), [1, 2]), {"scatter": CPU_PROVIDER}, ""),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_prediction_from_onnxruntime_cpu_shapes(form: str) -> None:
    model, cpu_nodes, fails_at = FORMS[form]
    reference = ort_run(model, {"x": X})[0]  # onnxruntime CPU runs every form
    declared = DeclaredOutputs(model)
    assert declared.values == ("t",)
    shapes = {n: v.shape for n, v in cpu_values(model, {"x": X}, declared.values).items()}
    assert shapes == {"t": reference.shape}  # Relu, ScatterND and Neg/Scaler keep x's shape
    found = declared.contradictions(shapes, cpu_nodes, from_log=True)
    assert len(found) == (1 if fails_at else 0), found
    if fails_at:
        message = found[0].message()
        producer = model.graph.node[0]
        assert f"value 't' of node {producer.name!r} ({producer.op_type}) is declared" in message
        assert f"in value_info but this run gives {list(reference.shape)}" in message and CODE in message
        assert ("MemcpyFromHost" in message) == (fails_at == "Memcpy")


def test_a_graph_output_is_not_taken_for_a_value() -> None:
    model = _model(_relu(), _neg(), [1, 2], y_declared=[1, 2])
    model.graph.value_info.append(helper.make_tensor_value_info("y", F, [1, 2]))
    assert DeclaredOutputs(model).values == ("t",)


@real
@pytest.mark.parametrize("form", list(FORMS))
def test_real_directml_fails_exactly_where_predicted(form: str, tmp_path: Path) -> None:
    model, _, fails_at = FORMS[form]
    result = sweep_built(model, {"x": X}, tmp_path, form)
    assert result.outcome == ("failed" if fails_at else "ran"), result.message
    assert (CODE in result.predicted_refusal) == bool(fails_at)
    if fails_at:
        assert "80070057" in result.message and f"Name:'{fails_at}'" in result.message
    else:
        assert result.vs_cpu is not None and result.vs_cpu.equal


@real
def test_directml_engine_error_names_the_value() -> None:
    model, _, _ = FORMS["t_1_2"]
    session = InferenceSession(model.SerializeToString(), engine="directml")
    with pytest.raises(DmlShimError, match=r"MLOperatorAuthorImpl\.cpp\(2853\).*80070057") as info:
        session.run(None, {"x": X})
    assert (
        "value 't' of node 'relu' (Relu) is declared [1, 2] in value_info but this run gives [3, 2]"
        in str(info.value)
    )


# name -> (model (x -> Relu -> h -> If(rank of h == 1), the else branch's `inner` declared), feeds, the
# node real DirectML fails at or "")
IF_FORMS: dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray], str]] = {
    "else_identity_rank_1": (if_model("Identity", ["d"], None), IF_FEEDS, "inner"),
    "else_relu_rank_1": (if_model("Relu", ["d"], None), IF_FEEDS, "inner"),
    "else_identity_1_m": (if_model("Identity", [1, "m"], None), IF_FEEDS, "inner"),
    "else_right_rank": (if_model("Identity", ["a", "b"], None), IF_FEEDS, ""),
    "else_undeclared": (if_model("Identity", None, None), IF_FEEDS, ""),
    "else_rank_known_by_inference": (if_model("Identity", ["d"], ["n", 2]), IF_FEEDS, ""),
    "then_branch_ran": (if_model("Identity", ["d"], None), {"x": IF_FEEDS["x"][0]}, ""),
}


@pytest.mark.parametrize("form", list(IF_FORMS))
def test_if_branch_prediction_from_onnxruntime_cpu(form: str) -> None:
    model, feeds, fails_at = IF_FORMS[form]
    reference = ort_run(model, feeds)  # onnxruntime CPU runs every form
    found = declared_shape_findings(model, ["y"], reference, feeds, {})
    assert len(found) == (1 if fails_at else 0), found
    if fails_at:
        message = found[0].message()
        assert "If 'if' else_branch output 'e_out' of node 'inner'" in message
        assert f"this run gives {list(reference[0].shape)}" in message
        else_branch = next(a.g for a in model.graph.node[-1].attribute if a.name == "else_branch")
        declared_rank = len(else_branch.output[0].type.tensor_type.shape.dim)
        assert ("(2844)" if declared_rank != reference[0].ndim else "(2853)") in message


@real
@pytest.mark.parametrize("form", list(IF_FORMS))
def test_real_directml_if_branch_fails_exactly_where_predicted(form: str, tmp_path: Path) -> None:
    model, feeds, fails_at = IF_FORMS[form]
    result = sweep_built(model, feeds, tmp_path, form)
    assert result.outcome == ("failed" if fails_at else "ran"), result.message
    assert (CODE in result.predicted_refusal) == bool(fails_at)
    if fails_at:
        assert "80070057" in result.message and f"Name:'{fails_at}'" in result.message
