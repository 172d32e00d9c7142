"""Issue 36, build cost, eighth pass: work a session build or ``inspect`` did not need, with the same answers.

- a session build of a model whose gathers read no constant indices imports neither inspect's whole-model
  translation nor the constant-index check; ``inspect`` imports neither the kernels nor the inputs package;
- the model check serializes a model that holds no weight to leave out once: the UTF-8 check's bytes are
  onnxruntime's acceptance payload (and still are the model's bytes);
- the engine asks whether the graph names a value like a shape output once per build;
- :func:`dmlshim.graph.subgraphs` gives the same pairs as a walk of the attributes.

Outputs are compared with onnxruntime CPU's own session of the same model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.execute.engines import partitioned
from dmlshim.execute.proofs import gather_given
from dmlshim.graph import GRAPH_ATTRIBUTE_TYPES, subgraphs
from dmlshim.model import modelcheck

PROVIDER = Path(dmlshim.__file__).resolve().parents[1]


def _gather_model(weight_elements: int = 12) -> onnx.ModelProto:
    data = numpy_helper.from_array(np.arange(weight_elements, dtype=np.float32).reshape(-1, 3), "data")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["data", "idx"], ["g"], name="gather", axis=0),
            helper.make_node("Relu", ["g"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [data],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _child(code: str, *args: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(PROVIDER)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


_BUILD = """
import json, sys
import numpy as np, onnxruntime as ort
import dmlshim
feeds = {"idx": np.array([2, 0], dtype=np.int64)}
ours = dmlshim.InferenceSession(sys.argv[1]).run(None, feeds)[0]
theirs = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"]).run(None, feeds)[0]
assert np.array_equal(ours, theirs)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("dmlshim."))))
"""

_INSPECT = """
import json, sys
from dmlshim.cli.main import main
code = main(["inspect", "-q", sys.argv[1]])
assert code == 0, code
print(json.dumps(sorted(m for m in sys.modules if m.startswith("dmlshim."))))
"""


def test_a_session_build_imports_no_whole_model_translation(tmp_path: Path) -> None:
    path = tmp_path / "gather.onnx"
    onnx.save(_gather_model(), str(path))
    loaded = set(_child(_BUILD, str(path)))
    assert "dmlshim.execute.engines.partitioned" in loaded  # the default engine built it
    for name in ("translate.model_translation", "translate.run_cases", "translate.constant_indices"):
        assert f"dmlshim.{name}" not in loaded


def test_inspect_imports_no_kernel_and_no_input_generation(tmp_path: Path) -> None:
    path = tmp_path / "gather.onnx"
    onnx.save(_gather_model(), str(path))
    loaded = set(_child(_INSPECT, str(path)))
    assert "dmlshim.translate.model_translation" in loaded  # inspect translated it
    assert not {m for m in loaded if m == "dmlshim.kernels" or m.startswith("dmlshim.kernels.")}
    assert "dmlshim.translate.runner" not in loaded
    assert not {m for m in loaded if m == "dmlshim.inputs" or m.startswith("dmlshim.inputs.")}


def test_the_runner_is_still_reachable_from_the_package() -> None:
    from dmlshim.translate import RunResult, run_translation
    from dmlshim.translate.runner import RunResult as direct_result
    from dmlshim.translate.runner import run_translation as direct

    assert run_translation is direct and RunResult is direct_result


@pytest.mark.parametrize(("elements", "shared"), [(12, True), (300_000, False)])
def test_the_acceptance_payload_is_the_utf8_checks_bytes(
    monkeypatch: pytest.MonkeyPatch, elements: int, shared: bool
) -> None:
    """A model without a weight to leave out: its bytes are made once and handed on; with one (a 1.2 MB
    weight), the acceptance session reads the weightless copy, serialized for it."""
    model = _gather_model(elements)
    seen: list[bytes | None] = []
    original = modelcheck.start_ort_acceptance

    def spy(light: onnx.ModelProto, *args: object, **kwargs: object) -> object:
        seen.append(kwargs.get("serialized"))  # type: ignore[arg-type]
        return original(light, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(modelcheck, "start_ort_acceptance", spy)
    modelcheck.check_model(model)()
    assert len(seen) == 1
    if shared:
        assert seen[0] == model.SerializeToString()
    else:
        assert seen[0] is None


def test_a_refused_model_is_still_refused_with_onnxruntimes_words() -> None:
    model = _gather_model()
    model.graph.node[1].op_type = "NoSuchOp"
    with pytest.raises(dmlshim.DmlShimError) as ours:
        modelcheck.check_model(model)()
    with pytest.raises(Exception) as theirs:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert "NoSuchOp" in str(ours.value) and "NoSuchOp" in str(theirs.value)


def test_the_engine_asks_for_a_shape_output_clash_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The lean gathers and the lean session both ask it (twice before this pass)."""
    calls: list[int] = []
    original = gather_given.shape_outputs_clash

    def counted(graph: onnx.GraphProto) -> bool:
        calls.append(1)
        return original(graph)

    monkeypatch.setattr(partitioned, "shape_outputs_clash", counted)
    monkeypatch.setattr(gather_given, "shape_outputs_clash", counted)
    path = tmp_path / "gather.onnx"
    onnx.save(_gather_model(), str(path))
    feeds = {"idx": np.array([1, 3], dtype=np.int64)}
    ours = dmlshim.InferenceSession(str(path)).run(None, feeds)[0]
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(ours, theirs)
    assert len(calls) == 1


def _walked(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """The reference: every graph attribute's graphs, in attribute order."""
    found = []
    for attr in node.attribute:
        if attr.type not in GRAPH_ATTRIBUTE_TYPES:
            continue
        if attr.HasField("g"):
            found.append((attr.name, attr.g))
        found.extend((attr.name, g) for g in attr.graphs)
    return found


def test_subgraphs_gives_the_attribute_walks_pairs() -> None:
    body = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "body", [], [])
    nodes = [
        helper.make_node("Add", ["x", "y"], ["z"]),
        helper.make_node("Gather", ["x", "i"], ["z"], axis=1),
        helper.make_node("If", ["c"], ["z"], then_branch=body, else_branch=body),
        helper.make_node("Loop", ["m", "c"], ["z"], body=body, axis=0),
    ]
    for node in nodes:
        assert list(subgraphs(node)) == _walked(node)
        assert next(subgraphs(node), None) == next(iter(_walked(node)), None)
    assert [name for name, _ in subgraphs(nodes[2])] == ["else_branch", "then_branch"]
    assert list(subgraphs(nodes[0])) == [] and list(subgraphs(nodes[0])) == []  # the shared empty answer
