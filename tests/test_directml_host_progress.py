"""Issue 37 (held-out models): Keypoint R-CNN's first run on real DirectML under Wine took longer than
the fixed 600 s request timeout on a loaded machine, so validate failed (exit 2) although the host was
working. The host's waits now follow its progress: they go on while its process tree gains CPU time and
fail, with a message naming what was waited for, how long, the CPU used and the setting, when it gains
none for the stall window or when the overall ceiling passes.

The hosts here are Python processes speaking host.js's protocol (connect back to 127.0.0.1:<port>;
frames of u32 header length, JSON header, u64 body length, body), with windows of a second or two.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmlshim.directml import progress
from dmlshim.directml.host import Host, HostError, HostSession
from dmlshim.errors import DmlShimError

FAKE_HOST = r"""
import json, socket, struct, subprocess, sys, time

mode, seconds, port = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
if mode == "exit":
    sys.exit(3)
if mode == "hang-before-connect":
    time.sleep(3600)
sock = socket.create_connection(("127.0.0.1", port))

def recv(n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data

seen = []
while True:
    (hlen,) = struct.unpack("<I", recv(4))
    header = json.loads(recv(hlen))
    seen.append(f"{header['op']} {header.get('session', '')}".strip())
    (blen,) = struct.unpack("<Q", recv(8))
    recv(blen)
    end = time.monotonic() + seconds
    if mode == "burn":  # works (uses CPU) for `seconds`, then answers
        while time.monotonic() < end:
            pass
    elif mode == "burn-in-child":  # its child does the work, as a host's helper process might
        burn = "import time\nend = time.monotonic() + %r\nwhile time.monotonic() < end: pass" % seconds
        subprocess.run([sys.executable, "-c", burn])
    elif mode == "sleep":  # never answers and uses no CPU
        time.sleep(3600)
    elif mode == "spin":  # never answers but keeps using CPU
        while True:
            pass
    head = json.dumps({"ok": True, "op": header["op"], "seen": seen}).encode()
    sock.sendall(struct.pack("<I", len(head)) + head + struct.pack("<Q", 0))
"""


@pytest.fixture(autouse=True)
def _short_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.TIMEOUT_ENV, raising=False)
    monkeypatch.setenv(progress.STALL_ENV, "1")
    # a CPU-bound process gets a fraction of a core on a loaded machine: 0.1 s per second is plenty
    monkeypatch.setattr(progress, "STALL_MIN_CPU", 0.1)


class _Fake:
    def __init__(self, tmp_path: Path) -> None:
        self.script = tmp_path / "fake_host.py"
        self.script.write_text(FAKE_HOST)
        self.log = tmp_path / "host.log"
        self.log.write_text("fake host log line\n")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(1)

    def spawn(self, mode: str, seconds: float = 0.0) -> subprocess.Popen[bytes]:
        port = self.server.getsockname()[1]
        proc = subprocess.Popen([sys.executable, str(self.script), mode, str(seconds), str(port)])
        self.procs.append(proc)
        return proc

    def bare_host(self, proc: subprocess.Popen[bytes]) -> Host:
        host = Host.__new__(Host)  # the protocol and the waits alone: no node.exe, no Wine
        host._lock = threading.Lock()
        host._proc = proc
        host.log_path = self.log
        return host

    def connected(self, mode: str, seconds: float = 0.0) -> Host:
        host = self.bare_host(self.spawn(mode, seconds))
        self.server.settimeout(60)
        host._sock, _ = self.server.accept()
        host._sock.settimeout(1.0)  # as Host.__init__ sets it
        return host

    def close(self) -> None:
        self.server.close()
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[_Fake]:
    made = _Fake(tmp_path)
    yield made
    made.close()


def test_a_host_working_longer_than_the_stall_window_is_waited_for(fake: _Fake) -> None:
    host = fake.connected("burn", 2.2)
    began = time.monotonic()
    reply, _ = host.request({"op": "run"})
    assert reply == {"ok": True, "op": "run", "seen": ["run"]}
    assert time.monotonic() - began >= 2.2  # past the 1 s stall window, with no ceiling hit


def test_work_done_by_a_child_of_the_host_counts_as_progress(fake: _Fake) -> None:
    host = fake.connected("burn-in-child", 2.2)
    reply, _ = host.request({"op": "load"})
    assert reply["op"] == "load"


def test_a_host_that_sleeps_without_answering_fails_within_the_stall_window(fake: _Fake) -> None:
    host = fake.connected("sleep")
    began = time.monotonic()
    with pytest.raises(HostError) as caught:
        host.request({"op": "run"}, b"x" * 1000)
    waited = time.monotonic() - began
    assert 1.0 <= waited < 6.0
    message = str(caught.value)
    assert "made no progress on the 'run' request" in message
    assert "DMLSHIM_DIRECTML_STALL (now 1 s)" in message
    assert "s of CPU" in message and "fake host log line" in message
    assert caught.value.stage == "host"


def test_a_host_spinning_past_the_ceiling_fails_naming_the_setting(
    fake: _Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(progress.TIMEOUT_ENV, "1")
    # the ceiling is what is tested: a spinning host starved of CPU on a loaded machine must not be
    # called stalled first
    monkeypatch.setenv(progress.STALL_ENV, "30")
    host = fake.connected("spin")
    began = time.monotonic()
    with pytest.raises(HostError, match=r"no answer to the 'run' request in \d+ s, past the ceiling of 1 s"):
        host.request({"op": "run"})
    assert time.monotonic() - began < 8.0


def test_a_host_that_exits_before_connecting_is_named_at_once(fake: _Fake) -> None:
    host = fake.bare_host(fake.spawn("exit"))
    fake.server.settimeout(1.0)  # as Host.__init__ sets it
    began = time.monotonic()
    with pytest.raises(HostError, match="the DirectML host exited"):
        host._accept(fake.server)
    assert time.monotonic() - began < 10.0


def test_a_host_that_hangs_before_connecting_fails_within_the_stall_window(fake: _Fake) -> None:
    host = fake.bare_host(fake.spawn("hang-before-connect"))
    fake.server.settimeout(1.0)
    with pytest.raises(HostError, match=r"no progress on its start \(connecting back\)"):
        host._accept(fake.server)


def test_a_release_from_inside_a_request_waits_for_the_next_request(
    fake: _Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A garbage-collected engine's ``__del__`` releases its session; when the collection runs while this
    thread is inside a request (holding the host's lock), the release deadlocked (seen with the real
    host). It is now sent before the next request."""
    host = fake.connected("burn", 0.0)
    send = host._send_all

    def collected_meanwhile(data: bytes, wait: progress.ProgressWait) -> None:
        host.release(HostSession(7, (), ()))  # as LinuxDirectMLEngine.__del__ does
        send(data, wait)

    monkeypatch.setattr(host, "_send_all", collected_meanwhile)
    replies: list[dict[str, object]] = []
    worker = threading.Thread(target=lambda: replies.append(host.request({"op": "run"})[0]), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the request deadlocked on the host's lock"
    assert replies[0]["seen"] == ["run"]
    monkeypatch.setattr(host, "_send_all", send)
    assert host.request({"op": "info"})[0]["seen"] == ["run", "release 7", "info"]


def test_default_ceiling_grows_with_the_bytes_and_the_setting_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = progress.ProgressWait.for_request("x", None, 1000)
    big = progress.ProgressWait.for_request("x", None, 237_000_000)
    assert small.ceiling == pytest.approx(progress.CEILING_BASE, abs=1)
    assert big.ceiling == pytest.approx(progress.CEILING_BASE + 237 * progress.CEILING_PER_MB)
    assert big.stall == 1.0
    monkeypatch.setenv(progress.TIMEOUT_ENV, "6000")
    assert progress.ProgressWait.for_request("x", None, 237_000_000).ceiling == 6000.0
    monkeypatch.setenv(progress.TIMEOUT_ENV, "soon")
    with pytest.raises(DmlShimError, match="DMLSHIM_DIRECTML_TIMEOUT='soon' is not a number"):
        progress.ProgressWait.for_request("x", None, 0)


def test_tree_cpu_seconds_reads_this_process_and_none_for_a_gone_one() -> None:
    import os

    before = progress.tree_cpu_seconds(os.getpid())
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = progress.tree_cpu_seconds(os.getpid())
    assert before is not None and after is not None
    assert after - before >= 0.15
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert progress.tree_cpu_seconds(gone.pid) is None


def _real_stack() -> bool:
    from dmlshim.directml.stack import stack_available

    return stack_available()


@pytest.mark.skipif(not _real_stack(), reason="real DirectML stack not set up (`dmlshim directml setup`)")
def test_the_real_host_works_as_the_popen_child_so_its_cpu_is_followed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the waits follow under Wine: node.exe keeps the pid of the process started, and the session
    creation and run (lavapipe's threads) show as its CPU time."""
    import numpy as np

    # the default stall window: Wine's start on a loaded machine can show no CPU for a second or more
    monkeypatch.delenv(progress.STALL_ENV, raising=False)

    from dmlshim import InferenceSession
    from dmlshim.directml.host import shared_host
    from tests.oracle import make_node_model, ort_run

    host = shared_host()
    pid = host._proc.pid
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "node.exe"
    before = progress.tree_cpu_seconds(pid)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    indices = np.array([[0, -1, 5], [2, -6, 3], [1, 1, -2], [4, 0, -3]], dtype=np.int64)
    model = make_node_model("GatherElements", {"data": data, "indices": indices}, {"axis": 1})
    got = InferenceSession(model, engine="directml").run(None, {"data": data, "indices": indices})
    assert np.array_equal(got[0], ort_run(model, {"data": data, "indices": indices})[0])
    after = progress.tree_cpu_seconds(pid)
    assert before is not None and after is not None and after - before > 0.01
