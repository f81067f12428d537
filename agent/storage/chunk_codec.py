"""The byte format of a chunk: one series' raw points of one time block, packed and compressed.

Time series compress well because neighbours are alike: ticks come at a steady interval, and
counters move by small steps while gauges and histogram buckets often do not move at all. The
format keeps that in three cheap steps (C-speed ``array``, slicing and ``zlib``, so packing an
hour of a box's series costs a fraction of a second):

- timestamps (integer microseconds) as their second differences (delta of delta): a steady tick
  is a run of zeros, scheduling jitter a few small numbers;
- values, when all are integers (token, request and bucket counters), as differences; otherwise
  each float64's bits XOR the previous one's (Gorilla's idea: equal values give zeros, near
  values share sign, exponent and high mantissa bits);
- both as 64-bit words split into byte planes (all first bytes, then all second bytes, ...:
  the "shuffle" of Blosc and HDF5), so the zeros of the high bytes form long runs that
  ``zlib`` folds to almost nothing.

Any float is kept bit for bit, NaN and infinities included; decoding gives back exactly the
points that were encoded, in time order.
"""

from __future__ import annotations

import sys
import zlib
from array import array
from collections.abc import Sequence
from math import copysign

VERSION = 1
INTEGRAL, FLOAT_XOR = 1, 2  # how the values are packed
WORD = 8
_MASK = (1 << 64) - 1
_INT_LIMIT = 2**53  # beyond it a float does not hold every integer: use the float path

RawPoint = tuple[int, float]  # (microseconds since the epoch, value)


class ChunkError(ValueError):
    """A chunk that does not decode: a truncated or foreign blob."""


def encode(points: Sequence[RawPoint]) -> bytes:
    """Pack points (in time order, distinct timestamps) into a compressed chunk."""
    return encode_columns([ts for ts, _ in points], [v for _, v in points])


def encode_columns(stamps: Sequence[int], values: Sequence[float]) -> bytes:
    """:func:`encode` of the points ``zip(stamps, values)``, given as two columns (packing
    collects them in arrays: no tuple per point)."""
    if not stamps:
        raise ValueError("a chunk holds at least one point")
    if len(stamps) != len(values):
        raise ValueError(f"{len(stamps)} timestamps for {len(values)} values")
    kind, words = _pack_values(values)
    body = _shuffle(_words(_delta_of_delta(stamps))) + _shuffle(words)
    header = bytes((VERSION, kind)) + len(stamps).to_bytes(4, "little")
    return header + zlib.compress(body, 6)


def decode(blob: bytes) -> list[RawPoint]:
    """The points of a chunk, oldest first."""
    if len(blob) < 6 or blob[0] != VERSION or blob[1] not in (INTEGRAL, FLOAT_XOR):
        raise ChunkError("not a gpuwatch chunk (unknown version or value packing)")
    count = int.from_bytes(blob[2:6], "little")
    try:
        body = zlib.decompress(blob[6:])
    except zlib.error as exc:
        raise ChunkError(f"chunk body does not decompress: {exc}") from None
    if len(body) != 2 * count * WORD:
        raise ChunkError(f"chunk body holds {len(body)} bytes, {2 * count * WORD} expected")
    half = count * WORD
    stamps = _undo_delta_of_delta(_signed(_unshuffle(body[:half], count)))
    values = _unpack_values(blob[1], _unshuffle(body[half:], count))
    return list(zip(stamps, values, strict=True))


# -- timestamps -------------------------------------------------------------------------------


def _delta_of_delta(stamps: Sequence[int]) -> list[int]:
    out = [stamps[0]]
    previous_delta = 0
    for before, after in zip(stamps, stamps[1:], strict=False):
        delta = after - before
        out.append(delta - previous_delta)
        previous_delta = delta
    return out


def _undo_delta_of_delta(encoded: Sequence[int]) -> list[int]:
    out = [encoded[0]]
    delta = 0
    for step in encoded[1:]:
        delta += step
        out.append(out[-1] + delta)
    return out


# -- values -----------------------------------------------------------------------------------


def _pack_values(values: Sequence[float]) -> tuple[int, array[int]]:
    if all(v.is_integer() and abs(v) < _INT_LIMIT and (v or copysign(1.0, v) > 0) for v in values):
        ints = [int(v) for v in values]
        deltas = [ints[0]] + [b - a for a, b in zip(ints, ints[1:], strict=False)]
        return INTEGRAL, _words(deltas)
    bits = array("Q", array("d", values).tobytes())
    xored = [bits[0]] + [a ^ b for a, b in zip(bits, bits[1:], strict=False)]
    return FLOAT_XOR, array("Q", xored)


def _unpack_values(kind: int, words: array[int]) -> list[float]:
    if kind == INTEGRAL:
        total, out = 0, []
        for delta in _signed(words):
            total += delta
            out.append(float(total))
        return out
    bits, acc = [], 0
    for word in words:
        acc ^= word
        bits.append(acc)
    return array("d", array("Q", bits).tobytes()).tolist()


# -- words and byte planes --------------------------------------------------------------------


def _words(signed: Sequence[int]) -> array[int]:
    """Signed integers as unsigned 64-bit words (two's complement)."""
    return array("Q", [v & _MASK for v in signed])


def _signed(words: array[int]) -> list[int]:
    return [w - (1 << 64) if w >> 63 else w for w in words]


def _shuffle(words: array[int]) -> bytes:
    if sys.byteorder != "little":
        words = array("Q", words)
        words.byteswap()
    raw = words.tobytes()
    return b"".join(raw[i::WORD] for i in range(WORD))


def _unshuffle(planes: bytes, count: int) -> array[int]:
    raw = bytearray(count * WORD)
    for i in range(WORD):
        raw[i::WORD] = planes[i * count : (i + 1) * count]
    words = array("Q", bytes(raw))
    if sys.byteorder != "little":
        words.byteswap()
    return words
