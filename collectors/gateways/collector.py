"""One gateway's scrape per round: fetched like an engine target (timeout, size cap, bearer
token, label limits), mapped by its :class:`GatewayMapping`.

It has a ``target`` (the gateway's name), so the round records ``gpuwatch_target_up`` for it:
a gateway that stops answering is a target down, and a key's first counter value after a good
scrape counts from zero (agent.storage.buckets' births), as an engine's label children do.
"""

from __future__ import annotations

from datetime import datetime

from collectors.base import CollectError, Sample
from collectors.engines.exposition import Exposition, ExpositionError
from collectors.gateways.tenant_tokens import GatewayMapping, first_present, map_tenants
from collectors.limits import LimitExceeded, NewSeries
from collectors.scrape import ScrapeCollector, TargetSpec
from foundation.redact import redact_url, redact_urls


class GatewayCollector:
    def __init__(self, spec: TargetSpec, mapping: GatewayMapping, *, host: str) -> None:
        self.name = f"gateway/{spec.name}"
        self.target = spec.name
        self.timeout_seconds = spec.timeout_seconds
        self._mapping = mapping
        self._host = host
        self._scrape = ScrapeCollector(spec, host=host)  # its fetch: caps, timeout, token
        self._families = mapping.families()
        # A tenant label is a key, a user or a team: new ones every day are the limit's case.
        self._series = NewSeries(spec.limits.series_per_day_limit)

    def collect(self, now: datetime) -> list[Sample]:
        text = self._scrape.fetch()
        limits = self._scrape.spec.limits
        try:
            limits.check_sample_count(text)
            exposition = Exposition.parse(
                text, keep=self._families.__contains__, check=limits.check_labels
            )
        except (ExpositionError, LimitExceeded) as exc:
            raise self._failed(str(exc)) from exc
        counters = (*self._mapping.prompt, *self._mapping.output)
        if first_present(exposition, counters) is None and not self._declared(exposition):
            raise CollectError(
                f"gateway {self.target} ({redact_url(self._scrape.spec.url)}): none of "
                f"{', '.join(counters)} in the response (LiteLLM: is its prometheus callback on?)"
            )
        # Declared without samples: no request served since the gateway started (0 tokens).
        samples = map_tenants(exposition, self._mapping, self._host, self.target, now)
        try:
            self._series.admit(samples, now)
        except LimitExceeded as exc:
            raise self._failed(str(exc)) from exc
        return samples

    def _failed(self, problem: str) -> CollectError:
        url = redact_url(self._scrape.spec.url)  # logged and stored without credentials
        return CollectError(f"gateway {self.target} ({url}): {redact_urls(problem)}")

    def _declared(self, exposition: Exposition) -> bool:
        names = set(exposition.names())
        return any(n.removesuffix("_total") in names or n in names
                   for n in (*self._mapping.prompt, *self._mapping.output))  # fmt: skip

    def close(self) -> None:
        self._scrape.close()
