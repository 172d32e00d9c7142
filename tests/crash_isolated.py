"""Many cases that may kill the process, run in one child process instead of one child each.

A test whose point is that a case does not crash the process (a SIGFPE in onnxruntime, say) must run it
in a child. Starting a child per case costs an import of numpy, onnx, onnxruntime and dmlshim each time,
most of such a test's time; :func:`run_isolated` runs every case of a module in one child, each case
reporting its result as one JSON line as soon as it is done. Should a case kill the child, that case gets
a ``crashed`` result naming the exit status and the child's last stderr, and a new child takes up the
cases after it: every case still gets its own verdict, and a crash costs one more child.

Run as a script (``python crash_isolated.py JOBS.json``) it is that child.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROVIDER = str(Path(__file__).resolve().parent.parent / "provider")


@dataclass(frozen=True)
class Outcome:
    """One case's result: ``value`` (what the case's handler returned), ``error`` (an exception it
    raised, as ``"TypeName: message"``), or ``crashed`` (the child died in it: exit status and stderr)."""

    value: Any = None
    error: str | None = None
    crashed: str | None = None
    error_type: str | None = None

    def ok(self) -> Any:
        """The value, or an AssertionError that says what happened instead."""
        assert self.crashed is None, f"the process died in this case: {self.crashed}"
        assert self.error is None, f"the case raised {self.error}"
        return self.value


def _status(code: int | str) -> str:
    if isinstance(code, int) and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def run_isolated(
    jobs: Sequence[dict[str, Any]], workdir: Path, *, timeout: float = 600
) -> dict[str, Outcome]:
    """Run ``jobs`` (each a dict with an ``id`` and a ``kind`` this module's child handles) in as few
    child processes as crashes allow; one :class:`Outcome` per job id."""
    results: dict[str, Outcome] = {}
    pending = list(jobs)
    round_ = 0
    env = {**os.environ, "PYTHONPATH": PROVIDER + os.pathsep + os.environ.get("PYTHONPATH", "")}
    while pending:
        spec = workdir / f"jobs{round_}.json"
        spec.write_text(json.dumps(pending))
        round_ += 1
        try:
            done = subprocess.run(
                [sys.executable, __file__, str(spec)],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
            )
            stdout, stderr, code = done.stdout, done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            code = f"timeout after {timeout}s"  # type: ignore[assignment]
        started: str | None = None
        for line in stdout.splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            elif record.get("id") in {j["id"] for j in pending}:
                results[record["id"]] = Outcome(
                    value=record.get("value"), error=record.get("error"), error_type=record.get("error_type")
                )
                started = None
        pending = [j for j in pending if j["id"] not in results]
        if not pending:
            break
        if started is None:  # died between cases, or before the first: every case left is lost
            for job in pending:
                results[job["id"]] = Outcome(
                    crashed=f"{_status(code)} before this case; stderr: {stderr[-2000:]}"
                )
            break
        results[started] = Outcome(crashed=f"{_status(code)}; stderr: {stderr[-2000:]}")
        pending = [j for j in pending if j["id"] != started]
    return results


# --- the child ---------------------------------------------------------------------------------------


def _arrays(outputs: Sequence[Any]) -> list[dict[str, Any]]:
    import numpy as np

    return [
        {"y": np.asarray(o).tolist(), "shape": list(np.shape(o)), "dtype": str(np.asarray(o).dtype)}
        for o in outputs
    ]


def _options(job: dict[str, Any]) -> Any:
    """The job's ``options``: None (the default), ``"own"`` (new, single-threaded), ``"callers"`` (the
    same, marked as a program's own object), or ``"optimized"`` (own, writing ``optimized_model_filepath``
    to ``job["optimized"]``)."""
    from dmlshim.runtime.real import callers_options, ort

    kind = job.get("options")
    if kind is None:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if kind == "callers":
        callers_options(options)
    elif kind == "optimized":
        options.optimized_model_filepath = job["optimized"]
    return options


def _session(job: dict[str, Any]) -> dict[str, Any]:
    """``dmlshim.InferenceSession`` of the model (given as bytes, or by ``path``), run on each feeds file."""
    import numpy as np
    import onnx

    import dmlshim

    engine = job.get("engine") or None
    if job.get("by_path"):
        source: Any = job["model"]
    else:
        source = onnx.load(job["model"], load_external_data=False).SerializeToString()
    session = dmlshim.InferenceSession(source, _options(job), engine=engine)
    runs = [_arrays(session.run(None, dict(np.load(f)))) for f in job["feeds"]]
    record = getattr(session, "_last_run_record", None)
    reasons = [r for n in record.nodes for r in n.reasons] if record is not None else []
    return {"runs": runs, "reasons": reasons}


def _ort(job: dict[str, Any]) -> dict[str, Any]:
    """dmlshim's ``OrtInferenceSession`` (onnxruntime's own class) of the model, by path or as bytes."""
    import numpy as np

    from dmlshim.runtime.real import OrtInferenceSession

    source: Any = job["model"] if job.get("by_path") else Path(job["model"]).read_bytes()
    session = OrtInferenceSession(source, _options(job), providers=["CPUExecutionProvider"])
    return {"runs": [_arrays(session.run(None, dict(np.load(f)))) for f in job["feeds"]]}


def _cli(job: dict[str, Any]) -> dict[str, Any]:
    """``dmlshim ARGV`` in this process: its exit code and what it printed."""
    import contextlib
    import io

    from dmlshim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(job["argv"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()[-4000:]}


_KINDS = {"session": _session, "ort": _ort, "cli": _cli}


def _child(spec: str) -> None:
    for job in json.loads(Path(spec).read_text()):
        print(json.dumps({"start": job["id"]}), flush=True)
        try:
            value = _KINDS[job["kind"]](job)
            print(json.dumps({"id": job["id"], "value": value}), flush=True)
        except Exception as exc:  # the case's verdict, for the parent to judge
            print(
                json.dumps(
                    {
                        "id": job["id"],
                        "error": f"{type(exc).__name__}: {exc}",
                        "error_type": type(exc).__name__,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    sys.path.pop(0)  # tests/ (its models/, scripts/ folders) shadows no package the cases import
    _child(sys.argv[1])
