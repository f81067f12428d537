"""Lambda Cloud: the live $/h of each instance, from ``GET /instances`` (base ``/api/v1``).

Each instance embeds its ``instance_type``, whose ``price_cents_per_hour`` is an integer in US
cents per hour for the WHOLE instance (``gpu_8x_a100``: 1592 -> $15.92/h, $1.99/GPU-h).
The GPU count is ``instance_type.specs.gpus``; older answers omit it, so it is then looked up
once in ``GET /instance-types`` and, failing that, read from the type name (``gpu_8x_...``).

There is no ``costs``: Lambda's API has no billing, usage or invoice endpoint (the console
only). Spend is rate x runtime, billed per minute, plus filesystems and tax, and the runtime
is the caller's to track: instances carry no launch time, so ``started_at`` stays None and
the caller counts from when it first saw the instance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from collectors.billing.base import BillingError, HourlyRate
from collectors.billing.http import ApiClient, Node

SOURCE = "lambda"
INSTANCES = "/instances"
INSTANCE_TYPES = "/instance-types"
NOT_BILLED = frozenset({"terminated", "preempted"})  # billing stops at terminate
_GPUS_IN_NAME = re.compile(r"gpu_(\d+)x_.+")
_CENTS = Decimal(100)


@dataclass(frozen=True, slots=True)
class _Instance:
    id: str
    name: str
    type_name: str
    usd_per_hour: Decimal
    gpus: int | None  # None: the answer did not say
    gpus_path: str


class LambdaSource:
    """Rates of one Lambda Cloud account's instances."""

    name = SOURCE

    def __init__(self, api: ApiClient) -> None:
        self._api = api

    def rates(self, now: datetime) -> list[HourlyRate]:
        """What each running instance costs per hour now (the whole instance)."""
        root = Node(self._api.get_json(INSTANCES), f"{SOURCE} {INSTANCES}")
        instances = [
            _instance(node)
            for node in root["data"].items()
            if node["status"].text() not in NOT_BILLED
        ]
        known = self._gpus_by_type() if any(i.gpus is None for i in instances) else {}
        return [
            HourlyRate(SOURCE, i.id, i.name, i.usd_per_hour, _gpus(i, known), now)
            for i in instances
        ]

    def close(self) -> None:
        self._api.close()

    def _gpus_by_type(self) -> dict[str, int]:
        root = Node(self._api.get_json(INSTANCE_TYPES), f"{SOURCE} {INSTANCE_TYPES}")
        found: dict[str, int] = {}
        for key, entry in root["data"].members():
            specs = entry["instance_type"].get("specs")
            gpus = None if specs is None else specs.get("gpus")
            if gpus is not None:
                found[key] = gpus.integer()
        return found


def _instance(node: Node) -> _Instance:
    kind = node["instance_type"]
    type_name = kind["name"].text()
    name = node.get("name")  # optional at launch
    specs = kind.get("specs")
    gpus = None if specs is None else specs.get("gpus")
    return _Instance(
        id=node["id"].text(),
        name=type_name if name is None else name.text(),
        type_name=type_name,
        usd_per_hour=kind["price_cents_per_hour"].decimal() / _CENTS,
        gpus=None if gpus is None else gpus.integer(),
        gpus_path=f"{node.where}: {kind.path}.specs.gpus",
    )


def _gpus(instance: _Instance, known: dict[str, int]) -> int:
    if instance.gpus is not None:
        return instance.gpus
    if instance.type_name in known:
        return known[instance.type_name]
    match = _GPUS_IN_NAME.fullmatch(instance.type_name)
    if match is None:
        raise BillingError(f"{instance.gpus_path} missing", retryable=False)
    return int(match.group(1))
