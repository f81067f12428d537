"""Benchmark: what a hostile target costs a host (issue 13).

    python bench/hostile_scrape.py

1. `gpuwatch collect --once` (a fresh process, SQLite, NVML off) against one vLLM 0.33
   simulator target: wall time and the process's peak RSS (its own VmHWM, tests/cli_peak.py), with a
   healthy body (the baseline) and with 100,000 extra series of one metric (a distinct
   ``model_name`` each), which the target's ``sample_limit`` refuses.
2. Parsing one healthy body (2 models x 2 data-parallel engines, every histogram): the median
   of 30 parses without and with the per-sample label limit checks, so their cost is seen
   next to the parse they ride on.

Targets (issue 13): the hostile tick finishes within the interval (10 s) and under 150 MB.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.sim.render import render  # noqa: E402
from agent.sim.server import EngineServer  # noqa: E402
from agent.sim.traffic import Traffic  # noqa: E402
from collectors.engines.exposition import Exposition  # noqa: E402
from collectors.engines.registry import read_by_a_mapper  # noqa: E402
from collectors.limits import ScrapeLimits  # noqa: E402
from tests.cli_peak import run_with_peak  # noqa: E402

EXTRA_SERIES = 100_000


def many_models(body: str) -> str:
    lines = (
        f'vllm:num_requests_running{{engine="0",model_name="m{i}"}} 1.0'
        for i in range(EXTRA_SERIES)
    )
    return body + "\n".join(lines) + "\n"


def collect_once(rewrite: Callable[[str], str] | None) -> tuple[float, float]:
    """(seconds, peak MB) of one `gpuwatch collect --once` process."""
    traffic = Traffic(models=("m",))
    traffic.serve(3)
    with EngineServer("vllm-0.33", traffic) as engine, tempfile.TemporaryDirectory() as tmp:
        engine.rewrite = rewrite
        config = Path(tmp) / "gpuwatch.toml"
        config.write_text(
            f'database_url = "sqlite:///{tmp}/gw.db"\n[collectors.nvml]\nenabled = false\n'
            f'[[targets]]\nname = "t"\nurl = "{engine.url}"\n'
        )
        began = time.monotonic()
        _, peak = run_with_peak(["collect", "--once", "--config", str(config)])
        return time.monotonic() - began, peak


def parse_times(body: str, limits: ScrapeLimits | None) -> float:
    took = []
    for _ in range(30):
        began = time.perf_counter()
        if limits is not None:
            limits.check_sample_count(body)
        check = limits.check_labels if limits is not None else None
        Exposition.parse(body, keep=read_by_a_mapper, check=check)
        took.append(time.perf_counter() - began)
    return statistics.median(took)


def main() -> int:
    healthy = collect_once(None)
    hostile = collect_once(many_models)
    print(f"collect --once, healthy target (baseline):  {healthy[0]:5.2f} s   "
          f"peak {healthy[1]:6.1f} MB")  # fmt: skip
    print(f"collect --once, +{EXTRA_SERIES:,} series refused:   {hostile[0]:5.2f} s   "
          f"peak {hostile[1]:6.1f} MB")  # fmt: skip
    ok = hostile[0] < 10 and hostile[1] < 150
    print(f"target: within 10 s and under 150 MB -> {'OK' if ok else 'OVER TARGET'}")
    traffic = Traffic(models=("a", "b"), engines=2)
    traffic.serve(50)
    rendered = render("vllm-0.33", traffic)
    body = rendered[0] if isinstance(rendered, tuple) else rendered
    bare, checked = parse_times(body, None), parse_times(body, ScrapeLimits())
    print(f"parse of a {len(body) / 1024:.0f} KiB body (baseline):  {bare * 1e3:6.2f} ms")
    print(f"the same with the limit checks:       {checked * 1e3:6.2f} ms "
          f"(+{(checked / bare - 1) * 100:.0f} %)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
