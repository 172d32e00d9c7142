"""``dmlshim directml setup [--check]``: set up (or report on) real DirectML on Linux.

The stack (Wine, vkd3d with DXIL, Mesa lavapipe, a Windows node.exe with onnxruntime-node's DirectML) is
built from the package registries into ``${DMLSHIM_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/dmlshim}/directml``;
see docs/directml-linux.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="directml_command", metavar="ACTION")
    setup = sub.add_parser("setup", help="set the real-DirectML stack up (Debian/Ubuntu; apt needs root)")
    setup.add_argument(
        "--check", action="store_true", help="only report what is in place; exit 1 if incomplete"
    )
    setup.add_argument(
        "--dir", type=Path, default=None, help="the stack folder (default: the user cache folder)"
    )
    setup.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    sweep = sub.add_parser(
        "sweep", help="run models on real DirectML; compare with dmlshim's emulation and onnxruntime CPU"
    )
    sweep.add_argument(
        "models",
        metavar="MODEL",
        nargs="+",
        type=Path,
        help="ONNX models (inputs from M.npz beside each, if any)",
    )
    sweep.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    sweep.add_argument(
        "--fail-on-difference",
        action="store_true",
        help="exit 1 when real DirectML differs from the emulation",
    )
    info = sub.add_parser("info", help="print the set-up stack's stack.json")
    info.add_argument("--dir", type=Path, default=None, help="the stack folder")
    info.add_argument("--json", action="store_true", default=True, help=argparse.SUPPRESS)
    for action in (setup, sweep, info):  # -q after the action too, as after every other command
        action.add_argument(
            "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress lines"
        )


def _progress(quiet: bool):  # type: ignore[no-untyped-def]
    start = time.monotonic()

    def show(line: str) -> None:
        if not quiet:
            print(
                f"dmlshim directml setup [{time.monotonic() - start:6.1f}s] {line}",
                file=sys.stderr,
                flush=True,
            )

    return show


def run(args: argparse.Namespace) -> int:
    from ..directml.setup import Setup
    from ..directml.stack import load_stack

    action = getattr(args, "directml_command", None)
    if action == "info":
        stack = load_stack(args.dir)
        print(json.dumps(stack.raw, indent=2))
        return 0
    if action == "sweep":
        return _sweep(args)
    if action != "setup":
        print("dmlshim directml: name an action: setup [--check], sweep MODEL..., info", file=sys.stderr)
        return 2
    setup = Setup(args.dir, progress=_progress(bool(getattr(args, "quiet", False))))
    if not args.check:
        times = setup.run()
        total = sum(times.values())
        print(f"DirectML stack ready in {setup.folder} ({total:.0f} s this run)", file=sys.stderr)
    states = setup.check()
    complete = all(s.done for s in states)
    if args.json:
        doc = {
            "schema_version": 1,
            "command": "directml setup",
            "folder": str(setup.folder),
            "complete": complete,
            "pieces": [{"name": s.name, "in_place": s.done, "detail": s.detail} for s in states],
        }
        print(json.dumps(doc, indent=2))
    else:
        for s in states:
            print(f"{'ok  ' if s.done else 'MISSING'} {s.name:12} {s.detail}")
        print(f"stack {'complete' if complete else 'incomplete'}: {setup.folder}")
    return 0 if complete else 1


def _sweep(args: argparse.Namespace) -> int:
    from ..directml.stack import load_stack
    from ..directml.sweep import sweep_one, table

    stack = load_stack()
    results = []
    for path in args.models:
        if not getattr(args, "quiet", False):
            print(f"dmlshim directml sweep: {path}", file=sys.stderr, flush=True)
        results.append(sweep_one(path))
    if args.json:
        doc = {
            "schema_version": 1,
            "command": "directml sweep",
            "stack": stack.versions,
            "results": [r.to_json() for r in results],
        }
        print(json.dumps(doc, indent=2))
    else:
        print(stack.describe())
        print("\n".join(table(results)))
    unexplained = [
        r
        for r in results
        if (r.outcome in ("refused", "failed") and not r.predicted_refusal)
        or (
            r.outcome == "ran"
            and r.vs_emulation is not None
            and not r.vs_emulation.equal
            and args.fail_on_difference
        )
    ]
    return 1 if unexplained else 0
