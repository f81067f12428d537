"""Benchmark: scrape, parse, map and store one vLLM 0.33 /metrics, against the parser alone.

    make bench          (or: python bench/scrape.py [--rounds N] [--database-url URL])

The exposition comes from the engine simulator: vLLM 0.33, 2 models x 2 data-parallel engines,
every histogram populated (about 150 KB, 1,700 lines), rendered once and served as static bytes
on loopback (rendering is the engine's work, not gpuwatch's). The floor is prometheus_client's
``text_string_to_metric_families`` alone on the same bytes, measured in the same run; the
measured path is a whole daemon tick for that target: HTTP GET on loopback, parse, map to the
canonical signals, store the round in one transaction. Target (issue 3): at most 1.5 x the floor.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
from collections.abc import Iterator
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
from agent.sim.traffic import Traffic  # noqa: E402
from agent.storage.db import upgrade_database  # noqa: E402
from bench.timing import ms, timed  # noqa: E402
from collectors.engines import vllm  # noqa: E402
from collectors.engines.exposition import Exposition  # noqa: E402
from collectors.engines.rules import Context  # noqa: E402

T0 = datetime(2026, 11, 30, tzinfo=UTC)


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


def open_app(url: str, database_url: str) -> App:
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as fh:
        fh.write('host = "bench"\n[collectors.nvml]\nenabled = false\n')
        fh.write(f'[[targets]]\nname = "vllm"\nurl = "{url}"\nengine = "vllm"\n')
    upgrade_database(database_url)  # PostgreSQL is never upgraded implicitly
    return App.open(load_config(fh.name, {"GPUWATCH_DATABASE_URL": database_url}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    args = parser.parse_args()
    body = render("vllm-0.33", traffic()).encode()
    with (
        tempfile.TemporaryDirectory() as tmp,
        static_server(body, content_type("vllm-0.33")) as metrics,
    ):
        text = httpx.get(metrics).text
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        app = open_app(metrics, url)
        context = Context("bench", "vllm", "vllm", "vllm", T0)

        floor = timed(lambda _: list(text_string_to_metric_families(text)), args.rounds)
        mapped = timed(lambda _: vllm.map_samples(Exposition.parse(text), context), args.rounds)
        ticks = timed(lambda i: app.tick(T0 + timedelta(seconds=10 * (i + 2))), args.rounds)
        rows = len(app.tick(T0).tagged_samples())
        app.close()

    kind = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
    size = f"{len(body):,} bytes, {text.count(chr(10)):,} lines"
    print(f"exposition: {size}; {rows} rows stored per tick")
    print(f"floor: prometheus_client parser alone      {ms(floor)}")
    print(f"parse + map to canonical signals           {ms(mapped)}")
    print(f"tick: GET + parse + map + store ({kind})  {ms(ticks)}")
    ratio = statistics.median(ticks) / statistics.median(floor)
    verdict = "OK" if ratio <= 1.5 else "OVER TARGET"
    print(f"target: tick <= 1.5 x floor -> {ratio:.2f} x, {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
