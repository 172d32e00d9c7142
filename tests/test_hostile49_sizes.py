"""Hostile round 49: the memory limit at the shapes a command runs with (``inputs/sizes.py``).

A Gather of a small table by twenty million indices (160 MB of indices, within a 200 MB limit) makes a
320 MB output. Before this round ``dmlshim export`` wrote it (2.5 GB peak, a 458 MB folder) under
``DMLSHIM_MEMORY_LIMIT=200000000``, and ``run`` refused it only after onnxruntime's whole-model run had
allocated it (905 MB peak). Each command now sizes every value at its inputs' shapes (generated or read
from ``--inputs``) before the first run, and refuses naming the node, op, value and size. Under the
limit the same commands still give onnxruntime's values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.oracle import ort_run
from tests.safety_helpers import run_child

LIMIT = 200_000_000
ROWS = 20_000_000  # indices: 160 MB (fit); the gather's output: 320 MB (does not)


def _gather_model() -> onnx.ModelProto:
    table = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(6, 4), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["w", "idx"], ["g"], name="g1"),
            helper.make_node("Relu", ["g"], ["out"], name="r"),
        ],
        "g",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["K"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [table],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sizes49")
    onnx.save(_gather_model(), folder / "g.onnx")
    np.savez(folder / "big.npz", idx=np.zeros(ROWS, np.int64))
    np.savez(folder / "small.npz", idx=np.array([5, 0, 3], np.int64))
    return folder


_REFUSED = [
    ["run", "{m}", "--input-shape", f"K={ROWS}"],
    ["run", "{m}", "--input-shape", f"idx={ROWS}", "-o", "{d}/out.npz"],
    ["validate", "{m}", "--input-shape", f"K={ROWS}"],
    ["export", "{m}", "--input-shape", f"K={ROWS}", "-o", "{d}/ex"],
    ["run", "{m}", "--inputs", "{d}/big.npz"],
    ["validate", "{m}", "--inputs", "{d}/big.npz"],
    ["export", "{m}", "--inputs", "{d}/big.npz", "-o", "{d}/ex"],
]


@pytest.mark.parametrize("argv", _REFUSED, ids=[" ".join(a[:1] + a[2:4]) for a in _REFUSED])
def test_a_value_the_input_shapes_make_too_large_is_refused_first(argv: list[str], files: Path) -> None:
    args = [a.format(m=files / "g.onnx", d=files) for a in argv]
    result = run_child([*args, "-q"], env={"DMLSHIM_MEMORY_LIMIT": str(LIMIT)})
    assert result.returncode == 2, result.stderr
    assert "node 'g1', op Gather, tensor g" in result.stderr, result.stderr
    assert "[20000000, 4]" in result.stderr and "DMLSHIM_MEMORY_LIMIT" in result.stderr
    assert "Traceback" not in result.stderr
    # the indices (160 MB) are the only large allocation: the output is never made
    assert result.peak_rss < LIMIT + 300 * 2**20 + 160_000_000, result.peak_rss
    assert not (files / "ex").exists() and not (files / "out.npz").exists()


def test_under_the_limit_run_gives_onnxruntimes_values(files: Path) -> None:
    out = files / "small_out.npz"
    result = run_child(
        ["run", str(files / "g.onnx"), "--inputs", str(files / "small.npz"), "-o", str(out), "-q"],
        env={"DMLSHIM_MEMORY_LIMIT": str(LIMIT)},
    )
    assert result.returncode == 0, result.stderr
    expected = ort_run(_gather_model(), {"idx": np.array([5, 0, 3], np.int64)})
    np.testing.assert_array_equal(np.load(out)["out"], expected[0])


def test_a_stale_declared_shape_is_not_the_size(files: Path, tmp_path: Path) -> None:
    """A ``value_info`` claiming the gather makes ``[10^10, 4]`` is the model's word, not onnxruntime's:
    the sizes are inferred without it, and the run goes on."""
    model = _gather_model()
    model.graph.value_info.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [10**10, 4]))
    onnx.save(model, tmp_path / "stale.onnx")
    result = run_child(
        ["run", str(tmp_path / "stale.onnx"), "--inputs", str(files / "small.npz"), "-q"],
        env={"DMLSHIM_MEMORY_LIMIT": str(LIMIT)},
    )
    assert result.returncode == 0, result.stderr


def _stale_then_huge() -> onnx.ModelProto:
    """The stale model, plus a ConstantOfShape of constants no machine holds (inference finds it too)."""
    model = _gather_model()
    model.graph.value_info.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [10**10, 4]))
    model.graph.initializer.append(numpy_helper.from_array(np.array([10**10], np.int64), "n"))
    model.graph.node.append(helper.make_node("ConstantOfShape", ["n"], ["big"], name="huge"))
    model.graph.output.append(helper.make_tensor_value_info("big", TensorProto.FLOAT, None))
    return model


@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
def test_a_value_computed_from_a_stale_declaration_is_not_refused(engine: str) -> None:
    """Before this round every engine refused the stale model at session creation, even without a limit
    set ("output 'out' of shape [10000000000, 4] ... 149.01 GiB"): the declared ``g`` flowed into the
    Relu after it, and only a refused value that is itself declared was sized again. onnxruntime runs it."""
    import dmlshim

    model = _gather_model()
    model.graph.value_info.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [10**10, 4]))
    feeds = {"idx": np.array([1, -6], np.int64)}
    session = dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
    for _ in range(4):
        np.testing.assert_array_equal(session.run(None, feeds)[0], ort_run(model, feeds, quiet=True)[0])


@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
def test_a_value_inference_sizes_without_the_declaration_is_still_refused(engine: str) -> None:
    import dmlshim
    from dmlshim.errors import TooLargeError

    with pytest.raises(TooLargeError, match="'big'"):
        dmlshim.InferenceSession(_stale_then_huge().SerializeToString(), engine=engine)


def test_lower_keeps_a_limit_below_the_model_file(tmp_path: Path) -> None:
    """``lower`` read the model whole (it writes the weights out again): a 160 MB file of inline weights
    under a 100 MB limit took it 1.5 GB (3.4 GB when the weights were a Constant node's) and went on; then
    it was refused before reading. It now reads the model without its weights and copies them to the
    lowered file a chunk at a time: under the limit it lowers the model, in either form, and its peak stays
    far below the weights' size."""
    table = numpy_helper.from_array(np.ones((160_000, 256), np.float32), "w")
    for form in ("initializer", "constant"):
        model = _gather_model()
        if form == "initializer":
            model.graph.initializer[0].CopyFrom(table)
        else:
            name = model.graph.initializer[0].name
            del model.graph.initializer[:]
            model.graph.node.insert(0, onnx.helper.make_node("Constant", [], [name], value=table))
        onnx.save(model, tmp_path / "big.onnx")
        low = tmp_path / "low.onnx"
        low.unlink(missing_ok=True)
        result = run_child(
            ["lower", str(tmp_path / "big.onnx"), "-o", str(low), "-q"],
            env={"DMLSHIM_MEMORY_LIMIT": "100000000"},
        )
        assert result.returncode == 0, (form, result.stderr)
        assert result.peak_rss < 300 * 2**20, (form, result.peak_rss)
        written = onnx.load(str(low))
        weights = [t for t in written.graph.initializer if tuple(t.dims)[-1:] == (256,)]
        assert weights and np.array_equal(
            onnx.numpy_helper.to_array(weights[0]).reshape(-1, 256)[-1], np.ones(256)
        )
