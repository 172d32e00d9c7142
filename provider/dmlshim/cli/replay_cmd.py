"""``dmlshim replay MODEL.json``: run a DxDispatch model file with dmlshim's kernels instead of DirectML."""

from __future__ import annotations

import argparse

from ..dml.enums import FeatureLevel
from .options import add_feature_level, output_path_arg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the replay command's arguments."""
    parser.add_argument("model", metavar="MODEL.json", help="a DxDispatch model file")
    out = parser.add_mutually_exclusive_group()
    out.add_argument(
        "-o",
        "--output",
        dest="output_path",
        metavar="DIR",
        type=output_path_arg,
        default=None,
        help="folder that writeFile targetPaths are relative to (default: the current directory), "
        "like dxdispatch --output_path",
    )
    out.add_argument(
        "--output-path", dest="output_path", type=output_path_arg, help=argparse.SUPPRESS
    )  # the old spelling
    add_feature_level(parser, "validated and executed")
    parser.add_argument(
        "--clamp-indices",
        action="store_true",
        help="clamp out-of-range indices instead of failing (DirectML leaves their result undefined)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files that already exist at writeFile targets (refused otherwise)",
    )


def run(args: argparse.Namespace) -> int:
    """Replay the model, printing what DxDispatch would print; returns the exit code."""
    from ..dxdispatch.replay import replay
    from ..fileio.filekind import require_dxdispatch_model
    from ..kernels import IndexMode

    require_dxdispatch_model(args.model)

    level: FeatureLevel = args.feature_level
    result = replay(
        args.model,
        output_path=args.output_path,
        feature_level=level,
        index_mode=IndexMode.CLAMP if args.clamp_indices else IndexMode.ERROR,
        overwrite=args.overwrite,
    )
    print(f"Running on 'dmlshim (emulated DirectML, {level.dml_name})'")
    for line in result.messages:
        print(line)
    return 0
