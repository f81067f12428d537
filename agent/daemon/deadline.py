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
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

T = TypeVar("T")
_Job = tuple[Callable[[], Any], "Future[Any]"]


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
        self._finished = threading.Condition(self._lock)  # notified as each call ends
        self._calls_done = 0

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

    def after_next_call(self, timeout: float) -> None:
        """Return as soon as the next call has finished (the one running, else the next one to
        start), or after ``timeout`` seconds without one.

        For background database work (the rollup, the hour's packing): started there, it runs
        in the gap before the tick's next call instead of beside it. Both share one interpreter
        lock, and a thread reading rows gives that lock up at every row SQLite steps to and
        waits for it back behind a busy thread's switch interval (5 ms): measured, a read of
        37 k rows took 0.07 s alone and 0.9-4.8 s beside a CPU-bound thread, and at 1 s ticks
        the tick's call beside the packing missed its 1 s deadline (bench/memory.py)."""
        with self._finished:
            seen = self._calls_done
            self._finished.wait_for(lambda: self._calls_done > seen, timeout)

    def close(self) -> None:
        self._jobs.put(None)  # the thread ends after a call it may still be stuck in

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            work, future = job
            try:
                future.set_result(work())
            except BaseException as exc:  # handed to the caller, who decides
                future.set_exception(exc)
            with self._finished:
                self._calls_done += 1
                self._finished.notify_all()
