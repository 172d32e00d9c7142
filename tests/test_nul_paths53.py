"""Paths holding a NUL character (issue 35's leftovers). onnxruntime hands a path to the system as a C
string, cut at the first NUL: it reads ``m.onnx`` for ``"m.onnx\\0junk"`` (1.24.4 and 1.32), and writes
``opt.onnx`` for ``optimized_model_filepath="opt.onnx\\0junk"`` and a file ``p`` for
``profile_file_prefix="p\\0q"``, replacing a file of that name. dmlshim reads a model path as onnxruntime
does, and refuses every path it writes that holds a NUL before anything is written. Each case asks
onnxruntime (CPU) in the same test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dmlshim
from dmlshim.cli.main import main
from dmlshim.errors import BadInputError

from .test_hostile52_files import FEED
from .test_hostile52_files import _model as _inline_model

USERS = "the user's file"


def _model(folder: Path, *, external: bool = False) -> Path:
    """``folder/m.onnx``: z = Relu(Gather(w[64, 4], i)), its weight inline or moved to ``w.bin``."""
    path = _inline_model(folder)
    if external:
        onnx.save(onnx.load(str(path)), path, save_as_external_data=True, location="w.bin", size_threshold=0)
    return path


def _ort(path: str, so: ort.SessionOptions | None = None) -> ort.InferenceSession:
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu"])
@pytest.mark.parametrize("external", [False, True], ids=["inline", "external-data"])
def test_a_model_path_is_read_up_to_its_nul_as_onnxruntime_reads_it(
    tmp_path: Path, engine: str, external: bool
) -> None:
    model = _model(tmp_path, external=external)
    path = f"{model}\x00junk"
    expected = _ort(path).run(None, FEED)[0]  # onnxruntime reads m.onnx
    session = dmlshim.InferenceSession(path, engine=engine)
    np.testing.assert_array_equal(session.run(None, FEED)[0], expected)
    assert [i.name for i in session.get_inputs()] == [i.name for i in _ort(path).get_inputs()]


def test_a_missing_prefix_is_missing_in_both(tmp_path: Path) -> None:
    _model(tmp_path)
    path = f"{tmp_path / 'absent'}\x00{tmp_path / 'm.onnx'}"
    with pytest.raises(Exception, match="NO_SUCHFILE"):
        _ort(path)
    with pytest.raises(dmlshim.DmlShimError, match="not found") as got:
        dmlshim.InferenceSession(path)
    assert "m.onnx" not in str(got.value)  # the file read is the prefix's, as onnxruntime's


def test_an_optimized_model_path_with_a_nul_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    model = _model(tmp_path)
    target = tmp_path / "opt.onnx"
    target.write_text(USERS)
    so = ort.SessionOptions()
    so.optimized_model_filepath = f"{target}\x00junk"
    _ort(str(model), so)
    assert target.read_bytes() != USERS.encode()  # onnxruntime replaced the file named by the cut path
    target.write_text(USERS)
    ours = dmlshim.SessionOptions()
    ours.optimized_model_filepath = f"{target}\x00junk"
    with pytest.raises(BadInputError, match="NUL") as got:
        dmlshim.InferenceSession(str(model), ours)
    assert "opt.onnx" in str(got.value)
    assert target.read_text() == USERS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "opt.onnx"]


def test_a_profile_prefix_with_a_nul_is_refused_when_the_session_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    model = _model(tmp_path)
    (tmp_path / "p").write_text(USERS)
    so = ort.SessionOptions()
    so.enable_profiling, so.profile_file_prefix = True, "p\x00q"
    session = _ort(str(model), so)
    session.run(None, FEED)
    assert session.end_profiling().startswith("p\x00q_")
    assert (tmp_path / "p").read_bytes() != USERS.encode()  # onnxruntime wrote its profile over the file "p"
    (tmp_path / "p").write_text(USERS)
    ours = dmlshim.SessionOptions()
    ours.enable_profiling, ours.profile_file_prefix = True, "p\x00q"
    with pytest.raises(BadInputError, match=r"profile_file_prefix.*NUL"):
        dmlshim.InferenceSession(str(model), ours)
    assert (tmp_path / "p").read_text() == USERS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "p"]


def test_a_summary_file_with_a_nul_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s").write_text(USERS)
    with pytest.raises(BadInputError, match="NUL"):
        dmlshim.install(summary_file=f"{tmp_path / 's'}\x00.json")
    assert not dmlshim.ort.installed()
    assert (tmp_path / "s").read_text() == USERS


def test_the_cli_reads_a_model_path_up_to_its_nul(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    model = _model(tmp_path)
    np.savez(tmp_path / "in.npz", **FEED)
    expected = _ort(f"{model}\x00junk").run(None, FEED)[0]
    assert main(["run", "m.onnx\x00junk", "--inputs", "in.npz", "-o", "out.npz"]) == 0
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_array_equal(got["z"], expected)
    # the file read is the one an output may not replace
    before = model.read_bytes()
    assert main(["lower", "m.onnx\x00junk", "-o", "m.onnx", "--overwrite"]) == 2
    assert model.read_bytes() == before


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "m.onnx", "-o", "o\x00.npz"],
        ["lower", "m.onnx", "-o", "o\x00.onnx"],
        ["export", "m.onnx", "-o", "o\x00"],
        ["validate", "m.onnx", "--save-outputs", "o\x00.npz"],
    ],
    ids=["run", "lower", "export", "validate"],
)
def test_the_cli_refuses_an_output_path_with_a_nul(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    (tmp_path / "o").write_text(USERS)
    try:
        code = main(argv)
    except SystemExit as exc:  # refused by the argument parser
        code = int(exc.code or 0)
    assert code == 2
    assert "NUL" in capsys.readouterr().err
    assert (tmp_path / "o").read_text() == USERS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o"]
