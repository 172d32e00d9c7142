"""Descriptors replayed on DirectML.dll itself (the replay host under Wine): skipped without the stack.

The expected values come from outside dmlshim: the DirectML reference pages' worked examples (typed in
tests/test_seeds.py), and DirectML's own answer for what dmlshim exports (a node folder's expected output
is dmlshim's; real DirectML must give the same bytes). Set the stack up with ``dmlshim directml setup``
(it writes ``<cache>/directml/stack.json``), or name a stack.json with ``$DMLSHIM_DIRECTML_STACK``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from dmlshim.cli.main import main
from dmlshim.dml.enums import DataType
from dmlshim.dml.operators import GatherElementsDesc
from dmlshim.dml.tensor import BufferTensorDesc
from dmlshim.dxdispatch import single_operator_model
from dmlshim.dxdispatch.host_stack import StackMissingError, default_stack_path, load_stack
from dmlshim.dxdispatch.real_replay import DirectMLReplay, replay_folders
from dmlshim.errors import BadInputError
from tests.test_seeds import SEED_CASES, SEEDS

REPO = Path(__file__).resolve().parent.parent

try:
    STACK = load_stack()
    _WHY = ""
except StackMissingError:
    STACK = None
    _WHY = f"real DirectML is not set up here (no {default_stack_path()}; run `dmlshim directml setup`)"
except BadInputError as exc:  # a stack.json naming files that are gone: set it up again
    STACK = None
    _WHY = f"the real-DirectML stack is unusable: {exc.message}"

pytestmark = pytest.mark.skipif(STACK is None, reason=_WHY)


def _refused_descriptor_model() -> object:
    # GATHER_ELEMENTS with IndicesTensor narrower than InputTensor on a non-axis dimension and no Strides:
    # DirectML requires equal sizes off the axis (dmlshim describes such nodes with a strided window).
    desc = GatherElementsDesc(
        BufferTensorDesc(DataType.FLOAT32, (3, 4)),
        BufferTensorDesc(DataType.INT32, (2, 2)),
        BufferTensorDesc(DataType.FLOAT32, (2, 2)),
        axis=0,
    )
    inputs = {
        "InputTensor": np.arange(12, dtype=np.float32).reshape(3, 4),
        "IndicesTensor": np.zeros((2, 2), np.int32),
    }
    return single_operator_model(desc, inputs, dispatchable="op", output_file="dml_output.npy")


@pytest.fixture(scope="module")
def seeds_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DirectMLReplay, dict[str, Path]]:
    """Every seed example and one descriptor DirectML must refuse, in one host process."""
    root = tmp_path_factory.mktemp("seeds")
    folders = {}
    for seed in SEED_CASES:
        folders[seed.name] = root / seed.name
        shutil.copytree(SEEDS / seed.name, folders[seed.name])
    refused = root / "refused"
    refused.mkdir()
    _refused_descriptor_model().save(refused / "model.json")  # type: ignore[attr-defined]
    folders["refused"] = refused
    return replay_folders(list(folders.values()), stack=STACK), folders


@pytest.mark.parametrize("seed", SEED_CASES, ids=lambda s: s.name)
def test_seed_example_on_directml(seed: object, seeds_run: tuple[DirectMLReplay, dict[str, Path]]) -> None:
    replay, folders = seeds_run
    assert replay.device.directml_version, replay.device.lines
    node = next(n for n in replay.nodes if n.folder == folders[seed.name])  # type: ignore[attr-defined]
    assert node.result.ok, node.result.describe()
    written = np.load(folders[seed.name] / "output.npy")  # type: ignore[attr-defined]
    expected = seed.expected  # type: ignore[attr-defined]
    if seed.duplicates:  # type: ignore[attr-defined]
        # index 3 is written by updates 5 and 7: DirectML does not say which write wins
        assert written[3] in (5, 7)
        np.testing.assert_array_equal(np.delete(written, 3), np.delete(expected, 3))
    else:
        np.testing.assert_array_equal(written, expected)


def test_directml_refuses_what_dmlshim_refuses(seeds_run: tuple[DirectMLReplay, dict[str, Path]]) -> None:
    replay, folders = seeds_run
    node = next(n for n in replay.nodes if n.folder == folders["refused"])
    assert node.result.status == "error"
    assert node.result.stage == "create_operator"
    assert node.result.hresult == 0x80070057  # E_INVALIDARG
    # and dmlshim's own replay refuses the same descriptor
    assert (
        main(["replay", str(folders["refused"] / "model.json"), "-o", str(folders["refused"] / "ours")]) == 2
    )


def test_shipped_model_export_replays_equal_on_directml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = REPO / "onnx_models" / "tiny_decoder_step.onnx"
    export = tmp_path / "export"
    inputs = REPO / "onnx_models" / "tiny_decoder_step.npz"
    assert main(["export", str(model), "--inputs", str(inputs), "-o", str(export), "-q"]) == 0
    capsys.readouterr()
    code = main(["compare", str(export), "--run-directml"])
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0, captured.out + captured.err  # the whole report when it fails (seen once in CI)
    assert "replayed on DirectML" in out, out
    assert "5 match, 0 mismatch, 0 missing of 5 node(s)" in out, out


def test_generated_sweep_sample_on_directml(tmp_path: Path) -> None:
    from dmlshim.dxdispatch.directml_sweep import FAIL, run_sweep
    from dmlshim.dxdispatch.sweep_cases import sweep_cases

    cases = sweep_cases()[::40]
    report = run_sweep(cases, tmp_path / "sweep", stack=STACK, with_ort=False)
    failed = [f"{o.case}: {o.detail}" for o in report.outcomes if o.verdict == FAIL]
    assert not failed, failed
    assert report.counts()["pass"] >= len(cases) // 2
