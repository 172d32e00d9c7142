"""Binding dmlshim in place of onnxruntime for a whole program, and the summary printed at its exit.

:func:`install` puts dmlshim's stand-in (:mod:`dmlshim.ort.standin`) in ``sys.modules["onnxruntime"]``,
so every later ``import onnxruntime`` (the program's, optimum's, transformers') gets dmlshim's sessions.
With ``children=True`` (the default) it also binds worker processes: the environment it leaves makes
every Python process the program starts (multiprocessing spawn or forkserver workers, subprocesses) run
:mod:`dmlshim.ort.boot.sitecustomize` first; forked workers inherit the binding as they are.

At exit the first process prints one summary for the program and its workers (sessions, runs, where
each gather/scatter node ran, warnings such as duplicate scatter indices) on stderr: as text, or as JSON
with ``summary="json"`` / ``$DMLSHIM_ORT_SUMMARY=json``; ``off`` prints nothing;
``$DMLSHIM_ORT_SUMMARY_FILE`` also writes the JSON to that file. Workers hand their tallies to the first
process through files in a private temporary folder.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import BadInputError, DmlShimError
from ..fileio import stale_folders
from ..runtime.real import ORT_VERSION, ort
from . import tracking
from .emulate import EMULATE_CHOICES, EMULATE_ENV, ENGINE_ENV
from .standin import is_standin, standin_module

if TYPE_CHECKING:
    from ..fileio.scratch import ScratchFile

logger = logging.getLogger(__name__)

INSTALL_ENV = "DMLSHIM_ORT_INSTALL"
"""``1``: processes started with the boot folder on ``PYTHONPATH`` bind dmlshim at start-up."""
SUMMARY_ENV = "DMLSHIM_ORT_SUMMARY"
"""``text`` (default), ``json`` or ``off``: the summary printed on stderr at exit."""
SUMMARY_FILE_ENV = "DMLSHIM_ORT_SUMMARY_FILE"
SUMMARY_INPUTS_ENV = "DMLSHIM_ORT_SUMMARY_INPUTS"
SUMMARY_OVERWRITE_ENV = "DMLSHIM_ORT_SUMMARY_OVERWRITE"
"""A file to write the JSON summary to at exit (besides stderr)."""
STATE_ENV = "DMLSHIM_ORT_STATE"
"""The private folder where worker processes leave their tallies (set by the first process)."""
STATE_PREFIX = "dmlshim-ort-locked-"
"""The state folder's name in the temporary directory: locked while the first process (or a child forked
from it) lives, so that one a killed process left is removed by the next (:mod:`dmlshim.fileio.stale_folders`;
earlier versions' ``dmlshim-ort-*``, unlocked, never are)."""
OWNER_ENV = "DMLSHIM_ORT_OWNER"
"""The process id of the first process, which prints the summary."""

BOOT_DIR = str(Path(__file__).resolve().parent / "boot")
"""The folder holding dmlshim's ``sitecustomize`` for worker processes."""

_SUMMARY_FORMATS = ("text", "json", "off")


class _State:
    installed = False
    previous: ModuleType | None = None
    registered = False
    flushed_changes = -1
    flush_lock = threading.Lock()
    tally_file: ScratchFile | None = None
    """This worker's tally in the state folder, open for rewriting."""
    state_lock: int | None = None
    """The open descriptor locking the state folder (the first process's)."""


def _choice(value: str | None, env: str, allowed: tuple[str, ...], default: str) -> str:
    chosen = (value if value is not None else os.environ.get(env, default)).strip().lower() or default
    if chosen not in allowed:
        raise BadInputError(f"{env} must be one of {', '.join(allowed)}, not {chosen!r}", value=chosen)
    return chosen


def installed() -> bool:
    """Whether ``import onnxruntime`` gives dmlshim's stand-in now."""
    return is_standin(sys.modules.get("onnxruntime"))


def install(
    *,
    summary: str | None = None,
    summary_file: str | os.PathLike[str] | None = None,
    emulate: str | None = None,
    engine: str | None = None,
    children: bool = True,
    overwrite: bool = False,
    inputs: Sequence[str | os.PathLike[str]] = (),
) -> ModuleType:
    """Bind dmlshim in place of onnxruntime for this process (call it before the program imports
    onnxruntime), and in the Python processes it starts when ``children`` is true.

    Args:
        summary: ``"text"`` (default), ``"json"`` or ``"off"``: the summary printed on stderr at exit.
        summary_file: also write the JSON summary to this file at exit.
        emulate: ``"asked"`` (default: sessions asking for DmlExecutionProvider or for no provider are
            emulated, as onnxruntime-directml would run them) or ``"all"`` (every session).
        engine: the engine of every emulated session that passes no ``engine=`` (default
            ``$DMLSHIM_ORT_ENGINE``, else ``partitioned``); ``customop`` emulates the nodes inside
            If/Loop/Scan bodies too.
        children: bind worker and child Python processes too (through ``PYTHONPATH``).
        overwrite: let ``summary_file`` replace an existing regular file.
        inputs: files the program reads (its script, models): ``summary_file`` may never be one of them,
            nor the external data of a model among them (checked now and again at exit).

    Returns:
        The stand-in module now in ``sys.modules["onnxruntime"]``.

    Raises:
        BadInputError: an unknown ``summary`` or ``emulate`` value; ``summary_file`` (or
            ``$DMLSHIM_ORT_SUMMARY_FILE``) names an input, or an existing file without ``overwrite``.
        EngineUnavailableError: an unknown ``engine``.
    """
    os.environ[SUMMARY_ENV] = _choice(summary, SUMMARY_ENV, _SUMMARY_FORMATS, "text")
    os.environ[EMULATE_ENV] = _choice(emulate, EMULATE_ENV, EMULATE_CHOICES, "asked")
    engine = engine if engine is not None else os.environ.get(ENGINE_ENV, "").strip()
    if engine:
        from ..errors import EngineUnavailableError
        from ..execute.engine import engine_names

        if engine not in engine_names():  # fails now, before the program runs; nothing imported yet
            raise EngineUnavailableError(
                f"unknown engine {engine!r}; available engines: {', '.join(engine_names())}", value=engine
            )
        os.environ[ENGINE_ENV] = engine
    _forget_foreign_state()
    if summary_file is None and OWNER_ENV not in os.environ and os.environ.get(SUMMARY_FILE_ENV):
        # named by the environment: the same rules as the argument (never an input, nor an existing file)
        summary_file = os.environ[SUMMARY_FILE_ENV]
    if summary_file is not None:
        from ..fileio import files

        # Refused now, before the program runs, as every dmlshim writer refuses (an existing file, an input);
        # what is there now is remembered, and a file that appears there while the program runs is kept.
        files.check_output_file(summary_file, overwrite=overwrite, inputs=inputs, what="summary file")
        # a path given as bytes (or a PathLike giving bytes) is kept as text: the environment holds text
        os.environ[SUMMARY_FILE_ENV] = os.path.abspath(os.fsdecode(os.fspath(summary_file)))
        os.environ[SUMMARY_INPUTS_ENV] = os.pathsep.join(
            os.path.abspath(os.fsdecode(os.fspath(p))) for p in inputs
        )
        os.environ[SUMMARY_OVERWRITE_ENV] = "1" if overwrite else "0"
    if OWNER_ENV not in os.environ:
        os.environ[OWNER_ENV] = str(os.getpid())
        state, _State.state_lock = stale_folders.make_held_folder(
            STATE_PREFIX, what="dmlshim.ort state folders"
        )
        os.environ[STATE_ENV] = state
    if children:
        _bind_children()
    if not installed():
        early = early_importers()
        if early:
            warnings.warn(
                f"dmlshim.install() came after {', '.join(early[:5])}{' ...' if len(early) > 5 else ''} "
                "imported onnxruntime: sessions made through the onnxruntime held there are onnxruntime's "
                "own, nothing emulated, and not in the summary; call dmlshim.install() before the program "
                "imports onnxruntime (or run it with python -m dmlshim.ort)",
                UserWarning,
                stacklevel=2,
            )
    return _bind()


def _forget_foreign_state() -> None:
    """Drop a state the environment names that no dmlshim process made (a copied environment, a leftover
    ``export``): a state folder that is not a real ``dmlshim-ort-locked-*`` folder. This process then
    owns the run; before, it took itself for a worker of a process long gone: it printed no summary,
    ignored ``$DMLSHIM_ORT_SUMMARY_FILE`` and wrote its tally into the folder named (any folder)."""
    if OWNER_ENV not in os.environ:
        return
    state = os.environ.get(STATE_ENV, "")
    named = bool(state) and os.path.basename(state).startswith(STATE_PREFIX)
    if named and not os.path.islink(state) and os.path.isdir(state):
        return
    if named and not os.path.lexists(state) and _late_child():
        # A child the run started (a pool worker, multiprocessing's resource tracker) that came up after
        # the first process printed the summary and removed the folder: the run is over. It stays a
        # worker of that run (its tally has nowhere to go): it printed a second, empty summary and
        # refused the run's summary file ("exists") as if it owned a run of its own.
        logger.debug("the run of process %s ended before this child started", os.environ.get(OWNER_ENV))
        return
    logger.warning(
        "%s=%r names no dmlshim state folder (%s=%r): this process owns the run",
        STATE_ENV,
        state,
        OWNER_ENV,
        os.environ.get(OWNER_ENV),
    )
    os.environ.pop(OWNER_ENV, None)
    os.environ.pop(STATE_ENV, None)


def _late_child() -> bool:
    """Whether this process's parent is the run's first process, or is gone (the child was handed to
    init): a copied environment or a leftover ``export`` has another parent."""
    parent = os.getppid()
    return str(parent) == os.environ.get(OWNER_ENV) or parent == 1


def early_importers() -> list[str]:
    """The modules (dmlshim's and onnxruntime's own aside) that hold the real onnxruntime module or its
    ``InferenceSession`` class: imported before :func:`install`, they keep onnxruntime's sessions."""
    real = (ort, ort.InferenceSession)
    found = []
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if module is None or id(module) in seen or name.partition(".")[0] in ("onnxruntime", "dmlshim"):
            continue
        seen.add(id(module))  # __mp_main__ is __main__
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and any(
            v is real[0] or v is real[1] for v in list(namespace.values())
        ):
            found.append(name)
    return sorted(found)


def install_from_environment() -> ModuleType:
    """:func:`install` as a worker process does it, with the settings its parent left in the environment."""
    return install(children=True)


def _bind_children() -> None:
    os.environ[INSTALL_ENV] = "1"
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding dmlshim
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    wanted = [BOOT_DIR]
    if not _is_site_packages(package_root):  # a source tree: children must find dmlshim there too
        wanted.append(package_root)
    os.environ["PYTHONPATH"] = os.pathsep.join([*wanted, *(p for p in parts if p not in wanted)])


def _is_site_packages(folder: str) -> bool:
    import site

    known = [*site.getsitepackages(), site.getusersitepackages()]
    return any(os.path.realpath(folder) == os.path.realpath(k) for k in known)


def _bind() -> ModuleType:
    standin = standin_module()
    current = sys.modules.get("onnxruntime")
    if current is not standin:
        _State.previous = current if isinstance(current, ModuleType) else ort
        sys.modules["onnxruntime"] = standin
    _State.installed = True
    if not _State.registered:
        atexit.register(_at_exit)
        tracking.AFTER_CHANGE.append(flush)
        _State.registered = True
    logger.debug("dmlshim bound in place of onnxruntime %s (pid %d)", ORT_VERSION, os.getpid())
    return standin


def uninstall() -> None:
    """Give ``import onnxruntime`` the real module again and stop binding child processes (no summary)."""
    if installed():
        sys.modules["onnxruntime"] = _State.previous if _State.previous is not None else ort
    _State.installed = False
    if _State.registered:
        atexit.unregister(_at_exit)
        tracking.AFTER_CHANGE.remove(flush)
        _State.registered = False
    discard_state()
    names = [
        INSTALL_ENV,
        STATE_ENV,
        OWNER_ENV,
        SUMMARY_ENV,
        SUMMARY_FILE_ENV,
        SUMMARY_INPUTS_ENV,
        SUMMARY_OVERWRITE_ENV,
    ]
    names.append(EMULATE_ENV)
    for name in names:
        os.environ.pop(name, None)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOT_DIR]
    if parts:
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        os.environ.pop("PYTHONPATH", None)


def _is_owner() -> bool:
    return os.environ.get(OWNER_ENV) == str(os.getpid())


@functools.lru_cache(maxsize=4)  # asked after every run: a Path built each time cost ~10 us a run
def _worker_name(state: str, pid: int) -> str:
    return os.path.join(state, f"{pid}.json")


_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
"""A worker's tally, compact: made once (``json.dumps`` with options makes an encoder a call)."""


def flush() -> None:
    """A worker's tally to the shared folder, when it changed (nothing when it made no session).

    Called after every change: a pool ends the workers it has no more tasks for with SIGTERM, which
    must end them as it would without dmlshim. A Python handler cannot promise that (the signal may land
    on another thread, onnxruntime's or OpenBLAS's, while the main thread waits for a task, and is then
    never handled: the worker outlived the pool's SIGTERM), so the tally on disk is never behind."""
    state = os.environ.get(STATE_ENV)
    if not state or _is_owner() or not tracking.TRACKER.sessions:
        return
    target = _worker_name(state, os.getpid())
    # one writer at a time: a tally another thread wrote meanwhile must not be replaced by an older one
    with _State.flush_lock:
        changes = tracking.TRACKER.changes
        if changes == _State.flushed_changes:
            return
        scratch = _State.tally_file
        if scratch is None or scratch.name != target:  # a forked child drops its parent's (_reset_in_child)
            if not os.path.isdir(state):
                return
            from ..fileio.scratch import ScratchFile

            scratch = _State.tally_file = ScratchFile(target)
        # Rewritten in place in one write, not fsync-ed: a scratch file in the private state folder. An
        # atomic replace took milliseconds a time on overlayfs: a pool worker's runs were ~50 times slower.
        with contextlib.suppress(OSError, ValueError):
            scratch.write_text(tracking.TRACKER.to_text(_ENCODER))
            _State.flushed_changes = changes


def _reset_in_child() -> None:
    _State.flushed_changes = -1
    _State.flush_lock = threading.Lock()
    if _State.tally_file is not None:  # the parent's open tally: the child writes its own
        _State.tally_file.close()
        _State.tally_file = None


os.register_at_fork(after_in_child=_reset_in_child)


def summary() -> dict[str, Any]:
    """The summary so far: this process's tally and those its workers left."""
    parts = [tracking.TRACKER.to_json()]
    state = os.environ.get(STATE_ENV)
    if state and os.path.isdir(state):
        for path in sorted(Path(state).glob("*.json")):
            if path.stem == str(os.getpid()):
                continue
            with contextlib.suppress(OSError, ValueError):
                parts.append(json.loads(path.read_text(encoding="utf-8")))
    merged = tracking.merge(parts)
    from ..version import __version__

    return {"dmlshim": __version__, "onnxruntime": ORT_VERSION, **merged}


def _at_exit() -> None:
    if not _is_owner():
        flush()
        return
    fmt = os.environ.get(SUMMARY_ENV, "text")
    result = summary()
    target = os.environ.get(SUMMARY_FILE_ENV)
    if target:
        from ..fileio import files

        try:
            # Checked when installed (existing file only with overwrite); an input never, even now; a file
            # that appeared there while the program ran (its own result, say) is the program's: kept.
            read = [p for p in os.environ.get(SUMMARY_INPUTS_ENV, "").split(os.pathsep) if p]
            # every model file a session of the program loaded (and, through it, its external data)
            read += [s["model_file"] for s in result.get("sessions", ()) if s.get("model_file")]
            replace = os.environ.get(SUMMARY_OVERWRITE_ENV) == "1"
            files.write_json(target, result, overwrite=replace, inputs=read, what="dmlshim summary")
        except (DmlShimError, OSError) as exc:
            sys.stderr.write(f"dmlshim: {exc}\n")
    if fmt == "json":
        sys.stderr.write(json.dumps(result, indent=2) + "\n")
    elif fmt == "text":
        header = f"dmlshim (DirectML emulated over onnxruntime {ORT_VERSION})"
        sys.stderr.write(tracking.render(result, header) + "\n")
    discard_state()


def discard_state() -> None:
    """Remove the state folder, in the first process (at exit, at :func:`uninstall`, or when SIGTERM ends
    ``python -m dmlshim.ort``'s program), and let go of its lock."""
    state = os.environ.get(STATE_ENV)
    if _is_owner() and state:
        lock, _State.state_lock = _State.state_lock, None
        stale_folders.release(state, lock)
