"""Entry point of the ``dmlshim`` command: one subcommand module per job.

Each command module defines ``add_arguments(parser)`` and ``run(args) -> int``. Errors that dmlshim raises
on purpose become one paragraph on stderr and the error's exit code (2 usage / bad input, 1 unsupported or
mismatch); a traceback is shown only with ``--debug``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from google.protobuf.message import DecodeError, EncodeError

from ..errors import DmlShimError
from ..resources import out_of_memory, too_deep
from ..startup import interrupts_raise
from ..text import printable

log = logging.getLogger(__name__)

COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("inspect_cmd", "show the DirectML descriptor each gather/scatter node becomes"),
    "run": ("run_cmd", "run a model with gather/scatter executed through DirectML descriptors"),
    "validate": ("validate_cmd", "compare a model's outputs under dmlshim with onnxruntime CPU"),
    "conformance": ("conformance_cmd", "run the ONNX backend node tests for gather/scatter"),
    "lower": ("lower_cmd", "write the model with each translated node as a custom-op node"),
    "export": ("export_cmd", "export translated nodes as DxDispatch models for real DirectML"),
    "compare": ("compare_cmd", "compare DxDispatch outputs with dmlshim's expected outputs"),
    "replay": ("replay_cmd", "execute a DxDispatch model file with dmlshim's kernels"),
    "directml": (
        "directml_cmd",
        "real DirectML on Linux (Wine + vkd3d + lavapipe): setup [--check], sweep MODEL..., info",
    ),
}
"""Subcommand name -> (module in dmlshim.cli, one-line help)."""


SHARED_OPTIONS = frozenset(
    {
        "--json",
        "--engine",
        "--input-shape",
        "--inputs",
        "--feature-level",
        "--output",
        "--overwrite",
        "--seed",
    }
)
"""Options several commands take, each meaning the same in all of them (docs/commands.md)."""


def _suggest(word: str, choices: Sequence[str]) -> str:
    import difflib  # only a misspelt word pays for it

    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    if not close and not word.startswith("-"):
        close = [c for c in choices if c.startswith(word[:3])][:3]
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a misspelt command or option."""

    _argv: Sequence[str] = ()

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def _command(self) -> argparse.ArgumentParser | None:
        """The parser of the command named on the command line, if one is."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                command = next((w for w in self._argv if w in action.choices), None)
                return action.choices[command] if command else None
        return None

    def _options(self) -> list[str]:
        """This parser's option strings and those of the command named on the command line."""
        options = [s for a in self._actions for s in a.option_strings]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                named = self._command()
                subs = [named] if named else list(action.choices.values())
                options += [s for sub in subs for a in sub._actions for s in a.option_strings]
        return sorted(set(options))

    def _hint(self, option: str, named: argparse.ArgumentParser | None) -> str:
        """A "did you mean" for a misspelt option; for a shared option the command lacks, that it lacks it
        (``lower --json`` is not a misspelt ``--version``)."""
        if named is not None and option in SHARED_OPTIONS:
            return f"; {named.prog} has no {option} option (see {named.prog} --help)"
        return _suggest(option, self._options())

    def error(self, message: str) -> NoReturn:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and "invalid choice" in message:
                words = [w for w in message.split("'") if w and w not in action.choices]
                if words:
                    message = f"unknown command {words[1]!r}" if len(words) > 1 else message
                    word = words[1] if len(words) > 1 else ""
                    message += _suggest(word, list(action.choices))
                    message += f" (commands: {', '.join(action.choices)})"
        if message.startswith("unrecognized arguments: "):
            unknown = message.removeprefix("unrecognized arguments: ").split()
            named = self._command()
            hints = [self._hint(w.split("=")[0], named) for w in unknown if w.startswith("-")]
            message += "".join(h for h in hints if h)
            if named is not None:  # the command's usage and name, as argparse gives for its other errors
                argparse.ArgumentParser.error(named, message)
        super().error(message)


def _named_command(argv: Sequence[str] | None) -> str | None:
    """The subcommand ``argv`` names (the first word that is not an option), when it is one."""
    word = next((w for w in argv or () if not w.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every available subcommand, or with only the one ``argv`` names: each
    command module imports what its job needs, and a command should not pay for the others' imports."""
    from ..version import __version__

    parser = _Parser(
        prog="dmlshim",
        description="Run and validate ONNX gather/scatter nodes exactly as DirectML executes them.",
    )
    parser.add_argument("--version", action="version", version=f"dmlshim {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    parser.add_argument("-v", "--verbose", action="store_true", help="info-level logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = _named_command(argv)
    for name, (module_name, help_text) in COMMANDS.items():
        if named is not None and name != named:
            continue
        try:
            module = importlib.import_module(f"{__package__}.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{module_name}":
                raise
            continue
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        cmd.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        quiet_help = "no progress lines on stderr"
        cmd.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=quiet_help)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def _os_error_text(exc: OSError) -> str:
    """An ``OSError``'s words and the file it names (``File name too long: 'x...'``)."""
    words = exc.strerror or str(exc) or type(exc).__name__
    name = os.fsdecode(exc.filename) if isinstance(exc.filename, bytes) else exc.filename
    return f"file {name!r}: {words}" if isinstance(name, str) else words


def _json_error(args: argparse.Namespace | None, exc: BaseException, code: int) -> None:
    """With ``--json``, the error as a JSON object on stdout too (the paragraph stays on stderr)."""
    if (args is not None and not getattr(args, "json", False)) or isinstance(exc, BrokenPipeError):
        return
    fields = {k: getattr(exc, k, None) for k in ("path", "node", "op_type", "tensor", "rule", "value")}
    kind = "UsageError" if args is None else getattr(exc, "reported_as", type(exc).__name__)
    text = DmlShimError.__str__(exc) if isinstance(exc, DmlShimError) else str(exc)
    error = {"type": kind, "message": text, "exit_code": code}
    error.update({k: v for k, v in fields.items() if v is not None})
    doc = {"schema_version": 1, "command": getattr(args, "command", None), "error": error}
    with contextlib.suppress(OSError):  # stdout is gone (a closed pipe): the stderr paragraph has to do
        print(json.dumps(doc, indent=2, default=str))


class _PrintableStdout:
    """stdout with control characters other than line breaks and tabs escaped (see
    :func:`dmlshim.text.printable`): a report prints names read from the model, and a name holding an escape
    sequence or a carriage return must not reach the terminal as one."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(_STDOUT_CONTROL.sub(lambda m: repr(m.group())[1:-1], text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _PrintableFormatter(logging.Formatter):
    """Log records with control characters escaped in their message (a warning naming a model's node or
    tensor); a traceback (``--debug``) keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))


class _OnceFilter(logging.Filter):
    """Drops a warning already printed word for word during this command (a model read again, as
    validate's retry on the inputs beside it does, would repeat onnx.checker's finding)."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or record.exc_info:
            return True
        key = (record.name, record.levelno, record.getMessage())
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


def configure_logging(level: int) -> None:
    """The command's log output on stderr: ``LEVEL logger: message``, control characters escaped, each
    warning once. Also run in ``validate --jobs`` workers, whose warnings would otherwise be lost."""
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        if handler.formatter is not None and not isinstance(handler.formatter, _PrintableFormatter):
            handler.setFormatter(_PrintableFormatter(handler.formatter._fmt))
        if isinstance(handler.formatter, _PrintableFormatter):  # ours: each command starts afresh
            for old in [f for f in handler.filters if isinstance(f, _OnceFilter)]:
                handler.removeFilter(old)
            handler.addFilter(_OnceFilter())


_STDOUT_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    usage = io.StringIO()
    try:
        with contextlib.redirect_stderr(usage):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        sys.stderr.write(usage.getvalue())
        if exc.code not in (0, None) and "--json" in argv:
            lines = usage.getvalue().strip().splitlines()
            _json_error(None, ValueError(lines[-1] if lines else "invalid command line"), 2)
        raise
    sys.stderr.write(usage.getvalue())
    debug = bool(getattr(args, "debug", False))
    configure_logging(logging.DEBUG if debug else (logging.INFO if args.verbose else logging.WARNING))
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    if args.command != "replay":
        # onnxruntime's extension module clears a KeyboardInterrupt raised while it initialises: the
        # import then succeeds and the command ran to its end, exit 0, as if Ctrl-C had not been pressed
        # (export, 3 of 24 tries at 0.2-0.45 s). Imported while Ctrl-C still ends the starting command.
        importlib.import_module("onnxruntime")
    interrupts_raise()  # Ctrl-C is handled below from here on (KeyboardInterrupt: "interrupted", 130)
    try:
        from ..limits import memory_limit

        memory_limit()  # a malformed DMLSHIM_MEMORY_LIMIT: one error before any work
        with contextlib.redirect_stdout(_PrintableStdout(sys.stdout)):
            return int(args._run(args))
    except DmlShimError as exc:
        if debug:
            log.exception("dmlshim failed")
        # dmlshim's own paragraph, not the onnxruntime-facing text an InferenceSession's error carries
        print(f"dmlshim {args.command}: error: {printable(DmlShimError.__str__(exc))}", file=sys.stderr)
        _json_error(args, exc, exc.exit_code)
        return exc.exit_code
    except UnicodeDecodeError as exc:
        # onnxruntime's own error for a string output whose bytes are no UTF-8 (its run raises it too)
        if debug:
            log.exception("dmlshim failed")
        print(f"dmlshim {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        _json_error(args, exc, 2)
        return 2
    except KeyboardInterrupt as exc:
        # SIGINT, or SIGTERM/SIGHUP turned into an interruption (validate of several models): 128 + signal.
        signum = int(getattr(exc, "signum", 2))
        print(f"dmlshim {args.command}: interrupted", file=sys.stderr)
        return 128 + signum
    except MemoryError as exc:
        if debug:
            log.exception("dmlshim failed")
        print(
            f"dmlshim {args.command}: error: {out_of_memory(exc, f'running {args.command}')}", file=sys.stderr
        )
        return 2
    except RecursionError as exc:
        if debug:
            log.exception("dmlshim failed")
        print(f"dmlshim {args.command}: error: {too_deep(exc, f'running {args.command}')}", file=sys.stderr)
        return 2
    except (DecodeError, EncodeError) as exc:
        # protobuf refuses a model nested deeper than 100 levels or above 2 GiB wherever onnx re-parses it.
        if debug:
            log.exception("dmlshim failed")
        print(
            f"dmlshim {args.command}: error: protobuf cannot handle the model ({exc}): it is nested deeper "
            "than 100 levels (subgraphs inside subgraphs) or larger than 2 GiB",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:
        # The reader went away (`dmlshim inspect M --json | head`): stop quietly, as Unix tools do.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        if debug:
            log.exception("dmlshim failed")
        # a system call's failure no check of dmlshim's turned into its own error: one line, no traceback
        # (DmlShimError.__str__ read attributes an OSError lacks and raised AttributeError)
        print(f"dmlshim {args.command}: error: {printable(_os_error_text(exc))}", file=sys.stderr)
        _json_error(args, exc, 2)
        return 2
