"""Ctrl-C while the ``dmlshim`` command is still starting (importing numpy, onnx and onnxruntime takes a
second or more): "interrupted" and exit code 130, as once it runs, not a traceback from an import.

Only the command installs this (``dmlshim ...`` or ``python -m dmlshim ...``), before the package imports
anything heavy; :func:`interrupts_raise` hands SIGINT back to Python (``KeyboardInterrupt``) once the
command's own handling is in place. Importing dmlshim as a library changes nothing.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from types import FrameType


def started_as_command() -> bool:
    """This process is the ``dmlshim`` command (the console script, or ``python -m dmlshim``)."""
    orig = list(getattr(sys, "orig_argv", ()))
    if "-m" in orig:
        at = orig.index("-m")
        return at + 1 < len(orig) and orig[at + 1] == "dmlshim"
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name in ("dmlshim", "dmlshim.exe", "dmlshim-script.py")


def _interrupted(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("dmlshim: interrupted\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def quiet_interrupt_while_starting() -> None:
    """Make Ctrl-C end the starting command quietly (nothing else is done yet, so nothing is lost)."""
    if (
        started_as_command()
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _interrupted)


_collection_deferred = False


def defer_collection_while_starting() -> None:
    """Turn the cycle collector off while the command starts: its imports (numpy, onnx, onnxruntime, the
    command's modules) make long-lived objects, not garbage, and the collector's passes over them cost
    about 10 ms of CPU per command. :func:`interrupts_raise` turns it back on; importing dmlshim as a
    library changes nothing."""
    global _collection_deferred
    if started_as_command() and gc.isenabled():
        gc.disable()
        _collection_deferred = True


def interrupts_raise() -> None:
    """Give SIGINT back to Python's ``KeyboardInterrupt`` (the command handles it from here), and the
    cycle collector back its work if the start deferred it."""
    global _collection_deferred
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if _collection_deferred:
        _collection_deferred = False
        gc.enable()
