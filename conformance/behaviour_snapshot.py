"""Record what every dmlshim command does on every model in onnx_models/, and diff two such records.

    python conformance/behaviour_snapshot.py record OUT_DIR [--models onnx_models] [--quick] [--jobs 2]
    python conformance/behaviour_snapshot.py diff OLD_DIR NEW_DIR      # exit 1 on any difference

A checking tool for refactors (issue 38): record before, record after, diff. Per model it runs
``dmlshim inspect --json`` (without and with the shipped .npz), ``dmlshim run --json -o`` with every engine
``dmlshim run --help`` offers except ``directml``, ``dmlshim validate --json`` (default engine), and the
Python API (``InferenceSession(model, engine=E).run(None, feeds)`` twice, each run's outputs and
``last_run_record``). Each command runs in its own fork of one process that imported dmlshim once (with
PYTHONHASHSEED=0): it starts as a fresh ``dmlshim`` process would, no session or cache carries over. It
writes one JSON document per model: exit codes, stdout JSON, stderr lines, records, arrays as sha256 digests.

Normalisation (``normalise``) is explicit and minimal; everything else is kept, since it is behaviour:
- keys in ``DROPPED_KEYS`` (wall-clock timings, pids, library versions) are removed wherever they occur;
- absolute paths of the repository root and of this run's temporary folders become ``<root>``/``<tmp>``,
  and any other ``/tmp/...`` temp name becomes ``<tmp>/...``;
- arrays become ``{"dtype", "shape", "sha256"}`` (sha256 of dtype, shape and the C-order bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DROPPED_KEYS = frozenset(
    {  # none occurs in today's outputs: they guard against timings/versions to come
        "seconds",
        "elapsed",
        "elapsed_s",
        "elapsed_seconds",
        "duration",
        "duration_s",
        "durations",
        "time",
        "time_s",
        "times",
        "timing",
        "timings",
        "wall_time",
        "timestamp",
        "created",
        "pid",
        "version",
        "versions",
        "dmlshim_version",
        "onnxruntime_version",
        "onnx_version",
        "numpy_version",
        "python_version",
        "hostname",
    }
)
TMP_NAME = re.compile(r"(/tmp|/var/tmp)/[^\s\"'/]+")
EXCLUDED_ENGINES = ("directml",)  # needs Windows or the Wine stack; not part of the snapshot
TIMEOUT = 600


def array_digest(value: Any) -> Any:
    """An array as dtype, shape and sha256; lists/tuples/dicts of arrays element by element."""
    if isinstance(value, (list, tuple)):
        return [array_digest(v) for v in value]
    if isinstance(value, dict):
        return {str(k): array_digest(v) for k, v in value.items()}
    arr = np.asarray(value)
    h = hashlib.sha256(f"{arr.dtype.str}|{arr.shape}|".encode())
    h.update(repr(arr.tolist()).encode() if arr.dtype == object else np.ascontiguousarray(arr).tobytes())
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "sha256": h.hexdigest()}


def normalise(obj: Any, subs: tuple[tuple[str, str], ...] = ()) -> Any:
    """Drop DROPPED_KEYS and replace machine-specific path prefixes (``subs`` first, then temp names)."""
    if isinstance(obj, dict):
        return {k: normalise(v, subs) for k, v in obj.items() if k not in DROPPED_KEYS}
    if isinstance(obj, (list, tuple)):
        return [normalise(v, subs) for v in obj]
    if isinstance(obj, str):
        for old, new in subs:
            if old:
                obj = obj.replace(old, new)
        return TMP_NAME.sub("<tmp>/", obj).replace("<tmp>//", "<tmp>/")
    return obj


def offered_engines() -> list[str]:
    """The engines ``dmlshim run --help`` lists, minus EXCLUDED_ENGINES."""
    text = in_child(cli, ["run", "--help"])[1]
    found = re.search(r"execution engine:\s*([a-z_,\s-]+?)\s*\(", " ".join(text.split()))
    if not found:
        raise SystemExit("cannot find the engine list in `dmlshim run --help`")
    return [e.strip() for e in found.group(1).split(",") if e.strip() and e.strip() not in EXCLUDED_ENGINES]


def cli(args: list[str]) -> Any:
    """The ``dmlshim`` console script's function (found by its entry point), called as the script would be."""
    (entry,) = entry_points(group="console_scripts", name="dmlshim")
    sys.argv = ["dmlshim", *args]
    return entry.load()()


def in_child(fn: Callable[..., Any], *args: Any) -> tuple[int, str, str]:
    """``fn(*args)`` in a forked child with its own stdout/stderr, as a fresh ``dmlshim`` process would run
    it but without paying for the imports again; returns (exit code, stdout, stderr)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code: Any = 1
            try:
                signal.alarm(TIMEOUT)  # a hang ends the child (SIGALRM's default action), not the record
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                code = fn(*args)
            except SystemExit as exc:
                code = exc.code
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code if isinstance(code, int) else (0 if code is None else 1))
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        stdout, stderr = (f.read().decode(errors="replace") for f in (out, err))
        return os.waitstatus_to_exitcode(status), stdout, stderr


def run_cli(args: list[str], subs: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """One CLI call: exit code, stdout (parsed JSON when it is JSON), stderr lines, all normalised."""
    rc, stdout, stderr = in_child(cli, args)
    try:
        out: Any = json.loads(stdout)
    except ValueError:
        out = stdout.splitlines()
    return normalise({"rc": rc, "stdout": out, "stderr": stderr.splitlines()}, subs)


def api_digest(model: str, npz: str, engines: list[str]) -> int:
    """Python API: two consecutive runs per engine, outputs hashed, ``last_run_record`` as JSON (stdout)."""
    import dmlshim

    with np.load(npz, allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    result: dict[str, Any] = {}
    for engine in engines:
        runs: list[Any] = []
        try:
            sess = dmlshim.InferenceSession(model, engine=engine)
            names = [o.name for o in sess.get_outputs()]
            for _ in range(2):
                try:
                    outs = sess.run(None, feeds)
                    rec = sess.last_run_record
                    runs.append(
                        {
                            "outputs": dict(zip(names, array_digest(list(outs)), strict=True)),
                            "record": rec.to_json() if rec is not None else None,
                        }
                    )
                except Exception as exc:  # an error is behaviour too: keep its type and message
                    runs.append({"error": type(exc).__name__, "message": str(exc)})
            result[engine] = {"outputs": names, "runs": runs}
        except Exception as exc:
            result[engine] = {"error": type(exc).__name__, "message": str(exc)}
    print(json.dumps(result))
    return 0


def preload(model: Path, engines: list[str]) -> None:
    """Import, once in this process, every module the commands import on one model, so that each fork
    starts with them (imports only: no session, no cache is made here)."""
    names = Path(tempfile.mkstemp(prefix="snapmods")[1])

    def warm_up() -> int:
        before = set(sys.modules)
        npz = str(model.with_suffix(".npz"))
        for command in ("inspect", "validate"):
            args = [command, "-q", "--json", "--inputs", npz]
            with contextlib.suppress(SystemExit):
                cli([*args, str(model)])
        api_digest(str(model), npz, engines)
        names.write_text("\n".join(sorted(set(sys.modules) - before)))
        return 0

    in_child(warm_up)
    for name in names.read_text().split():
        with contextlib.suppress(Exception):  # a module that imports only in some context: forks do it
            importlib.import_module(name)
    names.unlink()


def snapshot_model(model: Path, models_dir: Path, engines: list[str]) -> tuple[str, dict[str, Any]]:
    """Every command on one model; returns (relative name, normalised document)."""
    rel = model.relative_to(models_dir).as_posix()
    mpath = os.path.relpath(model, ROOT)
    npz = os.path.relpath(model.with_suffix(".npz"), ROOT)
    doc: dict[str, Any] = {"model": rel}
    with tempfile.TemporaryDirectory(prefix="snap") as tmp:
        subs = ((tmp, "<tmp>"), (str(ROOT), "<root>"))
        doc["inspect"] = run_cli(["inspect", "-q", "--json", mpath], subs)
        doc["inspect_inputs"] = run_cli(["inspect", "-q", "--json", "--inputs", npz, mpath], subs)
        for engine in engines:
            out = os.path.join(tmp, f"run_{engine}.npz")
            args = ["run", "-q", "--json", "--inputs", npz, "--engine", engine, "-o", out, mpath]
            res = run_cli(args, subs)
            if os.path.exists(out):
                with np.load(out, allow_pickle=False) as data:
                    res["output_file_arrays"] = {k: array_digest(data[k]) for k in sorted(data.files)}
            doc[f"run_{engine}"] = res
        doc["validate"] = run_cli(["validate", "-q", "--json", "--inputs", npz, mpath], subs)
        rc, stdout, stderr = in_child(api_digest, mpath, npz, engines)
        api = json.loads(stdout) if rc == 0 else stdout.splitlines()
        doc["api"] = normalise({"rc": rc, "engines": api, "stderr": stderr.splitlines()}, subs)
    return rel, doc


def record(out_dir: Path, models_dir: Path, quick: bool, jobs: int) -> int:
    start = time.monotonic()
    models_dir = models_dir.resolve()
    models = sorted(models_dir.glob("*.onnx") if quick else models_dir.rglob("*.onnx"))
    engines = offered_engines()
    if models:
        preload(models[0], engines)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{len(models)} models, engines {engines}, {jobs} job(s)", file=sys.stderr)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(snapshot_model, m, models_dir, engines) for m in models]
        for n, fut in enumerate(futures, 1):
            rel, doc = fut.result()
            target = out_dir / (rel.replace("/", "__") + ".json")
            target.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            print(f"[{n}/{len(models)}] {rel}", file=sys.stderr)
    index = {"engines": engines, "models": [m.relative_to(models_dir).as_posix() for m in models]}
    (out_dir / "_index.json").write_text(json.dumps(index, indent=1) + "\n")
    elapsed = time.monotonic() - start
    # Not compared by `diff`: where and how long.
    dmlshim_file = sys.modules["dmlshim"].__file__  # which tree's dmlshim was recorded
    (out_dir / "_run.txt").write_text(
        f"dmlshim={dmlshim_file}\nmodels_dir={models_dir}\nquick={quick}\n"
        f"jobs={jobs}\nelapsed_seconds={elapsed:.0f}\n"
    )
    print(f"recorded {len(models)} models in {elapsed:.0f} s into {out_dir}", file=sys.stderr)
    return 0


def differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Every difference between two JSON values, one line each, by JSON path."""
    if isinstance(old, dict) and isinstance(new, dict):
        lines = [f"{where}.{k}: only in OLD" for k in sorted(old.keys() - new.keys())]
        lines += [f"{where}.{k}: only in NEW" for k in sorted(new.keys() - old.keys())]
        for k in sorted(old.keys() & new.keys()):
            lines += differences(old[k], new[k], f"{where}.{k}")
        return lines
    if isinstance(old, list) and isinstance(new, list):
        lines = [f"{where}: length {len(old)} -> {len(new)}"] if len(old) != len(new) else []
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            lines += differences(a, b, f"{where}[{i}]")
        return lines
    if old != new or type(old) is not type(new):
        return [f"{where}: {json.dumps(old)[:300]} -> {json.dumps(new)[:300]}"]
    return []


def diff(old_dir: Path, new_dir: Path) -> int:
    """Print every difference between two record folders; 1 if any, else 0."""
    old_files = {p.name for p in old_dir.glob("*.json")}
    new_files = {p.name for p in new_dir.glob("*.json")}
    if not old_files and not new_files:
        print("no records in either folder", file=sys.stderr)
        return 2
    lines = [f"{name}: only in OLD" for name in sorted(old_files - new_files)]
    lines += [f"{name}: only in NEW" for name in sorted(new_files - old_files)]
    for name in sorted(old_files & new_files):
        old = json.loads((old_dir / name).read_text())
        new = json.loads((new_dir / name).read_text())
        lines += [f"{name}: {line}" for line in differences(old, new)]
    for line in lines:
        print(line)
    print(f"{len(lines)} difference(s) in {len(old_files | new_files)} file(s)", file=sys.stderr)
    return 1 if lines else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run every command on every model, write OUT_DIR")
    rec.add_argument("out_dir", type=Path)
    rec.add_argument("--models", type=Path, default=ROOT / "onnx_models")
    rec.add_argument("--quick", action="store_true", help="only the top level of the models folder")
    rec.add_argument("--jobs", type=int, default=2)
    dif = sub.add_parser("diff", help="print every difference, exit 1 if any")
    dif.add_argument("old_dir", type=Path)
    dif.add_argument("new_dir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "record":
        if os.environ.get("PYTHONHASHSEED") != "0":  # set/dict order in outputs must not vary between runs
            os.execve(
                sys.executable,
                [sys.executable, __file__, *sys.argv[1:]],
                {**os.environ, "PYTHONHASHSEED": "0"},
            )
        os.chdir(ROOT)
        import dmlshim  # noqa: F401  # imported once here: every command runs in a fork of this process

        next(iter(entry_points(group="console_scripts", name="dmlshim"))).load()
        return record(args.out_dir, args.models, args.quick, max(1, args.jobs))
    return diff(args.old_dir, args.new_dir)


if __name__ == "__main__":
    sys.exit(main())
