"""The daemon's side of the fleet: which database the fleet's work uses, the forward, and the
fleet-wide cost signals.

Local-first (``[fleet]`` names a central PostgreSQL): the box's own database keeps everything it
collects, and once a minute after the rollup :class:`agent.storage.forward.job.Forwarder` sends
what the fleet's reports read to the central one. The fleet's work (the leader's advisory lock,
billing's budget alerts, the digest, the fleet-wide cost signals) then reads and writes the
central database, where every box's figures meet. Without ``[fleet]`` the fleet database is the
daemon's own: a shared PostgreSQL in direct mode, or a lone box's SQLite.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from agent.config.settings import Config
from agent.cost import fleet_signals
from agent.storage.forward.job import Forwarder, central_engine
from collectors.base import Sample

log = logging.getLogger(__name__)


@dataclass
class FleetLink:
    engine: Engine  # the fleet's database: the central one, or the daemon's own
    forwarder: Forwarder | None  # None: nothing to forward (no [fleet])
    host: str
    _last_forward: datetime | None = None
    _signals_failing: bool = False

    @classmethod
    def open(cls, config: Config, local: Engine) -> FleetLink:
        """Nothing connects here: a central database that is away must not stop the daemon."""
        url = config.fleet.central_url
        if url is None:
            return cls(local, None, config.host)
        central = central_engine(url.reveal(), config.fleet.timeout_seconds)
        r = config.retention
        keep = (timedelta(seconds=r.minute_seconds), timedelta(seconds=r.hour_seconds))
        forwarder = Forwarder(local, central, config.host, retention=keep)
        return cls(central, forwarder, config.host)

    def forward(self, now: datetime) -> list[Sample]:
        """Forward what is new (never raises); its health as /metrics samples."""
        if self.forwarder is None:
            return []
        result = self.forwarder.run(now)
        if result.ok:
            self._last_forward = now
        labels = {"host": self.host}
        out = [Sample(metric="gpuwatch_fleet_forward_success", value=float(result.ok),
                      labels=labels, ts=now)]  # fmt: skip
        if self._last_forward is not None:
            at = self._last_forward.timestamp()
            out.append(Sample(metric="gpuwatch_fleet_forward_last_success_timestamp_seconds",
                              value=at, labels=labels, ts=now))  # fmt: skip
        return out

    def signals(self, config: Config, now: datetime, leading: bool) -> list[Sample]:
        """The fleet-wide cost signals: computed and stored here when leading, then read (so
        every daemon shows the same figures); none while the fleet database is away."""
        try:
            if leading:
                fleet_signals.publish(self.engine, config, now)
            found = fleet_signals.read(self.engine, self.host, now)
        except SQLAlchemyError as exc:
            if not self._signals_failing:
                log.error("fleet cost signals unavailable (retrying every minute): %s",
                          str(getattr(exc, "orig", None) or exc).splitlines()[0])  # fmt: skip
            self._signals_failing = True
            return []
        if self._signals_failing:
            log.info("fleet cost signals recovered")
        self._signals_failing = False
        return found

    def close(self) -> None:
        if self.forwarder is not None:
            self.engine.dispose()
