"""Database work with a deadline the client keeps, whatever the server does.

A PostgreSQL that is paused (SIGSTOP, a VM frozen, a network that drops packets) keeps its TCP
connections open and answers nothing: the server-side statement timeout never fires, and a
driver call blocks until the server wakes. So the tick's database work runs on one worker thread
and the tick waits for it at most ``timeout`` seconds. Past that, the database counts as
unavailable for this round (the tick spools it) and, while the stuck call is still running,
for the next rounds too: they are refused at once instead of queueing behind it. The stuck call
ends by itself when the server wakes or the connection breaks; what it did is then either
committed or rolled back, and the spool's replay is idempotent either way.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

T = TypeVar("T")
_Job = tuple[Callable[[], Any], "Future[Any]"]
MAX_PAUSE = 1.0  # seconds a background job stands aside after one of its transactions


class DeadlineExceeded(Exception):
    """The work did not finish in time, or earlier work is still stuck."""


class Deadline:
    """Runs one call at a time on its own thread; the caller waits at most ``timeout``.

    The thread is a daemon thread: a call stuck on a paused server must not keep the process
    from exiting (a ThreadPoolExecutor's workers are joined at exit).
    """

    def __init__(self, name: str = "gpuwatch-db") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running: Future[Any] | None = None
        self._lock = threading.Lock()

    def call(self, work: Callable[[], T], timeout: float) -> T:
        """``work()``'s result or exception; DeadlineExceeded when it takes longer than
        ``timeout`` seconds or a previous call is still running."""
        future: Future[T] = Future()
        with self._lock:
            if self._running is not None and not self._running.done():
                raise DeadlineExceeded("the previous database call has not returned yet")
            self._running = future
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()
        self._jobs.put((work, future))
        try:
            return future.result(timeout=timeout)
        except FutureTimeout:
            raise DeadlineExceeded(f"no answer from the database within {timeout:g}s") from None

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._running is not None and not self._running.done()

    def wait_idle(self, timeout: float) -> None:
        """Return once no call is running, or after ``timeout`` seconds: a background job
        that shares the database's one writer (SQLite) lets a tick's call go first."""
        with self._lock:
            running = self._running
        if running is not None:
            wait([running], timeout=timeout)

    def turn(self, timeout: float, busy: float) -> None:
        """Between two transactions of a background job that just worked ``busy`` seconds:
        let a tick's call in flight finish, then stay off the interpreter lock as long again
        (at most ``MAX_PAUSE``). The daemon's threads share that lock: at 1 s ticks the hour's
        packing, batch after batch, would slow the tick's database work past its deadline; at
        half the lock, the packing takes twice as long and the tick keeps its pace."""
        self.wait_idle(timeout)
        time.sleep(min(busy, MAX_PAUSE))

    def close(self) -> None:
        self._jobs.put(None)  # the thread ends after a call it may still be stuck in

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            work, future = job
            try:
                future.set_result(work())
            except BaseException as exc:  # handed to the caller, who decides
                future.set_exception(exc)
