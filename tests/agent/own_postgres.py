"""A PostgreSQL server of one test's own, to stop, start, pause and resume under a daemon.

The suite's shared server (scripts/with-postgres) must keep running for the other tests, so
the fault tests make their own with Debian's binaries (initdb without fsync: about a second).
As root the server runs as the ``postgres`` user, as scripts/with-postgres does.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.agent.daemon_harness import free_port


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]) if found and Path(found[-1], "pg_ctl").exists() else None


@dataclass
class OwnPostgres:
    folder: Path
    port: int
    bin: Path
    data: Path
    disk: Path | None = None  # a tmpfs of its own under the data folder, to fill

    @classmethod
    def create(cls, disk_mb: int | None = None) -> OwnPostgres:
        """In a folder of its own under /tmp: pytest's are private to root, and the server
        runs as ``postgres``. ``disk_mb``: the data folder on a tmpfs of that size (root
        only), which ``fill`` fills up."""
        binaries = pg_bin()
        if binaries is None:
            if os.environ.get("GPUWATCH_REQUIRE_PG") == "1":
                pytest.fail("GPUWATCH_REQUIRE_PG=1 but PostgreSQL's server binaries are missing")
            pytest.skip("PostgreSQL server binaries not installed (Debian's postgresql)")
        folder = Path(tempfile.mkdtemp(prefix="gpuwatch-pg-"))
        disk = None
        if disk_mb is not None:
            if os.geteuid() != 0:
                pytest.skip("a disk of its own (tmpfs) needs root")
            disk = folder / "disk"
            disk.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={disk_mb}m", "tmpfs", str(disk)],
                           check=True)  # fmt: skip
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", "postgres:", str(folder)], check=True)
        server = cls(folder, free_port(), binaries, (disk or folder) / "data", disk)
        server._as_pg("initdb", "-D", str(server.data), "-U", "postgres", "-A", "trust",
                      "-E", "UTF8", "--no-sync")  # fmt: skip
        server.start()
        return server

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} "
                   "-c fsync=off -c synchronous_commit=off")  # fmt: skip
        self._as_pg("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "server.log"),
                    "-w", "-t", "30", "-o", options, "start")  # fmt: skip

    def stop(self) -> None:
        """A clean but immediate stop: sessions are cut, as when a database is restarted."""
        self._as_pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def kill(self) -> None:
        """SIGKILL the server and every backend, as the OOM killer or a power cut would;
        ``start`` then runs PostgreSQL's crash recovery."""
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not self.running, timeout=10)

    def pause(self) -> None:
        """SIGSTOP the server and every backend: connections stay open, nothing answers."""
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError):  # a backend that ended meanwhile
                os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def count(self, query: str) -> int:
        engine = create_engine(self.url)
        try:
            with engine.connect() as conn:
                return int(conn.execute(text(query)).scalar() or 0)
        finally:
            engine.dispose()

    def fill(self) -> None:
        """Fill the server's disk to the last byte (as root, who is not held back by any
        reserve): every write that needs a new page fails with "No space left on device"."""
        assert self.disk is not None
        with open(self.disk / "filler", "wb") as filler:
            block = b"\0" * (1 << 16)
            with contextlib.suppress(OSError):
                while True:
                    filler.write(block)
                    filler.flush()

    def free(self) -> None:
        assert self.disk is not None
        (self.disk / "filler").unlink(missing_ok=True)

    @property
    def running(self) -> bool:
        pids = self._pids()
        return bool(pids) and Path(f"/proc/{pids[0]}").exists()

    def close(self) -> None:
        self.resume()
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self._as_pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        if self.disk is not None:
            subprocess.run(["umount", "-l", str(self.disk)], check=False)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _pids(self) -> list[int]:
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return []
        postmaster = int(pid_file.read_text().split()[0])
        return [postmaster, *_children(postmaster)]

    def _as_pg(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60)


def _children(parent: int) -> list[int]:
    """The processes whose parent is ``parent``, from /proc (no procps on a minimal box)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False
