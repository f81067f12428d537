"""Values every pricing source produces, and the errors they raise.

Money is exact: ``Decimal`` in the source's currency (USD unless the provider says otherwise),
never float. Times are UTC-aware.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import Enum

from collectors.base import CollectError


class CostKind(Enum):
    LIST = "list"  # at public prices, before discounts and credits
    BILLED = "billed"  # what the invoice says (credits and discounts included)
    EFFECTIVE = "effective"  # amortised commitments included (FOCUS EffectiveCost)


@dataclass(frozen=True, slots=True)
class CostRecord:
    """Money spent on one resource over one period, as a provider reports it.

    ``record_id`` is stable across fetches of the same period, so storing a record twice
    replaces it instead of counting it twice.
    """

    source: str  # "runpod", "lambda", "vast", "focus:<file or account>"
    record_id: str
    resource: str  # provider's id of the pod / instance / resource ("" when account-wide)
    period_start: datetime
    period_end: datetime
    amount: Decimal
    currency: str
    kind: CostKind
    description: str = ""


@dataclass(frozen=True, slots=True)
class HourlyRate:
    """What a running resource costs per hour now (the whole resource, in ``currency``)."""

    source: str
    resource: str
    name: str  # a human name: pod name, instance name, GPU type
    usd_per_hour: Decimal
    gpus: int  # how many GPUs the rate covers (Lambda prices the whole instance)
    observed_at: datetime
    started_at: datetime | None = None  # when the provider says it started, if it says


class BillingError(CollectError):
    """A pricing source failed; nothing from that fetch is stored."""


class BillingAuthError(BillingError):
    """401/403: the credentials are missing or refused. Retrying will not help."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)
