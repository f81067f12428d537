"""Benchmark: how much the spool holds per hour of a typical box, and so how long an outage
the default ``[spool] max_bytes`` covers.

    python bench/spool.py [--rounds 60]

The box of issue 11: 8 fake GPUs (tests/fakenvml, as bench/tick.py) and 2 vLLM 0.33 targets
served by the engine simulator (2 models x 2 data-parallel engines, every histogram), collected
by the real App (its collectors and derived samples) on the default SQLite. Each round is
encoded as the spool stores it (agent.storage.spool.encode: compressed JSON), next to a
baseline measured in the same run: the same rounds as plain JSON, uncompressed. Printed: bytes
per round, per hour at 10 s and at 1 s ticks, and the hours the default spool holds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "FAKE_NVML_CONFIG" not in os.environ:  # the fake library must load at startup
            from bench.tick import fake_library, hardware
            from tests.fakenvml.build import write_config

            env = {**os.environ, "LD_LIBRARY_PATH": str(fake_library(work)),
                   "FAKE_NVML_CONFIG": str(write_config(work / "hw.txt", hardware()))}  # fmt: skip
            os.execve(sys.executable, [sys.executable, *sys.argv], env)
        measure(work, args.rounds)
    return 0


def measure(work: Path, rounds: int) -> None:
    from agent.config.settings import load_config
    from agent.config.spool import DEFAULT_MAX_BYTES
    from agent.daemon.app import App
    from agent.storage.spool import encode
    from bench.memory import Engine, free_port, serving, write_daemon_config

    stop = threading.Event()
    engines = [Engine(), Engine()]
    with serving(engines, stop):
        config = load_config(str(write_daemon_config(work, [e.url for e in engines], free_port())))
        app = App.open(config)
        now = datetime.now(UTC).replace(microsecond=0)
        packed, plain, samples = [], [], []
        for i in range(rounds):
            round_ = app.tick(now + timedelta(seconds=10 * i))
            data = encode(round_)
            packed.append(len(data))
            plain.append(len(json.dumps(_plain(round_))))
            samples.append(len(round_.tagged_samples()))
        app.close()
        stop.set()
    per_round = statistics.median(packed)
    print(f"samples per round: {statistics.median(samples):.0f}")
    print(f"baseline: plain JSON        {statistics.median(plain):9.0f} bytes a round")
    print(f"spool: compressed JSON      {per_round:9.0f} bytes a round "
          f"({statistics.median(plain) / per_round:.1f} x smaller)")  # fmt: skip
    for interval in (10.0, 1.0):
        hourly = per_round * 3600 / interval
        hours = DEFAULT_MAX_BYTES / hourly
        print(f"at {interval:g} s ticks: {hourly / 1e6:7.1f} MB an hour; the default "
              f"{DEFAULT_MAX_BYTES / 2**20:.0f} MiB spool holds {hours:6.1f} hours")  # fmt: skip


def _plain(round_: object) -> object:
    from agent.collect.runner import Round

    assert isinstance(round_, Round)
    return [[s.metric, s.labels, s.value, s.ts.isoformat()] for _, s in round_.tagged_samples()]


if __name__ == "__main__":
    sys.exit(main())
