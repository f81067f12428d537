"""Bad input, billing APIs: whatever one provider answers, the hourly job records that
provider's failure with its reason, stores nothing of it, loses nothing stored before, and
reads the other providers as usual.

One loopback server plays RunPod, Lambda and Vast at once (their paths do not overlap), with
their sample answers (tests/fixtures/billing). The job runs once on good answers, then one
path answers a hostile body and the job runs again, on SQLite and on PostgreSQL (where an
amount of 10^12 used to overflow NUMERIC(24, 12) and escape the job).
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from agent.config.settings import load_config
from agent.cost.billing import BillingJob
from agent.storage.db import open_database, upgrade_database
from collectors.billing.registry import RateSource, make_source
from migrations.schema import billing_resources, cost_records
from tests.collectors.billing.conftest import TOKEN, FakeApi, Reply, sample

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MAX_ANSWER = 1 << 20  # the job's sources refuse answers larger than this (default 64 MiB)
PODS, POD_BILLING, SERVERLESS = "/v2/pods", "/v2/billing/pods", "/v2/billing/serverless"
LAMBDA, TYPES = "/instances", "/instance-types"
VAST, CHARGES = "/api/v1/instances/", "/api/v0/charges/"


def _final(name: str) -> dict[str, Any]:
    body = sample(name)
    body["next_token"] = None
    return body


GOOD: dict[str, Callable[[], Any]] = {
    PODS: lambda: sample("runpod-v2-pods.json"),
    POD_BILLING: lambda: sample("runpod-v2-billing-pods.json"),
    SERVERLESS: lambda: sample("runpod-v2-billing-serverless.json"),
    LAMBDA: lambda: sample("lambda-instances.json"),
    TYPES: lambda: sample("lambda-instance-types.json"),  # the sample's instance has no GPU count
    VAST: lambda: _final("vast-instances-v1.json"),
    CHARGES: lambda: _final("vast-charges.json"),
}


def edit(path: str, change: Callable[[dict[str, Any]], object]) -> Callable[[], Reply]:
    """The good answer of ``path`` as JSON, after ``change`` edited it in place."""

    def make() -> Reply:
        body = copy.deepcopy(GOOD[path]())
        change(body)
        return Reply(200, body)

    return make


def raw(data: bytes) -> Callable[[], Reply]:
    return lambda: Reply(200, data)


def raw_edit(path: str, old: str, new: str) -> Callable[[], Reply]:
    """The good answer of ``path`` as bytes, with the first ``old`` replaced by ``new``."""
    return lambda: Reply(200, json.dumps(GOOD[path]()).replace(old, new, 1).encode())


def put(where: str, value: object) -> Callable[[dict[str, Any]], None]:
    """Set the field at ``where`` ("records.0.totalAmount") to ``value``."""

    def change(body: dict[str, Any]) -> None:
        *parents, last = where.split(".")
        node: Any = body
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value

    return change


@dataclass(frozen=True)
class Bad:
    kind: str
    provider: str
    path: str
    reply: Callable[[], Reply]
    problem: str  # must appear in the error


CASES = [
    Bad("amount-1e999", "runpod", POD_BILLING, raw_edit(POD_BILLING, "12.34", "1e999"),
        "amount 1E+999 is out of bounds (|amount| must be under 1e+9)"),
    Bad("amount-minus-1e26", "vast", CHARGES, raw_edit(CHARGES, "38.421", "-1e26"),
        "amount -1E+26 is out of bounds"),
    Bad("amount-1e12", "runpod", SERVERLESS, edit(SERVERLESS, put("records.0.totalAmount", 10**12)),
        "amount 1000000000000 is out of bounds"),
    Bad("amount-5000-digits", "vast", CHARGES, raw_edit(CHARGES, "38.421", "9" * 5000),
        "/api/v0/charges/: the answer is not JSON"),
    Bad("amount-a-boolean", "vast", CHARGES, edit(CHARGES, put("results.0.amount", True)),
        "results[0].amount is a boolean, expected number"),
    Bad("rate-NaN", "vast", VAST, raw_edit(VAST, '"dph_total": ', '"dph_total": NaN, "x": '),
        "vast /api/v1/instances/: the answer is not JSON"),
    Bad("rate-Infinity", "lambda", LAMBDA, raw_edit(LAMBDA, '"price_cents_per_hour": ',
        '"price_cents_per_hour": Infinity, "x": '), "lambda /instances: the answer is not JSON"),
    Bad("rate-negative", "vast", VAST, edit(VAST, put("instances.0.dph_total", -5)),
        "USD per hour -5 is negative"),
    Bad("rate-1e7-per-hour", "lambda", LAMBDA,
        edit(LAMBDA, put("data.0.instance_type.price_cents_per_hour", 10**9)),
        "USD per hour 10000000 is out of bounds (|amount| must be under 1e+6)"),
    Bad("rate-a-string", "runpod", PODS, edit(PODS, put("pods.0.cost", "0.44")),
        "pods[0].cost is a string, expected number"),
    Bad("gpus-1e30", "lambda", LAMBDA,
        edit(LAMBDA, put("data.0.instance_type.specs.gpus", 10**30)),
        "GPUs is not in 0..10000"),
    Bad("nested-100k-deep", "runpod", POD_BILLING, raw(b"[" * 100_000 + b"]" * 100_000),
        "runpod /v2/billing/pods: the answer nests too deeply to be read"),
    Bad("html-page", "lambda", LAMBDA, raw(b"<html><body>Gateway</body></html>"),
        "lambda /instances: the answer is not JSON (HTTP 200"),
    Bad("empty-body", "vast", CHARGES, raw(b""), "vast /api/v0/charges/: the answer is not JSON"),
    Bad("truncated-json", "runpod", PODS, raw(json.dumps(GOOD[PODS]())[:60].encode()),
        "runpod /v2/pods: the answer is not JSON"),
    Bad("not-utf8", "lambda", LAMBDA, lambda: Reply(200, json.dumps(GOOD[LAMBDA]()).encode()
        .replace(b"training-node-1", b"training-\xff", 1)),
        "lambda /instances: the answer is not JSON"),
    Bad("array-not-object", "vast", VAST, lambda: Reply(200, [1, 2, 3]),
        "the answer is an array, expected object"),
    Bad("field-missing", "lambda", LAMBDA, lambda: Reply(200, {"dat": []}),
        "lambda /instances: data missing"),
    Bad("field-null", "runpod", POD_BILLING, lambda: Reply(200, {"records": None}),
        "runpod /v2/billing/pods: records is null"),
    Bad("time-before-year-1", "runpod", POD_BILLING,
        edit(POD_BILLING, put("records.0.startTime", "0001-01-01T00:00:00+01:00")),
        "records[0].startTime is out of range"),
    Bad("unix-time-1e20", "vast", CHARGES, edit(CHARGES, put("results.0.start", 10**20)),
        "results[0].start is not a unix time"),
    Bad("period-reversed", "runpod", SERVERLESS,
        edit(SERVERLESS, put("records.0.endTime", "2026-05-01T00:00:00Z")),
        "the period ends before it starts"),
    Bad("id-1000-chars", "runpod", PODS, edit(PODS, put("pods.0.id", "p" * 1000)),
        "resource is 1000 characters, at most 255 are stored"),
    Bad("nul-in-name", "runpod", PODS, edit(PODS, put("pods.0.name", "pod\x00name")),
        "name holds a NUL character"),
    Bad("pagination-loop", "vast", VAST,
        edit(VAST, put("next_token", "c2FtZQ==")), "next_token repeats; pagination loops"),
    Bad("endless-answer", "runpod", POD_BILLING, raw(b"[" + b"0," * (1 << 20) + b"0]"),
        f"runpod /v2/billing/pods: the answer is larger than {MAX_ANSWER:,} bytes (HTTP 200)"),
    Bad("gzip-bomb-answer", "lambda", LAMBDA,
        lambda: Reply(200, gzip.compress(b" " * (64 << 20)), {"Content-Encoding": "gzip"}),
        f"lambda /instances: the answer is larger than {MAX_ANSWER:,} bytes"),
]  # fmt: skip


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = FakeApi().start()
    for path, body in GOOD.items():
        server.answer(path, Reply(200, body()))
    yield server
    server.stop()


def _job(db_url: str, api: FakeApi, tmp_path: Path) -> BillingJob:
    upgrade_database(db_url)
    config_file = tmp_path / "gpuwatch.toml"
    config_file.write_text(
        "".join(f'[billing.{p}]\nbase_url = "{api.url}"\n' for p in ("runpod", "lambda", "vast"))
    )
    keys = {"RUNPOD_API_KEY": TOKEN, "LAMBDA_API_KEY": TOKEN, "VAST_API_KEY": TOKEN}
    config = load_config(str(config_file), keys)

    def quick(provider: str, key: str, base_url: str | None) -> RateSource:
        # Real sources and HTTP; retries and pacing are not waited out.
        return make_source(provider, key, base_url, sleep=lambda _: None, min_interval_seconds=0,
                           max_answer_bytes=MAX_ANSWER)  # fmt: skip

    return BillingJob(open_database(db_url), config.billing, factory=quick)


def _stored(job: BillingJob) -> tuple[set[tuple[object, ...]], set[tuple[object, ...]]]:
    with job.engine.connect() as conn:
        records = conn.execute(
            select(cost_records.c.source, cost_records.c.record_id, cost_records.c.amount)
        )
        rates = conn.execute(
            select(
                billing_resources.c.source,
                billing_resources.c.resource,
                billing_resources.c.usd_per_hour,
            )  # fmt: skip
        )
        return {tuple(r) for r in records}, {tuple(r) for r in rates}


@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
def test_a_bad_answer_fails_its_provider_alone_and_loses_nothing(
    case: Bad,
    db_url: str,
    api: FakeApi,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = _job(db_url, api, tmp_path)
    try:
        assert job.run(NOW) == {"runpod": None, "lambda": None, "vast": None}
        before = _stored(job)
        assert {source for source, *_ in before[1]} == {"runpod", "lambda", "vast"}

        api.answer(case.path, case.reply())
        with caplog.at_level(logging.INFO, logger="agent.cost.billing"):
            result = job.run(NOW + timedelta(hours=1))
            again = job.run(NOW + timedelta(hours=2))  # the same failure is not logged twice

        error = result.pop(case.provider)
        assert error is not None and error.startswith(case.provider), error
        assert case.problem in error, error
        assert TOKEN not in error and len(error) < 600
        assert result == dict.fromkeys(result)  # the others were read and stored
        assert again[case.provider] == error and job.last_errors[case.provider] == error
        records, rates = _stored(job)
        assert before[0] <= records and before[1] <= rates  # nothing stored before is lost
        (line,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert (
            line.getMessage() == f"billing source {case.provider} failed, nothing stored: {error}"
        )
        assert line.exc_info is None  # a foreseen failure: no traceback

        api.answer(case.path, Reply(200, GOOD[case.path]()))
        assert job.run(NOW + timedelta(hours=3))[case.provider] is None  # and it recovers
    finally:
        job.close()
        job.engine.dispose()


def test_an_unforeseen_error_in_a_source_is_its_failure_with_a_traceback(
    db_url: str, api: FakeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = _job(db_url, api, tmp_path)
    try:
        job.run(NOW)
        source = job._sources["vast"]

        def broken(now: datetime) -> list[Any]:
            raise ZeroDivisionError("a bug in a source")

        source.rates = broken  # type: ignore[method-assign]
        with caplog.at_level(logging.ERROR, logger="agent.cost.billing"):
            result = job.run(NOW + timedelta(hours=1))
        assert result == {
            "runpod": None,
            "lambda": None,
            "vast": "vast: unexpected ZeroDivisionError: a bug in a source",
        }
        (line,) = caplog.records
        assert line.exc_info is not None  # not foreseen: a bug, so its traceback is logged
    finally:
        job.close()
        job.engine.dispose()


def test_the_daemons_billing_job_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agent.daemon.service import Daemon  # APScheduler: only where the daemon is tested

    server = FakeApi().start()
    server.answer(VAST, Reply(200, b"[" * 100_000 + b"]" * 100_000))
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'database_url = "sqlite:///{tmp_path / "gw.db"}"\n[daemon]\ninterval_seconds = 10\n'
        f'metrics_listen = ""\n[collectors.nvml]\nenabled = false\n'
        f'[billing.vast]\nbase_url = "{server.url}"\n'
    )
    monkeypatch.setenv("VAST_API_KEY", TOKEN)
    daemon = Daemon(str(path), load_config(str(path)))
    try:
        daemon.lead()  # alone on its database: the leader, which asks the providers
        daemon.bill()  # the hourly job, as the scheduler calls it
        error = daemon.app.billing.last_errors["vast"]
        assert error is not None and "nests too deeply" in error
        # and /metrics says so, as for any collector (never succeeded: no timestamp)
        assert _billing_health(daemon) == {"gpuwatch_collector_success": 0.0}
        server.answer(VAST, Reply(200, GOOD[VAST]()))
        server.answer(CHARGES, Reply(200, GOOD[CHARGES]()))
        daemon.bill()
        health = _billing_health(daemon)
        assert health["gpuwatch_collector_success"] == 1.0
        assert health["gpuwatch_collector_last_success_timestamp_seconds"] > 1.7e9
        server.answer(VAST, Reply(200, b"[" * 100_000 + b"]" * 100_000))

        def broken(now: datetime) -> dict[str, str | None]:
            raise RuntimeError("a bug past the job's own guard")

        monkeypatch.setattr(daemon.app.billing, "run", broken)
        with caplog.at_level(logging.ERROR):
            daemon.bill()  # logged with its traceback, never raised into the scheduler
        assert any("billing failed" in r.getMessage() for r in caplog.records)
    finally:
        daemon.app.close()
        server.stop()


def _billing_health(daemon: Any) -> dict[str, float]:
    """The billing source's health series as /metrics renders them."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    registry.register(daemon.latest)
    text = generate_latest(registry).decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("collector") == "billing/vast"
    }
