"""Command-line options shared by several subcommands, defined once."""

from __future__ import annotations

import argparse

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..errors import BadInputError


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


def add_input_shape(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--input-shape NAME=D0,D1,..`` (repeatable)."""
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,..", help=help_text)


def input_shapes(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    """The ``--input-shape`` options as name -> shape; a name given twice is a usage error."""
    from ..translate.shapes_info import parse_input_shape

    shapes: dict[str, tuple[int, ...]] = {}
    for text in args.input_shape:
        name, dims = parse_input_shape(text)
        if name in shapes:
            raise BadInputError(f"--input-shape given twice for {name!r}", value=name)
        shapes[name] = dims
    return shapes


def tolerance_type(text: str) -> float:
    """argparse type of ``--rtol`` / ``--atol``: a number >= 0 (defaults: dmlshim.comparison)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value
