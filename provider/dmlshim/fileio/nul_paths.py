"""Paths holding a NUL character: a model path and an external-data location are read as onnxruntime reads
them, a path dmlshim writes is refused.

onnxruntime hands a model path to the operating system as a C string, which ends at the first NUL:
``InferenceSession("m.onnx\\0junk")`` reads ``m.onnx`` (1.24.4 and 1.32 alike). A program that works with
onnxruntime so works with dmlshim: the session (and the CLI's ``MODEL`` argument) reads the same file,
and every later check (an output that would replace an input) sees that file's name.

An external-data ``location`` is cut the same way (:func:`location_read`): ``w.bin\\0junk`` reads ``w.bin``
(1.24.4 and 1.32 alike), and onnxruntime's folder rules apply to what is left (``../w.bin\\0`` escapes the
model's folder and is refused, ``w.bin\\0/../../x`` reads ``w.bin``; an empty cut names the model's folder,
no regular file).

The same cut on a path onnxruntime *writes* (``optimized_model_filepath``, ``profile_file_prefix``) writes
a file the caller never named (``prof\\0x`` gives a file ``prof``, which may be the user's): dmlshim refuses
every path it writes that holds a NUL, before anything is written (:func:`dmlshim.fileio.files
.check_output_file`, :func:`refuse_nul`).
"""

from __future__ import annotations

import logging
import os
from typing import TypeVar

from ..errors import BadInputError

__all__ = ["BytesPath", "as_onnxruntime_reads", "location_read", "refuse_nul", "refuse_undecodable"]

logger = logging.getLogger(__name__)

Source = TypeVar("Source")

RULE = "dmlshim writes atomically, only inside its target, never through a link or over a non-regular file"


class BytesPath(str):
    """A model path an ``os.PathLike`` gave as ``bytes``, decoded with ``os.fsdecode``: onnxruntime opens
    it whatever its bytes (:func:`refuse_undecodable` is for names given as text)."""

    __slots__ = ()


def as_onnxruntime_reads(source: Source, *, utf8_checked: bool = True) -> Source | str:
    """A model path up to its first NUL, as onnxruntime opens it; anything else (bytes, a ModelProto, a
    path without NUL) as it is. An ``os.PathLike`` whose ``__fspath__`` gives bytes is a path to
    onnxruntime too (it opens the file; plain bytes are a serialized model): it is given as text.

    Raises:
        BadModelError: (``utf8_checked``) a path given as text that is no UTF-8 (:func:`refuse_undecodable`,
            also a ``TypeError``); the CLI's argument parser leaves that to the model's loading, where it
            is one error line."""
    if not isinstance(source, (str, os.PathLike)):
        return source
    text = os.fspath(source)
    if isinstance(text, str) and utf8_checked:
        refuse_undecodable(text)
    given_as_bytes = isinstance(text, bytes)
    if isinstance(text, bytes):
        text = BytesPath(os.fsdecode(text))
        if "\x00" not in text:
            return text
    if "\x00" not in text:
        return source
    cut = text.split("\x00", 1)[0]
    if given_as_bytes:
        cut = BytesPath(cut)
    # onnxruntime opens the empty name: NoSuchFile (a path that is empty to start with is not one)
    if not cut:
        from ..errors import BadModelError
        from ..runtime.exceptions import with_onnxruntime_words

        error = BadModelError("model file not found: the model path starts with a NUL character", path=text)
        raise with_onnxruntime_words(error, "Load model from  failed:Load model  failed. File doesn't exist")
    logger.warning("the model path %r holds a NUL character: %r is read, as onnxruntime reads it", text, cut)
    return cut


UNDECODABLE_WORDS = "__init__(): incompatible constructor arguments."
"""How onnxruntime's binding begins its ``TypeError`` for a model path it cannot pass as UTF-8 text."""


def refuse_undecodable(text: str) -> None:
    """Refuse a model path given as text that is no UTF-8 (a name read from the file system with
    ``os.fsdecode``: ``b'\\xff.onnx'`` is ``'\\udcff.onnx'``), as onnxruntime refuses it (1.24.4 and 1.32):
    its binding takes the path as UTF-8 text, cannot encode the lone surrogate and raises ``TypeError``
    before any file is opened, a NUL anywhere in the name or not. The same name as ``bytes`` from an
    ``os.PathLike`` is a path it opens (plain ``bytes`` are a serialized model).

    Raises:
        BadModelError: ``text`` cannot be encoded as UTF-8; also a ``TypeError`` (onnxruntime's class).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        from ..errors import BadModelError
        from ..runtime.exceptions import as_onnxruntime_error, with_onnxruntime_class, with_onnxruntime_words

        error = BadModelError(
            f"the model path {text!r} is not valid UTF-8 (character {exc.start}): onnxruntime takes a model "
            "path as UTF-8 text and refuses this one (TypeError); rename the file, or pass the name's bytes "
            "through an os.PathLike, which onnxruntime opens",
            value=text,
            rule="a model path given as text is UTF-8, as onnxruntime reads it",
        )
        with_onnxruntime_words(error, UNDECODABLE_WORDS)
        raise as_onnxruntime_error(with_onnxruntime_class(error, TypeError)) from None


def location_read(location: str) -> str:
    """An external-data ``location`` as onnxruntime opens it: up to its first NUL (the whole text when it
    holds none)."""
    return location.split("\x00", 1)[0]


def refuse_nul(text: str, what: str) -> None:
    """Refuse a path dmlshim would write that holds a NUL character.

    Raises:
        BadInputError: ``text`` holds a NUL (naming the file the operating system would have written).
    """
    if "\x00" in text:
        cut = text.split("\x00", 1)[0]
        raise BadInputError(
            f"the {what} path contains a NUL character; the operating system would cut the name there "
            f"({cut!r}, as onnxruntime writes it), which may name another file: dmlshim writes nothing, "
            "give a name without NUL",
            path=text,
            rule=RULE,
        )
