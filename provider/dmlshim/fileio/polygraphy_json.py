"""polygraphy's JSON array files, read and written, so that a user can move between the two tools.

polygraphy (``polygraphy run --save-inputs / --save-outputs``) stores every array as an object holding the
base64 of its ``.npy`` bytes, tagged with a ``polygraphy_class`` (older files: a
``__polygraphy_encoded_<type>`` key). An inputs file is a list of feeds, one per iteration; an outputs
file is a ``RunResults`` object, ``{"lst": [[runner, [iteration, ...]], ...]}``, each iteration holding
``{"outputs": {name: array}, "runtime", "runner_name"}`` with arrays wrapped in ``LazyArray`` objects.
Reading never unpickles and checks each array's declared size against the memory limit before decoding.
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import BadInputError
from ..limits import check_tensor
from .reading import npy_header

logger = logging.getLogger(__name__)

CLASS_KEY = "polygraphy_class"
LEGACY_PREFIX = "__polygraphy_encoded_"
LEGACY_MARKER = "polygraphy_serialized_json_type"
RUNNER_NAME = "dmlshim"
"""The runner name dmlshim's outputs carry in a ``RunResults`` file."""

_PICKLE_RULE = "arrays are loaded with allow_pickle=False"


def _class_of(value: Mapping[str, Any]) -> str | None:
    if isinstance(value.get(CLASS_KEY), str):
        return str(value[CLASS_KEY])
    for key in value:
        if isinstance(key, str) and key.startswith(LEGACY_PREFIX):
            return key[len(LEGACY_PREFIX) :]
    return None


def decode_array(value: Any, key: str, where: str) -> np.ndarray:
    """One array as polygraphy encodes it (``{"array": base64 .npy}``, or a ``LazyArray`` around it).

    Raises:
        BadInputError: not an encoded array, not base64, not ``.npy``, truncated, or holding objects.
        TooLargeError: the declared shape exceeds the memory limit.
    """
    if isinstance(value, Mapping) and _class_of(value) in ("LazyArray", "LazyNumpyArray"):
        value = value.get("values")
    if not (isinstance(value, Mapping) and isinstance(value.get("array"), str)):
        raise BadInputError(
            f"{key!r} is not an array as polygraphy encodes it ({{'array': base64 of .npy bytes}})",
            path=where,
            tensor=key,
        )
    try:
        data = base64.b64decode(value["array"].encode(), validate=True)
    except (ValueError, binascii.Error) as exc:
        raise BadInputError(f"array {key!r} is not base64: {exc}", path=where, tensor=key) from exc
    member = io.BytesIO(data)
    try:
        shape, _, dtype = npy_header(member)
    except (ValueError, EOFError, TypeError, SyntaxError) as exc:
        raise BadInputError(f"array {key!r} is not an .npy array: {exc}", path=where, tensor=key) from exc
    if dtype.hasobject:
        raise BadInputError(
            f"array {key!r} holds Python objects; refusing (allow_pickle=False)",
            path=where,
            tensor=key,
            rule=_PICKLE_RULE,
        )
    check_tensor(shape, dtype, tensor=key, path=where, what="array in the JSON file")
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if len(data) - member.tell() < nbytes:
        raise BadInputError(
            f"array {key!r} is truncated: its header declares shape {list(shape)} {dtype}",
            path=where,
            tensor=key,
        )
    member.seek(0)
    return np.lib.format.read_array(member, allow_pickle=False)


def arrays_from_document(doc: Any, where: str) -> dict[str, np.ndarray]:
    """The arrays of a parsed polygraphy file: the first feed of an inputs list, or the first iteration of
    the first runner of a ``RunResults`` outputs file (others are ignored, with a log message).

    Raises:
        BadInputError: the document is neither.
    """
    if (isinstance(doc, Mapping) and _class_of(doc) == "RunResults") or (
        isinstance(doc, Mapping) and isinstance(doc.get("lst"), list)
    ):
        runs = doc["lst"]
        if not runs or not isinstance(runs[0], (list, tuple)) or len(runs[0]) != 2 or not runs[0][1]:
            raise BadInputError("the polygraphy RunResults file holds no outputs", path=where)
        runner, iterations = runs[0]
        if not isinstance(iterations, list):
            raise BadInputError(
                f"the polygraphy RunResults entry of runner {runner!r} holds {type(iterations).__name__}, "
                "not a list of iterations",
                path=where,
            )
        if len(runs) > 1 or len(iterations) > 1:
            logger.warning("%s: using runner %r, iteration 0 of %d", where, runner, len(iterations))
        first = iterations[0]
        outputs = first.get("outputs") if isinstance(first, Mapping) else None
        if not isinstance(outputs, Mapping):
            raise BadInputError("the polygraphy RunResults iteration holds no 'outputs'", path=where)
        return {str(k): decode_array(v, str(k), where) for k, v in outputs.items()}
    feeds = doc[0] if isinstance(doc, list) and doc else doc
    if not isinstance(feeds, Mapping) or not feeds:
        raise BadInputError(
            "the JSON file is neither polygraphy inputs (a list of {name: array}) nor RunResults",
            path=where,
        )
    if isinstance(doc, list) and len(doc) > 1:
        logger.warning("%s holds %d sets of arrays; using the first", where, len(doc))
    return {str(k): decode_array(v, str(k), where) for k, v in feeds.items()}


def encode_array(array: np.ndarray) -> dict[str, Any]:
    """An array as polygraphy encodes it."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return {"array": base64.b64encode(buffer.getvalue()).decode(), CLASS_KEY: "ndarray"}


def inputs_document(feeds: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """polygraphy's inputs file for one set of feeds (``polygraphy run --load-inputs`` reads it)."""
    return [{name: encode_array(value) for name, value in feeds.items()}]


def outputs_document(
    outputs: Mapping[str, np.ndarray], runner: str = RUNNER_NAME, runtime: float | None = None
) -> dict[str, Any]:
    """polygraphy's ``RunResults`` file for one iteration of one runner (``--load-outputs`` reads it)."""
    iteration = {
        "outputs": {
            name: {"values": encode_array(value), CLASS_KEY: "LazyArray"} for name, value in outputs.items()
        },
        "runtime": runtime,
        "runner_name": runner,
        CLASS_KEY: "IterationResult",
    }
    return {"lst": [[runner, [iteration]]], CLASS_KEY: "RunResults"}
