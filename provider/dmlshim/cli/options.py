"""Command-line options shared by several subcommands, defined once."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import onnx

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..errors import BadInputError
from ..fileio.nul_paths import as_onnxruntime_reads

INPUT_SHAPE_HELP = (
    "NAME=D0,D1,.. the shape of graph input NAME, or SYMBOL=N the size of a symbolic dimension "
    "(e.g. batch=1, past_sequence_length=7) wherever it appears; repeatable"
)


def feature_level_type(text: str) -> FeatureLevel:
    """argparse type: ``3_0``, ``3.0``, ``0x3000`` or ``DML_FEATURE_LEVEL_3_0``."""
    try:
        return FeatureLevel.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_feature_level(parser: argparse.ArgumentParser, purpose: str = "target") -> None:
    """``--feature-level/-l L``, defaulting to what onnxruntime-directml requires."""
    parser.add_argument(
        "--feature-level",
        "-l",
        type=feature_level_type,
        default=DEFAULT_FEATURE_LEVEL,
        metavar="L",
        help=f"{purpose} DirectML feature level: 3_0, 3.0, 0x3000 or DML_FEATURE_LEVEL_3_0 "
        f"(default {DEFAULT_FEATURE_LEVEL.short}, what onnxruntime-directml requires)",
    )


def add_engine(parser: argparse.ArgumentParser) -> None:
    """``--engine E``: the execution engine (``dmlshim.InferenceSession(engine=E)``), default partitioned.

    An unknown name is refused by the session, which lists the engines it knows."""
    from ..execute.engine import engine_names  # no onnxruntime import: building a parser stays cheap

    parser.add_argument(
        "--engine",
        default="partitioned",
        metavar="E",
        help=f"execution engine: {', '.join(engine_names())} (default partitioned; docs/engines.md)",
    )


def path_arg(text: str) -> str:
    """A file or folder argument: never empty (``--reference-outputs "$UNSET"`` would otherwise compare
    nothing, ``-o ""`` write nothing, ``--inputs ""`` generate inputs, each with exit 0)."""
    if not text:
        raise argparse.ArgumentTypeError("the path is empty")
    return text


def model_path_arg(text: str) -> str:
    """A ``MODEL`` argument, read up to a NUL as onnxruntime reads a model path (no command line holds one;
    ``main([...])`` from Python may), so that every later check (an output that is an input) sees that
    file."""
    if text.startswith("\x00"):  # onnxruntime reads the empty name (NoSuchFile): a usage error here
        raise argparse.ArgumentTypeError(f"{text!r} starts with a NUL character: the name read is empty")
    # a name that is no UTF-8 is refused when the model is loaded (one error line, exit 2)
    return as_onnxruntime_reads(text, utf8_checked=False)


def output_path_arg(text: str) -> str:
    """A file or folder dmlshim writes: as :func:`path_arg`, and never ``-``. Tools read ``-`` as standard
    output, which these outputs (an .npz, a folder, a model, a page) never go to; ``./-`` names a file
    called ``-``. A NUL is refused (the name would be cut there)."""
    if "\x00" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} contains a NUL character; the name would be cut there, so nothing is written"
        )
    if text == "-":
        raise argparse.ArgumentTypeError(
            "'-' (standard output) is not supported: this output is written to a file; write ./- for a "
            "file named '-'"
        )
    return path_arg(text)


def seed_type(text: str) -> int:
    """``--seed``: a whole number >= 0 (numpy's generators take no negative seed)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0: {text!r}")
    return value


def add_html(parser: argparse.ArgumentParser, shows: str) -> None:
    """``--html REPORT.html``: the self-contained page of the graph, ``shows`` saying what a click gives."""
    parser.add_argument(
        "--html",
        metavar="REPORT.html",
        type=output_path_arg,
        help="also write a self-contained HTML page: the graph, each gather/scatter node coloured by where "
        f"it {shows} on click (needs igraph: the html extra, docs/inspect.md)",
    )


def add_input_shape(parser: argparse.ArgumentParser, help_text: str = INPUT_SHAPE_HELP) -> None:
    """``--input-shape NAME=D0,D1,..`` or ``--input-shape SYMBOL=N`` (repeatable)."""
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,..", help=help_text)


_MAX_DIM = 2**63 - 1
"""The largest size an ONNX dimension (an int64) holds."""


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=D0,D1,..`` -> (name, dims); ``NAME=`` is a scalar. NAME is an input or a symbol.

    The last ``=`` separates the sizes, so a symbol such as ``a=b`` can still be named.

    Raises:
        BadInputError: the text is not of that form or a size is not a non-negative integer.
    """
    name, sep, dims_text = text.rpartition("=")
    name = name.strip()
    if not sep or not name:
        raise BadInputError(
            f"--input-shape expects NAME=D0,D1,.. (a graph input) or SYMBOL=N (a symbolic dimension), "
            f"got {text!r}",
            value=text,
        )
    dims: list[int] = []
    for part in (p.strip() for p in dims_text.split(",")):
        if not part and dims_text.strip():
            raise BadInputError(f"--input-shape {text!r}: an empty size between commas", value=text)
        if not part:
            continue
        if not (part.isascii() and part.isdigit()):  # '²' is a digit to str.isdigit, not to int()
            raise BadInputError(
                f"--input-shape {text!r}: size {part!r} is not a non-negative integer", value=text
            )
        if int(part) > _MAX_DIM:  # an ONNX dimension is an int64: a larger size failed deep in protobuf
            raise BadInputError(
                f"--input-shape {text!r}: size {part} is past the largest ONNX dimension, 2**63-1 "
                f"({_MAX_DIM})",
                value=text,
            )
        dims.append(int(part))
    return name, tuple(dims)


def input_shapes(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    """The ``--input-shape`` options as name -> sizes; a name given twice is a usage error."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in getattr(args, "input_shape", None) or []:
        name, dims = parse_input_shape(text)
        if name in shapes:
            raise BadInputError(f"--input-shape given twice for {name!r}", value=name)
        shapes[name] = dims
    return shapes


def apply_input_shapes(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, tuple[int, ...]]:
    """For commands that keep dimensions symbolic (inspect, lower): fix the named symbols in ``model``'s
    graph inputs in place and return the whole-input shapes, for shape inference.

    Raises:
        BadInputError: a name is neither an input nor a symbol, or a size contradicts the model.
    """
    if not shapes:
        return {}
    from ..inputs.symbols import fix_symbols  # (the inputs package is not imported without shapes)

    return fix_symbols(model, shapes)


def add_tolerances(parser: argparse.ArgumentParser, default: str) -> None:
    """``--rtol`` / ``--atol`` as every command takes them: ``VALUE`` for all floating-point values, or
    ``NAME:VALUE`` (repeatable) for one (parsed by :func:`dmlshim.validate.tolerances.parse_tolerances`)."""
    for flag, what in (("rtol", "relative"), ("atol", "absolute")):
        parser.add_argument(
            f"--{flag}",
            action="append",
            type=tolerance_spec,
            metavar="[NAME:]VALUE",
            help=f"{what} tolerance for floating-point values, for all or (NAME:VALUE, repeatable) one "
            f"(default: {default})",
        )


def tolerance_spec(text: str) -> str:
    """argparse type of ``--rtol`` / ``--atol``: ``VALUE`` or ``NAME:VALUE``, VALUE a number >= 0."""
    name, sep, number = text.rpartition(":")
    if sep and not name:
        raise argparse.ArgumentTypeError(f"the name before ':' is empty: {text!r}")
    tolerance_type(number)
    return text


def tolerance_type(text: str) -> float:
    """argparse type of ``--rtol`` / ``--atol``: a number >= 0 (defaults: dmlshim.comparison)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text!r}")
    return value
