"""No command or session option replaces a file the model reads: the model, its external-data files (by
identity, through links), ``--inputs``, ``--reference-outputs``, replay's ``sourcePath`` arrays; the same
for ``optimized_model_filepath`` and its external-initializers file, and for profile files."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dmlshim
from dmlshim.errors import BadInputError
from tests.fuzz_settings import assert_cli_error, run_cli
from tests.test_initializer_overrides import feeds, override_model
from tests.test_replay import gather_elements_model


@pytest.fixture
def external(tmp_path: Path) -> Path:
    """A model whose weights are in ``w.bin`` beside it, a link ``link.bin`` to that file, and inputs."""
    path = tmp_path / "m.onnx"
    onnx.save(
        override_model(),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.bin",
        size_threshold=0,
    )
    (tmp_path / "link.bin").symlink_to("w.bin")
    np.savez(tmp_path / "in.npz", **feeds())
    return path


def _unchanged(folder: Path, before: bytes) -> None:
    assert (folder / "w.bin").read_bytes() == before
    session = ort.InferenceSession(str(folder / "m.onnx"), providers=["CPUExecutionProvider"])
    session.run(None, feeds())  # the model still loads with its own weights


@pytest.mark.parametrize("target", ["w.bin", "link.bin"])
@pytest.mark.parametrize(
    "command",
    [
        ["run", "{m}", "--inputs", "{d}/in.npz", "-o", "{t}", "--overwrite"],
        ["validate", "{m}", "--save-outputs", "{t}", "--overwrite"],
        ["validate", "{m}", "--inputs", "{d}/in.npz", "--save-inputs", "{t}", "--overwrite"],
        ["lower", "{m}", "-o", "{t}", "--overwrite"],
    ],
    ids=["run", "validate-outputs", "validate-inputs", "lower"],
)
def test_commands_refuse_the_external_data(external: Path, command: list[str], target: str) -> None:
    folder = external.parent
    before = (folder / "w.bin").read_bytes()
    argv = [a.format(m=external, d=folder, t=folder / target) for a in command]
    result = run_cli(*argv)
    assert_cli_error(result.code, result.err, "w.bin", "external data of the input model", "refusing")
    _unchanged(folder, before)


def test_validate_refuses_its_reference_outputs(external: Path) -> None:
    folder = external.parent
    reference = folder / "ref.npz"
    ort_out = ort.InferenceSession(str(external), providers=["CPUExecutionProvider"]).run(None, feeds())
    np.savez(reference, y=ort_out[0], z=ort_out[1])
    before = reference.read_bytes()
    result = run_cli(
        "validate", external, "--inputs", folder / "in.npz", "--reference-outputs", reference,
        "--save-outputs", reference, "--overwrite",
    )  # fmt: skip
    assert_cli_error(result.code, result.err, "ref.npz", "refusing to replace an input")
    assert reference.read_bytes() == before


@pytest.mark.parametrize("target", ["w.bin", "link.bin", "m.onnx"])
def test_optimized_model_filepath_refuses_the_models_files(external: Path, target: str) -> None:
    folder = external.parent
    before = (folder / "w.bin").read_bytes()
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(folder / target)
    with pytest.raises(BadInputError, match="refusing to replace an input"):
        dmlshim.InferenceSession(str(external), so)
    _unchanged(folder, before)


def test_optimized_model_weights_file_refuses_the_models_data(external: Path, tmp_path: Path) -> None:
    before = (tmp_path / "w.bin").read_bytes()
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "w.bin")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1")
    with pytest.raises(BadInputError, match=r"w\.bin"):
        dmlshim.InferenceSession(str(external), so)
    _unchanged(tmp_path, before)


def test_optimized_model_external_initializers_as_onnxruntime_writes_them(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(override_model(rows=512), str(model))

    def optimize(module: Any, folder: Path) -> list[np.ndarray]:
        folder.mkdir()
        so = ort.SessionOptions()
        so.optimized_model_filepath = str(folder / "opt.onnx")
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "opt.data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "64")
        module.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        assert sorted(os.listdir(folder)) == ["opt.data", "opt.onnx"]
        loaded = ort.InferenceSession(str(folder / "opt.onnx"), providers=["CPUExecutionProvider"])
        return [np.asarray(o) for o in loaded.run(None, feeds(512))]

    theirs = optimize(ort, tmp_path / "ort")
    ours = optimize(dmlshim, tmp_path / "dmlshim")
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)
    # The weights went to the data file, not into the model.
    assert (tmp_path / "dmlshim" / "opt.onnx").stat().st_size < (
        tmp_path / "dmlshim" / "opt.data"
    ).stat().st_size


def test_replay_refuses_to_write_over_a_source_array(tmp_path: Path) -> None:
    doc = gather_elements_model()
    np.save(tmp_path / "x.npy", np.arange(1, 10, dtype=np.float32))
    doc["resources"]["input"] = {"initialValues": {"sourcePath": "x.npy"}}
    doc["commands"][-1]["targetPath"] = "x.npy"
    (tmp_path / "model.json").write_text(json.dumps(doc))
    before = (tmp_path / "x.npy").read_bytes()
    result = run_cli("replay", tmp_path / "model.json", "--output-path", tmp_path)
    assert_cli_error(result.code, result.err, "x.npy", "refusing to replace an input")
    assert (tmp_path / "x.npy").read_bytes() == before


def test_end_profiling_hands_the_name_out_once(tmp_path: Path) -> None:
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "profile")
    session = dmlshim.InferenceSession(override_model().SerializeToString(), so)
    session.run(None, feeds())
    names: list[str] = []
    barrier = threading.Barrier(8)

    def end() -> None:
        barrier.wait()
        names.append(session.end_profiling())

    threads = [threading.Thread(target=end) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    written = [n for n in names if n]
    assert len(names) == 8 and len(written) == 1
    assert isinstance(json.loads(Path(written[0]).read_text()), list)
