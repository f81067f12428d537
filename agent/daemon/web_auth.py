"""Basic auth and the rate limit of /metrics, as Prometheus' exporter-toolkit does them.

web/handler.go there: a wrong password and an unknown user get the same 401 with
``WWW-Authenticate: Basic``; an unknown user is checked against a fixed hash, so timing does not
tell which users exist; each (user, hash, password) verdict is cached, so a scrape every 15 s
costs one bcrypt (tens to hundreds of milliseconds of CPU) once, not every time; bcrypt runs one
at a time, so a flood of guesses takes one core, not all of them."""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
import time
from collections.abc import Callable, Mapping

import bcrypt

from agent.config.secret import Secret
from agent.config.web import RateLimit

# The toolkit's bcrypt hash of "fakepassword" (cost 10), checked for users that do not exist.
FAKE_HASH = b"$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
CACHE_SIZE = 100  # the toolkit's: a few users, each with its right and some wrong passwords


def credentials(header: str | None) -> tuple[bytes, bytes] | None:
    """(user, password) from an ``Authorization: Basic ...`` header, as Go's
    Request.BasicAuth reads it; None when there is none or it is malformed."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else None


class BasicAuth:
    """Checks credentials against the file's users, with the toolkit's cache of verdicts."""

    def __init__(self, check: Callable[[bytes, bytes], bool] = bcrypt.checkpw) -> None:
        self._check = check
        self._verdicts: dict[bytes, bool] = {}
        self._lock = threading.Lock()
        self._bcrypt = threading.Lock()

    def allowed(self, users: Mapping[str, Secret], header: str | None) -> bool:
        given = credentials(header)
        if given is None:
            return False
        user, password = given
        try:
            hashed = users.get(user.decode())
        except UnicodeDecodeError:  # no user of the file's has such a name
            hashed = None
        known = hashed is not None
        wanted = hashed.reveal().encode() if hashed is not None else FAKE_HASH
        # The key holds a digest, not the password: the cache must not be a list of them.
        key = hashlib.sha256(b"\0".join((user, wanted, password))).digest()
        with self._lock:
            verdict = self._verdicts.get(key)
        if verdict is None:
            with self._bcrypt:
                verdict = known and self._verified(password, wanted)
            self._remember(key, verdict)
        return verdict and known

    def _verified(self, password: bytes, hashed: bytes) -> bool:
        try:
            return self._check(password, hashed)
        except ValueError:  # bcrypt 5 refuses passwords over 72 bytes; Go's bcrypt does too
            return False

    def _remember(self, key: bytes, verdict: bool) -> None:
        with self._lock:
            if len(self._verdicts) >= CACHE_SIZE:
                # A tenth at once (the oldest), so a full cache does not evict on every miss.
                for old in list(self._verdicts)[: max(1, CACHE_SIZE // 10)]:
                    del self._verdicts[old]
            self._verdicts[key] = verdict


class TokenBucket:
    """golang.org/x/time/rate's Limiter.Allow: ``burst`` tokens, one more every interval."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._tokens = float(limit.burst)
        self._at = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            refill = (now - self._at) / self.limit.interval_seconds
            self._tokens = min(float(self.limit.burst), self._tokens + refill)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False
