"""The shared Wine pieces of real DirectML (dmlshim.directml.wine): cache folder, stack.json, environment and
the process's one Xvfb."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dmlshim.directml import stack as dml_stack
from dmlshim.directml import wine
from dmlshim.dxdispatch import host_build, host_stack
from dmlshim.errors import BadInputError, EngineUnavailableError


def test_both_loaders_find_the_same_stack_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(host_stack.STACK_ENV, raising=False)
    assert wine.stack_file() == tmp_path / "directml" / "stack.json"
    assert dml_stack.stack_file() == host_stack.default_stack_path() == wine.stack_file()
    assert host_build.cache_dir() == dml_stack.cache_root() == tmp_path


def test_missing_stack_is_one_error_both_loaders_name(tmp_path: Path) -> None:
    for load in (
        lambda: dml_stack.load_stack(tmp_path),
        lambda: host_stack.load_stack(tmp_path / "stack.json"),
    ):
        with pytest.raises(wine.StackMissingError, match="dmlshim directml setup") as info:
            load()
        assert isinstance(info.value, EngineUnavailableError)
        assert isinstance(info.value, BadInputError)
        assert info.value.path == str(tmp_path / "stack.json")


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_unreadable_stack_json_is_named(tmp_path: Path, text: str) -> None:
    (tmp_path / "stack.json").write_text(text)
    with pytest.raises(wine.StackFileError, match=r"stack\.json is not"):
        wine.read_stack_doc(tmp_path / "stack.json")


def test_wine_env_adds_the_stack_variables_to_the_base() -> None:
    env = wine.wine_env({"WINEDEBUG": "-all", "PATH": "/x"}, {"PATH": "/usr/bin", "HOME": "/h"})
    assert env == {"WINEDEBUG": "-all", "PATH": "/x", "HOME": "/h"}


@pytest.mark.skipif(sys.platform == "win32", reason="Wine path names")
def test_windows_path_is_drive_z() -> None:
    assert wine.windows_path("/tmp/a b/c.onnx") == "Z:" + str(Path("/tmp/a b/c.onnx").resolve()).replace(
        "/", "\\"
    )


_CHILD = textwrap.dedent(
    """
    import os, sys, time
    os.environ.pop("DISPLAY", None)
    from dmlshim.directml.wine import shared_display
    print(shared_display(), flush=True)
    if sys.argv[1] == "wait":
        time.sleep(120)
    """
)


def _socket(display: str) -> Path:
    return Path(f"/tmp/.X11-unix/X{display.lstrip(':')}")


def _gone(path: Path, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not path.exists()


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")
def test_concurrent_processes_get_their_own_display_and_stop_it() -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _CHILD, "wait"], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    try:
        displays = [p.stdout.readline().strip() for p in procs if p.stdout is not None]
        assert all(d.startswith(":") and d[1:].isdigit() for d in displays), displays
        assert len(set(displays)) == 3, displays
        assert all(_socket(d).exists() for d in displays)
        procs[0].send_signal(signal.SIGTERM)
        assert procs[0].wait(timeout=20) == -signal.SIGTERM
        assert _gone(_socket(displays[0])), "SIGTERM left the Xvfb running"
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()  # SIGTERM: each stops its Xvfb
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    # A normal exit stops it too (atexit).
    done = subprocess.run([sys.executable, "-c", _CHILD, "exit"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _gone(_socket(done.stdout.strip()))


def test_stack_json_written_by_setup_reads_in_both_loaders() -> None:
    path = wine.stack_file()
    if not path.is_file():
        pytest.skip("real DirectML is not set up here")
    doc = json.loads(path.read_text(encoding="utf-8"))
    engine = dml_stack.load_stack()
    replay = host_stack.load_stack(path) if not os.environ.get(host_stack.STACK_ENV) else None
    assert engine.env == {str(k): str(v) for k, v in doc["env"].items()}
    if replay is not None:
        assert dict(replay.env) == engine.env
        assert replay.directml_dll.parent == engine.dml_dir
