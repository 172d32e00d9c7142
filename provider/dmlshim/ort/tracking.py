"""What the sessions of a program bound to dmlshim emulated: sessions, runs, and each gather/scatter node's
placements, reasons and warnings, gathered per process for the summary printed at exit."""

from __future__ import annotations

import functools
import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..dml.enums import FeatureLevel
from ..execute.record import PLACEMENT_DML, RunRecord
from ..text import printable


@dataclass
class NodeTally:
    """One gather/scatter node of one session, over all its runs."""

    name: str
    op_type: str
    placements: Counter[str] = field(default_factory=Counter)
    operators: set[str] = field(default_factory=set)
    reasons: dict[str, str] = field(default_factory=dict)
    duplicate_indices: int = 0
    negative_indices: bool = False
    negative_below_fl_3_0: bool = False
    """Negative indices seen in a run at a feature level below 3_0, where DirectML takes none (from 3_0 on
    they are DirectML's own, nothing to warn about: as validate's NEGATIVE_INDICES_BELOW_FL_3_0)."""

    def to_json(self, holes: Iterator[Any] | None = None) -> dict[str, Any]:
        runs = sorted(self.placements.items())
        return {
            "name": self.name,
            "op_type": self.op_type,
            "runs": {k: next(holes) for k, _ in runs} if holes is not None else dict(runs),
            "operators": sorted(self.operators),
            "reasons": [{"code": c, "message": m} for c, m in sorted(self.reasons.items())],
            "duplicate_indices": next(holes) if holes is not None else self.duplicate_indices,
            "negative_indices": self.negative_indices,
            "negative_below_fl_3_0": self.negative_below_fl_3_0,
        }


@dataclass
class SessionTally:
    """One session: its model, providers, engine and runs."""

    number: int
    model: str
    providers: list[str]
    engine: str
    runs: int = 0
    nodes: dict[str, NodeTally] = field(default_factory=dict)
    failed_runs: int = 0
    first_error: str = ""
    origin: int = field(default_factory=os.getpid)
    """The process that made the session (a forked worker runs its parent's sessions)."""
    inherited: bool = False
    model_file: str = ""
    """The model file's absolute path ("" for a model given as bytes): the summary never replaces it."""

    shape: int = 0
    """Bumped when anything but a count changes (a node, a placement, an operator, a reason, a flag, the
    engine, the first error): the JSON text is then made anew, else its counts are filled in."""
    _template: tuple[tuple[int, int, int], list[str]] | None = field(default=None, repr=False, compare=False)
    version: int = 0
    """Bumped by every change, counts included: a session's text is made again only when it changed (a
    worker that made many sessions rewrote every one's text after each run of any: 12 ms a run with
    1000 sessions)."""
    _text: tuple[tuple[int, int, int], str] | None = field(default=None, repr=False, compare=False)

    def add_run(self, record: RunRecord) -> None:
        self.runs += 1
        self.version += 1
        if record.engine != self.engine:
            self.engine = record.engine
            self.shape += 1
        below_3_0 = _below_fl_3_0(record.feature_level)
        for node in record.nodes:
            tally = self.nodes.get(node.name)
            if tally is None:
                tally = self.nodes[node.name] = NodeTally(node.name, node.op_type)
                self.shape += 1
            if node.placement not in tally.placements:
                self.shape += 1
            tally.placements[node.placement] += 1
            if node.operator and node.operator not in tally.operators:
                tally.operators.add(node.operator)
                self.shape += 1
            for code, message in node.reasons:
                if code not in tally.reasons:
                    tally.reasons[code] = message
                    self.shape += 1
            tally.duplicate_indices += node.duplicate_indices
            negative = tally.negative_indices or node.negative_indices
            below = tally.negative_below_fl_3_0 or (node.negative_indices and below_3_0)
            if (negative, below) != (tally.negative_indices, tally.negative_below_fl_3_0):
                tally.negative_indices, tally.negative_below_fl_3_0 = negative, below
                self.shape += 1

    def _counts(self) -> list[int]:
        """The counts, in the order :meth:`to_json` writes them."""
        counts = [self.runs, self.failed_runs]
        for node in self.nodes.values():
            counts.extend(n for _, n in sorted(node.placements.items()))
            counts.append(node.duplicate_indices)
        return counts

    def to_text(self, pid: int, encoder: json.JSONEncoder) -> str:
        """:meth:`to_json` encoded by ``encoder``, made from a template while only counts changed (a pool
        worker writes its tally after every run: encoding it whole cost most of a small model's run)."""
        key = (pid, self.version, id(encoder))
        if self._text is not None and self._text[0] == key:
            return self._text[1]
        text = self._made_text(pid, encoder)
        self._text = (key, text)
        return text

    def _made_text(self, pid: int, encoder: json.JSONEncoder) -> str:
        counts = self._counts()
        key = (pid, self.shape, id(encoder))
        if self._template is None or self._template[0] != key:
            holes = iter([_HOLE] * len(counts))
            parts = encoder.encode(self.to_json(pid, holes)).split(encoder.encode(_HOLE))
            if len(parts) != len(counts) + 1:  # a name holding the hole's own text: never a template
                return encoder.encode(self.to_json(pid))
            self._template = (key, parts)
        parts = self._template[1]
        out = [parts[0]]
        for count, part in zip(counts, parts[1:], strict=True):
            out += (str(count), part)
        return "".join(out)

    def to_json(self, pid: int, holes: Iterator[Any] | None = None) -> dict[str, Any]:
        """The session's tally (``holes``: what stands for each count, in order, for :meth:`to_text`)."""
        runs, failed = (next(holes), next(holes)) if holes is not None else (self.runs, self.failed_runs)
        return {
            "process": pid,
            "number": self.number,
            "model": self.model,
            "model_file": self.model_file,
            "providers": list(self.providers),
            "engine": self.engine,
            "origin": [self.origin, self.number],
            "runs": runs,
            "failed_runs": failed,
            "first_error": self.first_error,
            "nodes": [n.to_json(holes) for n in self.nodes.values()],
        }


@functools.lru_cache(maxsize=64)  # parsed once a level: parsing took most of a run's tally (~20 us)
def _below_fl_3_0(level: str) -> bool:
    """Whether a run record's feature level (``DML_FEATURE_LEVEL_2_1``) is below 3_0 (an unknown one: no)."""
    try:
        return FeatureLevel.parse(level) < FeatureLevel.FL_3_0
    except ValueError:
        return False


_HOLE = "\x00dmlshim count\x00"
"""What stands for a count in a session's JSON template (a name holding it only costs the template)."""

_ERROR_TEXT = 300
"""How much of a failed run's error message the summary keeps."""


class Tracker:
    """The sessions of this process (reset in a forked child, which starts its own tally)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sessions: list[SessionTally] = []
        self.changes = 0

    def reset(self) -> None:
        self._lock = threading.Lock()
        self.sessions = []
        self.changes = 0

    def reset_after_fork(self) -> None:
        """In a forked child: the parent's sessions stay (the child may run them) with nothing counted
        yet; the child reports those it runs, and the summary adds them to the parent's."""
        self._lock = threading.Lock()
        for tally in self.sessions:
            tally.runs = tally.failed_runs = 0
            tally.first_error = ""
            tally.nodes = {}
            tally.inherited = True
            tally.shape += 1
            tally.version += 1
        self.changes = 0

    def add_session(
        self, model: str, providers: list[str], engine: str, model_file: str = ""
    ) -> SessionTally:
        with self._lock:
            tally = SessionTally(len(self.sessions) + 1, model, providers, engine, model_file=model_file)
            self.sessions.append(tally)
            self.changes += 1
            return tally

    def add_run(self, tally: SessionTally, record: RunRecord | None) -> None:
        if record is None:
            return
        with self._lock:
            tally.add_run(record)
            self.changes += 1

    def undo_run(self, tally: SessionTally) -> None:
        """The latest run counted for ``tally`` raised after all (its outputs could not be stored): it is
        counted as a failure instead (its nodes' placements stay: they ran)."""
        with self._lock:
            tally.runs = max(0, tally.runs - 1)
            tally.version += 1
            self.changes += 1

    def add_failure(self, tally: SessionTally, error: BaseException) -> None:
        """A run that raised: counted, and the first error kept (its class and first line)."""
        with self._lock:
            tally.failed_runs += 1
            tally.version += 1
            if not tally.first_error:
                lines = str(error).strip().splitlines()
                tally.first_error = f"{type(error).__name__}: {lines[0][:_ERROR_TEXT] if lines else ''}"
                tally.shape += 1
            self.changes += 1

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            pid = os.getpid()
            return {"process": pid, "sessions": [s.to_json(pid) for s in self._shown()]}

    def to_text(self, encoder: json.JSONEncoder) -> str:
        """:meth:`to_json` as ``encoder`` (compact separators) writes it, cheaply after a run."""
        with self._lock:
            pid = os.getpid()
            sessions = ",".join(s.to_text(pid, encoder) for s in self._shown())
            return f'{{"process":{pid},"sessions":[{sessions}]}}'

    def _shown(self) -> list[SessionTally]:
        return [s for s in self.sessions if not s.inherited or s.runs or s.failed_runs]


TRACKER = Tracker()
"""This process's tally."""

os.register_at_fork(after_in_child=TRACKER.reset_after_fork)

AFTER_CHANGE: list[Callable[[], None]] = []
"""Called after a session is added or a run counted (a worker hands its tally on from there)."""


def changed() -> None:
    for hook in list(AFTER_CHANGE):
        hook()


def _fold(into: dict[str, Any], other: dict[str, Any]) -> None:
    """Add a forked worker's runs of a session to the session's entry."""
    into["runs"] += other["runs"]
    into["failed_runs"] = into.get("failed_runs", 0) + other.get("failed_runs", 0)
    into["first_error"] = into.get("first_error") or other.get("first_error", "")
    nodes = {n["name"]: n for n in into["nodes"]}
    for node in other["nodes"]:
        mine = nodes.get(node["name"])
        if mine is None:
            into["nodes"].append(node)
            nodes[node["name"]] = node
            continue
        mine["runs"] = dict(sorted((Counter(mine["runs"]) + Counter(node["runs"])).items()))
        mine["operators"] = sorted(set(mine["operators"]) | set(node["operators"]))
        known = {r["code"] for r in mine["reasons"]}
        mine["reasons"] += [r for r in node["reasons"] if r["code"] not in known]
        mine["duplicate_indices"] += node["duplicate_indices"]
        mine["negative_indices"] = mine["negative_indices"] or node["negative_indices"]
        mine["negative_below_fl_3_0"] = mine.get("negative_below_fl_3_0") or node.get("negative_below_fl_3_0")


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary from the per-process tallies: totals, sessions, and warnings. A session a forked worker
    ran is one session: the worker's runs are added to it."""
    sessions: list[dict[str, Any]] = []
    by_origin: dict[tuple[int, int], dict[str, Any]] = {}
    for sess in (s for part in parts for s in part.get("sessions", ())):
        origin = tuple(sess.get("origin") or (sess["process"], sess["number"]))
        key = (int(origin[0]), int(origin[1]))
        if key in by_origin:
            _fold(by_origin[key], sess)
        else:
            by_origin[key] = sess
            sessions.append(sess)
    warnings: list[dict[str, Any]] = []
    emulated = not_emulated = 0
    for number, sess in enumerate(sessions, 1):
        sess["number"] = number
        if "DmlExecutionProvider" not in sess["providers"]:
            warnings.append(
                {
                    "code": "nothing_emulated",
                    "session": number,
                    "message": f"session {number} ({sess['model']}) asked for {', '.join(sess['providers'])} "
                    "without DmlExecutionProvider: it ran on onnxruntime's CPU provider, nothing emulated "
                    "(ask for DmlExecutionProvider, or set DMLSHIM_ORT_EMULATE=all)",
                }
            )
        if sess.get("failed_runs"):
            warnings.append(
                {
                    "code": "failed_runs",
                    "session": number,
                    "message": f"session {number} ({sess['model']}): {sess['failed_runs']} run(s) raised "
                    f"(first: {sess.get('first_error', '')})",
                }
            )
        for node in sess["nodes"]:
            if node["runs"].get(PLACEMENT_DML):
                emulated += 1
            else:
                not_emulated += 1
            if node["duplicate_indices"]:
                warnings.append(
                    {
                        "code": "duplicate_scatter_indices",
                        "session": number,
                        "node": node["name"],
                        "message": f"{node['op_type']} {node['name']!r} (session {number}): "
                        f"{node['duplicate_indices']} scatter write(s) hit an element written before; "
                        "DirectML guarantees no winner among them",
                    }
                )
            if node.get("negative_below_fl_3_0"):
                warnings.append(
                    {
                        "code": "negative_indices",
                        "session": number,
                        "node": node["name"],
                        "message": f"{node['op_type']} {node['name']!r} (session {number}): negative "
                        "indices seen below feature level 3_0 (DirectML takes them from 3_0; they were "
                        "normalised on the host)",
                    }
                )
    return {
        "processes": sorted({int(p["process"]) for p in parts}),
        "totals": {
            "sessions": len(sessions),
            "runs": sum(s["runs"] for s in sessions),
            "failed_runs": sum(s.get("failed_runs", 0) for s in sessions),
            "gather_scatter_nodes": emulated + not_emulated,
            "emulated_nodes": emulated,
            "not_emulated_nodes": not_emulated,
        },
        "sessions": sessions,
        "warnings": warnings,
    }


def render(summary: dict[str, Any], header: str) -> str:
    """The summary as text for stderr."""
    totals = summary["totals"]
    procs = len(summary["processes"])
    lines = [
        f"{header}: {totals['sessions']} session(s), {totals['runs']} run(s)"
        + (f" ({totals['failed_runs']} more raised)" if totals.get("failed_runs") else "")
        + f" in {procs} process(es); "
        f"{totals['emulated_nodes']} of {totals['gather_scatter_nodes']} gather/scatter node(s) "
        "ran as DirectML"
    ]
    for sess in summary["sessions"]:
        lines.append(
            f"  [{sess['number']}] {sess['model']}  engine={sess['engine']}  runs={sess['runs']}  "
            + (f"failed={sess['failed_runs']}  " if sess.get("failed_runs") else "")
            + f"providers={','.join(sess['providers'])}  pid={sess['process']}"
        )
        for node in sess["nodes"]:
            runs = ", ".join(f"{k} x{v}" for k, v in node["runs"].items())
            ops = f"  {'/'.join(node['operators'])}" if node["operators"] else ""
            off_dml = any(k != PLACEMENT_DML for k in node["runs"])
            why = "; ".join(f"{r['code']}" for r in node["reasons"]) if off_dml else ""
            why = f"  ({why})" if why else ""
            lines.append(f"      {node['op_type']:<15} {node['name']:<30} {runs}{ops}{why}")
    if summary["warnings"]:
        lines.append("  warnings:")
        lines.extend(f"    - {w['message']}" for w in summary["warnings"])
    # each line is one entry: a model path, node name or message read from the model stays on its line
    return "\n".join(map(printable, lines))
