"""Vast.ai: the live $/h of each instance and the itemised charges per contract.

- ``rates``: ``GET /api/v1/instances/``, keyset-paginated (``limit`` <= 25; ``after_token``
  takes the previous page's ``next_token``, which is null on the last page). On instances
  ``dph_total`` is all-in ($/h for GPU plus storage; on offers it is GPU-only). Instances
  ``stopped`` (disk billed, no GPU) or ``offline`` (not billed) are left out.
- ``costs``: ``GET /api/v0/charges/`` with the required ``select_filters`` day range, one
  record per charge (``source`` "instance-<id>", "volume-<id>"...), paginated the same way.
  The resource of an instance charge is the bare id, as in ``rates``. A charge covers the
  part of the contract inside the query range, so query aligned windows (whole UTC days) to
  get the same records, and ids, again.

Query values that are not strings are JSON-encoded, as vast-cli does (``select_filters``,
``order_by``). Vast sends no Retry-After on 429 and enforces a minimum interval per endpoint:
the ApiClient's ``min_interval_seconds`` and backoff handle that.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

from collectors.billing.base import BillingError, CostKind, CostRecord, HourlyRate
from collectors.billing.http import ApiClient, Node

SOURCE = "vast"
INSTANCES = "/api/v1/instances/"
CHARGES = "/api/v0/charges/"
INSTANCES_PAGE = 25  # the documented maximum
CHARGES_PAGE = 100  # the doc allows 500; vast-cli asks for at most 100
MAX_PAGES = 1000  # 25k instances or 100k charges: beyond that, something loops
NOT_GPU_BILLED = frozenset({"stopped", "offline"})


class VastSource:
    """Rates and billed charges of one Vast.ai account."""

    name = SOURCE

    def __init__(self, api: ApiClient) -> None:
        self._api = api

    def rates(self, now: datetime) -> list[HourlyRate]:
        """What each GPU-billed instance costs per hour now, all in."""
        params: dict[str, str | int] = {
            "limit": INSTANCES_PAGE,
            "order_by": json.dumps([{"col": "id", "dir": "asc"}]),
        }
        rates: list[HourlyRate] = []
        for instance in self._pages(INSTANCES, params, "instances"):
            status = instance.get("actual_status")  # null while the instance is created
            if status is None or status.text() not in NOT_GPU_BILLED:
                rates.append(_rate(instance, now))
        return rates

    def costs(self, start: datetime, end: datetime, now: datetime) -> list[CostRecord]:
        """Billed charges (instances, volumes, serverless) for the days in [start, end].

        ``now`` is not needed: Vast bills what has run.
        """
        day = {"gte": _unix(start), "lte": _unix(end)}
        params: dict[str, str | int] = {
            "select_filters": json.dumps({"day": day}),
            "limit": CHARGES_PAGE,
        }
        return [_charge(node) for node in self._pages(CHARGES, params, "results")]

    def close(self) -> None:
        self._api.close()

    def _pages(self, endpoint: str, params: dict[str, str | int], key: str) -> Iterator[Node]:
        """Every item of every page, each page read whole before the next is asked for."""
        token: str | None = None
        seen: set[str] = set()
        for page in range(1, MAX_PAGES + 1):
            query = params if token is None else {**params, "after_token": token}
            where = f"{SOURCE} {endpoint}" + ("" if page == 1 else f" (page {page})")
            root = Node(self._api.get_json(endpoint, query), where)
            yield from root[key].items()
            following = root.get("next_token")
            if following is None or not following.text():
                return
            token = following.text()
            if token in seen:
                raise BillingError(f"{where}: next_token repeats; pagination loops")
            seen.add(token)
        raise BillingError(f"{SOURCE} {endpoint}: more than {MAX_PAGES} pages")


def _unix(when: datetime) -> int:
    if when.tzinfo is None:
        raise ValueError(f"naive datetime {when!r}: pass UTC-aware times")
    return int(when.timestamp())


def _rate(instance: Node, now: datetime) -> HourlyRate:
    resource = str(instance["id"].integer())
    gpus = instance["num_gpus"].integer()
    started = instance.get("start_date")
    return HourlyRate(
        source=SOURCE,
        resource=resource,
        name=_name(instance, gpus, resource),
        usd_per_hour=instance["dph_total"].decimal(),
        gpus=gpus,
        observed_at=now,
        started_at=None if started is None else started.unix_time(),
    )


def _name(instance: Node, gpus: int, resource: str) -> str:
    label = instance.get("label")
    if label is not None and label.text():
        return label.text()
    gpu_name = instance.get("gpu_name")
    return f"{gpus}x {gpu_name.text()}" if gpu_name is not None else f"instance {resource}"


def _charge(charge: Node) -> CostRecord:
    source = charge["source"].text()
    start = charge["start"].unix_time()
    end = charge["end"].unix_time()
    description = charge.get("description")
    return CostRecord(
        source=SOURCE,
        record_id=f"{source}/{start.isoformat()}/{end.isoformat()}",
        resource=source.removeprefix("instance-"),
        period_start=start,
        period_end=end,
        amount=charge["amount"].decimal(),
        currency="USD",
        kind=CostKind.BILLED,
        description=charge["type"].text() if description is None else description.text(),
    )
