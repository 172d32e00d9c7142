"""One profile per session, as onnxruntime gives: ``SessionOptions.enable_profiling`` for the whole model.

The engine's onnxruntime sessions (CPU partitions, one-node fallbacks) profile themselves into a private
folder; emulated gather/scatter nodes are timed here as each runs. :meth:`SessionProfiler.end` reads the
onnxruntime profiles back, moves their timestamps onto the session's clock, and writes one file in the
Chrome trace format onnxruntime uses (a JSON array of complete ``"ph": "X"`` events, microseconds):

* ``cat: "Session"`` events ``model_loading_uri`` (or ``_array``), ``session_initialization`` and one
  ``model_run`` per run of the dmlshim session;
* ``cat: "Node"`` events ``<node>_kernel_time`` for every node, with ``args.op_name`` and
  ``args.provider``: onnxruntime's own events for nodes in CPU partitions (``args.partition`` names the
  partition), and dmlshim's for emulated nodes (``provider: "DmlExecutionProvider"``,
  ``args.emulated_by: "dmlshim"``, the DirectML operator, input and output types and shapes);
* the partitions' own session-level events, renamed ``partition_<name>`` so that a tool summing
  ``model_run`` durations counts each run once.

Beyond basic optimization, runs are answered by the whole-model check (as without profiling: its
outputs are onnxruntime's own): its session's events come with ``args.partition: "whole-model check"``
(onnxruntime's node events of the whole model, as optimized, its events for the emulated nodes left out),
and each emulated node's kernel, run and compared on every run, is timed here as above.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..errors import BadInputError
from ..execute.engines.whole_model import CHECK_LABEL
from ..execute.record import PLACEMENT_DML
from ..fileio import files
from ..fileio.nul_paths import refuse_nul
from ..runtime.real import OrtInferenceSession, ort
from .providers import CPU_EP, DML_EP
from .session_copy import _probe_model
from .session_options import write_session_file

logger = logging.getLogger(__name__)

OrtSessions = Sequence[tuple[str, Any]]


@functools.cache
def _names_end_in_milliseconds() -> bool:
    """Whether the installed onnxruntime ends a profile's name with milliseconds (1.32:
    ``p_2026-11-29_17-55-28_815.json``; 1.24: ``p_2026-11-29_17-55-28.json``), asked of it once."""
    with tempfile.TemporaryDirectory(prefix="dmlshim-profile-name-") as tmp:
        so = ort.SessionOptions()
        so.enable_profiling, so.profile_file_prefix, so.log_severity_level = True, str(Path(tmp) / "p"), 4
        name = Path(OrtInferenceSession(_probe_model(), so, providers=[CPU_EP]).end_profiling()).name
    return re.fullmatch(r"p_[\d-]+_[\d-]+_\d{3}\.json", name) is not None


def _type_name(dtype: np.dtype) -> str:
    try:
        return onnx.TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(dtype)).lower()
    except (KeyError, TypeError, ValueError):
        return str(dtype)


def _type_shapes(arrays: Sequence[Any]) -> list[dict[str, list[int]]]:
    return [{_type_name(a.dtype): [int(d) for d in a.shape]} for a in arrays if isinstance(a, np.ndarray)]


_NODE_EVENT = re.compile(r"(.+)_(?:kernel_time|fence_before|fence_after)")


def _node_of(event: Mapping[str, Any]) -> str | None:
    """The node an onnxruntime ``Node`` event is about (None for other events)."""
    if event.get("cat") != "Node":
        return None
    found = _NODE_EVENT.fullmatch(str(event.get("name", "")))
    return found.group(1) if found else None


class SessionProfiler:
    """Collects one session's profile (see the module docstring).

    Args:
        prefix: ``SessionOptions.profile_file_prefix``; the file is ``<prefix>_<date>_<time>.json``,
            relative to the working directory unless the prefix holds a folder, as in onnxruntime.
    """

    def __init__(self, prefix: str, inputs: tuple[str | None, ...] = ()) -> None:
        refuse_nul(prefix, "profile file prefix (profile_file_prefix)")  # before the session is built
        self._prefix = prefix  # "" too: onnxruntime then names the file "_<date>_<time>.json"
        self.inputs = inputs
        """Files the session reads (the model): the profile is never written over one of them."""
        self._start_wall_ns = time.time_ns()
        self._start_perf_ns = time.perf_counter_ns()
        self._tmp = tempfile.TemporaryDirectory(prefix="dmlshim-profile-")
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._ended = False
        self._end_lock = threading.Lock()  # end() hands the file name out once, whatever the threads
        # what is at the profile's name now may be replaced (as onnxruntime replaces it); a file that
        # appears there while the session runs is someone else's
        self._name = self._file_name()
        # onnxruntime opens the file when the session starts: a relative prefix names a file in the
        # working directory of that moment, whatever directory the program is in when profiling ends
        self._path = os.path.abspath(self._name)
        self._unusable: str | None = None
        """Why no file can have the profile's name (too long): onnxruntime then writes nothing and still
        returns the name."""
        try:
            files.remember_output(self._path)
        except BadInputError as exc:
            self._unusable = exc.message

    @property
    def start_time_ns(self) -> int:
        """When profiling started, in nanoseconds since the epoch (``get_profiling_start_time_ns``)."""
        return self._start_wall_ns

    @property
    def partition_prefix(self) -> str:
        """The ``profile_file_prefix`` for the engine's onnxruntime sessions (a private folder)."""
        return str(Path(self._tmp.name) / "partition")

    def _file_name(self) -> str:
        stamp = time.localtime(self._start_wall_ns / 1e9)
        millis = (self._start_wall_ns // 1_000_000) % 1000
        tail = f"_{millis:03d}" if _names_end_in_milliseconds() else ""
        return f"{self._prefix}_{time.strftime('%Y-%m-%d_%H-%M-%S', stamp)}{tail}.json"

    def _now_us(self) -> int:
        return (time.perf_counter_ns() - self._start_perf_ns) // 1000

    def _add(self, name: str, cat: str, start_us: int, args: Mapping[str, Any]) -> None:
        event = {
            "cat": cat,
            "pid": self._pid,
            "tid": threading.get_native_id(),
            "dur": max(self._now_us() - start_us, 0),
            "ts": start_us,
            "ph": "X",
            "name": name,
            "args": dict(args),
        }
        with self._lock:
            self._events.append(event)

    @contextlib.contextmanager
    def span(self, name: str, args: Mapping[str, Any] | None = None) -> Iterator[None]:
        """Record a session-level event around the block (also when it raises)."""
        start = self._now_us()
        try:
            yield
        finally:
            if not self._ended:
                self._add(name, "Session", start, args or {})

    def observe_step(self, step: Callable[[Any, Any], None], values: dict[str, Any], state: Any) -> None:
        """Run one step of the partitioned engine, recording an event when it is an emulated node.

        CPU partitions are not timed here: their onnxruntime session profiles its own nodes.
        """
        node = getattr(step, "node", None)
        if node is None or self._ended:
            step(values, state)
            return
        inputs = [values.get(n) if n else None for n in node.input]
        start = self._now_us()
        step(values, state)
        slot = getattr(step, "slot", None)
        records = getattr(state, "records", None)
        record = records[slot] if records is not None and slot is not None else None
        emulated = record is None or record.placement == PLACEMENT_DML
        args: dict[str, Any] = {
            "op_name": node.op_type,
            "provider": DML_EP if emulated else CPU_EP,
            "emulated_by": "dmlshim" if emulated else "onnxruntime (runtime fallback)",
            "input_type_shape": _type_shapes(inputs),
            "output_type_shape": _type_shapes([values.get(o) for o in node.output if o]),
        }
        if record is not None and record.operator:
            args["dml_operator"] = record.operator
        self._add(f"{getattr(step, 'name', node.name)}_kernel_time", "Node", start, args)

    def harvest(self, sessions: OrtSessions, emulated: Collection[str] = ()) -> None:
        """End profiling of onnxruntime sessions (before they go away) and keep their events; the
        whole-model check's events for the ``emulated`` nodes are left out (dmlshim's own events time
        their kernels)."""
        for label, session in sessions:
            try:
                produced = session.end_profiling()
            except Exception as exc:  # onnxruntime's error types share no useful base
                logger.warning("could not end profiling of %s: %s", label, exc)
                continue
            if not produced:
                continue
            path = Path(produced)
            try:
                events = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                logger.warning("unreadable onnxruntime profile of %s: %s", label, exc)
                continue
            finally:
                with contextlib.suppress(OSError):
                    path.unlink()
            offset_us = (int(session.get_profiling_start_time_ns()) - self._start_wall_ns) // 1000
            kept = []
            drop = frozenset(emulated) if label.startswith(CHECK_LABEL) else frozenset()
            for event in events if isinstance(events, list) else []:
                if not isinstance(event, dict) or (drop and _node_of(event) in drop):
                    continue
                event = dict(event)
                event["ts"] = int(event.get("ts", 0)) + offset_us
                event["args"] = {**event.get("args", {}), "partition": label}
                if event.get("cat") == "Session":
                    event["name"] = f"partition_{event.get('name', '')}"
                kept.append(event)
            with self._lock:
                self._events.extend(kept)

    def end(self, sessions: OrtSessions, emulated: Collection[str] = ()) -> str:
        """Finish: merge the onnxruntime profiles, write the file, return its name ('' if ended before).
        ``emulated``: the emulated nodes' names (see :meth:`harvest`).

        Raises:
            BadInputError: the profile file cannot be written.
        """
        with self._end_lock:
            if self._ended:
                return ""
            self._ended = True
            return self._finish(sessions, emulated)

    def _finish(self, sessions: OrtSessions, emulated: Collection[str]) -> str:
        self.harvest(sessions, emulated)
        with self._lock:
            events = sorted(self._events, key=lambda e: (e.get("ts", 0), -e.get("dur", 0)))
        name = self._name  # returned as onnxruntime returns it (relative when the prefix is)
        if self._unusable is not None or not Path(self._path).parent.is_dir():
            # onnxruntime cannot open the file either: it writes nothing and still returns the name
            why = self._unusable or "its folder does not exist"
            logger.warning("profile not written to %r: %s", name, why)
            self._tmp.cleanup()
            return name
        data = json.dumps(events, separators=(",", ":")).encode("utf-8")
        try:
            write_session_file(Path(self._path), data, what="profile file", inputs=self.inputs)
        finally:
            self._tmp.cleanup()
        logger.info("profile with %d events written to %s", len(events), name)
        return name

    def discard(self) -> None:
        """Drop everything (the session went away without ``end_profiling``)."""
        self._ended = True
        self._tmp.cleanup()
