"""Nothing the user owns is overwritten by a summary or an output (issue 35, part 2): the summary file
named by ``--summary-file``, ``$DMLSHIM_ORT_SUMMARY_FILE`` or ``install(summary_file=...)`` is never the
script, a path the program is given, an existing file (without ``--overwrite``), nor a file that appeared
or changed while the program ran; the same write-time rule holds for every output of the careful writer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmlshim.errors import BadInputError
from dmlshim.fileio import files

REPO = Path(__file__).resolve().parents[1]
SCRIPT = 'import sys\nopen(sys.argv[1], "w").write("the program\'s result")\n'


def _drop_in(cwd: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO / "provider"), "DMLSHIM_ORT_SUMMARY": "off", **(env or {})}
    full.pop(
        "DMLSHIM_ORT_SUMMARY_FILE", None
    ) if env is None or "DMLSHIM_ORT_SUMMARY_FILE" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", *argv],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_variable_naming_the_script_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(SCRIPT)
    done = _drop_in(tmp_path, "s.py", "out.txt", env={"DMLSHIM_ORT_SUMMARY_FILE": "s.py"})
    assert done.returncode == 2 and "given to the program too; refusing to replace an input" in done.stderr
    assert (tmp_path / "s.py").read_text() == SCRIPT


def test_the_variable_naming_an_existing_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(SCRIPT)
    (tmp_path / "mine.json").write_text("mine")
    done = _drop_in(tmp_path, "s.py", "out.txt", env={"DMLSHIM_ORT_SUMMARY_FILE": "mine.json"})
    assert done.returncode == 2 and "exists; pass --overwrite" in done.stderr
    assert (tmp_path / "mine.json").read_text() == "mine"


def test_a_result_the_program_writes_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(SCRIPT)
    done = _drop_in(tmp_path, "--summary-file", "res.json", "s.py", "res.json")
    assert done.returncode == 2 and "given to the program too; refusing to replace an input" in done.stderr
    # named nowhere on the command line, written by the program while it ran: kept, even with --overwrite
    late = 'open("late.json", "w").write("the program\'s")\n'
    (tmp_path / "t.py").write_text(late)
    done = _drop_in(tmp_path, "--summary-file", "late.json", "--overwrite", "t.py")
    assert "appeared while dmlshim was running" in done.stderr
    assert (tmp_path / "late.json").read_text() == "the program's"


def test_the_summary_is_written_where_nothing_was(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(SCRIPT)
    done = _drop_in(tmp_path, "--summary-file", "sum.json", "s.py", "out.txt")
    assert done.returncode == 0, done.stderr
    assert '"dmlshim"' in (tmp_path / "sum.json").read_text()
    assert (tmp_path / "out.txt").read_text() == "the program's result"


def test_install_refuses_an_existing_file_named_by_the_variable(tmp_path: Path) -> None:
    (tmp_path / "mine.json").write_text("mine")
    code = (
        "import dmlshim\ntry:\n    dmlshim.install()\n"
        "except dmlshim.errors.BadInputError as e:\n    print('refused', e)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "provider"),
        "DMLSHIM_ORT_SUMMARY": "off",
        "DMLSHIM_ORT_SUMMARY_FILE": "mine.json",
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "refused" in done.stdout and "exists" in done.stdout, done.stderr
    assert (tmp_path / "mine.json").read_text() == "mine"


@pytest.mark.parametrize("change", ["appears", "changes"])
def test_the_writer_keeps_a_file_that_appeared_or_changed_after_the_check(
    tmp_path: Path, change: str
) -> None:
    target = tmp_path / "out.json"
    if change == "changes":
        target.write_text("old")
    files.check_output_file(target, overwrite=True, what="output file")  # the command starts
    target.write_text("the user's, written meanwhile" + "!" * 10)  # someone writes it during the run
    with pytest.raises(BadInputError, match=r"(appeared|changed) while dmlshim was running"):
        files.write_json(target, {"a": 1}, overwrite=True)
    assert target.read_text().startswith("the user's")
    # checked again (a new command): replaced as asked
    files.check_output_file(target, overwrite=True)
    files.write_json(target, {"a": 1}, overwrite=True)
    assert target.read_text().strip().startswith("{")


def test_the_writer_through_a_fifo_or_symlink_never_touches_the_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "out.json"
    files.check_output_file(link, overwrite=True)
    link.symlink_to(victim)  # a link planted during the run
    with pytest.raises(BadInputError, match="appeared while dmlshim was running"):
        files.write_json(link, {"a": 1}, overwrite=True)
    assert victim.read_text() == "precious" and link.is_symlink()
    fifo = tmp_path / "pipe.json"
    files.check_output_file(fifo, overwrite=True)
    os.mkfifo(fifo)
    with pytest.raises(BadInputError, match="FIFO"):
        files.write_json(fifo, {"a": 1}, overwrite=True)


def test_a_file_at_the_profiles_name_written_during_the_session_is_kept(tmp_path: Path) -> None:
    import onnxruntime as ort

    import dmlshim
    from tests.test_weightless_load import _model

    model, feeds = _model()
    path = tmp_path / "m.onnx"
    import onnx

    onnx.save_model(model, str(path))
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    session = dmlshim.InferenceSession(str(path), so)
    session.run(None, feeds)
    name = Path(session._profiler._file_name())  # the name onnxruntime's rule gives it
    name.write_text("the user's")
    with pytest.raises(Exception, match="appeared while dmlshim was running"):
        session.end_profiling()
    assert name.read_text() == "the user's"
