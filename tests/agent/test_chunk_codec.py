"""The chunk format: every point comes back bit for bit, and steady series cost a few bytes."""

from __future__ import annotations

import math
import random
import struct
import zlib
from array import array

import pytest

from agent.storage.chunk_codec import ChunkError, RawPoint, decode, encode, encode_columns

T0 = 1_796_155_262_345_678  # 2026-12-01T20:01:02.345678Z in microseconds
TICK = 10_000_000


def ticks(values: list[float], jitter: int = 0, seed: int = 1) -> list[RawPoint]:
    rng = random.Random(seed)
    return [(T0 + i * TICK + rng.randint(0, jitter), v) for i, v in enumerate(values)]


def bits(points: list[RawPoint]) -> list[tuple[int, bytes]]:
    return [(ts, struct.pack("<d", v)) for ts, v in points]


@pytest.mark.parametrize(
    "values",
    [
        [0.0],
        [3.0, 3.0, 3.0],
        [1.0, 5.0, 2.0, 0.0, 7.0],  # a counter that restarted
        [0.93, 0.951, 0.0, 1.0],
        [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e308, -1e-308, 5e-324],
        [2.0**53, 2.0**53 + 2, -(2.0**60)],  # integers a float no longer holds one by one
        [float(i * 17) for i in range(500)],
    ],
)
def test_points_come_back_bit_for_bit(values: list[float]) -> None:
    points = ticks(values, jitter=2_000)
    assert bits(decode(encode(points))) == bits(points)


def test_irregular_and_backwards_steps_in_time_survive() -> None:
    points = [(T0, 1.0), (T0 + 1, 2.0), (T0 + 90 * TICK, 3.0), (T0 + 90 * TICK + 7, 4.0)]
    assert decode(encode(points)) == points


def test_a_steady_hour_costs_a_few_bytes_per_point() -> None:
    """An hour at 10 s ticks with millisecond scheduling jitter: a bucket counter that moves
    by small steps, and a gauge that holds still."""
    rng = random.Random(7)
    counter, total = [], 0
    for _ in range(360):
        total += rng.randint(0, 3)
        counter.append(float(total))
    for values in (counter, [70.0 * 2**30] * 360):
        blob = encode(ticks(values, jitter=2_000))
        assert len(blob) / 360 < 4.0


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\x09\x01\x00\x00\x00\x00",  # an unknown version
        b"\x01\x07\x01\x00\x00\x00x",  # an unknown value packing
        b"\x01\x01\x01\x00\x00\x00junk",  # a body that is not zlib
    ],
)
def test_a_foreign_or_truncated_blob_is_refused_clearly(blob: bytes) -> None:
    with pytest.raises(ChunkError):
        decode(blob)


def test_a_body_of_the_wrong_length_is_refused() -> None:
    good = encode(ticks([1.0, 2.0]))
    bad = good[:2] + (3).to_bytes(4, "little") + good[6:]
    with pytest.raises(ChunkError, match="48 expected"):
        decode(bad)
    assert zlib.decompress(good[6:])  # the body itself was fine


def test_an_empty_chunk_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one point"):
        encode([])


def test_columns_in_arrays_encode_as_the_same_points() -> None:
    # Packing collects a series' rows in arrays (agent.storage.raw._runs): same bytes as points.
    points = ticks([0.5, math.nan, -0.0, 7.0, 7.0], jitter=2_000)
    stamps, values = array("q", (ts for ts, _ in points)), array("d", (v for _, v in points))
    blob = encode_columns(stamps, values)
    assert blob == encode(points)
    assert bits(decode(blob)) == bits(points)


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="3 timestamps for 2 values"):
        encode_columns([T0, T0 + TICK, T0 + 2 * TICK], [1.0, 2.0])
