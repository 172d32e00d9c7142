"""``dmlshim validate MODEL1 MODEL2 ...`` or a folder: validate each model, then one summary table.

Each model is validated on its own, with generated inputs; a model that fails to load, raises, or kills
its worker process is reported in its row and the others still run. ``--jobs N`` spreads the models over
N worker processes. ``--json`` prints JSON lines: one object per model (with its full validate document),
then one summary object.

Exit codes: 0 every model matches, 1 some model mismatches (and none errored), 2 some model could not be
validated (bad model, bad input, crash).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import BadInputError, DmlShimError
from ..portable import process_context
from ..report.text import table
from .progress import Progress

Status = Literal["match", "mismatch", "error", "crash"]
STATUS_EXIT: dict[Status, int] = {"match": 0, "mismatch": 1, "error": 2, "crash": 2}

_SINGLE_MODEL_OPTIONS = ("inputs",)
"""validate options that describe one model and so cannot apply to several."""


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


def validate_one(model: str, args: argparse.Namespace) -> ModelOutcome:
    """Validate one model with validate's options; every failure becomes an outcome, not an exception."""
    from .validate_files import model_report

    start = time.perf_counter()
    try:
        report = model_report(args, model)
    except DmlShimError as exc:
        return ModelOutcome(model, "error", time.perf_counter() - start, message=str(exc))
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
    )


def _in_processes(
    models: Sequence[str], args: argparse.Namespace, jobs: int, done: Callable[[ModelOutcome], None]
) -> dict[str, ModelOutcome]:
    outcomes: dict[str, ModelOutcome] = {}
    broken: list[str] = []
    with ProcessPoolExecutor(max_workers=min(jobs, len(models)), mp_context=process_context()) as pool:
        futures: dict[Future[ModelOutcome], str] = {pool.submit(validate_one, m, args): m for m in models}
        for future, model in futures.items():
            try:
                outcomes[model] = future.result()
                done(outcomes[model])
            except BrokenProcessPool:
                broken.append(model)
    # A dead worker takes every unfinished model down with it: run those again, one process each, so
    # only the model that kills its process is reported as a crash.
    for model in broken:
        start = time.perf_counter()
        try:
            with ProcessPoolExecutor(max_workers=1, mp_context=process_context()) as pool:
                outcomes[model] = pool.submit(validate_one, model, args).result()
        except BrokenProcessPool:
            outcomes[model] = ModelOutcome(
                model, "crash", time.perf_counter() - start, message="the worker process died"
            )
        done(outcomes[model])
    return outcomes


def validate_models(
    models: Sequence[str], args: argparse.Namespace, jobs: int = 1, progress: Progress | None = None
) -> list[ModelOutcome]:
    """Validate every model (in ``jobs`` processes when above 1); outcomes in the order given."""
    progress = progress or Progress(False)
    finished = 0

    def done(outcome: ModelOutcome) -> None:
        nonlocal finished
        finished += 1
        progress.update(f"validate: {finished} of {len(models)} done ({outcome.model}: {outcome.status})")

    if jobs > 1 and len(models) > 1:
        progress.update(f"validate: {len(models)} models in {min(jobs, len(models))} processes")
        by_model = _in_processes(models, args, jobs, done)
        outcomes = [by_model[m] for m in models]
    else:
        outcomes = []
        for i, model in enumerate(models, 1):
            progress.update(f"validate: {i} of {len(models)}: {model}")
            outcomes.append(validate_one(model, args))
    progress.clear()
    return outcomes


def render_text(outcomes: Sequence[ModelOutcome], level_name: str) -> str:
    """One summary table, then the problems, then the totals."""
    rows = [["model", "result", "outputs", "gather/scatter", "emulated", "warnings", "time"]]
    for o in outcomes:
        finished = o.report is not None
        rows.append(
            [
                o.model,
                o.status.upper() if o.status != "match" else "match",
                f"{o.matched}/{o.outputs}" if finished else "-",
                str(o.nodes) if finished else "-",
                str(o.emulated) if finished else "-",
                str(o.warnings) if finished else "-",
                f"{o.seconds:.1f} s",
            ]
        )
    lines = [f"dmlshim validate: {len(outcomes)} models at {level_name}", *table(rows)]
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
    for name in _SINGLE_MODEL_OPTIONS:
        if getattr(args, name, None):
            raise BadInputError(
                f"--{name.replace('_', '-')} describes one model; validate several models without it "
                "(inputs are generated for each), or validate each model on its own",
                value=name,
            )
    models = collect_models(args.model)
    outcomes = validate_models(models, args, args.jobs, Progress.for_args(args))
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
