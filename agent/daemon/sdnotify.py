"""A dependency-free sd_notify(3) client for running under systemd with Type=notify.

The protocol is one AF_UNIX datagram of newline-separated ``KEY=VALUE`` lines sent to
``$NOTIFY_SOCKET``. We implement it directly instead of depending on libsystemd/python-systemd
so the agent installs from PyPI alone; outside systemd (tests, ``gpuwatch demo``) every method
is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

__all__ = ["SdNotifier", "watchdog_interval_seconds"]

log = logging.getLogger(__name__)

# Bounded so a wedged PID 1 with a full socket queue cannot stall a collection tick forever.
_SEND_TIMEOUT_SECONDS = 2.0


def _parse_address(raw: str | None) -> str | None:
    """Return a socket address for ``socket.sendto``, or None when there is nothing usable."""
    if not raw:
        return None
    if raw.startswith("@"):
        # Abstract namespace: systemd writes a leading '@' for the kernel's leading NUL byte.
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    # Newer systemd may hand out vsock: addresses (VMs); we only speak AF_UNIX.
    log.debug("NOTIFY_SOCKET %r is not an AF_UNIX address; sd_notify disabled", raw)
    return None


def watchdog_interval_seconds(
    environ: Mapping[str, str] = os.environ, pid: int | None = None
) -> float | None:
    """How often to send WATCHDOG=1: half of ``$WATCHDOG_USEC`` (as sd_watchdog_enabled(3) advises).

    None when the watchdog is off, malformed, or meant for another process: ``$WATCHDOG_PID``,
    when set, must name this process, because children inherit the environment.
    """
    raw_pid = environ.get("WATCHDOG_PID")
    if raw_pid:
        try:
            if int(raw_pid) != (os.getpid() if pid is None else pid):
                return None
        except ValueError:
            return None
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 2_000_000


class SdNotifier:
    """Sends state changes to systemd; every method returns whether a datagram went out."""

    def __init__(self, address: str | None, watchdog_interval: float | None = None) -> None:
        self._address = _parse_address(address)
        self._watchdog_interval = watchdog_interval
        self._sock: socket.socket | None = None
        self._failure_logged = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> SdNotifier:
        return cls(environ.get("NOTIFY_SOCKET"), watchdog_interval_seconds(environ))

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def watchdog_interval_seconds(self) -> float | None:
        """Ping period derived from the environment at construction; None when not requested."""
        return self._watchdog_interval

    def ready(self) -> bool:
        return self.notify("READY=1")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets systemd >= 253 (Type=notify-reload) match this to the reload job;
        # older versions ignore it. Call ready() again once the new configuration is live.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def status(self, text: str) -> bool:
        # A newline would start a new KEY=VALUE assignment, so flatten it.
        return self.notify("STATUS=" + " ".join(text.splitlines()))

    def notify(self, *assignments: str) -> bool:
        if self._address is None:
            return False
        try:
            if self._sock is None:
                # One socket for the process lifetime: the watchdog pings on every tick.
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                sock.settimeout(_SEND_TIMEOUT_SECONDS)
                self._sock = sock
            self._sock.sendto("\n".join(assignments).encode(), self._address)
        except OSError as exc:
            # Monitoring must keep running even if systemd is unreachable; say so only once.
            if not self._failure_logged:
                self._failure_logged = True
                log.debug("sd_notify to %r failed: %s", self._address, exc)
            return False
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> SdNotifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
