"""Prometheus' TSDB on the samples gpuwatch stored, for bench/storage.py.

The raw samples are read back from the database through ``Store.samples`` (so exactly what was
stored, in whatever layout), written as OpenMetrics text with timestamps, and turned into TSDB
blocks by Debian's ``promtool tsdb create-blocks-from openmetrics``: the 2-hour blocks a
Prometheus server cuts from its head, with the same XOR chunks and index. Each block's
``meta.json`` says how many samples it holds; its bytes are its files (chunks, index, meta).

Why promtool and not a running Prometheus scraping the simulator: the bench runs hours of
simulated time in minutes, and a server scrapes on the wall clock; backfilling the stored
samples gives the same series, timestamps and values to both stores.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agent.storage.store import Store, StoredSample

PROMTOOL = "promtool"


@dataclass(frozen=True)
class Export:
    path: Path
    samples: int
    series: int


@dataclass(frozen=True)
class Blocks:
    blocks: int
    samples: int
    series: int  # summed over blocks (a series in two blocks counts twice, as on disk)
    chunk_bytes: int
    index_bytes: int
    other_bytes: int  # meta.json, tombstones

    @property
    def bytes(self) -> int:
        return self.chunk_bytes + self.index_bytes + self.other_bytes

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes / self.samples if self.samples else math.nan


def export(store: Store, metrics: Iterable[str], path: Path) -> Export:
    """Every stored sample of ``metrics`` as OpenMetrics text; one metric at a time, so the
    read-back never holds more than one metric's samples."""
    samples = 0
    series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    with path.open("w", encoding="utf-8") as out:
        for metric in sorted(metrics):
            for s in store.samples(metric):
                out.write(_line(s))
                samples += 1
                series.add((s.metric, tuple(sorted(s.labels.items()))))
        out.write("# EOF\n")
    return Export(path, samples, len(series))


def _line(s: StoredSample) -> str:
    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
    return f"{s.metric}{{{labels}}} {_value(s.value)} {s.ts.timestamp():.3f}\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def available() -> str | None:
    return shutil.which(PROMTOOL)


def create_blocks(promtool: str, source: Path, out: Path) -> Blocks:
    out.mkdir(parents=True, exist_ok=True)
    command = [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet"]
    command += [str(source), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return read_blocks(out)


def read_blocks(folder: Path) -> Blocks:
    metas = sorted(folder.glob("*/meta.json"))
    samples = series = chunks = index = other = 0
    for meta_path in metas:
        block = meta_path.parent
        stats = json.loads(meta_path.read_text())["stats"]
        samples += int(stats["numSamples"])
        series += int(stats["numSeries"])
        for f in block.rglob("*"):
            if not f.is_file():
                continue
            size = f.stat().st_size
            if f.parent.name == "chunks":
                chunks += size
            elif f.name == "index":
                index += size
            else:
                other += size
    return Blocks(len(metas), samples, series, chunks, index, other)
