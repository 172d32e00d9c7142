"""Acceptance round 49: the DirectML host's log folders (``dmlshim-dmlhost-*`` in the temporary directory)
are removed when the host closes; one whose log an error names (a host that did not start) is kept, and
only the newest few such folders are. No Wine: node.exe is replaced by a Python process speaking the
host's protocol (or exiting at once)."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from dmlshim.directml import host as host_module
from dmlshim.directml import progress
from dmlshim.errors import EngineUnavailableError

FAKE_NODE = r"""
import json, socket, struct, sys
mode, port = sys.argv[1], int(sys.argv[2])
print("fake node.exe log line", flush=True)
if mode == "exit":
    sys.exit(3)
sock = socket.create_connection(("127.0.0.1", port))
def exact(n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
while True:
    (hlen,) = struct.unpack("<I", exact(4))
    exact(hlen)
    (blen,) = struct.unpack("<Q", exact(8))
    exact(blen)
    head = json.dumps({"ok": True, "version": "fake"}).encode()
    sock.sendall(struct.pack("<I", len(head)) + head + struct.pack("<Q", 0))
"""


class _Stack:  # what Host.__init__ reads
    node_modules = bin_dir = node_exe = wine = "/nonexistent"

    def run_env(self) -> dict[str, str]:
        return {"DISPLAY": ":0"}


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory the host's log folders are made in."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv(progress.STALL_ENV, "5")
    return folder


def _fake_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    script = tmp_path / "fake_node.py"
    script.write_text(FAKE_NODE)
    real_popen = subprocess.Popen

    def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        kwargs.pop("cwd", None)
        kwargs.pop("env", None)
        return real_popen([sys.executable, str(script), mode, args[-1]], **kwargs)

    monkeypatch.setattr(host_module.subprocess, "Popen", popen)


def _log_folders(temp: Path) -> list[str]:
    return sorted(p.name for p in temp.iterdir() if p.name.startswith(host_module.LOG_PREFIX))


def test_a_closed_host_leaves_no_log_folder(
    tmp_path: Path, temp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_node(tmp_path, monkeypatch, "serve")
    host = host_module.Host(_Stack())  # type: ignore[arg-type]
    assert host.info.get("ok") is True
    assert host.log_path.parent.parent == temp and host.log_path.is_file()
    host.close()
    assert _log_folders(temp) == []


def test_a_host_that_did_not_start_keeps_the_log_its_error_names(
    tmp_path: Path, temp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_node(tmp_path, monkeypatch, "exit")
    with pytest.raises(EngineUnavailableError) as caught:
        host_module.Host(_Stack())  # type: ignore[arg-type]
    log = Path(str(caught.value.value))
    assert log.parent.parent == temp
    assert "fake node.exe log line" in log.read_text()
    assert "fake node.exe log line" in str(caught.value)
    assert _log_folders(temp) == [log.parent.name]


def test_kept_log_folders_are_bounded_newest_first(
    tmp_path: Path, temp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = []
    for i in range(host_module.KEPT_LOGS + 3):
        folder = temp / f"{host_module.LOG_PREFIX}old{i:02d}"
        folder.mkdir()
        (folder / "host.log").write_text("old\n")
        mark = folder / host_module.KEPT_MARK
        mark.touch()
        os.utime(mark, (1_000_000 + i, 1_000_000 + i))
        old.append(folder.name)
    unmarked = temp / f"{host_module.LOG_PREFIX}inuse"  # another process's live host: not a kept one
    unmarked.mkdir()
    _fake_node(tmp_path, monkeypatch, "exit")
    with pytest.raises(EngineUnavailableError) as caught:
        host_module.Host(_Stack())  # type: ignore[arg-type]
    new = Path(str(caught.value.value)).parent.name
    kept = set(_log_folders(temp)) - {unmarked.name}
    assert kept == {new, *old[-(host_module.KEPT_LOGS - 1) :]}
    assert unmarked.is_dir()


def test_the_wire_format_of_the_fake_is_the_hosts(tmp_path: Path) -> None:
    """The fake answers as host.js frames a reply: a header length, JSON, a body length, the body."""
    head = json.dumps({"op": "info"}).encode()
    frame = struct.pack("<I", len(head)) + head + struct.pack("<Q", 0)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        script = tmp_path / "fake_node.py"
        script.write_text(FAKE_NODE)
        proc = subprocess.Popen(
            [sys.executable, str(script), "serve", str(server.getsockname()[1])], stdout=subprocess.DEVNULL
        )
        try:
            server.settimeout(60)
            conn, _ = server.accept()
            with conn:
                conn.sendall(frame)
                conn.settimeout(60)
                (hlen,) = struct.unpack("<I", conn.recv(4, socket.MSG_WAITALL))
                assert json.loads(conn.recv(hlen, socket.MSG_WAITALL))["ok"] is True
        finally:
            proc.kill()
            proc.wait()
