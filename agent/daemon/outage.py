"""Log lines an operator can read during an outage.

A database that is away fails every tick: a line (or a traceback) per failure buried the
journal (2,100 lines in 92 s at 2 s ticks). :class:`OutageLog` says it once when it starts,
at most once a minute while it goes on (with how many failures since the last line and the
latest reason), and once when it ends, with its length and count. No traceback: these
failures are expected (refused, timed out, full), and their reason is one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

LOG_EVERY = 60.0  # seconds between lines while the failure goes on


@dataclass
class OutageLog:
    """The log of one kind of failure (``what``: "storing rounds", "forwarding the spool")."""

    what: str
    logger: logging.Logger
    then: str = ""  # what happens meanwhile, said once at the start ("rounds are spooled")
    clock: Callable[[], float] = time.monotonic
    _started: float | None = field(default=None, init=False)  # None: not failing
    _logged_at: float = field(default=0.0, init=False)
    _since_line: int = field(default=0, init=False)
    _count: int = field(default=0, init=False)

    @property
    def failing(self) -> bool:
        return self._started is not None

    def failed(self, reason: str) -> None:
        now = self.clock()
        self._count += 1
        self._since_line += 1
        if self._started is None:
            self._started = self._logged_at = now
            self._since_line = 0
            then = f"; {self.then}" if self.then else ""
            self.logger.error("%s failed: %s%s", self.what, reason, then)
        elif now - self._logged_at >= LOG_EVERY:
            self.logger.error(
                "%s still failing: %d more failure(s) in the last %.0f s; latest: %s",
                self.what, self._since_line, now - self._logged_at, reason,
            )  # fmt: skip
            self._logged_at, self._since_line = now, 0

    def ok(self, detail: str = "") -> None:
        if self._started is None:
            return
        lasted = self.clock() - self._started
        more = f"; {detail}" if detail else ""
        self.logger.warning(
            "%s recovered after %.0f s and %d failure(s)%s", self.what, lasted, self._count, more
        )
        self._started, self._count, self._since_line = None, 0, 0


def brief(exc: Exception) -> str:
    # SQLAlchemy's str() appends the full SQL and parameters; the first line is the cause.
    cause = getattr(exc, "orig", None) or exc
    return (str(cause).splitlines() or [type(cause).__name__])[0]
