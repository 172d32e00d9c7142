"""The steady lane: a run of the lean check as one onnxruntime call plus the index proofs (issue 36).

Once the lean check (:mod:`dmlshim.execute.engines.lean_check`) has answered a run, every later run with
feeds of the same names, types, dtypes and shapes (:func:`dmlshim.execute.feeds.feed_key`) does the same
Python work again: the value table, every node's inputs looked up and compared with the shapes of its
proved run, the proofs, the records, a run record equal to the last. The steady lane works out once,
from that lean run, what can still differ on such a run and checks only that:

- the shape and dtype of each fetched value a proof or a record rested on, and each fetched ``Shape``
  (shapes that depend on values: a ``NonZero``'s count, say);
- each node's proof on this run's indices (fed or fetched: a gather's ``[0, dim)``, a scatter's no place
  written twice), exactly as :meth:`~dmlshim.execute.plan.steps.EmulatedStep.given_again` proves it;
  constant indices were proved at the same data shapes by the run the lane was made from.

Shapes that follow from the feeds' dims, feeds' values used as held inputs, and the static values cannot
differ under the same feed key. When every check holds, the run's record is that lean run's record (the
same nodes, proofs and notes); when one does not hold, or onnxruntime refuses the run, nothing of the
run is kept and the ordinary path answers it (the full check, the partitions, their errors).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..plan.cpu_step import ort_run_of
from ..proofs.index_ranges import SMALL_INDICES, in_range
from ..proofs.proved_again import same_inputs
from ..proofs.symbol_shapes import FeedShapes, feeds_agree
from ..record import RunRecord
from .lean_check import LeanSession, input_source

Proof = tuple[str | None, int, Callable[[np.ndarray], bool]]
"""A proof on this run's indices: the feed holding them (or None), else where the run fetched them."""


@dataclass(frozen=True)
class SteadyLane:
    """What a steady run checks (see the module docstring); made by :func:`steady_lane`."""

    feed_key: tuple[Any, ...]
    session: LeanSession
    static_feeds: dict[str, Any]
    feed_names: tuple[str, ...] | None
    values: tuple[tuple[int, tuple[int, ...], np.dtype[Any]], ...]
    shapes: tuple[tuple[int, list[int]], ...]
    proofs: tuple[Proof, ...]
    ranges: tuple[tuple[str | None, int, int], ...]
    """Proofs that are :func:`~dmlshim.execute.proofs.gather_given.in_range` (every index in ``[0, dim)``),
    as (feed, fetched at, dim): run inline."""
    record: RunRecord
    ort_errors: tuple[type[BaseException], ...]
    ort_run: Callable[[list[str], Mapping[str, Any], Any], list[Any]]
    """onnxruntime's run of the lean session (see :func:`ort_run_of`)."""
    graph_outputs: list[str]
    """The model's outputs, in order: the first values the lean session fetches."""

    def answer(self, output_names: Sequence[str], feeds: Mapping[str, Any]) -> list[Any] | None:
        """The outputs named, as the lean check would answer them, or None when a check does not hold."""
        if self.feed_names is None and not self.static_feeds:
            session_feeds: Mapping[str, Any] = feeds
        else:
            session_feeds = dict(self.static_feeds)
            for name in self.feed_names if self.feed_names is not None else feeds:
                session_feeds[name] = feeds[name]
        try:
            fetched = self.ort_run(self.session.fetch, session_feeds, None)
        except self.ort_errors:
            return None  # the ordinary path runs it again and answers as it answers
        ndarray = np.ndarray
        for at, shape, dtype in self.values:
            value = fetched[at]
            if type(value) is not ndarray or value.shape != shape or value.dtype != dtype:
                return None
        for at, dims in self.shapes:
            if fetched[at].tolist() != dims:
                return None
        for feed, at, dim in self.ranges:  # in_range, inlined for a few indices
            indices = feeds[feed] if feed is not None else fetched[at]
            if indices.size <= SMALL_INDICES:
                if indices.size:
                    listed = indices.ravel().tolist()
                    if min(listed) < 0 or max(listed) >= dim:
                        return None
            elif not in_range(indices, dim):
                return None
        for feed, at, proof in self.proofs:
            if not proof(feeds[feed] if feed is not None else fetched[at]):
                return None
        if output_names == self.graph_outputs:  # every output, in graph order: the first fetched
            return fetched[: len(output_names)]
        position = self.session.position
        try:
            return [fetched[position[n]] for n in output_names]
        except KeyError:
            return None


def _range_dim(proof: Callable[[np.ndarray], bool]) -> int | None:
    """The ``dim`` of a proof that is ``in_range(indices, dim=dim)``, else None."""
    if isinstance(proof, functools.partial) and proof.func is in_range and not proof.args:
        dim = proof.keywords.get("dim")
        if type(dim) is int and len(proof.keywords) == 1:
            return dim
    return None


def _from_feed_dims(from_feeds: FeedShapes | None, name: str, feeds: Mapping[str, Any]) -> bool:
    """Whether ``name``'s shape follows from the feeds' dims alone (not from onnx's inference)."""
    if from_feeds is None or name not in from_feeds.dims:
        return False
    for d in from_feeds.dims[name]:
        if isinstance(d, int):
            continue
        feed, axis = from_feeds.symbols.get(d, ("", 0)) if d is not None else ("", 0)
        value = feeds.get(feed)
        if type(value) is not np.ndarray or axis >= value.ndim:
            return False
        where = from_feeds.shared.get(d) if d is not None else None
        if where and not (all(n in feeds for n, _ in where) and feeds_agree(where, feeds)):
            return False  # inputs declaring one name fed different sizes (or one not fed): not the feeds'
    return True


def steady_lane(
    check: Any,
    fetched: list[Any],
    feeds: Mapping[str, Any],
    feed_key: tuple[Any, ...],
    static: Mapping[str, Any],
    record: RunRecord,
) -> SteadyLane | None:
    """The steady lane made from a lean run of ``check`` (a ``WholeModelCheck``) that fetched ``fetched``
    on ``feeds`` (keyed ``feed_key``) and was recorded ``record``; None when some input of a proof is
    found in a way the lane does not repeat (it then keeps to the ordinary path)."""
    made, plan, inputs, from_feeds = check.lean_parts()
    if made is None:
        return None
    values: dict[int, tuple[tuple[int, ...], np.dtype[Any]]] = {}
    shapes: dict[int, list[int]] = {}
    proofs: list[Proof] = []

    def fixed(name: str) -> bool:  # held unchanged under the same feed key
        return name in feeds or name in static

    def fetched_value(at: int) -> bool:
        value = fetched[at]
        if type(value) is not np.ndarray:
            return False
        values[at] = (value.shape, value.dtype)
        return True

    for step, is_lean, lean_inputs, needs_indices, _ in plan:
        if is_lean:
            data_shape: tuple[int, ...] | None = None
            for i, (name, at, shape_at) in enumerate(lean_inputs):
                if fixed(name):
                    shape = np.shape(feeds[name] if name in feeds else static[name])
                elif at is not None:
                    if not fetched_value(at):
                        return None
                    shape = fetched[at].shape
                elif shape_at is not None:
                    shapes[shape_at] = fetched[shape_at].tolist()
                    shape = tuple(shapes[shape_at])
                elif _from_feed_dims(from_feeds, name, feeds):
                    shape = from_feeds.resolve(name, feeds)
                else:
                    return None
                if i == 0:
                    data_shape = shape
            if needs_indices:
                name, at, _ = lean_inputs[1]
                assert data_shape is not None
                proof = step.lean_proof(data_shape)
                if name in feeds:
                    proofs.append((name, 0, proof))
                elif name not in static:
                    if at is None:
                        return None
                    proofs.append((None, at, proof))
            continue
        given = step.given_proof()
        if given is None:
            return None
        key, proof = given
        # The step's last given run may be another thread's, with other shapes, since this lean run
        # proved it: its proof then belongs to those shapes, not to this lane's (a reduced scatter proof
        # of a one-row update would pass a later run's repeated writes).
        if not same_inputs(made.inputs_of(step.output, fetched, {**static, **feeds}, []) or (), key):
            return None
        for i, (kind, name, at) in enumerate(made.given_plan[step.output]):
            source = input_source(kind)
            if source == "fetched":
                if not fetched_value(at):
                    return None
            elif source == "shape":
                shapes[at] = list(key[i][0])
            elif (source == "feeds" and not _from_feed_dims(made.from_feeds, name, feeds)) or (
                source == "held" and not fixed(name)
            ):
                return None
            if i != 1:
                continue
            if source == "fetched":
                proofs.append((None, at, proof))
            elif source == "held" and name in feeds:
                proofs.append((name, 0, proof))
            elif source != "held":
                return None
    names_in = tuple(n for n in feeds if n in inputs)
    static_feeds = {n: static[n] for n in inputs if n in static and n not in feeds}
    return SteadyLane(
        feed_key=feed_key,
        session=made,
        static_feeds=static_feeds,
        feed_names=None if len(names_in) == len(feeds) else names_in,
        values=tuple((at, s, d) for at, (s, d) in values.items()),
        shapes=tuple(shapes.items()),
        proofs=tuple(p for p in proofs if _range_dim(p[2]) is None),
        ranges=tuple((f, at, d) for f, at, p in proofs if (d := _range_dim(p)) is not None),
        record=record,
        ort_errors=check.ort_errors,
        ort_run=ort_run_of(made.session, static_feeds),
        graph_outputs=list(made.fetch[: made.graph_outputs]),
    )
