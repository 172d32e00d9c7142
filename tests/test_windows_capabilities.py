"""dmlshim with Windows' capability set, simulated on Linux so CI catches a Windows break.

The fixture takes away what Python documents as missing on Windows: ``os.link`` does not accept
``follow_symlinks`` (passing it raises NotImplementedError), ``os.chmod`` takes no descriptor, and
``os.fchmod``, ``os.sched_getaffinity``, ``os.sysconf``, ``os.O_DIRECTORY``, ``os.O_NONBLOCK``,
``signal.pthread_sigmask`` and ``signal.SIGHUP`` do not exist; ``dmlshim.portable.is_windows()`` answers
True. Worker processes use the ``spawn`` start method, Windows' only one, on every platform. What only a
real Windows machine can show is listed in docs/windows.md.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import stat
from collections.abc import Iterator
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from dmlshim import portable
from dmlshim.cli.main import main
from dmlshim.errors import BadInputError
from dmlshim.fileio.confined import confined_path, write_inside
from dmlshim.fileio.files import (
    check_output_file,
    write_bytes,
    write_json,
    write_npy,
    write_npz,
    write_onnx,
    write_text,
)
from dmlshim.fileio.folders import StagedFolder
from dmlshim.fileio.reading import read_npy, read_text

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "onnx_models"
PACKAGE = REPO / "provider" / "dmlshim"


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # multiprocessing's resource tracker is (re)launched with pthread_sigmask, which this fixture removes:
    # make sure it runs before, since an earlier test in this worker may have left it dead.
    resource_tracker.ensure_running()
    real_link = os.link

    def link(src: Any, dst: Any, *, src_dir_fd: Any = None, dst_dir_fd: Any = None, **kw: Any) -> None:
        if "follow_symlinks" in kw:
            raise NotImplementedError("link: follow_symlinks unavailable on this platform")
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "supports_follow_symlinks", {os.stat})
    monkeypatch.setattr(os, "supports_fd", {os.stat, os.truncate, os.listdir})
    for name in ("fchmod", "sched_getaffinity", "sysconf", "O_DIRECTORY", "O_NONBLOCK"):
        monkeypatch.delattr(os, name, raising=False)
    for name in ("pthread_sigmask", "SIGHUP"):
        monkeypatch.delattr(signal, name, raising=False)
    monkeypatch.setattr(portable, "is_windows", lambda: True)
    yield


def test_every_writer_creates_new_files(windows: None, tmp_path: Path) -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    write_bytes(tmp_path / "a.bin", b"\x00\x1a\r\n")  # Ctrl-Z and CRLF survive: binary everywhere
    write_text(tmp_path / "a.txt", "x\n")
    write_json(tmp_path / "a.json", {"k": [1, 2]})
    write_npy(tmp_path / "a.npy", arr)
    write_npz(tmp_path / "a.npz", {"x": arr})
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []), ir_version=10)
    write_onnx(tmp_path / "a.onnx", model)
    write_inside(tmp_path / "folder", "sub/b.npy", lambda h: np.lib.format.write_array(h, arr))
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x1a\r\n"
    assert json.loads((tmp_path / "a.json").read_text()) == {"k": [1, 2]}
    np.testing.assert_array_equal(read_npy(tmp_path / "a.npy"), arr)
    np.testing.assert_array_equal(np.load(tmp_path / "a.npz")["x"], arr)
    np.testing.assert_array_equal(np.load(tmp_path / "folder" / "sub" / "b.npy"), arr)
    assert read_text(tmp_path / "a.txt") == "x\n"
    # Without overwrite an existing file is still refused (the hard link fails on the existing name).
    with pytest.raises(BadInputError, match="pass --overwrite"):
        write_text(tmp_path / "a.txt", "y")
    write_text(tmp_path / "a.txt", "y", overwrite=True)
    assert (tmp_path / "a.txt").read_text() == "y"


def test_replace_waits_for_a_file_another_process_holds(
    windows: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_text(tmp_path / "out.txt", "old")
    real_replace = os.replace
    busy = {"left": 3}

    def replace(src: Any, dst: Any) -> None:
        if busy["left"]:
            busy["left"] -= 1
            exc = PermissionError(errno.EACCES, "The process cannot access the file")
            exc.winerror = 32  # type: ignore[attr-defined]  # ERROR_SHARING_VIOLATION
            raise exc
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(portable, "_REPLACE_WAIT_S", 0.001)
    write_text(tmp_path / "out.txt", "new", overwrite=True)
    assert (tmp_path / "out.txt").read_text() == "new"

    busy["left"] = 10_000  # held open for good: one clear error, the old content kept, no temp file left
    with pytest.raises(BadInputError, match="cannot write the output file"):
        write_text(tmp_path / "out.txt", "newer", overwrite=True)
    assert (tmp_path / "out.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


@pytest.mark.parametrize("name", ["NUL", "nul.npz", "CON", "com1.txt", "LPT9.json", "AUX.", "conin$"])
def test_device_names_are_refused_on_windows(windows: None, tmp_path: Path, name: str) -> None:
    with pytest.raises(BadInputError, match="Windows device"):
        check_output_file(tmp_path / name, overwrite=True)


def test_device_names_are_allowed_where_they_are_plain_files(tmp_path: Path) -> None:
    # On POSIX "NUL" is an ordinary name: only paths read from files (below) are refused everywhere.
    check_output_file(tmp_path / "NUL", overwrite=True)


@pytest.mark.parametrize("relative", ["NUL.npy", "sub/CON.npy", "out.npy:stream", "sub\\com3.npy", "C:x.npy"])
def test_names_read_from_files_never_name_devices_or_streams(tmp_path: Path, relative: str) -> None:
    with pytest.raises(BadInputError, match=r"device|':'|absolute"):
        confined_path(tmp_path, relative, what="targetPath", suffixes=(".npy",))


def test_names_read_from_files_accept_both_separators(tmp_path: Path) -> None:
    assert confined_path(tmp_path, "a\\b\\c.npy") == tmp_path / "a" / "b" / "c.npy"
    assert confined_path(tmp_path, "a/b/c.npy") == tmp_path / "a" / "b" / "c.npy"


def _stat(mode: int, tag: int = 0) -> Any:
    class Fake:
        st_mode = mode
        st_reparse_tag = tag

    return Fake()


def test_junctions_and_symlinks_are_links() -> None:
    io_reparse_tag_mount_point = 0xA0000003  # a junction: lstat reports a directory
    io_reparse_tag_symlink = 0xA000000C
    io_reparse_tag_dedup = 0x80000013  # not a name surrogate: the file's own data
    assert portable.is_link(_stat(stat.S_IFDIR, io_reparse_tag_mount_point))
    assert portable.is_link(_stat(stat.S_IFREG, io_reparse_tag_symlink))
    assert portable.is_link(_stat(stat.S_IFLNK))
    assert not portable.is_link(_stat(stat.S_IFREG, io_reparse_tag_dedup))
    assert not portable.is_link(_stat(stat.S_IFDIR))


def test_a_junction_inside_a_target_folder_is_refused(
    windows: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "out" / "j").mkdir(parents=True)
    real_lstat = os.lstat

    def lstat(path: Any, *args: Any, **kw: Any) -> Any:
        st = real_lstat(path, *args, **kw)
        if Path(path) == tmp_path / "out" / "j":
            return _stat(st.st_mode, 0xA0000003)
        return st

    monkeypatch.setattr(os, "lstat", lstat)
    with pytest.raises(BadInputError, match="symbolic link"):
        write_inside(tmp_path / "out", "j/x.npy", lambda h: h.write(b""))


def test_signals_are_held_and_delivered_after_on_windows(windows: None) -> None:
    # as in an interactive program, even where the tests run as a background job started with SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _held_and_delivered()
    finally:
        signal.signal(signal.SIGINT, previous)


def _held_and_delivered() -> None:
    assert signal.SIGINT in portable.termination_signals()
    reached_end = False
    with pytest.raises(KeyboardInterrupt), portable.hold_signals():
        signal.raise_signal(signal.SIGINT)
        reached_end = True  # the renames finish before Ctrl-C stops the program
    assert reached_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_empty_folder_is_replaced_by_a_staged_one(windows: None, tmp_path: Path) -> None:
    (tmp_path / "export").mkdir()
    with StagedFolder(tmp_path / "export") as staged:
        (staged.path / "a.txt").write_text("a")
        staged.commit()
    assert (tmp_path / "export" / "a.txt").read_text() == "a"


def test_cores_and_memory_without_posix_calls(windows: None) -> None:
    assert portable.usable_cores() >= 1
    assert portable.physical_memory() is None or portable.physical_memory() > 0  # type: ignore[operator]
    assert portable.read_flags() == portable.READ_FLAGS


def test_export_replay_compare(windows: None, tmp_path: Path, capsys: Any) -> None:
    model = MODELS / "tiny_decoder_step.onnx"
    out = tmp_path / "export"
    assert main(["export", str(model), "--inputs", str(model.with_suffix(".npz")), "-o", str(out), "-q"]) == 0
    folders = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(folders) == 5
    for folder in folders:
        doc = json.loads((folder / "model.json").read_text())
        values = [r["initialValues"] for r in doc["resources"].values()]
        paths = [v["sourcePath"] for v in values if isinstance(v, dict) and "sourcePath" in v]
        paths += [c["targetPath"] for c in doc["commands"] if c["type"] == "writeFile"]
        # Plain relative names: the same text on Windows and elsewhere.
        assert paths and all(re.fullmatch(r"[A-Za-z0-9_.]+\.npy", p) for p in paths), paths
        assert main(["replay", str(folder / "model.json"), "-o", str(folder), "-q"]) == 0
    capsys.readouterr()
    assert main(["compare", str(out)]) == 0
    assert "5 match, 0 mismatch, 0 missing" in capsys.readouterr().out


def test_validate_jobs_uses_spawned_workers(windows: None, capsys: Any) -> None:
    assert portable.process_context().get_start_method() == "spawn"
    models = [str(MODELS / "embedding_gather.onnx"), str(MODELS / "topk_gather.onnx")]
    assert main(["validate", *models, "--jobs", "2", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    names = {Path(r["model"]).name for r in lines if "model" in r}
    assert names >= {"embedding_gather.onnx", "topk_gather.onnx"}


# Names that exist only on some platforms, or behave differently on Windows: outside dmlshim/portable.py
# the package must reach them through portable's functions.
_PLATFORM_CALLS = re.compile(
    r"os\.link\(|os\.fchmod|os\.fchown|sched_getaffinity|pthread_sigmask|O_DIRECTORY|O_NONBLOCK|O_NOFOLLOW"
    r"|SIGHUP|SIGBREAK|os\.sysconf|os\.getuid|os\.geteuid|os\.mkfifo|os\.killpg|os\.setsid|os\.getpgid"
    r"|import fcntl|import resource|import termios|import pwd|import grp|os\.replace\(|get_context\("
)


def test_no_platform_dependent_call_outside_portable() -> None:
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "portable.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            pool = "ProcessPoolExecutor(" in code and "mp_context=process_context()" not in code
            if pool or _PLATFORM_CALLS.search(code):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []
