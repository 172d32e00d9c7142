"""``dmlshim validate MODEL1 MODEL2 ...`` or a folder: validate each model, then one summary table.

Each model is validated on its own, with generated inputs, or with ``--inputs DIR``: the ``<stem>.npz`` of
each model from DIR (below DIR as the model is below the folder it was found in). Without ``--inputs``, a
model whose inputs cannot be generated (an input with no shape, say) runs on the ``<stem>.npz`` beside it
when that file names its inputs, and its row says so (:mod:`.validate_inputs`). A model that fails to load,
raises, or kills its worker process is reported in its row and the others still run. ``--jobs N``
spreads the models over N worker processes. ``--json`` prints JSON lines: one object per model (with its
full validate document), then one summary object.

Exit codes: 0 every model matches, 1 some model mismatches (and none errored), 2 some model could not be
validated (bad model, bad input, crash).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .. import portable
from ..errors import BadInputError, DmlShimError, InputsNotGeneratedError
from ..portable import process_context, termination_signals
from ..text import table
from .progress import Progress
from .validate_inputs import InputsPlan, plan_inputs, sibling_inputs, with_inputs

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

Status = Literal["match", "mismatch", "error", "crash"]
STATUS_EXIT: dict[Status, int] = {"match": 0, "mismatch": 1, "error": 2, "crash": 2}

_ENDING_SIGNALS = tuple(s for s in termination_signals() if s != signal.SIGINT)
"""Signals that end a validation of several models in worker processes as Ctrl-C does (the termination
signals but SIGINT: SIGTERM, and the hang-up or break signal of the platform): workers stopped,
"interrupted". In one process they keep their default action (see :func:`run`)."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or the hang-up signal received: handled as Ctrl-C is (exit code 128 + ``signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_WAKE_SECONDS = 0.5
"""The longest the main thread sleeps in one wait for a worker's result. A Python signal handler runs only
when the main thread runs Python again, and the kernel may hand a termination signal (or SIGINT) to another
thread, the pool's manager thread: a wait with no end would hold "interrupted" back until a model finished."""


def _result(future: Future[ModelOutcome]) -> ModelOutcome:
    """The future's result, waited for in slices of :data:`_WAKE_SECONDS` so that the handlers run."""
    from concurrent.futures import wait

    while not future.done():
        wait([future], timeout=_WAKE_SECONDS)
    return future.result()


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """The ending signals raise :class:`Interrupted` in the main thread while the models run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_interrupted) for s in _ENDING_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _worker_start(log_level: int) -> None:
    """In each worker: the ending signals end the process (the parent's handlers are not inherited), and
    Ctrl-C is the parent's to handle (a terminal sends it to every process of the group): ignored here,
    where it would print a traceback from whatever the worker was doing. The worker was started with
    SIGINT blocked (:func:`dmlshim.portable.sigint_blocked`), so one that arrived while it imported is
    dropped now."""
    for s in _ENDING_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    portable.unblock_sigint()
    from .main import configure_logging  # a spawned worker starts with no log handler: warn as the parent

    configure_logging(log_level)


def _pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes started as the platform allows, each logging at the parent's level (imported here: a
    single model's validate never needs the pool, ~25 ms of imports)."""
    from concurrent.futures import ProcessPoolExecutor as Pool

    level = (logging.getLogger().getEffectiveLevel(),)
    return Pool(workers, mp_context=process_context(), initializer=_worker_start, initargs=level)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End the pool's worker processes and its manager thread now (an interrupted parent must leave none
    behind, nor their inherited pipes open)."""
    import multiprocessing

    # Taken before shutdown, which forgets it: the manager thread closes its wake-up pipe as it ends, and
    # left running it races concurrent.futures' exit hook writing to that pipe (CPython 3.11 then prints
    # "Exception ignored ... Bad file descriptor" after "interrupted").
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join(timeout=5)
    if manager is not None:
        manager.join(timeout=30)


@dataclass(frozen=True)
class ModelOutcome:
    """What validating one model of several gave.

    Attributes:
        model: the model path as given (or found in a folder).
        status: ``match``, ``mismatch``, ``error`` (dmlshim refused it: bad model, bad input) or ``crash``
            (an unexpected exception, or the worker process died).
        seconds: wall time of the validation.
        outputs: graph outputs compared; ``matched`` of them agreed.
        matched: outputs that agreed.
        nodes: gather/scatter nodes in the model (subgraphs included).
        emulated: of those, the nodes that ran from their DirectML descriptor.
        warnings: warnings the validation raised.
        message: why the model errored or crashed; the first mismatching outputs otherwise.
        report: the full ``dmlshim validate --json`` document, None when validation did not finish.
        inputs: the inputs file the model ran on ("" when its inputs were generated).
        note: why that file, when the user did not name it (the inputs could not be generated).
    """

    model: str
    status: Status
    seconds: float
    outputs: int = 0
    matched: int = 0
    nodes: int = 0
    emulated: int = 0
    warnings: int = 0
    message: str = ""
    report: dict[str, Any] | None = field(default=None, compare=False)
    inputs: str = ""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "model": self.model,
            "status": self.status,
            "exit_code": STATUS_EXIT[self.status],
            "seconds": round(self.seconds, 3),
            "outputs": self.outputs,
            "matched": self.matched,
            "nodes": self.nodes,
            "emulated": self.emulated,
            "warnings": self.warnings,
            "message": self.message,
            "inputs": self.inputs or None,
            "note": self.note or None,
            "report": self.report,
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options only several models need."""
    parser.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="with several models: validate them in N worker processes (default 1)",
    )


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def applies(args: argparse.Namespace) -> bool:
    """True when the command line names several models or a folder."""
    models: Sequence[str] = args.model
    return len(models) > 1 or Path(models[0]).is_dir()


def collect_models(paths: Iterable[str]) -> list[str]:
    """The models to validate: files as given, folders expanded to their ``*.onnx`` files (recursively).

    Raises:
        BadInputError: a path does not exist, or a folder holds no ``.onnx`` file.
    """
    models: list[str] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found = sorted(str(p) for p in path.rglob("*.onnx") if p.is_file())
            if not found:
                raise BadInputError(f"the folder {text} holds no .onnx file", path=text)
            models += found
        elif path.exists():
            models.append(text)
        else:
            raise BadInputError(f"no such file or folder: {text}", path=text)
    return list(dict.fromkeys(models))


def validate_one(model: str, args: argparse.Namespace, inputs: InputsPlan | None = None) -> ModelOutcome:
    """Validate one model with validate's options, on the inputs ``inputs`` plans (generated when None);
    every failure becomes an outcome, not an exception. Its warnings name the model."""
    with _warnings_name(model):
        return _validate_one(model, args, inputs)


def _validate_one(model: str, args: argparse.Namespace, inputs: InputsPlan | None) -> ModelOutcome:
    from .validate_files import model_report

    plan = inputs or InputsPlan()
    start = time.perf_counter()
    note = ""
    try:
        if plan.missing:
            raise BadInputError(plan.missing, path=model)
        try:
            report = model_report(with_inputs(args, plan.file), model)
        except InputsNotGeneratedError as exc:
            sibling, why = sibling_inputs(model, exc) if plan.file is None else (None, "")
            if sibling is None:
                raise BadInputError(f"{exc}{why}", path=model) from exc
            plan = InputsPlan(sibling)
            note = f"inputs from {sibling}, beside the model: {exc.message.split(';')[0]}"
            report = model_report(with_inputs(args, sibling), model)
    except DmlShimError as exc:
        return ModelOutcome(
            model, "error", time.perf_counter() - start, message=str(exc), inputs=plan.file or ""
        )
    except UnicodeDecodeError as exc:  # a string output that is no UTF-8: onnxruntime's run refuses it too
        return ModelOutcome(
            model, "error", time.perf_counter() - start, message=str(exc), inputs=plan.file or ""
        )
    except Exception as exc:  # one model's bug must not stop the others: report it as a crash
        where = traceback.extract_tb(exc.__traceback__)[-1]
        detail = f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})"
        return ModelOutcome(model, "crash", time.perf_counter() - start, message=f"internal error: {detail}")
    differing = [o.name for o in report.outputs if not o.match]
    return ModelOutcome(
        model,
        "match" if report.match else "mismatch",
        time.perf_counter() - start,
        outputs=len(report.outputs),
        matched=len(report.outputs) - len(differing),
        nodes=len(report.nodes),
        emulated=sum(n.placement == "dml" for n in report.nodes),
        warnings=len(report.warnings),
        message=f"differ: {', '.join(differing)}" if differing else "",
        report=report.to_json(),
        inputs=plan.file or "",
        note=note,
    )


def _in_processes(
    models: Sequence[str],
    args: argparse.Namespace,
    jobs: int,
    done: Callable[[ModelOutcome], None],
    plans: Mapping[str, InputsPlan],
) -> dict[str, ModelOutcome]:
    from concurrent.futures.process import BrokenProcessPool

    outcomes: dict[str, ModelOutcome] = {}
    broken: list[str] = []
    workers = min(jobs, len(models))
    with _pool(workers) as pool:
        try:
            with portable.sigint_blocked():  # submit starts the workers
                futures: dict[Future[ModelOutcome], str] = {
                    pool.submit(validate_one, m, args, plans.get(m)): m for m in models
                }
            for future, model in futures.items():
                try:
                    outcomes[model] = _result(future)
                    done(outcomes[model])
                except BrokenProcessPool:
                    broken.append(model)
        except BaseException:  # Ctrl-C, SIGTERM, SIGHUP: no worker outlives the command
            _stop_workers(pool)
            raise
    # A dead worker takes every unfinished model down with it: run those again, one process each, so
    # only the model that kills its process is reported as a crash.
    for model in broken:
        start = time.perf_counter()
        try:
            with _pool(1) as single:
                try:
                    with portable.sigint_blocked():
                        future = single.submit(validate_one, model, args, plans.get(model))
                    outcomes[model] = _result(future)
                except BaseException as exc:
                    if not isinstance(exc, BrokenProcessPool):
                        _stop_workers(single)
                    raise
        except BrokenProcessPool:
            outcomes[model] = ModelOutcome(
                model, "crash", time.perf_counter() - start, message="the worker process died"
            )
        done(outcomes[model])
    return outcomes


def validate_models(
    models: Sequence[str],
    args: argparse.Namespace,
    jobs: int = 1,
    progress: Progress | None = None,
    plans: Mapping[str, InputsPlan] | None = None,
) -> list[ModelOutcome]:
    """Validate every model (in ``jobs`` processes when above 1), each on the inputs its plan names
    (generated when it has none); outcomes in the order given."""
    progress = progress or Progress(False)
    plans = plans or {}
    finished = 0

    def done(outcome: ModelOutcome) -> None:
        nonlocal finished
        finished += 1
        progress.update(f"validate: {finished} of {len(models)} done ({outcome.model}: {outcome.status})")

    if jobs > 1 and len(models) > 1:
        progress.update(f"validate: {len(models)} models in {min(jobs, len(models))} processes")
        by_model = _in_processes(models, args, jobs, done, plans)
        outcomes = [by_model[m] for m in models]
    else:
        outcomes = []
        for i, model in enumerate(models, 1):
            progress.update(f"validate: {i} of {len(models)}: {model}")
            outcomes.append(validate_one(model, args, plans.get(model)))
    progress.clear()
    return outcomes


class _NamesModel(logging.Filter):
    """Prefixes ``model`` to a warning that does not name it: the table comes after every model ran, so a
    warning about an input of one of many models must say which."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.model = model

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and self.model not in (text := record.getMessage()):
            record.msg, record.args = f"{self.model}: {text}", None
        return True


@contextlib.contextmanager
def _warnings_name(model: str) -> Iterator[None]:
    """While ``model`` is validated, the warnings logged through the root handlers name it. The filter goes
    first, so the CLI's once-only filter compares the named text (two models may warn alike)."""
    named = _NamesModel(model)
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.filters.insert(0, named)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(named)


def render_text(outcomes: Sequence[ModelOutcome], level_name: str) -> str:
    """One summary table, then the notes (inputs the user did not name), the problems, the totals."""
    rows = [["model", "result", "inputs", "outputs", "gather/scatter", "emulated", "warnings", "time"]]
    for o in outcomes:
        finished = o.report is not None
        rows.append(
            [
                o.model,
                o.status.upper() if o.status != "match" else "match",
                ("beside" if o.note else "file") if o.inputs else ("generated" if finished else "-"),
                f"{o.matched}/{o.outputs}" if finished else "-",
                str(o.nodes) if finished else "-",
                str(o.emulated) if finished else "-",
                str(o.warnings) if finished else "-",
                f"{o.seconds:.1f} s",
            ]
        )
    lines = [f"dmlshim validate: {len(outcomes)} models at {level_name}", *table(rows)]
    notes = [o for o in outcomes if o.note]
    if notes:
        lines += ["", "notes:"]
        lines += [f"  {o.model}: {o.note}" for o in notes]
    problems = [o for o in outcomes if o.status != "match"]
    if problems:
        lines += ["", "problems:"]
        lines += [f"  {o.model}: {o.status}: {o.message}" for o in problems]
    counts = Counter(o.status for o in outcomes)
    lines += [
        "",
        f"summary: {counts['match']} match, {counts['mismatch']} mismatch, {counts['error']} error, "
        f"{counts['crash']} crash of {len(outcomes)} models",
    ]
    return "\n".join(lines) + "\n"


def exit_code(outcomes: Sequence[ModelOutcome]) -> int:
    """The worst of the models' exit codes."""
    return max((STATUS_EXIT[o.status] for o in outcomes), default=0)


def run(args: argparse.Namespace) -> int:
    """Validate several models with validate's options; returns the exit code."""
    models = collect_models(args.model)
    plans = plan_inputs(models, args.model, args.inputs)
    # Workers to stop: the ending signals become "interrupted". In one process there is nothing to stop, and a
    # Python handler would wait for onnxruntime's run to return (minutes): they end it at once, as python.
    pooled = args.jobs > 1 and len(models) > 1
    with _signals_interrupt() if pooled else contextlib.nullcontext():
        outcomes = validate_models(models, args, args.jobs, Progress.for_args(args), plans)
    if args.json:
        for o in outcomes:
            sys.stdout.write(json.dumps(o.to_json(), default=str) + "\n")
        counts = Counter(o.status for o in outcomes)
        summary = {str(s): counts[s] for s in STATUS_EXIT}
        doc = {"schema_version": 1, "summary": summary, "models": len(outcomes)}
        sys.stdout.write(json.dumps({**doc, "exit_code": exit_code(outcomes)}) + "\n")
    else:
        sys.stdout.write(render_text(outcomes, args.feature_level.dml_name))
    return exit_code(outcomes)
