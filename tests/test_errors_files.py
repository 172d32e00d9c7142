"""The careful writer (dmlshim.fileio.files, dmlshim.fileio.folders): atomic, inside the target, never through
a link, never over a non-regular file, umask-respecting modes, inputs never replaced; and the commands that
use it (run -o, lower -o, export -o)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import numpy as np
import onnx
import pytest

from dmlshim.errors import BadInputError
from dmlshim.fileio.confined import confined_path, write_inside
from dmlshim.fileio.files import (
    check_output_file,
    write_bytes,
    write_npy,
    write_text,
)
from dmlshim.fileio.folders import StagedFolder
from tests.fuzz_settings import assert_cli_error, run_cli

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "onnx_models" / "embedding_gather.onnx"
MODEL_INPUTS = REPO / "onnx_models" / "embedding_gather.npz"


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# --- single files -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_get_the_umask_mode(tmp_path: Path, mask: int, mode: int) -> None:
    old = os.umask(mask)
    try:
        path = write_bytes(tmp_path / "a.bin", b"x")
        sub = write_inside(tmp_path, "d/b.npy", lambda h: h.write(b"y"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert stat.S_IMODE(os.stat(sub).st_mode) == mode
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o777 & ~mask


def test_existing_file_needs_overwrite_and_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(BadInputError, match="--overwrite"):
        write_text(path, "new")
    assert path.read_text() == "old"
    write_text(path, "new", overwrite=True)
    assert path.read_text() == "new"
    assert _listing(tmp_path) == {"out.txt"}  # no temporary file left behind


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    from dmlshim.fileio.files import write_stream

    path = tmp_path / "out.bin"
    path.write_bytes(b"keep")

    def broken(handle) -> None:
        handle.write(b"partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(BadInputError, match="No space left"):
        write_stream(path, broken, overwrite=True)
    assert path.read_bytes() == b"keep"
    assert _listing(tmp_path) == {"out.bin"}


def test_symlink_is_replaced_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch")
    link = tmp_path / "link.txt"
    link.symlink_to(victim)
    with pytest.raises(BadInputError, match="--overwrite"):
        write_text(link, "new")
    write_text(link, "new", overwrite=True)
    assert victim.read_text() == "do not touch"
    assert not link.is_symlink() and link.read_text() == "new"
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to(tmp_path / "appears.txt")
    with pytest.raises(BadInputError, match="--overwrite"):
        write_text(dangling, "new")
    assert not (tmp_path / "appears.txt").exists()


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "dev-null"])
def test_non_regular_files_are_never_replaced(tmp_path: Path, kind: str) -> None:
    if kind == "dev-null":
        path = Path("/dev/null")
        # Only the check runs here: a regression must not be able to replace the machine's /dev/null.
        with pytest.raises(BadInputError, match="character device"):
            check_output_file(path, overwrite=True)
        assert stat.S_ISCHR(os.lstat(path).st_mode)
        return
    path = tmp_path / "target"
    sock = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    else:
        path.mkdir()
    before = os.lstat(path).st_mode
    try:
        with pytest.raises(BadInputError, match=r"directory|FIFO|socket"):
            write_bytes(path, b"x", overwrite=True)
    finally:
        if sock is not None:
            sock.close()
    assert stat.S_IFMT(os.lstat(path).st_mode) == stat.S_IFMT(before)
    assert _listing(tmp_path) == {"target"}


def test_run_output_fifo_refused_and_kept(tmp_path: Path) -> None:
    fifo = tmp_path / "out.npz"
    os.mkfifo(fifo)
    r = run_cli("run", MODEL, "--inputs", MODEL_INPUTS, "-o", fifo, "--overwrite")
    assert_cli_error(r.code, r.err, "FIFO", "regular files")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("how", ["symlink", "hardlink", "same"])
def test_lower_refuses_to_replace_its_input(tmp_path: Path, how: str) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(MODEL.read_bytes())
    alias = tmp_path / "alias.onnx"
    if how == "symlink":
        alias.symlink_to(model)
    elif how == "hardlink":
        os.link(model, alias)
    else:
        alias = model
    r = run_cli("lower", model, "-o", alias, "--overwrite")
    assert_cli_error(r.code, r.err, "input")
    assert model.read_bytes() == MODEL.read_bytes()


def test_lower_replaces_a_link_not_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim.onnx"
    victim.write_bytes(b"keep")
    link = tmp_path / "out.onnx"
    link.symlink_to(victim)
    r = run_cli("lower", MODEL, "-o", link)
    assert_cli_error(r.code, r.err, "--overwrite")
    r = run_cli("lower", MODEL, "-o", link, "--overwrite")
    assert r.code == 0, r.err
    assert victim.read_bytes() == b"keep" and not link.is_symlink()
    onnx.checker.check_model(onnx.load(link))
    dangling = tmp_path / "dangling.onnx"
    dangling.symlink_to(tmp_path / "appears.onnx")
    r = run_cli("lower", MODEL, "-o", dangling)
    assert_cli_error(r.code, r.err, "--overwrite")
    assert not (tmp_path / "appears.onnx").exists()


def test_run_refuses_to_replace_its_inputs(tmp_path: Path) -> None:
    inputs = tmp_path / "in.npz"
    inputs.write_bytes(MODEL_INPUTS.read_bytes())
    alias = tmp_path / "alias.npz"
    alias.symlink_to(inputs)
    r = run_cli("run", MODEL, "--inputs", inputs, "-o", alias, "--overwrite")
    assert_cli_error(r.code, r.err, "input")
    assert inputs.read_bytes() == MODEL_INPUTS.read_bytes()


# --- inside a target folder -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../../escaped.npy", "leaves the folder"),
        ("a/../../x.npy", "leaves the folder"),
        ("/tmp/abs.npy", "absolute"),
        ("\\\\server\\share.npy", "absolute"),
        ("C:\\x.npy", "absolute"),
        (".", "folder itself"),
        ("", "folder itself"),
        ("./", "folder itself"),
        ("a\x00b.npy", "NUL"),
        ("noext", "extension"),
        ("dir/.npy", "extension"),
    ],
)
def test_confined_path_refuses_names_that_leave(tmp_path: Path, name: str, reason: str) -> None:
    with pytest.raises(BadInputError, match=reason) as info:
        confined_path(tmp_path, name, what="targetPath", suffixes=(".npy",))
    assert "expected a relative path inside the folder" in str(info.value)


@pytest.mark.parametrize(("name", "parts"), [("a/b.npy", ("a", "b.npy")), ("a\\b.NPY", ("a", "b.NPY"))])
def test_confined_path_accepts_relative_names(tmp_path: Path, name: str, parts: tuple[str, ...]) -> None:
    assert confined_path(tmp_path, name, suffixes=(".npy",)) == tmp_path.joinpath(*parts)


def test_write_inside_refuses_links_on_the_way(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "sub").symlink_to(outside)
    with pytest.raises(BadInputError, match="symbolic link"):
        write_inside(root, "sub/x.npy", lambda h: h.write(b"x"))
    linked_root = tmp_path / "linked_root"
    linked_root.symlink_to(outside)
    with pytest.raises(BadInputError, match="symbolic link"):
        write_inside(linked_root, "x.npy", lambda h: h.write(b"x"))
    assert _listing(outside) == set()


def test_write_npy_round_trips(tmp_path: Path) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(np.load(write_npy(tmp_path / "a.npy", a)), a)


# --- folders -------------------------------------------------------------------------------------------


def test_staged_folder_appears_only_on_commit(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt), StagedFolder(target) as stage:
        write_text(stage.path / "a.txt", "a")
        raise KeyboardInterrupt
    assert _listing(tmp_path) == set()
    with StagedFolder(target) as stage:
        write_text(stage.path / "a.txt", "a")
        assert not target.exists()
        stage.commit()
    assert _listing(tmp_path) == {"out", "out/a.txt"}


def test_export_interrupted_leaves_nothing_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dmlshim.dxdispatch import export_node as export

    calls = {"n": 0}
    real = export.write_npy

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(export, "write_npy", interrupted)
    target = tmp_path / "export"
    r = run_cli("export", MODEL, "-o", target, "--inputs", MODEL_INPUTS)
    assert r.code == 130
    assert _listing(tmp_path) == set()


def test_export_to_a_link_never_writes_through_it(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "keep.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(real)
    r = run_cli("export", MODEL, "-o", link, "--inputs", MODEL_INPUTS)
    assert_cli_error(r.code, r.err, "symbolic link")
    r = run_cli("export", MODEL, "-o", link, "--inputs", MODEL_INPUTS, "--overwrite")
    assert r.code == 0, r.err
    assert _listing(real) == {"keep.txt"}
    assert not link.is_symlink() and (link / "index.json").is_file()


def test_export_overwrite_removes_only_what_it_wrote(tmp_path: Path) -> None:
    target = tmp_path / "export"
    r = run_cli("export", MODEL, "-o", target, "--inputs", MODEL_INPUTS)
    assert r.code == 0, r.err
    first = _listing(target)
    folder = next(p for p in target.iterdir() if p.is_dir())
    # A previous export folder that holds something dmlshim did not write (a FIFO) stops the overwrite.
    os.mkfifo(folder / "pipe")
    r = run_cli("export", MODEL, "-o", target, "--inputs", MODEL_INPUTS, "--overwrite")
    assert_cli_error(r.code, r.err, "FIFO", "move it away")
    assert _listing(target) == first | {f"{folder.name}/pipe"}
    (folder / "pipe").unlink()
    (target / "notes.txt").write_text("mine")
    r = run_cli("export", MODEL, "-o", target, "--inputs", MODEL_INPUTS, "--overwrite")
    assert r.code == 0, r.err
    assert _listing(target) == first | {"notes.txt"}
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())
