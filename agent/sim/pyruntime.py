"""Families a Python engine's /metrics carries besides its own: a parser must skip them.

- ``python_gc_*``, ``python_info`` and ``process_*`` come from prometheus_client's default
  collectors: single-process registries only (a MultiProcessCollector registry has none).
  They are custom collectors, so they never have ``_created``. The numbers are fixed, except
  ``process_start_time_seconds``, which follows the engine's start time.
- ``http_*`` come from prometheus_fastapi_instrumentator (vLLM 0.8.5+). They are ordinary
  prometheus_client metrics, with ``_created`` in single-process mode. Every simulated request
  counts as one ``POST /v1/completions``; engine errors answer 500, everything else 200.
"""

from __future__ import annotations

from agent.sim.expo import Family, Scalar, Summary, histogram
from agent.sim.traffic import Snapshot

_GENERATIONS = ("0", "1", "2")
_GC_COLLECTED = (12053.0, 3476.0, 511.0)
_GC_COLLECTIONS = (1523.0, 138.0, 9.0)

# prometheus_fastapi_instrumentator's defaults.
HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    7.5, 10.0, 30.0, 60.0,
)  # fmt: skip
LOWR_BUCKETS = (0.1, 0.5, 1.0)
_HANDLER = "/v1/completions"


def _per_generation(values: tuple[float, ...]) -> tuple[Scalar, ...]:
    return tuple(Scalar((("generation", g),), v) for g, v in zip(_GENERATIONS, values, strict=True))


def python_families(snap: Snapshot) -> list[Family]:
    """The default registry's gc, platform and process collectors."""
    info = (
        ("implementation", "CPython"),
        ("major", "3"),
        ("minor", "12"),
        ("patchlevel", "9"),
        ("version", "3.12.9"),
    )
    return [
        Family(
            "python_gc_objects_collected",
            "counter",
            "Objects collected during gc",
            _per_generation(_GC_COLLECTED),
        ),
        Family(
            "python_gc_objects_uncollectable",
            "counter",
            "Uncollectable objects found during GC",
            _per_generation((0.0, 0.0, 0.0)),
        ),
        Family(
            "python_gc_collections",
            "counter",
            "Number of times this generation was collected",
            _per_generation(_GC_COLLECTIONS),
        ),
        Family("python_info", "gauge", "Python platform information", (Scalar(info, 1.0),)),
        _process("virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", 33_554_432_000),
        _process("resident_memory_bytes", "gauge", "Resident memory size in bytes.", 2_147_483_648),
        _process(
            "start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            round(snap.started_at, 2),
        ),
        _process(
            "cpu_seconds", "counter", "Total user and system CPU time spent in seconds.", 41.36
        ),
        _process("open_fds", "gauge", "Number of open file descriptors.", 87),
        _process("max_fds", "gauge", "Maximum number of open file descriptors.", 1_048_576),
    ]


def _process(name: str, kind: str, help_: str, value: float) -> Family:
    return Family(f"process_{name}", kind, help_, (Scalar((), float(value)),))


def http_families(snap: Snapshot, *, created: float | None) -> list[Family]:
    """prometheus_fastapi_instrumentator's families; children appear with the first request."""
    reqs = snap.requests
    by_status = [
        (s, sum(1 for r in reqs if (r.finish_reason == "error") == (s == "5xx")))
        for s in ("2xx", "5xx")
    ]
    handler = (("handler", _HANDLER),)
    e2e = [r.e2e_latency for r in reqs]
    some = bool(reqs)
    return [
        Family(
            "http_requests",
            "counter",
            "Total number of requests by method, status and handler.",
            tuple(
                Scalar(handler + (("method", "POST"), ("status", s)), float(n))
                for s, n in by_status
                if n
            ),
            created,
        ),
        Family(
            "http_request_size_bytes",
            "summary",
            "Content length of incoming requests by handler. Only value of header is respected. "
            "Otherwise ignored. No percentile calculated. ",
            (Summary(handler, len(reqs), float(sum(200 + 4 * r.prompt_tokens for r in reqs))),)
            if some
            else (),
            created,
        ),
        Family(
            "http_response_size_bytes",
            "summary",
            "Content length of outgoing responses by handler. Only value of header is respected. "
            "Otherwise ignored. No percentile calculated. ",
            (Summary(handler, len(reqs), float(sum(300 + 4 * r.generation_tokens for r in reqs))),)
            if some
            else (),
            created,
        ),
        Family(
            "http_request_duration_highr_seconds",
            "histogram",
            "Latency with many buckets but no API specific labels. Made for more accurate "
            "percentile calculations. ",
            (histogram((), HIGHR_BUCKETS, e2e),),
            created,
        ),
        Family(
            "http_request_duration_seconds",
            "histogram",
            "Latency with only few buckets by handler. Made to be only used if aggregation by "
            "handler is important. ",
            (histogram(handler + (("method", "POST"),), LOWR_BUCKETS, e2e),) if some else (),
            created,
        ),
    ]
