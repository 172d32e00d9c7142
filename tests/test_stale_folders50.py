"""Folders a killed process leaves in the temporary directory: the DirectML host's log folders and
``python -m dmlshim.ort``'s state folder. SIGTERM ends the program at once, as under python; what it
or SIGKILL leaves is removed by the next process making one of the same kind, only when it is
this user's, a real folder, older than a minute and no live process holds its lock. No Wine: the host's
node.exe is the fake of tests/test_accept49_host_logs.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dmlshim.directml import host as host_module
from dmlshim.fileio import stale_folders
from dmlshim.ort.install import STATE_PREFIX
from tests.test_accept49_host_logs import _fake_node, _Stack, temp  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX locks and signals")

HOLD = (
    "import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDONLY)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\ntime.sleep(120)\n"
)


def _age(folder: Path) -> None:
    old = time.time() - 3600
    os.utime(folder, (old, old))


def _held(folder: Path) -> subprocess.Popen[str]:
    """A live process holding ``folder``'s lock (as the process that made it does)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT")}
    return {**env, "TMPDIR": str(tmp)}


def _start_ort(script: Path, tmp: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmlshim.ort", "--summary", "off", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("state "), (line, proc.stderr.read() if proc.stderr else "")
    return proc


@pytest.fixture
def sleeper(tmp_path: Path) -> Path:
    script = tmp_path / "sleeper.py"
    script.write_text(
        "import os, time\nprint('state', os.environ['DMLSHIM_ORT_STATE'], flush=True)\ntime.sleep(120)\n"
    )
    (tmp_path / "tmp").mkdir()
    return script


def _states(tmp: Path) -> list[Path]:
    return sorted(p for p in tmp.iterdir() if p.name.startswith(STATE_PREFIX))


def test_sigterm_ends_the_program_by_the_signal_and_the_next_run_sweeps_its_state(
    tmp_path: Path, sleeper: Path
) -> None:
    tmp = tmp_path / "tmp"
    proc = _start_ort(sleeper, tmp)
    (state,) = _states(tmp)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, err
    assert "Traceback" not in err
    _age(state)
    later = _start_ort(sleeper, tmp)
    later.kill()
    later.communicate(timeout=60)
    assert not state.exists()


def test_sigkill_leftover_state_is_swept_only_when_nobody_holds_it(tmp_path: Path, sleeper: Path) -> None:
    tmp = tmp_path / "tmp"
    proc = _start_ort(sleeper, tmp)
    proc.kill()
    proc.communicate(timeout=60)
    (left,) = _states(tmp)
    live = tmp / f"{STATE_PREFIX}live"  # another program's, still running
    live.mkdir()
    holder = _held(live)
    older = tmp / "dmlshim-ort-abcdef"  # an earlier version's (unlocked): never swept
    older.mkdir()
    link = tmp / f"{STATE_PREFIX}link"  # a link is never followed nor removed
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    link.symlink_to(outside)
    try:
        for folder in (left, live, older, outside):
            _age(folder)
        young = _start_ort(sleeper, tmp)  # a minute's grace first: the leftover is aged above
        (young_state,) = set(_states(tmp)) - {link, live}
        young.send_signal(signal.SIGTERM)
        young.communicate(timeout=60)
        assert not left.exists()
        assert live.is_dir() and older.is_dir() and link.is_symlink() and (outside / "keep.txt").exists()
    finally:
        holder.kill()
        holder.wait()
    assert sorted(_states(tmp)) == sorted([link, live, young_state])  # the young one: a minute's grace
    assert stale_folders.sweep_stale(STATE_PREFIX, str(tmp)) == [str(live)]  # its holder is gone


def test_a_young_leftover_is_left_a_minutes_grace(tmp_path: Path) -> None:
    folder = tmp_path / f"{STATE_PREFIX}young"
    folder.mkdir()
    assert stale_folders.sweep_stale(STATE_PREFIX, str(tmp_path)) == []
    _age(folder)
    assert stale_folders.sweep_stale(STATE_PREFIX, str(tmp_path)) == [str(folder)]


def test_host_log_folders_of_killed_processes_are_swept_by_the_next_host(
    tmp_path: Path,
    temp: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dead = temp / f"{host_module.LOCKED_LOG_PREFIX}dead"  # SIGKILL skipped its host's close()
    dead.mkdir()
    (dead / "host.log").write_text("a killed run\n")
    kept = temp / f"{host_module.LOCKED_LOG_PREFIX}kept"  # an error named its log: pruned apart
    kept.mkdir()
    (kept / host_module.KEPT_MARK).touch()
    live = temp / f"{host_module.LOCKED_LOG_PREFIX}live"  # another process's running host
    live.mkdir()
    holder = _held(live)
    try:
        for folder in (dead, kept, live):
            _age(folder)
        _fake_node(tmp_path, monkeypatch, "serve")
        host = host_module.Host(_Stack())  # type: ignore[arg-type]
        try:
            assert not dead.exists()
            assert kept.is_dir() and live.is_dir()
            own = host.log_path.parent
            assert own.name.startswith(host_module.LOCKED_LOG_PREFIX)
            _age(own)
            marked = lambda folder: (Path(folder) / host_module.KEPT_MARK).exists()  # noqa: E731
            assert stale_folders.sweep_stale(host_module.LOCKED_LOG_PREFIX, str(temp), kept=marked) == []
        finally:
            host.close()
        assert not own.exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_forked_child_of_a_termination_block_ends_by_sigterm() -> None:
    """A pool's worker forked inside cleanup_on_termination (``python -m dmlshim.ort`` runs the whole
    program in one) is ended by SIGTERM as before, not by an exception in its loop."""
    from dmlshim import portable

    with portable.cleanup_on_termination():
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                time.sleep(30)
            finally:
                os._exit(7)  # reached only when SIGTERM raised instead of ending the process
        time.sleep(0.5)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
    assert tempfile.gettempdir()  # the parent is untouched
