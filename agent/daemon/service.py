"""`gpuwatch run`: the collection tick, the background jobs on APScheduler 3.x, /metrics, signals.

- A tick every ``daemon.interval_seconds`` on the monotonic clock (agent.daemon.ticker: a wall
  clock step neither stops nor bunches ticks); one at a time, a tick's overrun skipping the
  slots it covered (counted), because a slow tick must not pile up behind itself.
- The minute rollup, delivery, the spool's drain, billing and the digest on APScheduler.
- SIGTERM/SIGINT: the running tick finishes, the database is flushed, exit 0 (well within 5 s).
- SIGHUP: the config is re-read; an invalid one is logged and the old one kept.
- systemd: READY=1 once serving; WATCHDOG=1 from the main loop while ticks happen and none is
  stuck, so a tick hung in the driver (it happens with NVML) or ticks that stopped get the
  service restarted by WatchdogSec."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TypeVar
from wsgiref.simple_server import WSGIServer

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client.process_collector import ProcessCollector
from sqlalchemy.exc import SQLAlchemyError

from agent.collect.clock import Clock, utc_now
from agent.config.settings import Config, DaemonConfig, load_config, parse_listen
from agent.config.web import WebConfigError
from agent.daemon.app import App, brief
from agent.daemon.exposition import LatestRoundCollector, make_registry
from agent.daemon.leader import CHECK_SECONDS
from agent.daemon.malloc import limit_arenas, trim
from agent.daemon.missed import MissedTicks
from agent.daemon.otlp_listen import OtlpListeners
from agent.daemon.outage import OutageLog
from agent.daemon.sdnotify import SdNotifier
from agent.daemon.ticker import Ticker
from agent.daemon.web import WebSettings, serve
from agent.reporting.digest_job import CHECK_INTERVAL as DIGEST_CHECK
from collectors.otlp.inbox import SpanInbox
from foundation.errors import GpuwatchError

log = logging.getLogger(__name__)
T = TypeVar("T")

ROLLUP_SECONDS = 60  # rollups and cost signals: minute buckets complete once a minute
BILLING_SECONDS = 3600  # provider APIs: hourly is within every documented rate limit
DELIVER_JOB = "deliver"
DELIVER_SECONDS = 5  # retries come due between ticks; fresh notifications wake the job at once
DRAIN_EVERY = 5  # seconds between looks at the spool (forwarding it is agent.daemon.app's)


class ListenError(GpuwatchError):
    """/metrics cannot listen where ``daemon.metrics_listen`` says (in use, no such address)."""


@dataclass
class MetricsServer:
    """The /metrics listener; restarted only when the address or the web config file named
    changes (the file's contents take effect on the next connection: agent.daemon.web)."""

    listen: str
    latest: LatestRoundCollector
    web_config_file: str | None = None  # the exporter-toolkit's: TLS and basic auth
    key: str = "daemon.metrics_listen"  # where ``listen`` came from, for errors
    _server: WSGIServer | None = None
    _thread: threading.Thread | None = None

    @classmethod
    def of(cls, daemon: DaemonConfig, latest: LatestRoundCollector) -> MetricsServer:
        return cls(daemon.metrics_listen, latest, daemon.web_config_file, daemon.metrics_listen_key)

    def start(self) -> None:
        address = parse_listen(self.listen) if self.listen else None
        if address is None:
            return
        web = WebSettings(Path(self.web_config_file)) if self.web_config_file else None
        try:
            tls = web is not None and web.current().config.tls is not None
        except WebConfigError as exc:  # changed since the config was read: one line, as below
            raise ListenError(f"daemon.web_config_file: {exc}") from None
        registry = make_registry(self.latest)
        ProcessCollector(registry=registry)  # the daemon's own RSS and CPU, for the guest budget
        try:
            self._server, self._thread = serve(address, registry, web)
        except OSError as exc:  # an expected failure, said in one line: no traceback
            reason = exc.strerror or str(exc)
            raise ListenError(
                f"{self.key} = {self.listen!r}: cannot listen there: {reason}"
            ) from None
        scheme = "https" if tls else "http"
        log.info("serving /metrics on %s://%s/metrics%s", scheme, self.listen,
                 f" (web config {self.web_config_file})" if web else "")  # fmt: skip

    @property
    def port(self) -> int | None:
        return self._server.server_port if self._server else None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@dataclass
class Daemon:
    """The running agent. ``clock`` is injectable; the scheduler itself runs on real time."""

    config_path: str | None
    config: Config
    clock: Clock = utc_now
    notifier: SdNotifier = field(default_factory=SdNotifier.from_env)
    app: App = field(init=False)
    latest: LatestRoundCollector = field(default_factory=LatestRoundCollector)
    _stop: threading.Event = field(default_factory=threading.Event)
    _reload: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _tick_started: float | None = None  # monotonic start of the running tick, None when idle
    _outages: dict[str, OutageLog] = field(default_factory=dict)

    def __post_init__(self) -> None:
        limit_arenas()  # before any thread allocates (see agent.daemon.malloc)
        self.otlp = OtlpListeners.for_config(self.config)  # None: [otlp] off
        self.app = App.open(self.config, inbox=self._inbox())
        self.metrics = MetricsServer.of(self.config.daemon, self.latest)
        self.scheduler = BackgroundScheduler(timezone="UTC")
        # Its warning per skipped tick is replaced by MissedTicks' count and rate-limited lines.
        logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
        self.missed = MissedTicks()
        # A counter from 0 at start, so rate() and alerts see the first miss as an increase.
        self.latest.update_daemon([self.missed.sample(self.config.host, utc_now())])
        # The wall clock the ticker watches for steps is the one the samples are stamped with.
        self.ticker = Ticker(self.config.daemon.interval_seconds, self.tick, self.skipped,
                             wall=lambda: self.clock().timestamp())  # fmt: skip

    def tick(self) -> None:
        """One scheduled tick; never raises (APScheduler would only log it anyway)."""
        self.missed.ran()
        with self._lock:  # a reload swaps the App; never mid-tick
            self._tick_started = time.monotonic()
            try:
                self.latest.update(self.app.tick(self.clock()))
            except Exception:
                log.exception("tick failed")
            finally:
                self._tick_started = None
            trim()  # the round's scrape bodies and rows: a tick's garbage, not the next's heap
            if self.app.queued and self.scheduler.running:
                self.scheduler.modify_job(DELIVER_JOB, next_run_time=utc_now())

    def skipped(self, count: int) -> None:
        """The ticker skipped ``count`` ticks: the previous one ran over their slots."""
        self.missed.missed(count)
        self.latest.update_daemon([self.missed.sample(self.config.host, utc_now())])

    def deliver(self) -> None:
        """Send queued notifications; a failed send is recorded in the outbox, not raised."""
        self._guarded("delivering notifications", "the outbox keeps them",
                      lambda: self.app.deliver(self.clock()))  # fmt: skip

    def roll_up(self) -> None:
        """The minute job: rollups, retention, then the cost signals on /metrics."""
        cost = self._guarded("the rollup", "it resumes from its watermark next minute",
                             lambda: self.app.roll_up(self.clock()))  # fmt: skip
        if cost is not None:
            self.latest.update_cost(cost)
        trim()  # the minute's garbage (rollup reads, a minute of rounds) back to the kernel
        if self.app.queued and self.scheduler.running:
            self.scheduler.modify_job(DELIVER_JOB, next_run_time=utc_now())

    def drain(self) -> None:
        """Forward the spool while the database takes it: a job of its own, never the tick's
        time. A failure is logged as an outage (once, then once a minute), not per run."""
        if self.app.spool.empty:
            return
        sent = self._guarded("forwarding the spool", "it stays spooled", self.app.drain)
        if sent:
            log.info("forwarded %d spooled round(s); %d left", sent, self.app.spool.stats().rounds)

    def bill(self) -> None:
        """The hourly job: provider APIs; each failing provider is logged and stores nothing.
        Fleet work: only the leader asks the providers (their rate limits are per account)."""
        if self.app.config.billing and self.app.leading:
            # BillingJob records each provider's failure itself; _guarded is the last net.
            now = self.clock()
            self._guarded("billing", "it is retried next hour",
                          lambda: self.app.billing.run(now))  # fmt: skip
            self.latest.update_billing(self.app.billing.health(self.app.config.host, now))

    def send_digest(self) -> None:
        """The weekly digest when due (checked every few minutes and at start, so a week
        missed while the daemon was down goes out within its grace period)."""
        self._guarded("the weekly digest", "it is retried while the week is due",
                      lambda: self.app.send_digest(self.clock()))  # fmt: skip

    def _guarded(self, what: str, then: str, work: Callable[[], T]) -> T | None:
        """``work()``, never raising. A database that is away is an expected failure: one line
        when it starts, one a minute, one when it ends (agent.daemon.outage), no traceback.
        Anything else is a bug, logged with its traceback every time."""
        outage = self._outages.setdefault(what, OutageLog(what, log, then=then))
        try:
            result = work()
        except SQLAlchemyError as exc:
            outage.failed(brief(exc))
            return None
        except Exception:
            log.exception("%s failed; %s", what, then)
            return None
        outage.ok()
        return result

    def lead(self) -> None:
        """Take or keep the fleet lead (see agent.daemon.leader); never raises."""
        try:
            self.latest.update_fleet([self.app.check_leadership(self.clock())])
        except Exception:
            log.exception("checking the fleet lead failed")

    def ticking(self, now_monotonic: float) -> bool:
        """Whether ticks really happen: one started lately and none is stuck. The watchdog
        pings only then, so systemd restarts a daemon whose ticks stopped, however."""
        started = self.ticker.last_started
        limit = max(60.0, 3 * self.config.daemon.interval_seconds)
        recent = started is not None and now_monotonic - started <= limit
        return recent and not self.tick_stuck(now_monotonic)

    def tick_stuck(self, now_monotonic: float) -> bool:
        """True when the running tick has taken far longer than any healthy one could."""
        started = self._tick_started
        limit = max(60.0, 3 * self.config.daemon.interval_seconds)
        return started is not None and now_monotonic - started > limit

    def serve(self) -> int:
        """Run until SIGTERM/SIGINT; returns the process exit code. Raises ListenError, with
        nothing started, when /metrics cannot listen."""
        try:
            self.metrics.start()
        except ListenError:
            self.app.close()
            raise
        if self.otlp is not None:
            self.otlp.apply(self.config)
        self._install_signals()
        interval = self.config.daemon.interval_seconds
        self.lead()  # before the first rollup, so a sole daemon does the fleet work at once
        self.scheduler.add_job(
            self.lead, "interval", seconds=CHECK_SECONDS, id="lead", max_instances=1,
            coalesce=True, misfire_grace_time=CHECK_SECONDS,
        )  # fmt: skip
        self.scheduler.add_job(
            self.roll_up, "interval", seconds=ROLLUP_SECONDS, id="rollup", max_instances=1,
            coalesce=True, misfire_grace_time=ROLLUP_SECONDS, next_run_time=utc_now(),
        )  # fmt: skip
        self.scheduler.add_job(
            self.drain, "interval", seconds=DRAIN_EVERY, id="drain", max_instances=1,
            coalesce=True, misfire_grace_time=DRAIN_EVERY, next_run_time=utc_now(),
        )  # fmt: skip
        self.scheduler.add_job(
            self.deliver, "interval", seconds=DELIVER_SECONDS, id=DELIVER_JOB, max_instances=1,
            coalesce=True, misfire_grace_time=DELIVER_SECONDS, next_run_time=utc_now(),
        )  # fmt: skip
        digest_every = DIGEST_CHECK.total_seconds()
        self.scheduler.add_job(
            self.send_digest, "interval", seconds=digest_every, id="digest", max_instances=1,
            coalesce=True, misfire_grace_time=int(digest_every), next_run_time=utc_now(),
        )  # fmt: skip
        self.scheduler.add_job(
            self.bill, "interval", seconds=BILLING_SECONDS, id="billing", max_instances=1,
            coalesce=True, misfire_grace_time=BILLING_SECONDS, next_run_time=utc_now(),
        )  # fmt: skip
        self.scheduler.start()
        self.ticker.start()
        self.notifier.ready()
        log.info(
            "gpuwatch started: host %s, %d collector(s), every %gs, config from %s",
            self.config.host,
            len(self.app.runner.collectors),
            interval,
            self.config.source,
        )
        ping_every = self.notifier.watchdog_interval_seconds()  # None: no systemd watchdog
        last_ping = time.monotonic()
        while not self._stop.is_set():
            self._stop.wait(timeout=1.0)
            now = time.monotonic()
            due = ping_every is not None and now - last_ping >= ping_every
            if due and self.ticking(now):
                self.notifier.watchdog()
                last_ping = now
            if self._reload.is_set():
                self._reload.clear()
                self.reload()
        return self.shutdown()

    def request_stop(self) -> None:
        self._stop.set()

    def shutdown(self) -> int:
        self.notifier.stopping()
        # wait=True lets a running tick finish and commit its transaction before we exit.
        self.ticker.stop()
        self.scheduler.shutdown(wait=True)
        self.metrics.stop()
        if self.otlp is not None:
            self.otlp.stop()
        self.app.close()
        log.info("gpuwatch stopped")
        return 0

    def reload(self) -> bool:
        """Re-read the config; keep the old one (and say why) when the new one is invalid."""
        self.notifier.reloading()
        try:
            new = load_config(self.config_path)
            otlp = self._otlp_for(new)
            new_app = App.open(new, inbox=None if otlp is None else otlp.inbox)
        except Exception as exc:  # a bad file, a database gone: the running config stays
            log.error("reload failed, keeping the previous configuration: %s", exc)
            self.notifier.ready()
            return False
        with self._lock:
            old_app, self.app, self.config = self.app, new_app, new
        if self.otlp is not None and otlp is None:
            self.otlp.stop()  # [otlp] went off; only now, as the old configuration is gone
        self.otlp = otlp
        old_app.close()  # gives the fleet lead away; the new App asks for it again now
        new_app.spool.refresh()  # the old App may have spooled rounds since the new one opened
        self.lead()
        self._apply_listen(new.daemon)
        if self.otlp is not None:
            self.otlp.apply(new)
        self._apply_interval(new.daemon.interval_seconds)
        log.info("configuration reloaded from %s", new.source)
        self.notifier.ready()
        return True

    def _apply_listen(self, daemon: DaemonConfig) -> None:
        """Move /metrics; when the new address cannot be had, keep the old one and say so
        (a crash here would make systemd restart the daemon into the same failure)."""
        old = self.metrics
        if (daemon.metrics_listen, daemon.web_config_file) == (old.listen, old.web_config_file):
            return
        old.stop()  # first: the new address may be the same port on another interface
        new = MetricsServer.of(daemon, self.latest)
        try:
            new.start()
        except ListenError as exc:
            log.error("reload: %s; /metrics stays on %s", exc, old.listen or "(disabled)")
            self.metrics = replace(old, _server=None, _thread=None)
            try:
                self.metrics.start()
            except ListenError as again:  # taken in the moment it was free: say it, keep going
                log.error("reload: %s; /metrics is off until the next reload", again)
            return
        self.metrics = new

    def _inbox(self) -> SpanInbox | None:
        return None if self.otlp is None else self.otlp.inbox

    def _otlp_for(self, new: Config) -> OtlpListeners | None:
        """The listeners for a reloaded configuration: kept (with their inbox) while [otlp] is
        on, new when it comes on, None when it goes off. Nothing is stopped here: a reload
        that fails after this keeps the running configuration, receiver included."""
        if not new.otlp.enabled:
            return None
        return self.otlp or OtlpListeners.for_config(new)

    def _apply_interval(self, interval: float) -> None:
        self.ticker.interval = interval  # from the next tick on

    def _install_signals(self) -> None:
        def on_stop(signum: int, _frame: FrameType | None) -> None:
            log.info("received %s, stopping", signal.Signals(signum).name)
            self._stop.set()

        def on_hup(_signum: int, _frame: FrameType | None) -> None:
            self._reload.set()  # handled on the main loop, not inside the signal handler

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)
