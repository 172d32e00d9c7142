"""``python -m dmlshim.ort [options] SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``): run an unmodified
program with dmlshim in place of onnxruntime, its worker processes included, and print what was emulated
at exit. See docs/coming-from.md."""

from __future__ import annotations

import argparse
import builtins
import importlib.util
import os
import runpy
import sys
import types
import zipfile

from ..errors import DmlShimError
from .install import SUMMARY_FILE_ENV, install

_USAGE = (
    "python -m dmlshim.ort [--summary text|json|off] [--summary-file PATH] [--emulate asked|all] "
    "[--engine NAME] (SCRIPT | -m MODULE) [ARGS...]"
)
_VALUED = ("--summary", "--summary-file", "--emulate", "--engine")
"""dmlshim's own options that take a value (``--opt VALUE`` or ``--opt=VALUE``)."""


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
    parser.add_argument(
        "--engine",
        default=None,
        help="the engine of every emulated session (default partitioned; customop emulates the nodes "
        "inside If/Loop/Scan bodies too; $DMLSHIM_ORT_ENGINE)",
    )
    return parser


def _same_path(a: str, b: str) -> bool:
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # ValueError: a NUL (the summary file is then refused with its reason)
        return False


def split_argv(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """``argv`` as ``python`` reads its own: dmlshim's options, then ``-m MODULE`` or ``SCRIPT``, and every
    argument after the module or script passed through untouched (options looking like dmlshim's too).
    Returns (own options, module or None, [script] + its arguments or the module's arguments)."""
    own: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return own, (argv[i + 1] if i + 1 < len(argv) else ""), argv[i + 2 :]
        if arg.startswith("-m") and not arg.startswith("--"):  # -mpytest, as python takes it
            return own, arg[2:], argv[i + 1 :]
        if arg == "--":
            return own, None, argv[i + 1 :]
        if not arg.startswith("-") or arg == "-":
            return own, None, argv[i:]
        own.append(arg)
        if arg in _VALUED and i + 1 < len(argv):
            own.append(argv[i + 1])
            i += 1
        i += 1
    return own, None, []


def main(argv: list[str] | None = None) -> int:
    """Parse the options, bind dmlshim, and run the program as ``python`` would run it."""
    own, module, target = split_argv(sys.argv[1:] if argv is None else list(argv))
    args = _parser().parse_args(own)
    if not module and not target:
        _parser().print_usage(sys.stderr)
        sys.stderr.write("python -m dmlshim.ort: error: give a script or -m MODULE\n")
        return 2
    # The script and every argument naming an existing file are inputs the summary may never replace;
    # a path the program is given that does not exist yet may be its output: never the summary's either.
    read = [a for a in target if os.path.isfile(a)]
    named = os.environ.get(SUMMARY_FILE_ENV) if args.summary_file is None else args.summary_file
    if named and any(_same_path(named, a) for a in target):
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
            engine=args.engine,
            overwrite=args.overwrite,
            inputs=read,
        )
    except DmlShimError as exc:
        sys.stderr.write(f"python -m dmlshim.ort: error: {exc}\n")
        return 2
    # SIGTERM (SIGHUP) ends the program as it ends it under python, at once: no Python handler, which
    # would run only when the main thread runs Python again (a program waiting on a lock while the signal
    # lands on another thread never ended). The state folder it leaves is swept by the next run
    # (dmlshim.fileio.stale_folders), as one a SIGKILL left.
    return _run(module, target)


_MAIN_GLOBALS = {"__builtins__": builtins}
"""What python's ``__main__`` holds before the program runs: ``__builtins__`` the module (runpy's fresh
globals gave the program the module's dict, and ``__builtins__.open`` raised AttributeError)."""


def _run(module: str | None, target: list[str]) -> int:
    """Run the program (``-m MODULE`` or a script, folder, archive or ``-``) as ``python`` runs it."""
    if module is not None:
        missing = _missing_module(module)
        if missing:  # as python -m says it: one line, exit 1, no traceback
            sys.stderr.write(f"{sys.executable}: {missing}\n")
            return 1
        sys.argv = [module, *target]
        runpy.run_module(module, _MAIN_GLOBALS, run_name="__main__", alter_sys=True)
        return 0
    script, *rest = target
    if script == "-":  # as `python -`: the program is read from standard input
        sys.argv = ["-", *rest]
        sys.path[0] = ""
        # bytes, as python reads them: compile() honours a coding declaration and a UTF-8 BOM (text
        # decoded with the locale's codec was a UnicodeEncodeError or a SyntaxError at U+FEFF)
        stdin = getattr(sys.stdin, "buffer", sys.stdin)
        _run_source(stdin.read(), "<stdin>")
        return 0
    if os.path.isdir(script) or (os.path.isfile(script) and zipfile.is_zipfile(script)):
        # as python runs a folder or a zip archive: its __main__ module, the folder first on sys.path
        if not _has_main(script):
            sys.stderr.write(
                f"{sys.executable}: can't find '__main__' module in {os.path.abspath(script)!r}\n"
            )
            return 1
        sys.argv = [script, *rest]
        runpy.run_path(script, _MAIN_GLOBALS, run_name="__main__")
        return 0
    if not os.path.isfile(script):
        sys.stderr.write(f"python -m dmlshim.ort: error: can't open file {script!r}: no such file\n")
        return 2
    sys.argv = [script, *rest]
    # the folder of the script's real file, as python puts it first: a script linked into ~/bin still
    # imports the modules beside it (the link's own folder made them ModuleNotFoundError)
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    # __file__ absolute, as python makes it (a script that changes directory still finds its files);
    # runpy sets argv[0] to the same absolute path
    runpy.run_path(os.path.abspath(script), _MAIN_GLOBALS, run_name="__main__")
    return 0


def _has_main(path: str) -> bool:
    """Whether a folder or zip archive holds the ``__main__`` module python would run."""
    names = ("__main__.py", "__main__.pyc")
    if os.path.isdir(path):
        return any(os.path.isfile(os.path.join(path, n)) for n in names)
    with zipfile.ZipFile(path) as archive:
        return any(n in archive.NameToInfo for n in names)


def _run_source(source: str | bytes, filename: str) -> None:
    """Run program text as the ``__main__`` module, as python runs ``python -``."""
    main_module = types.ModuleType("__main__")
    main_module.__dict__["__builtins__"] = builtins
    main_module.__dict__.update(__file__=filename, __cached__=None)  # as python's __main__ for stdin
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main_module
    try:
        exec(compile(source, filename, "exec"), main_module.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _missing_module(module: str) -> str | None:
    """Why ``python -m module`` would not start (python's own words), or None when it would."""
    try:
        spec = importlib.util.find_spec(module)
        package = spec is not None and spec.submodule_search_locations is not None
        if package and importlib.util.find_spec(f"{module}.__main__") is None:
            return (
                f"No module named {module}.__main__; {module!r} is a package and cannot be directly executed"
            )
    except (ImportError, ValueError) as exc:
        kind = type(exc).__name__
        return f"Error while finding module specification for {module!r} ({kind}: {exc})"
    return None if spec is not None else f"No module named {module}"


if __name__ == "__main__":
    sys.exit(main())
