"""Benchmark: what does scraping one engine target cost, healthy and hostile?

    python bench/scrape.py [--rounds 60] [--database-url URL] [--extra-series 100000]

1. A healthy vLLM 0.33 /metrics: the engine simulator's exposition for 2 models x 2
   data-parallel engines, every histogram populated (about 150 KB, 1,700 lines), rendered once
   and served as static bytes on loopback (rendering is the engine's work, not gpuwatch's).
   Measured, median of ``--rounds`` after a warm-up: the parse with and without the per-sample
   limit checks, the parse mapped to the canonical signals, and a whole daemon tick for that
   target (HTTP GET, parse, map, store the round in one transaction; SQLite unless
   ``--database-url``). Baseline: prometheus_client's ``text_string_to_metric_families``
   alone on the same bytes. Target: the tick at most 1.5 x the baseline.
2. A hostile target: `gpuwatch collect --once` (a fresh process, SQLite, NVML off) against a
   simulator target whose body carries ``--extra-series`` more series of one metric (a
   distinct ``model_name`` each), which the target's default ``sample_limit`` (50,000) refuses
   before parsing. Wall time and the process's own peak RSS (VmHWM as it exits), next to the
   baseline: the same command against the healthy target. Target: within the default 10 s
   interval and under 150 MB.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from agent.config.settings import load_config  # noqa: E402
from agent.daemon.app import App  # noqa: E402
from agent.sim.render import content_type, render  # noqa: E402
from agent.sim.server import EngineServer  # noqa: E402
from agent.sim.traffic import Traffic  # noqa: E402
from agent.storage.db import upgrade_database  # noqa: E402
from bench.common import ms, timed, verdict  # noqa: E402
from collectors.engines import vllm  # noqa: E402
from collectors.engines.exposition import Exposition  # noqa: E402
from collectors.engines.registry import read_by_a_mapper  # noqa: E402
from collectors.engines.rules import Context  # noqa: E402
from collectors.limits import ScrapeLimits  # noqa: E402
from tests.cli_peak import run_with_peak  # noqa: E402

T0 = datetime(2026, 11, 30, tzinfo=UTC)
RATIO_TARGET = 1.5
HOSTILE_SECONDS, HOSTILE_MB = 10.0, 150.0


def traffic() -> Traffic:
    t = Traffic(models=("llama-3.1-8b", "qwen2.5-7b"), engines=2)
    for model in t.models:
        for engine in t.engines:
            t.serve(24, model=model, engine=engine)
            t.set_gauges(model=model, engine=engine, running=7, waiting=3, kv_usage=0.62)
    return t


@contextmanager
def static_server(body: bytes, ctype: str) -> Iterator[str]:
    """Serves ``body`` at /metrics on 127.0.0.1, like an engine with its text ready."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the daemon's client reuses connections

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def healthy(rounds: int, database_url: str | None, folder: Path) -> None:
    body = render("vllm-0.33", traffic()).encode()
    with static_server(body, content_type("vllm-0.33")) as metrics:
        text = httpx.get(metrics).text
        url = database_url or f"sqlite:///{folder / 'scrape.db'}"
        toml = folder / "scrape.toml"
        toml.write_text(
            'host = "bench"\n[collectors.nvml]\nenabled = false\n'
            f'[[targets]]\nname = "vllm"\nurl = "{metrics}"\nengine = "vllm"\n'
        )
        upgrade_database(url)  # PostgreSQL is never upgraded implicitly
        app = App.open(load_config(str(toml), {"GPUWATCH_DATABASE_URL": url}))
        context = Context("bench", "vllm", "vllm", "vllm", T0)
        limits = ScrapeLimits()

        def checked(_: int) -> None:
            limits.check_sample_count(text)
            Exposition.parse(text, keep=read_by_a_mapper, check=limits.check_labels)

        floor = timed(lambda _: list(text_string_to_metric_families(text)), rounds)
        bare = timed(lambda _: Exposition.parse(text, keep=read_by_a_mapper), rounds)
        limited = timed(checked, rounds)
        mapped = timed(lambda _: vllm.map_samples(Exposition.parse(text), context), rounds)
        ticks = timed(lambda i: app.tick(T0 + timedelta(seconds=10 * (i + 2))), rounds)
        rows = len(app.tick(T0).tagged_samples())
        app.close()
    kind = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
    print(f"healthy target: {len(body):,} bytes, {text.count(chr(10)):,} lines; {rows} rows "
          f"stored per tick; {rounds} rounds")  # fmt: skip
    print(f"  baseline: prometheus_client parser alone   {ms(floor)}")
    print(f"  parse (the families a mapper reads)        {ms(bare)}")
    print(f"  the same with the limit checks             {ms(limited)}")
    print(f"  parse + map to canonical signals           {ms(mapped)}")
    print(f"  tick: GET + parse + map + store, {kind:<10} {ms(ticks)}")
    ratio = statistics.median(ticks) / statistics.median(floor)
    print(f"target: tick <= {RATIO_TARGET:g} x baseline -> {ratio:.2f} x, "
          f"{verdict(ratio <= RATIO_TARGET)}")  # fmt: skip


def collect_once(rewrite: Callable[[str], str] | None) -> tuple[float, float, str]:
    """(seconds, peak MB, the refusal if any) of one `gpuwatch collect --once` process."""
    sim = Traffic(models=("m",))
    sim.serve(3)
    with EngineServer("vllm-0.33", sim) as engine, tempfile.TemporaryDirectory() as tmp:
        engine.rewrite = rewrite
        config = Path(tmp) / "gpuwatch.toml"
        config.write_text(
            f'database_url = "sqlite:///{tmp}/gw.db"\n[collectors.nvml]\nenabled = false\n'
            f'[[targets]]\nname = "t"\nurl = "{engine.url}"\n'
        )
        began = time.monotonic()
        done, peak = run_with_peak(["collect", "--once", "--config", str(config)])
        took = time.monotonic() - began
    if done.returncode not in (0, 1):  # 1: the target failed, which a hostile one should
        raise SystemExit(f"gpuwatch collect --once: exit {done.returncode}: {done.stderr}")
    refused = "sample_limit exceeded" in done.stdout + done.stderr
    return took, peak, "refused by sample_limit" if refused else "accepted"


def hostile(extra: int) -> None:
    def many_models(body: str) -> str:
        lines = (
            f'vllm:num_requests_running{{engine="0",model_name="m{i}"}} 1.0' for i in range(extra)
        )
        return body + "\n".join(lines) + "\n"

    base = collect_once(None)
    bad = collect_once(many_models)
    print("hostile target: `gpuwatch collect --once`, a fresh process, NVML off")
    print(f"  baseline: healthy target  {base[0]:6.2f} s   peak {base[1]:6.1f} MB")
    print(f"  +{extra:,} series         {bad[0]:6.2f} s   peak {bad[1]:6.1f} MB   ({bad[2]})")
    ok = bad[0] < HOSTILE_SECONDS and bad[1] < HOSTILE_MB
    print(f"target: hostile collect within {HOSTILE_SECONDS:g} s and under {HOSTILE_MB:g} MB -> "
          f"{verdict(ok)}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=60, help="timed rounds (default 60)")
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    parser.add_argument("--extra-series", type=int, default=100_000,
                        help="the hostile body's extra series (default 100,000)")  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        healthy(args.rounds, args.database_url, Path(tmp))
    hostile(args.extra_series)
    return 0


if __name__ == "__main__":
    sys.exit(main())
