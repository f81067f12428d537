"""Wiring: from a Config to the collectors, the runner and the store, and one tick over them."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from agent.alerting.budget_rules import BUDGET_RULES, budget_conditions
from agent.alerting.conditions import RULES as HOST_RULES
from agent.alerting.conditions import conditions
from agent.alerting.evaluation import FLEET, Alerting, Delivery, build_receivers
from agent.alerting.inputs import (
    LatencyCadence,
    StoredBaselines,
    gather,
    outage_memory,
    raw_reach,
)
from agent.alerting.local_outbox import LocalOutbox, outbox_path
from agent.alerting.recent import RecentWindows
from agent.collect.gateways import gateway_collectors
from agent.collect.kubernetes import kubelet_collector
from agent.collect.runner import CollectorRunner, Round
from agent.collect.spans import span_collector
from agent.config.settings import Config
from agent.config.targets import TargetConfig
from agent.cost.allocation import Allocator, TargetPlacement
from agent.cost.billing import BillingJob
from agent.cost.budget import gather_budget
from agent.cost.metering import rollup_for
from agent.cost.pods import pod_samples
from agent.cost.signals import host_samples, hourly_prices
from agent.daemon.deadline import Deadline, DeadlineExceeded
from agent.daemon.fleet import FleetLink
from agent.daemon.leader import Leadership, leadership_for
from agent.daemon.outage import OutageLog, brief
from agent.reporting.digest_job import DigestJob, Outcome
from agent.storage.db import open_database
from agent.storage.demo_mark import DemoDatabaseError, check_kind
from agent.storage.rollup import Rollup
from agent.storage.spool import Spool, SpoolStats
from agent.storage.store import Store
from alerts.model import State
from collectors.base import Collector, Sample
from collectors.otlp.inbox import SpanInbox
from collectors.scrape import ScrapeCollector, TargetSpec

log = logging.getLogger(__name__)

# Spooled rounds per transaction when forwarding: a decoded round is a fraction of a megabyte
# of objects, and Python's allocator keeps the arenas of a peak, so a small batch keeps the
# peak (and what stays behind) small.
DRAIN_BATCH = 10
DRAIN_SECONDS = 20.0  # per drain run: a long outage's spool goes in steps, between ticks


def build_collectors(config: Config, inbox: SpanInbox | None = None) -> list[Collector]:
    """The enabled collectors, in the order they run each tick: the kubelet's pods (on
    Kubernetes), NVML (labelling its processes with them), then one per target, then the
    request spans the OTLP receiver put in ``inbox`` (the daemon's; None: none)."""
    collectors: list[Collector] = []
    kubelet = kubelet_collector(config)
    if kubelet is not None:
        collectors.append(kubelet)
    if config.collectors.nvml.enabled:
        from collectors.nvml import NvmlCollector  # imports pynvml, which needs no GPU to import

        pods = kubelet.attribution if kubelet is not None else None
        nvml = config.collectors.nvml
        collectors.append(NvmlCollector(host=config.host, gpm_pipes=nvml.gpm_pipes, pods=pods))
    collectors.extend(ScrapeCollector(target_spec(t), host=config.host) for t in config.targets)
    collectors.extend(gateway_collectors(config))  # [[gateways]]: tokens per tenant
    if inbox is not None:
        collectors.append(span_collector(config, inbox))
    return collectors


def target_spec(target: TargetConfig) -> TargetSpec:
    """The collector's view of a configured target (the token revealed only to its client)."""
    return TargetSpec(
        name=target.name,
        url=target.url,
        engine=target.engine,
        model=target.model,
        timeout_seconds=target.timeout_seconds,
        max_bytes=target.max_response_bytes,
        bearer_token=target.bearer_token.reveal() if target.bearer_token else None,
        limits=target.limits,
    )


@dataclass
class App:
    """What one daemon (or one `collect --once`) works with."""

    config: Config
    engine: Engine
    store: Store
    runner: CollectorRunner
    allocator: Allocator
    rollup: Rollup
    billing: BillingJob
    alerting: Alerting
    fleet_alerting: Alerting  # the budget rules, over every host's data
    leader: Leadership  # whether this daemon does the fleet's work (see agent.daemon.leader)
    digest: DigestJob | None  # None: no weekly digest ([digest] off, or no Slack)
    fleet: FleetLink  # the fleet's database (central when [fleet] forwards) and the forward
    spool: Spool  # rounds the database could not take, until it can (agent.storage.spool)
    leading: bool = False  # as of the last check_leadership()
    started_at: datetime | None = None  # the first tick: "never collected" counts from here
    queued: int = 0  # notifications the last tick queued (the daemon delivers them at once)
    deadline: Deadline = field(default_factory=Deadline)
    store_outage: OutageLog = field(
        default_factory=lambda: OutageLog("storing rounds", log, then="spooling them")
    )
    spool_outage: OutageLog = field(
        default_factory=lambda: OutageLog("spooling rounds", log, then="these rounds are lost")
    )
    local_outbox: OutageLog = field(
        default_factory=lambda: OutageLog(
            "queueing notifications locally", log, then="they are not sent"
        )  # fmt: skip
    )
    _alerts_failing: bool = False
    # While the database is away, the host's rules read their windows from the outage's
    # rounds (agent.alerting.recent) and the baselines they last read.
    recent: RecentWindows | None = None
    baselines: StoredBaselines | None = None
    cadence: LatencyCadence | None = None  # how often the latency windows are read
    # Collectors failing when the daemon last stopped and never successful: since when.
    failing_since: dict[str, datetime] = field(default_factory=dict)

    @property
    def on_kubernetes(self) -> bool:
        return any(c.name == "kubelet" for c in self.runner.collectors)

    def __post_init__(self) -> None:
        rules, interval = self.alerting.rules, self.config.daemon.interval_seconds
        self.recent = self.recent or outage_memory(rules, interval)
        self.baselines = self.baselines or StoredBaselines(self.engine)
        self.cadence = self.cadence or LatencyCadence(interval)
        self.rollup.head_reach = raw_reach(rules, interval)  # packing waits for these windows
        self._resume_failures()

    def _resume_failures(self) -> None:
        """Collectors that were failing when the daemon stopped go on failing from then, not
        from this start: a restart must neither resolve CollectorDown nor fire it again."""
        names = [c.name for c in self.runner.collectors]
        try:
            failing = self.store.failing_at_stop(names)
        except SQLAlchemyError:  # the database is away at start: counted from now, as before
            return
        self.runner.remember({n: ok for n, (ok, _) in failing.items() if ok is not None})
        self.failing_since = {n: first for n, (ok, first) in failing.items() if ok is None}

    @classmethod
    def open(
        cls,
        config: Config,
        collectors: list[Collector] | None = None,
        inbox: SpanInbox | None = None,
    ) -> App:
        """Open the database (SQLite upgraded, PostgreSQL checked) and build the collectors."""
        engine = open_database(config.database_url, config.daemon.database_timeout)
        try:
            check_kind(engine, config.database_url, config.demo)
        except DemoDatabaseError:
            engine.dispose()
            raise
        fleet = FleetLink.open(config, engine)  # the fleet's work runs on fleet.engine
        chosen = build_collectors(config, inbox) if collectors is None else collectors
        placements = [TargetPlacement(t.name, t.url, t.unit, t.gpus) for t in config.targets]
        receivers = build_receivers(config)
        spool = Spool(config.spool.file(config.database_url, os.environ), config.spool.max_bytes)
        alerting = Alerting.for_scope(engine, config.host, config.alerts, receivers, HOST_RULES)
        alerting.local = LocalOutbox(outbox_path(spool.path))
        deadline = Deadline()
        # Packing batches leave the tick its turn (one SQLite writer, one interpreter lock).
        turn = partial(deadline.turn, config.daemon.database_timeout)
        return cls(
            config,
            engine,
            Store(engine, config.host),
            CollectorRunner(config.host, chosen),
            Allocator(config.host, placements),
            rollup_for(engine, config, turn),
            BillingJob(engine, config.billing),
            alerting,
            Alerting.for_scope(fleet.engine, FLEET, config.alerts, receivers, BUDGET_RULES),
            leadership_for(fleet.engine, config.host),
            DigestJob.from_config(fleet.engine, config, config.digest),
            fleet,
            spool,
            deadline=deadline,
        )

    def tick(self, now: datetime) -> Round:
        """Collect once, store the round in one transaction and evaluate this host's rules.

        The database work has a deadline (``daemon.database_timeout``, kept on our side: see
        agent.daemon.deadline). A round the database cannot take in time goes to the spool, and
        the round is returned (and exposed) either way: an outage must not blind /metrics.
        """
        round_ = self.collect(now)
        self._store(round_, now)
        exposed = self.alert_samples(now) + spool_samples(self.spool.stats(), self.config, now)
        return replace(round_, derived=round_.derived + exposed)

    def collect(self, now: datetime) -> Round:
        """One round of every collector, with what gpuwatch derives from it (which target uses
        which GPU, the GPUs' prices): what a tick stores (the demo's history stores it too)."""
        round_ = self.runner.run(now)
        samples = [s for _, s in round_.tagged_samples()]
        derived = self.allocator.samples(samples, now) + hourly_prices(self.config, samples, now)
        if self.on_kubernetes:  # pod labels come from the kubelet collector alone
            derived += pod_samples(self.config.host, samples, now, self.allocator.target_of_pid)
        return replace(round_, derived=round_.derived + tuple(derived))

    def _store(self, round_: Round, now: datetime) -> None:
        if not self.spool.empty:
            # Behind the rounds already spooled: the database always holds a prefix of the
            # box's history, so a rollup never closes a minute whose rounds are still spooled.
            self._spool(round_)
            self.queued = self.evaluate_offline(round_, now)
            return
        try:
            self.queued = self.deadline.call(
                lambda: self._write_and_evaluate(round_, now), self.config.daemon.database_timeout
            )
        except (SQLAlchemyError, DeadlineExceeded) as exc:
            self.store_outage.failed(brief(exc))
            self._spool(round_)
            self.queued = self.evaluate_offline(round_, now)
            return
        self.store_outage.ok()
        if self.recent is not None and not self.recent.empty:
            self.recent.clear()  # the outage is over: the rules read the store again

    def _write_and_evaluate(self, round_: Round, now: datetime) -> int:
        self.store.write_round(round_, timeout=self.config.daemon.database_timeout)
        return self.evaluate_alerts(round_, now)

    def _spool(self, round_: Round) -> None:
        try:
            self.spool.append(round_)
        except (OSError, sqlite3.Error) as exc:  # the spool's disk is full too: lost, said
            self.spool_outage.failed(f"{self.spool.path}: {exc}")
            return
        self.spool_outage.ok()

    def drain(self, budget_seconds: float = DRAIN_SECONDS) -> int:
        """Forward spooled rounds to the database, oldest first, a batch per transaction, for
        at most ``budget_seconds``; returns how many were forwarded. A batch is removed from
        the spool only after its commit, and a replayed round changes nothing already stored,
        so a crash at any point neither loses nor doubles a sample. Raises SQLAlchemyError
        while the database is still away (the spool stays as it was)."""
        started, sent = time.monotonic(), 0
        while time.monotonic() - started < budget_seconds:
            batch = self.spool.oldest(DRAIN_BATCH)
            if not batch:
                break
            # Decoded one by one as the transaction reaches them: Python's allocator keeps the
            # arenas a larger peak spread over.
            self.store.write_rounds((s.round() for s in batch), replay=True)
            self.spool.remove([s.seq for s in batch])
            sent += len(batch)
        return sent

    def alert_samples(self, now: datetime) -> tuple[Sample, ...]:
        """``gpuwatch_alerts{rule, state}``: this host's pending and firing alerts, for
        /metrics (Prometheus' own ALERTS series, counted per rule); exposed, not stored."""
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for state in self.alerting.states():
            if state.state in (State.PENDING, State.FIRING):
                counts[(state.key.rule, state.state.value)] += 1
        return tuple(
            Sample(metric="gpuwatch_alerts", value=float(n), ts=now,
                   labels={"host": self.config.host, "rule": rule, "state": value})
            for (rule, value), n in sorted(counts.items())
        )  # fmt: skip

    def evaluate_alerts(self, round_: Round, now: datetime) -> int:
        """This host's rules after a stored round; returns how many notifications were queued.
        Skipped when the round could not be stored: the rules read their windows from the
        store, and a half-seen round would resolve alerts that still hold."""
        self.started_at = self.started_at or now
        rules = self.alerting.rules
        try:
            inputs = gather(self.store, round_, self.config, now, rules=rules,
                            started_at=self.started_at, baselines=self.baselines,
                            failing_since=self.failing_since, cadence=self.cadence)  # fmt: skip
            found, evaluated = conditions(rules, inputs)
            _, plan = self.alerting.evaluate(found, evaluated, now)
        except SQLAlchemyError as exc:
            if not self._alerts_failing:
                log.error("evaluating alerts failed (retrying every tick): %s", brief(exc))
            self._alerts_failing = True
            return 0
        if self._alerts_failing:
            log.info("evaluating alerts recovered")
        self._alerts_failing = False
        return len(plan.notifications)

    def evaluate_offline(self, round_: Round, now: datetime) -> int:
        """This host's rules while the database is away (the round was spooled): windows from
        the outage's rounds, notifications to the local outbox; returns how many were queued."""
        assert self.recent is not None and self.baselines is not None  # set by __post_init__
        self.started_at = self.started_at or now
        self.recent.add((s for _, s in round_.tagged_samples()), now)
        rules = self.alerting.rules
        baselines = self.baselines.remembered
        inputs = gather(self.recent, round_, self.config, now, rules=rules,
                        started_at=self.started_at, baselines=baselines,
                        failing_since=self.failing_since, cadence=self.cadence)  # fmt: skip
        found, evaluated = conditions(rules, inputs)
        try:
            _, plan = self.alerting.evaluate_offline(found, evaluated, now)
        except (OSError, sqlite3.Error) as exc:  # the local disk is full too
            self.local_outbox.failed(brief(exc))
            return 0
        self.local_outbox.ok()
        return len(plan.notifications)

    def deliver(self, now: datetime) -> Delivery:
        """Send the queued notifications that are due (a separate job: a slow receiver must
        not hold up collection). While rounds are spooled the database is away or behind:
        only the local outbox is sent, so a hung database cannot hold notifications up."""
        delivery = self.alerting.deliver(now, database=self.spool.empty)
        if (
            self.leading and self.spool.empty
        ):  # a dead leader's queued budget notifications go out from the next one
            delivery += self.fleet_alerting.deliver(now)
        return delivery

    def roll_up(self, now: datetime) -> list[Sample]:
        """Roll up what is complete, forward it to the central database ([fleet]), then this
        host's cost signals from its own rollups and the fleet-wide ones the leader stores.
        Nothing from the oldest spooled round on is complete: its minute waits for the spool."""
        oldest = self.spool.stats().oldest
        self.rollup.run(now if oldest is None else min(now, oldest))
        forwarded = self.fleet.forward(now)
        if self.leading:
            self.queued = self.evaluate_fleet_alerts(now)
        fleet = self.fleet.signals(self.config, now, self.leading)
        return host_samples(self.engine, self.config, now) + fleet + forwarded

    def send_digest(self, now: datetime) -> Outcome | None:
        """The weekly digest, on the leader only; the digests table makes it once a week
        whatever the restarts and leaders (see agent.reporting.digest_job)."""
        if self.digest is None or not self.leading:
            return None
        return self.digest.run(now)

    def check_leadership(self, now: datetime) -> Sample:
        """Take or keep the fleet lead; the answer as a /metrics sample."""
        self.leading = self.leader.held()
        labels = {"host": self.config.host}
        return Sample(metric="gpuwatch_fleet_leader", value=float(self.leading), labels=labels,
                      ts=now)  # fmt: skip

    def evaluate_fleet_alerts(self, now: datetime) -> int:
        """The budget rules, once a minute after the rollup (they read rollups only)."""
        rules = self.fleet_alerting.rules
        try:
            inputs = gather_budget(self.fleet.engine, self.config, now, rules)
            found, evaluated = budget_conditions(rules, inputs)
            _, plan = self.fleet_alerting.evaluate(found, evaluated, now)
        except SQLAlchemyError as exc:
            log.error("evaluating budget alerts failed (retrying next minute): %s", brief(exc))
            return 0
        return len(plan.notifications)

    def close(self) -> None:
        """Release the collectors (NVML session, HTTP clients), the workers and the database."""
        self.deadline.close()
        self.spool.close()
        if self.alerting.local is not None:
            self.alerting.local.close()
        self.runner.close()
        self.billing.close()
        self.leader.close()
        self.fleet.close()
        for collector in self.runner.collectors:
            close = getattr(collector, "close", None)
            if callable(close):
                close()
        self.engine.dispose()


def spool_samples(stats: SpoolStats, config: Config, now: datetime) -> tuple[Sample, ...]:
    """The spool on /metrics (exposed every tick, never stored)."""
    labels = {"host": config.host}
    age = 0.0 if stats.oldest is None else max(0.0, (now - stats.oldest).total_seconds())
    values = {
        "gpuwatch_spool_bytes": float(stats.bytes),
        "gpuwatch_spool_rounds": float(stats.rounds),
        "gpuwatch_spool_oldest_age_seconds": age,
        "gpuwatch_spool_dropped_rounds_total": float(stats.dropped),
    }
    return tuple(Sample(metric=m, value=v, labels=labels, ts=now) for m, v in values.items())
