"""Generated inputs that onnxruntime CPU accepts: a search over small sizes of the symbolic dimensions.

Same-named symbols always get the same size. Relations between symbols that the names do not show (a
KV-cache decoder's ``attention_mask`` length is ``past_sequence_length + sequence_length``; one step of a
decoder needs ``sequence_length = 1``) are found by trying candidates on onnxruntime CPU, cheapest first:

1. every free symbol at the default size (2);
2. one symbol changed to a sum of two other symbols' sizes or one more than another's (symbols that
   appear in few inputs first: a total length usually appears only in the mask);
3. one symbol at 1, alone or with another changed as in 2 (``sequence_length = 1`` and the total one more
   than the past: one decoding step); 1s come after 2 because a size of 1 broadcasts and can hide a
   relation;
4. one symbol at a size the model was traced at (a size read from its constants, :mod:`.hints`: a
   TorchScript export can bake the example's sequence length into a Reshape target or an arithmetic
   constant), then two symbols at such sizes (the 6 smallest);
5. two symbols changed as in 2, every symbol at 1, one symbol at 0.

Dimensions written as expressions (``past_sequence_length + sequence_length``, ``s0 + s1``) are computed
from their symbols, never searched. The first candidate that runs is used; when none does, the error
names the shapes tried and how to choose them (``--inputs``, ``--input-shape``).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..errors import BadModelError, DmlShimError, InputsNotGeneratedError, TooLargeError
from ..limits import check_tensor
from ..model.modelcheck import check_well_formed
from ..model.random_ops import RANDOM_OPS
from ..text import printable
from .constraints import DEFAULT_DIM, light_copy, plan_for_shapes
from .hints import size_hints
from .narrow_floats import run_any_outputs
from .sizes import refuse_sizes_at
from .symbols import ModelDims, model_dims, shapes_for, split_given
from .values import draw

if TYPE_CHECKING:
    from ..execute.weights.model_source import LoadedModel

__all__ = ["GeneratedInputs", "annotate_error", "generate", "generate_inputs", "input_free_values"]

logger = logging.getLogger(__name__)

NO_PREPACKING = "session.disable_prepacking"
"""onnxruntime's session config key that leaves weights as they are: for the trial runs, whose values are
never used. (Pre-packed MatMul weights change float results in the last bits, 3-7e-6 on the real-size
transformers measured: a session whose values or value-dependent shapes count keeps them.)"""

MAX_TRIES = 400
"""Most candidates tried on onnxruntime before giving up."""
PAIR_HINTS = 6
"""How many of the smallest traced sizes are tried for two symbols together."""
TIME_BUDGET_S = 30.0
"""Most seconds spent trying candidates (after the first) before giving up."""

FIX_HINT = (
    "pass your own inputs with --inputs FILE.npz, or choose the sizes with --input-shape NAME=D0,D1,.. "
    "(a graph input) or --input-shape SYMBOL=N (a symbolic dimension)"
)


@dataclass(frozen=True)
class GeneratedInputs:
    """Random feeds and how they were chosen.

    Attributes:
        feeds: graph input name -> array, in graph-input order (an ``onnxruntime.OrtValue`` of its type for
            a bfloat16 or float8 input, which numpy cannot hold: :mod:`.narrow_floats`).
        shapes: graph input name -> shape.
        symbols: symbolic dimension -> the size chosen (``INPUT[axis]`` for an unnamed dimension).
        seed: the seed of the values.
        tries: candidates run on onnxruntime CPU (0: no symbol was free, so nothing was tried).
        checked: onnxruntime CPU ran the model on these feeds.
    """

    feeds: dict[str, Any]
    shapes: dict[str, tuple[int, ...]]
    symbols: dict[str, int] = field(default_factory=dict)
    seed: int = 0
    tries: int = 0
    checked: bool = False

    def describe(self) -> str:
        """``input_ids [1,5], mask [1,7] (batch=1, seq=5, total=7)``."""
        from ..text import shape_text

        text = ", ".join(f"{n} {shape_text(s)}" for n, s in self.shapes.items()) or "no inputs"
        if self.symbols:
            text += " (" + ", ".join(f"{k}={v}" for k, v in self.symbols.items()) + ")"
        return text

    def to_json(self) -> dict[str, Any]:
        """The JSON form used in reports: source, seed, shapes, symbols, tries."""
        return {
            "source": "random",
            "seed": self.seed,
            "shapes": {n: list(s) for n, s in self.shapes.items()},
            "symbols": dict(self.symbols),
            "tries": self.tries,
            "checked_with_onnxruntime": self.checked,
        }


_NOT_CONSTANT_OPS = RANDOM_OPS


def input_free_values(graph: onnx.GraphProto) -> frozenset[str]:
    """The top-level values no graph input can change: initializers a feed cannot override, Constant
    outputs, and what nodes without subgraphs or randomness compute from those alone."""
    fed = {i.name for i in graph.input}
    free = {t.name for t in graph.initializer if t.name not in fed}
    for node in graph.node:
        if node.op_type in _NOT_CONSTANT_OPS or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
        ):
            continue
        if all(not n or n in free for n in node.input):
            free.update(o for o in node.output if o)
    return frozenset(free)


def annotate_error(
    exc: DmlShimError, generated: GeneratedInputs, graph: onnx.GraphProto | None = None
) -> DmlShimError:
    """Add to an error's message that the inputs were generated, their shapes, and how to choose them.

    With the model's ``graph``, an error about a value no input can change (an out-of-range index held in
    an initializer, say) says so, instead of suggesting other values would help."""
    if "inputs were generated" not in exc.message:
        constant = ""
        if graph is not None and exc.tensor and exc.tensor in input_free_values(graph):
            constant = (
                f"{printable(exc.tensor)} is a constant of the model: it depends on no graph input, so no "
                "generated or given input changes its values; "
            )
        exc.message = (
            f"{exc.message} ({constant}the inputs were generated with seed {generated.seed}: "
            f"{generated.describe()}; {FIX_HINT})"
        )
        exc.args = (exc.message,)
    return exc


def _as_proto(model: onnx.ModelProto | LoadedModel) -> tuple[onnx.ModelProto, str | None]:
    from ..execute.weights.model_source import LoadedModel

    if isinstance(model, LoadedModel):
        return model.proto, model.path
    if isinstance(model, onnx.ModelProto):
        check_well_formed(model)
        from ..model.prepare import prepare_model

        return prepare_model(model), None  # function bodies and sorted nodes, as onnxruntime sees them
    raise BadModelError(f"expected an onnx.ModelProto, got {type(model).__name__}")


class _Candidates:
    """Builds the feeds for one assignment of the symbols."""

    def __init__(self, model: onnx.ModelProto, dims: ModelDims, fixed: Mapping[str, tuple[int, ...]],
                 seed: int, negative: bool, path: str | None = None) -> None:  # fmt: skip
        self._model = model
        self._path = path
        self._light = light_copy(model)
        self._dims = dims
        self._fixed = fixed
        self._seed = seed
        self._negative = negative

    def feeds(
        self, values: Mapping[str, int]
    ) -> tuple[dict[str, tuple[int, ...]], dict[str, np.ndarray]] | None:
        shapes = shapes_for(self._dims, values, self._fixed)
        if shapes is None:
            return None
        for declared in self._dims.inputs:
            check_tensor(
                shapes[declared.name],
                declared.elem_type,
                tensor=declared.name,
                what="generated input",
                path=self._path,
            )
        # every value at these shapes, before a trial run or the command's run allocates it
        refuse_sizes_at(self._light, shapes, path=self._path)
        rng = np.random.default_rng(self._seed)
        feeds: dict[str, np.ndarray] = {}
        for spec in plan_for_shapes(self._model, shapes, light=self._light):
            feeds[spec.name] = draw(spec, rng, self._negative)
            if spec.constraints:
                logger.debug("input %r: indices in %s for %s", spec.name, spec.bounds,
                             [c.node for c in spec.constraints])  # fmt: skip
        return shapes, feeds


def _assignments(
    dims: ModelDims, given: Mapping[str, int], default: int, hints: Sequence[int] = ()
) -> Iterator[dict[str, int]]:
    """Symbol assignments to try, likeliest first (duplicates removed by the caller).

    A size of 1 broadcasts against anything, so a choice that sets a symbol to 1 can run while hiding the
    relation the model means (a mask of length 1 is broadcast over any total length): choices with fewer
    symbols at 1 come first.
    """
    free = [s for s in dims.symbols if s not in given]
    base = {**{s: default for s in free}, **given}
    uses = Counter(
        s for spec in dims.inputs for d in (spec.dims or ()) for s in (d.symbol, *d.names) if s is not None
    )
    # Symbols used by few inputs first: a total length usually appears only in the mask.
    order = sorted(free, key=lambda s: (uses[s], free.index(s)))

    def options(symbol: str, values: Mapping[str, int]) -> list[int]:
        """Sums of two other symbols' sizes, then one more than another's (never 0 or 1)."""
        others = [v for s, v in values.items() if s != symbol]
        sums = sorted({a + b for a, b in itertools.combinations(others, 2)})
        plus_one = sorted({a + 1 for a in others})
        return [v for v in dict.fromkeys([*sums, *plus_one]) if v != values[symbol] and v > 1]

    yield dict(base)
    for symbol in order:  # one symbol changed, no 1s
        for value in options(symbol, base):
            yield {**base, symbol: value}
    for symbol in order:  # one symbol at 1
        yield {**base, symbol: 1}
    for first, second in itertools.permutations(order, 2):  # one at 1, another changed
        step = {**base, first: 1}
        for value in options(second, step):
            yield {**step, second: value}
    for symbol in order:  # one symbol at a size the model was traced at
        for value in hints:
            yield {**base, symbol: value}
    for first, second in itertools.combinations(order, 2):  # two symbols at traced sizes (the smallest)
        for a, b in itertools.product(hints[:PAIR_HINTS], repeat=2):
            yield {**base, first: a, second: b}
    for first, second in itertools.permutations(order, 2):  # two changed, no 1s
        step = {**base, first: default + 1}
        for value in options(second, step):
            yield {**step, second: value}
    yield {**base, **{s: 1 for s in free}}
    for symbol in order:
        yield {**base, symbol: 0}


def _onnxruntime_session(
    model: onnx.ModelProto | LoadedModel, proto: onnx.ModelProto, path: str | None
) -> Any:
    import onnxruntime as ort

    from ..execute.weights.model_source import LoadedModel
    from ..runtime.real import OrtInferenceSession

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    # a trial run only asks whether onnxruntime accepts the sizes: without pre-packing, the weights are
    # not repacked (a copy of every MatMul weight, ~1 s on a 548 MB model) and the session maps them
    so.add_session_config_entry(NO_PREPACKING, "1")
    if isinstance(model, LoadedModel) and model.weights_folder is not None:
        # read without its weights: onnxruntime reads them from the model's files, as the engines'
        # sessions do, instead of parsing them out of the .onnx file (a copy of every inline weight)
        from ..execute.weights.shared import SharedWeights
        from ..execute.weights.shared import light_copy as referencing_copy

        graph = proto.graph
        shared = SharedWeights(
            {t.name: t for t in graph.initializer}, model_path=model.weights_path, graph=graph
        )
        light = referencing_copy(proto, shared) if shared.names else proto
        shared.attach(so, light)
        return OrtInferenceSession(light.SerializeToString(), so, providers=["CPUExecutionProvider"])
    source: Any = path if path is not None and os.path.isfile(path) else proto.SerializeToString()
    return OrtInferenceSession(source, so, providers=["CPUExecutionProvider"])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def generate(
    model: onnx.ModelProto | LoadedModel,
    *,
    input_shapes: Mapping[str, Sequence[int] | int] | None = None,
    seed: int = 0,
    default_dim: int = DEFAULT_DIM,
    negative_indices: bool = False,
    check: bool = True,
) -> GeneratedInputs:
    """Random feeds for every graph input, with symbol sizes that onnxruntime CPU accepts.

    Args:
        model: a ``ModelProto`` (checked for well-formedness here), or a model read by
            :func:`dmlshim.ort.session.load_model` (which has checked it already).
        input_shapes: an input name -> its full shape, or a symbolic dimension -> its size; what is given
            is kept, the other symbols are searched.
        seed: the seed of the values; the same seed gives the same feeds.
        default_dim: the first size tried for every free symbol.
        negative_indices: also draw negative indices (counting from the end) where that keeps them valid
            and repetition does not matter.
        check: search and run candidates on onnxruntime CPU when some symbol is free (False: take the
            first candidate untried).

    Raises:
        BadModelError: the model is not an ONNX model.
        BadInputError: an input cannot be generated (non-tensor, unsupported type, impossible range, a
            given shape that contradicts the model), or no candidate runs on onnxruntime CPU.
        TooLargeError: a generated input would not fit in memory.
    """
    proto, path = _as_proto(model)
    dims = model_dims(proto)
    fixed, given = split_given(dims, input_shapes)
    # a bare type annotation: onnxruntime takes any rank there, so none can be chosen for it
    shapeless = [spec.name for spec in dims.inputs if spec.dims is None and spec.name not in fixed]
    if shapeless:
        names = ", ".join(repr(n) for n in shapeless)
        options = " ".join(f"--input-shape {n}=D0,D1,.." for n in shapeless)
        raise InputsNotGeneratedError(
            f"graph input{'s' if len(shapeless) > 1 else ''} {names} "
            f"{'are' if len(shapeless) > 1 else 'is'} declared with an element type and no shape (unknown "
            f"rank), so no shape can be generated; give {options} or your own inputs (--inputs FILE.npz)",
            tensor=shapeless[0],
            rule="a generated input needs a known rank",
        )
    candidates = _Candidates(proto, dims, fixed, seed, negative_indices, path)
    free = [s for s in dims.symbols if s not in given]
    seen: set[tuple[int, ...]] = set()
    first: tuple[dict[str, int], dict[str, tuple[int, ...]], str] | None = None
    session: Any = None
    tries = 0
    started = time.monotonic()
    hints = size_hints(proto) if free and check else ()
    for values in _assignments(dims, given, default_dim, hints):
        key = tuple(values[s] for s in dims.symbols)
        if key in seen:
            continue
        seen.add(key)
        try:
            built = candidates.feeds(values)
        except TooLargeError:
            if len(seen) == 1:
                raise  # the sizes asked for do not fit; later choices only grow from sums of them
            continue
        if built is None:
            continue
        shapes, feeds = built
        symbols = {s: values[s] for s in dims.symbols}
        if not free or not check:
            return GeneratedInputs(feeds, shapes, symbols, seed)
        if session is None:
            # each trial run would allocate a value whose size follows from the model alone (2 GB for
            # 100 MB) before the session's own check refused it
            from ..execute.plan.checks import refuse_static_sizes

            refuse_static_sizes(proto)
            try:
                session = _onnxruntime_session(model, proto, path)
            except Exception as exc:  # onnxruntime's exception types share no useful base
                logger.info("onnxruntime cannot load the model (%s): inputs not checked", _first_line(exc))
                return GeneratedInputs(feeds, shapes, symbols, seed)
        tries += 1
        try:
            run_any_outputs(session, feeds)  # a bfloat16 output is one run() cannot return
        except Exception as exc:  # onnxruntime's exception types share no useful base
            logger.debug("candidate %s failed on onnxruntime: %s", symbols, _first_line(exc))
            if first is None:
                first = (symbols, shapes, _first_line(exc))
            if tries >= MAX_TRIES or time.monotonic() - started > TIME_BUDGET_S:
                break
            continue
        if tries > 1:
            logger.info("symbol sizes %s chosen after %d tries on onnxruntime CPU", symbols, tries)
        return GeneratedInputs(feeds, shapes, symbols, seed, tries, checked=True)
    if first is None:
        raise InputsNotGeneratedError(
            f"no choice of the symbolic dimensions gives every input a valid shape; {FIX_HINT}",
            value=list(dims.symbols),
        )
    symbols, shapes, error = first
    tried = GeneratedInputs({}, shapes, symbols, seed)
    raise InputsNotGeneratedError(
        f"could not generate inputs that onnxruntime CPU accepts: tried {tries} choice(s) of the symbolic "
        f"dimensions {', '.join(free)}; with {tried.describe()} onnxruntime says: {error}. {FIX_HINT}",
        value={n: list(s) for n, s in shapes.items()},
    )


def generate_inputs(
    model: onnx.ModelProto | LoadedModel,
    *,
    input_shapes: Mapping[str, Sequence[int] | int] | None = None,
    seed: int = 0,
    default_dim: int = DEFAULT_DIM,
    negative_indices: bool = False,
    check: bool = True,
) -> dict[str, np.ndarray]:
    """Random feeds for every graph input of a model (the ``feeds`` of :func:`generate`)."""
    return generate(
        model, input_shapes=input_shapes, seed=seed, default_dim=default_dim,
        negative_indices=negative_indices, check=check,
    ).feeds  # fmt: skip
