"""Byte-mutation fuzzer over the shipped models: flip, insert, delete, overwrite and truncate bytes of
``onnx_models/*.onnx`` (seeded), then run ``dmlshim inspect`` and ``dmlshim validate`` in-process.

Every mutant must end with exit code 0, 1 or 2, a message on any non-zero code, no uncaught exception and
no hang (each command runs under a ``signal.alarm`` guard). ``DMLSHIM_FUZZ_MUTANTS`` sets the number of
mutants (default 200) and ``DMLSHIM_FUZZ_SEED`` the seed (default 0); a failure names the model, the seed
and the mutations, so ``mutate(model, seed)`` rebuilds the mutant.
"""

from __future__ import annotations

import random
import resource
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.fuzz_settings import FUZZ_MUTANTS, FUZZ_SEED, CliResult, run_cli

REPO = Path(__file__).resolve().parents[1]
MODELS = sorted((REPO / "onnx_models").glob("*.onnx"))
TIMEOUT_S = 30
BATCHES = 8


def mutate(payload: bytes, seed: int) -> tuple[bytes, list[str]]:
    """A mutant of ``payload`` and the list of what was done, reproducible from ``seed``."""
    rng = random.Random(seed)
    data = bytearray(payload)
    done: list[str] = []
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        if not data:
            break
        kind = rng.choice(("flip", "flip", "byte", "insert", "delete", "chunk", "truncate", "varint"))
        at = rng.randrange(len(data))
        if kind == "flip":
            bit = rng.randrange(8)
            data[at] ^= 1 << bit
            done.append(f"flip byte {at} bit {bit}")
        elif kind == "byte":
            value = rng.choice((0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)))
            data[at] = value
            done.append(f"set byte {at} = {value:#x}")
        elif kind == "insert":
            extra = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
            data[at:at] = extra
            done.append(f"insert {extra.hex()} at {at}")
        elif kind == "delete":
            n = rng.randrange(1, 9)
            del data[at : at + n]
            done.append(f"delete {n} bytes at {at}")
        elif kind == "chunk":
            n = rng.randrange(1, 33)
            src = rng.randrange(len(data))
            data[at : at + n] = data[src : src + n]
            done.append(f"copy {n} bytes from {src} to {at}")
        elif kind == "truncate":
            del data[at:]
            done.append(f"truncate at {at}")
        else:
            # A large varint where a length or a dimension is likely to be read.
            big = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])
            data[at : at + 1] = big
            done.append(f"varint 0xFFFFFFFF at {at}")
    return bytes(data), done


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang


@pytest.fixture
def guarded() -> Iterator[None]:
    """A per-command alarm and an address-space cap, so a hang or a runaway allocation fails fast."""
    old_handler = signal.signal(signal.SIGALRM, _alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = 24 * 2**30
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_handler)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _run_guarded(argv: list[object], what: str) -> CliResult:
    signal.alarm(TIMEOUT_S)
    try:
        return run_cli(*argv)
    except _Hang:
        pytest.fail(f"{what}: no answer within {TIMEOUT_S} s")
    except BaseException as exc:  # the point: nothing may escape main()
        pytest.fail(f"{what}: uncaught {type(exc).__name__}: {exc}")
    finally:
        signal.alarm(0)


def _check(result: CliResult, what: str) -> None:
    assert result.code in (0, 1, 2), f"{what}: exit code {result.code}\n{result.err}"
    assert "Traceback" not in result.err, f"{what}: traceback\n{result.err}"
    if result.code != 0:
        assert result.err.strip() or result.out.strip(), f"{what}: exit {result.code} without a message"
    if result.code == 2:
        assert ": error: " in result.err, f"{what}: exit 2 without an error paragraph\n{result.err}"


def test_shipped_models_found() -> None:
    assert len(MODELS) >= 10


@pytest.mark.parametrize("batch", range(BATCHES))
def test_mutated_models_exit_cleanly(
    batch: int, tmp_path: Path, guarded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mutated dims can declare huge tensors; a lower limit keeps the fuzzer's memory use small.
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(512 * 2**20))
    per_batch = -(-FUZZ_MUTANTS // BATCHES)
    originals = {m: m.read_bytes() for m in MODELS}
    outcomes: dict[int, int] = {0: 0, 1: 0, 2: 0}
    for k in range(batch * per_batch, min(FUZZ_MUTANTS, (batch + 1) * per_batch)):
        model = MODELS[k % len(MODELS)]
        seed = FUZZ_SEED * 1_000_003 + k
        payload, done = mutate(originals[model], seed)
        path = tmp_path / f"mutant_{k}.onnx"
        path.write_bytes(payload)
        what = f"mutant {k} of {model.name} (seed {seed}: {'; '.join(done)})"
        for argv in (["inspect", path], ["validate", path]):
            result = _run_guarded(argv, f"dmlshim {argv[0]} on {what}")
            _check(result, f"dmlshim {argv[0]} on {what}")
            outcomes[result.code] += 1
        path.unlink()
    print(f"batch {batch}: exit codes {outcomes}", file=sys.stderr)


def test_mutator_is_reproducible() -> None:
    payload = MODELS[0].read_bytes()
    assert mutate(payload, 42) == mutate(payload, 42)
    assert mutate(payload, 42)[0] != payload or mutate(payload, 43)[0] != payload
