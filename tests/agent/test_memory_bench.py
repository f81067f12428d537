"""bench/memory.py's readings of a process: RSS split by kind, threads, RSS per mapping."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench import memory

linux_only = pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="/proc/PID/smaps")


@linux_only
def test_a_reading_splits_rss_and_counts_threads() -> None:
    started = threading.Event()
    done = threading.Event()

    def wait() -> None:
        started.set()
        done.wait()

    thread = threading.Thread(target=wait)
    thread.start()
    started.wait()
    try:
        reading = memory.read(os.getpid(), 0.0)
    finally:
        done.set()
        thread.join()
    assert reading.rss_mb > 0 and reading.anon_mb > 0 and reading.file_mb > 0
    assert abs(reading.anon_mb + reading.file_mb + reading.shmem_mb - reading.rss_mb) < 1.0
    assert reading.threads >= 2


@linux_only
def test_rss_by_mapping_names_the_heap_and_the_interpreter() -> None:
    before = memory.read(os.getpid(), 0.0).rss_mb
    maps = memory.smaps_summary(os.getpid())
    after = memory.read(os.getpid(), 0.0).rss_mb
    assert maps["[anon]"] > 0
    assert any("python" in name for name in maps)
    # The test process's other threads (pytest-xdist's) allocate meanwhile: the sum of the
    # mappings lies between the RSS read just before and just after, within a page table.
    assert min(before, after) - 2.0 <= sum(maps.values()) <= max(before, after) + 2.0


@linux_only
def test_a_reading_keeps_the_peak_of_the_interval_before_it() -> None:
    if not memory.reset_peak(os.getpid()):
        pytest.skip("/proc/PID/clear_refs is not writable here (a read-only /proc)")
    memory.read(os.getpid(), 0.0)  # the interval starts here
    block = b"\x01" * (64 << 20)  # written, so resident; mapped, so unmapped when freed
    del block

    after = memory.read(os.getpid(), 0.0)
    next_one = memory.read(os.getpid(), 0.0)

    assert after.peak_mb >= after.rss_mb + 48
    assert next_one.peak_mb < after.peak_mb - 48  # each reading starts the peak over


@linux_only
def test_each_reading_reaches_the_csv_as_it_is_taken(tmp_path: Path) -> None:
    # A run of hours read while it runs, or stopped before its end, still has its readings.
    sink = (tmp_path / "readings.csv").open("w")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        readings = memory.sample_daemon(child, 0.4, 0.1, sink)
        on_disk = (tmp_path / "readings.csv").read_text().splitlines()  # not closed yet
    finally:
        child.kill()
        child.wait()
        sink.close()

    assert len(on_disk) == len(readings) >= 3
    fields = memory.CSV_HEADER.split(",")
    for line, reading in zip(on_disk, readings, strict=True):
        row = dict(zip(fields, line.split(","), strict=True))
        assert float(row["rss_mb"]) == pytest.approx(reading.rss_mb, abs=0.01)
        assert row["utc"].endswith("Z")
