"""``python -m dmlshim.ort [options] SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``): run an unmodified
program with dmlshim in place of onnxruntime, its worker processes included, and print what was emulated
at exit. See docs/coming-from.md."""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from ..errors import BadInputError
from .install import SUMMARY_FILE_ENV, install

_USAGE = (
    "python -m dmlshim.ort [--summary text|json|off] [--summary-file PATH] [--emulate asked|all] "
    "(SCRIPT | -m MODULE) [ARGS...]"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dmlshim.ort",
        usage=_USAGE,
        description="Run a Python program with dmlshim in place of onnxruntime: every onnxruntime session it "
        "(or a library it uses, or a worker process it starts) creates runs its gather/scatter nodes as "
        "DirectML executes them. A summary of what was emulated is printed on stderr at exit.",
    )
    parser.add_argument(
        "--summary",
        choices=("text", "json", "off"),
        default=None,
        help="the summary at exit (default text; $DMLSHIM_ORT_SUMMARY)",
    )
    parser.add_argument("--summary-file", default=None, help="also write the JSON summary to this file")
    parser.add_argument(
        "--overwrite", action="store_true", help="let --summary-file replace an existing file"
    )
    parser.add_argument(
        "--emulate",
        choices=("asked", "all"),
        default=None,
        help="asked (default): sessions asking for DmlExecutionProvider or no provider; "
        "all: every session ($DMLSHIM_ORT_EMULATE)",
    )
    parser.add_argument("-m", dest="module", default=None, help="run a library module as a script")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="the script and its arguments")
    return parser


def _same_path(a: str, b: str) -> bool:
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Parse the options, bind dmlshim, and run the program as ``python`` would run it."""
    args = _parser().parse_args(argv)
    if args.module is None and not args.target:
        _parser().print_usage(sys.stderr)
        sys.stderr.write("python -m dmlshim.ort: error: give a script or -m MODULE\n")
        return 2
    # The script and every argument naming an existing file are inputs the summary may never replace;
    # a path the program is given that does not exist yet may be its output: never the summary's either.
    read = [a for a in args.target if os.path.isfile(a)]
    named = os.environ.get(SUMMARY_FILE_ENV) if args.summary_file is None else args.summary_file
    if named and any(_same_path(named, a) for a in args.target):
        sys.stderr.write(
            f"python -m dmlshim.ort: error: the summary file {named!r} is given to the program too; "
            "refusing to replace an input (or a file the program writes): give the summary another name\n"
        )
        return 2
    try:
        install(
            summary=args.summary,
            summary_file=args.summary_file,
            emulate=args.emulate,
            overwrite=args.overwrite,
            inputs=read,
        )
    except BadInputError as exc:
        sys.stderr.write(f"python -m dmlshim.ort: error: {exc}\n")
        return 2
    if args.module is not None:
        sys.argv = [args.module, *args.target]
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        return 0
    script, *rest = args.target
    if not os.path.isfile(script):
        sys.stderr.write(f"python -m dmlshim.ort: error: can't open file {script!r}: no such file\n")
        return 2
    sys.argv = [script, *rest]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    # __file__ absolute, as python makes it (a script that changes directory still finds its files);
    # runpy sets argv[0] to the same absolute path
    runpy.run_path(os.path.abspath(script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
