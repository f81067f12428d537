"""Scraping an inference engine's (or dcgm-exporter's) /metrics into canonical samples.

One collector per target, so a broken target is isolated, timed and reported on its own
(``gpuwatch_target_up``). A scrape is all or nothing: a body that is too large, too slow,
malformed, over one of its target's limits (collectors.limits) or not from the expected engine
raises CollectError and none of it is stored.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

import httpx

from collectors.base import CollectError, Sample
from collectors.engines import ollama
from collectors.engines.exposition import Exposition, ExpositionError
from collectors.engines.registry import ENGINES, Engine, detect, read_by_a_mapper
from collectors.engines.rules import Context
from collectors.limits import LimitExceeded, NewSeries, ScrapeLimits
from foundation.redact import redact_url, redact_urls

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
# Engines speak the classic text format; asking for it keeps vLLM <= 0.8.0 and SGLang from
# answering in OpenMetrics, whose counters and _created series differ.
ACCEPT = "text/plain; version=0.0.4, text/plain; version=1.0.0; q=0.9, */*; q=0.1"


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """One configured target; ``model`` names the model for engines that do not label it."""

    name: str
    url: str
    engine: str = "auto"  # auto, or an engine of collectors/engines (registry.py, ollama.py)
    model: str | None = None
    timeout_seconds: float = 5.0
    max_bytes: int = DEFAULT_MAX_BYTES
    bearer_token: str | None = field(default=None, repr=False)
    limits: ScrapeLimits = field(default_factory=ScrapeLimits)


class ScrapeCollector:
    """Fetches, parses and maps one target per round."""

    def __init__(
        self,
        target: TargetSpec,
        *,
        host: str,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = target
        self.name = f"target/{target.name}"
        self.target = target.name
        self.timeout_seconds = target.timeout_seconds
        self._host = host
        self._clock = clock
        self._series = NewSeries(target.limits.series_per_day_limit)
        self._client = client or httpx.Client(
            timeout=target.timeout_seconds, follow_redirects=True, verify=_tls_for(target.url)
        )

    def collect(self, now: datetime) -> list[Sample]:
        text = self.fetch()
        if ollama.wanted(self.spec.engine, text):  # JSON from /api/ps, not a /metrics body
            return self._admitted(self._ollama(text, now), now)
        limits = self.spec.limits
        try:
            limits.check_sample_count(text)
            exposition = Exposition.parse(text, keep=read_by_a_mapper, check=limits.check_labels)
        except (ExpositionError, LimitExceeded) as exc:
            raise self._error(str(exc)) from exc
        del text  # a large body need not live through the mapping
        engine = self._engine(exposition)
        model = self.spec.model or self.target
        context = Context(self._host, self.target, engine.name, model, now)
        return self._admitted(engine.map_samples(exposition, context), now)

    def _admitted(self, samples: list[Sample], now: datetime) -> list[Sample]:
        try:
            self._series.admit(samples, now)
        except LimitExceeded as exc:
            raise self._error(str(exc)) from exc
        return samples

    def _ollama(self, text: str, now: datetime) -> list[Sample]:
        try:
            models = ollama.parse(text, self.spec.limits)
        except (ExpositionError, LimitExceeded) as exc:
            raise self._error(str(exc)) from exc
        model = self.spec.model or self.target
        return ollama.map_models(models, Context(self._host, self.target, ollama.NAME, model, now))

    def fetch(self) -> str:
        """The body of one GET, within the timeout and the size cap; CollectError otherwise."""
        headers = {"Accept": ACCEPT}
        if self.spec.bearer_token:
            headers["Authorization"] = f"Bearer {self.spec.bearer_token}"
        deadline = self._clock() + self.spec.timeout_seconds
        try:
            with self._client.stream("GET", self.spec.url, headers=headers) as response:
                if response.status_code != 200:
                    raise self._error(f"HTTP {response.status_code} {response.reason_phrase}")
                body = self._read_capped(response, deadline)
        except httpx.TimeoutException as exc:
            raise self._error(f"no answer within {self.spec.timeout_seconds:g}s") from exc
        except httpx.HTTPError as exc:
            raise self._error(f"{type(exc).__name__}: {exc}") from exc
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._error(f"body is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc

    def _read_capped(self, response: httpx.Response, deadline: float) -> bytes:
        limit = self.spec.max_bytes
        declared = response.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise self._error(f"response of {int(declared)} bytes exceeds the {_size(limit)} cap")
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > limit:
                raise self._error(f"response exceeds the {_size(limit)} cap")
            if self._clock() > deadline:  # httpx's timeout is per read; a trickle could go on
                raise self._error(f"body not complete within {self.spec.timeout_seconds:g}s")
            chunks.append(chunk)
        return b"".join(chunks)

    def _engine(self, exposition: Exposition) -> Engine:
        if self.spec.engine == "auto":
            found = detect(exposition)
            if found is None:
                families = sorted(exposition.names())
                shown = ", ".join(families[:5]) + (", ..." if len(families) > 5 else "")
                raise self._error(
                    f"no known engine metrics among {len(families)} families ({shown or 'none'})"
                )
            return found
        engine = ENGINES[self.spec.engine]
        if not engine.detect(exposition):
            raise self._error(
                f"configured engine {engine.name} but no {engine.name} metrics in the response "
                "(metrics disabled in the engine, or the wrong URL?)"
            )
        return engine

    def _error(self, problem: str) -> CollectError:
        # The URL may carry credentials (userinfo, ?token=): logged and stored without them.
        url = redact_url(self.spec.url)
        return CollectError(f"target {self.target} ({url}): {redact_urls(problem)}")

    def close(self) -> None:
        self._client.close()


def _tls_for(url: str) -> ssl.SSLContext | bool:
    """What a target's client verifies TLS with: one shared CA store for https targets (httpx
    loads one per client, 0.8 MB each after the first 2.9 MB), none for http:// ones (engines
    on the box itself, the usual case). An http:// target's answer is unauthenticated anyway: a
    redirect to https that came over plaintext proves nothing a certificate check could add."""
    return _verified_tls() if url.lower().startswith("https://") else False


@cache
def _verified_tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()  # httpx's default: certifi, or SSL_CERT_FILE / _DIR


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:g} MiB" if n >= 1024 * 1024 else f"{n} bytes"
