"""``dmlshim compare DIR``: compare DxDispatch's outputs with dmlshim's expected outputs, node by node."""

from __future__ import annotations

import argparse
import json
import math

from ..dxdispatch.compare import CompareReport
from ..errors import BadInputError
from ..text import shape_text, table
from .options import add_tolerances


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the compare command's arguments."""
    parser.add_argument("directory", metavar="DIR", help="an export directory written by dmlshim export")
    add_tolerances(parser, "exact")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument(
        "--run-directml",
        action="store_true",
        help="first replay every node folder on DirectML.dll itself (under Wine on Linux; needs the stack "
        "`dmlshim directml setup` writes), writing each dml_output.npy, then compare",
    )
    parser.add_argument(
        "--stack",
        metavar="FILE",
        help="with --run-directml: the stack.json to use (default: the one in dmlshim's cache folder)",
    )


def _fmt_diff(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.6g}"


def _table(report: CompareReport) -> str:
    headers = ["node", "op", "status", "max abs diff", "first mismatch"]
    rows = [
        [
            n.node,
            n.op_type,
            n.status,
            _fmt_diff(n.max_abs_diff),
            shape_text(n.first_mismatch) if n.first_mismatch is not None else "-",
        ]
        for n in report.nodes
    ]
    return "\n".join(table([headers, *rows]))


def run(args: argparse.Namespace) -> int:
    """Compare and print the table; 0 when every node matches, 1 otherwise (2 for a bad DIR)."""
    from ..dxdispatch.compare import compare_export
    from ..fileio.filekind import KIND_NAMES, kind_of

    kind = kind_of(args.directory)
    if kind is not None:
        raise BadInputError(
            f"this is {KIND_NAMES[kind]}, not a folder: compare takes the folder dmlshim export wrote "
            "(with dml_output.npy files from dxdispatch.exe in it)",
            path=args.directory,
        )
    from ..validate.tolerances import parse_tolerances

    tolerances = parse_tolerances(args.rtol, args.atol)
    if tolerances.per_output:
        raise BadInputError(
            "compare takes one --rtol/--atol for every node; NAME:VALUE is validate's per-output form",
            value=next(iter(tolerances.per_output)),
        )
    device = None
    if args.run_directml:
        device = _run_directml(args.directory, args.stack, quiet=args.json)
    elif args.stack:
        raise BadInputError("--stack goes with --run-directml", value=args.stack)
    report = compare_export(args.directory, rtol=tolerances.rtol, atol=tolerances.atol)
    if args.json:
        doc = report.to_json()
        if device is not None:
            doc["directml"] = device
        print(json.dumps(doc, indent=2, allow_nan=False))
        return 0 if report.all_match else 1
    counts = report.counts()
    print(f"export: {report.directory} (floats: rtol {report.rtol:g}, atol {report.atol:g})")
    if report.nodes:
        print(_table(report))
    details = [n for n in report.nodes if n.detail]
    if details:
        print()
        for n in details:
            print(f"  {n.node}: {n.detail}")
    print()
    errors = f", {counts['error']} DirectML error" if counts.get("error") else ""
    print(
        f"{counts['match']} match, {counts['mismatch']} mismatch, {counts['missing']} missing{errors} "
        f"of {len(report.nodes)} node(s)"
    )
    if counts.get("missing") and device is None:
        # the per-node hint names dxdispatch.exe (Windows); the README's Linux path is DirectML.dll under Wine
        print(
            f"no DirectML output yet: replay the export with DxDispatch on Windows, or run "
            f"dmlshim compare {args.directory} --run-directml (Linux, after dmlshim directml setup)"
        )
    return 0 if report.all_match else 1


def _run_directml(directory: str, stack_path: str | None, *, quiet: bool) -> dict[str, object]:
    """Replay the export on DirectML.dll; print the device line; return the device for --json."""
    from ..dxdispatch.host_stack import load_stack
    from ..dxdispatch.real_replay import replay_export_on_directml

    replay = replay_export_on_directml(directory, stack=load_stack(stack_path))
    if not quiet:
        ran = sum(1 for n in replay.nodes if n.result.ok)
        print(
            f"replayed on {replay.device.describe()}: {ran} of {len(replay.nodes)} node(s) ran "
            f"({replay.seconds:.1f} s)"
        )
    return {
        **replay.device.to_json(),
        "seconds": round(replay.seconds, 3),
        "host_processes": replay.processes,
    }
