"""Which inputs each model of a ``dmlshim validate`` of several models runs on.

``--inputs DIR`` gives each model the ``<stem>.npz`` of DIR, below it as the model is below the folder it
was found in (``validate models/ --inputs feeds/``: ``models/a/b.onnx`` runs on ``feeds/a/b.npz``); a
model named on its own runs on ``DIR/<stem>.npz``. A missing file is that model's error: never generated
inputs in place of the ones asked for.

Without ``--inputs`` inputs are generated. A model for which no inputs can be generated (an input declared
without a shape, of a type nothing is drawn for) then runs on the ``<stem>.npz`` beside it, provided that
file holds an array for every input the model needs and none it does not have; the row says so. Anything
else (no such file, other names) stays the model's error, with the file named in the hint.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInputError, DmlShimError


@dataclass(frozen=True)
class InputsPlan:
    """The inputs of one model: ``file`` (None: generated), or why the file asked for is not there."""

    file: str | None = None
    missing: str = ""


def plan_inputs(models: Sequence[str], given: Sequence[str], inputs: str | None) -> dict[str, InputsPlan]:
    """Each model's inputs file under ``--inputs`` (``inputs``), from the paths given on the command line.

    Raises:
        BadInputError: ``inputs`` is a file (it describes one model) with several models to validate.
    """
    if inputs is None:
        return {}
    folder = Path(inputs)
    if not folder.is_dir():
        raise BadInputError(
            f"--inputs describes one model when it names a file ({inputs}); to validate several models give "
            "--inputs a folder holding <model name>.npz for each, or validate each model on its own",
            path=inputs,
            value="inputs",
        )
    plans: dict[str, InputsPlan] = {}
    for model in models:
        relative = _below_given(model, given)
        target = folder / relative.with_suffix(".npz")
        if target.is_file():
            plans[model] = InputsPlan(str(target))
        else:
            plans[model] = InputsPlan(
                missing=f"--inputs {inputs} holds no inputs file for this model: expected {target}"
            )
    return plans


def inputs_file_of(model: str, inputs: str) -> str:
    """``--inputs`` for one model: ``inputs`` itself, or ``<inputs>/<stem>.npz`` when it is a folder.

    Raises:
        BadInputError: the folder holds no ``<stem>.npz``.
    """
    folder = Path(inputs)
    if not folder.is_dir():
        return inputs
    target = folder / (Path(model).stem + ".npz")
    if not target.is_file():
        raise BadInputError(
            f"--inputs {inputs} is a folder, and it holds no inputs file for this model: expected {target}",
            path=model,
            value=str(target),
        )
    return str(target)


def _below_given(model: str, given: Sequence[str]) -> Path:
    """The model's path below the folder of ``given`` it was found in (its name when given as a file)."""
    path = Path(model)
    for text in given:
        root = Path(text)
        if root.is_dir():
            try:
                return path.relative_to(root)
            except ValueError:
                continue
    return Path(path.name)


def with_inputs(args: argparse.Namespace, inputs: str | None) -> argparse.Namespace:
    """validate's options for one model, with ``inputs`` as its ``--inputs``."""
    if inputs == args.inputs:
        return args
    one = copy.copy(args)
    one.inputs = inputs
    return one


def sibling_inputs(model: str, why: DmlShimError) -> tuple[str | None, str]:
    """The ``<stem>.npz`` beside ``model`` when it holds exactly the model's inputs, else None and a hint
    for the error saying why the file (if any) was not used. ``why`` is why no inputs were generated."""
    sibling = Path(model).with_suffix(".npz")
    if not sibling.is_file():
        return None, ""
    try:
        names = _file_names(sibling)
        needed, allowed = _model_inputs(model)
    except DmlShimError as exc:
        return None, f"; {sibling} beside it cannot be used: {exc}"
    absent = sorted(needed - names)
    unknown = sorted(names - allowed)
    if absent or unknown:
        what = "; ".join(
            part
            for part in (
                f"it lacks {', '.join(map(repr, absent))}" if absent else "",
                f"{', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} not an input"
                if unknown
                else "",
            )
            if part
        )
        return None, f"; {sibling} beside it does not hold this model's inputs ({what})"
    return str(sibling), ""


def _file_names(path: Path) -> set[str]:
    """The array names of an ``.npz`` (read with dmlshim's careful reader)."""
    from ..fileio.array_files import read_arrays

    return set(read_arrays(str(path), what="inputs file"))


def _model_inputs(model: str) -> tuple[set[str], set[str]]:
    """(inputs the model needs, inputs it accepts): graph inputs without and with an initializer."""
    from ..execute.weights.model_source import load_model

    graph = load_model(model, weightless=True).proto.graph
    initialized = {t.name for t in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
    accepted = {i.name for i in graph.input}
    return accepted - initialized, accepted
