"""Issue 37 (held-out models): feeding 12 MB (a GATConv layer's ScatterElements over 250 000 edges) to
the real-DirectML host failed with "lost the DirectML host: timed out" after about a second: the request
was sent with ``sendall`` on a socket with a 1 s timeout, which Python applies to the whole transfer, and
node.exe under Wine on a busy machine reads slower. The request now waits as long as a reply may take.

The host here is a thread on the other end of a socket pair that starts reading late and slowly, and
answers as host.js does (length-prefixed JSON header, length-prefixed body); no Wine is needed.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from dmlshim.directml.host import Host, HostError


class _Running:
    def poll(self) -> None:
        return None


class _Exited:
    def poll(self) -> int:
        return 1


def _recv(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 16))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
        time.sleep(0.002)  # a slow reader: ~32 MB/s at best
    return data


def _slow_host(sock: socket.socket, delay: float, got: list[int]) -> None:
    time.sleep(delay)
    (hlen,) = struct.unpack("<I", _recv(sock, 4))
    json.loads(_recv(sock, hlen))
    (blen,) = struct.unpack("<Q", _recv(sock, 8))
    got.append(len(_recv(sock, blen)))
    head = json.dumps({"ok": True, "bytes": got[0]}).encode()
    sock.sendall(struct.pack("<I", len(head)) + head + struct.pack("<Q", 0))


def _host(sock: socket.socket, proc: object, log: Path) -> Host:
    host = Host.__new__(Host)  # the socket protocol alone: no node.exe, no Wine
    host._lock = threading.Lock()
    host._sock = sock
    host._proc = proc
    host.log_path = log
    sock.settimeout(1.0)  # as Host.__init__ sets it
    return host


def test_a_large_request_to_a_slow_host_is_sent_whole(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    body = bytes(12 * 1024 * 1024)
    got: list[int] = []
    peer = threading.Thread(target=_slow_host, args=(theirs, 1.5, got), daemon=True)
    peer.start()
    try:
        reply, data = _host(ours, _Running(), tmp_path / "host.log").request({"op": "run"}, body)
    finally:
        peer.join(timeout=60)
        ours.close()
        theirs.close()
    assert got == [len(body)]
    assert reply == {"ok": True, "bytes": len(body)}
    assert data == b""


def test_a_host_that_exited_while_being_sent_to_is_named(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    try:
        with pytest.raises(HostError, match="the DirectML host exited"):
            _host(ours, _Exited(), tmp_path / "host.log").request({"op": "run"}, bytes(12 * 1024 * 1024))
    finally:
        ours.close()
        theirs.close()
