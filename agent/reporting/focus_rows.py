"""A metered charge as a FOCUS 1.0 Cost and Usage row: the columns, their values, their text.

Every FOCUS 1.0 column is written, in the spec's order, NULL (an empty field) where the column
does not apply: a self-metered GPU has no commitment discount, no correction, no separate
contracted price. What each column holds, and why, is in docs/cost.md ("FOCUS export").

After them come two custom columns, prefixed ``x_`` as FOCUS requires of columns it does not
define (it defines none for energy or carbon, 1.0 to 1.3): ``x_EnergyConsumedKwh``, the GPU's
own energy from its counter (without PUE), and ``x_Co2Grams``, the CO2 of that energy at the
facility (PUE and the grid's intensity of its hour, as metered); NULL where unknown.

Money is written exactly as the ledger holds it (12 decimals, the ``Numeric(24, 12)`` of
``gpu_usage.cost_usd``): no rounding, so the rows sum to the metered total to the digit. Unit
prices are the charge's cost per GPU-hour to the micro-dollar (the rate card's price, or the
average where energy is priced per kWh or the price changed inside the charge).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache

from agent.config.export import DEFAULT_PROVIDER, FocusExportConfig
from agent.config.teams import Labels
from agent.reporting.focus_charges import Charge

VERSIONS = ("1.0",)  # what the FinOps Foundation's validator here checks (focus-validator 1.0.0)

# FOCUS 1.0's Cost and Usage columns, in the spec's (alphabetical) order.
COLUMNS_1_0 = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName",
    "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory",
    "ChargeClass", "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd",
    "ChargePeriodStart", "CommitmentDiscountCategory", "CommitmentDiscountId",
    "CommitmentDiscountName", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice",
    "EffectiveCost", "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "RegionId",
    "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory",
    "ServiceName", "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
)  # fmt: skip
# Ours, after FOCUS's: readers that ignore what they do not know (the validator, importers,
# gpuwatch's own `import focus`) read the FOCUS columns unchanged.
CUSTOM_COLUMNS = ("x_EnergyConsumedKwh", "x_Co2Grams")
COLUMNS = (*COLUMNS_1_0, *CUSTOM_COLUMNS)

SERVICE_NAME = "GPU compute"
RESOURCE_TYPE = "GPU"
UNIT = "Hours"  # one row is one GPU: its hours are GPU-hours (FOCUS unit format: "Hours")
UNKNOWN_SKU = "GPU"  # a GPU whose product name was never stored
TAG_PREFIX = "gpuwatch/"  # FOCUS: provider-defined tag keys carry the provider's prefix
_MONEY = Decimal("1e-12")  # the ledger's scale: exact
_PRICE = Decimal("1e-6")
_QUANTITY = Decimal("1e-9")  # GPU-hours to 3.6 microseconds
_HOUR_SECONDS = Decimal(3600)
_KWH = Decimal("1e-9")  # 3.6 millijoules
_GRAMS = Decimal("1e-6")
_JOULES_PER_KWH = Decimal(3_600_000)
NO_LABELS = Labels()


@dataclass(frozen=True, slots=True)
class Naming:
    """Who the rows name as provider and payer: the ``[export.focus]`` section, defaulted."""

    provider: str
    publisher: str
    invoice_issuer: str
    billing_account_id: str
    billing_account_name: str
    region_id: str | None
    region_name: str | None
    availability_zone: str | None
    labels: Labels = NO_LABELS  # the team and project tags (agent.config.teams)

    @classmethod
    def of(cls, config: FocusExportConfig, host: str, labels: Labels = NO_LABELS) -> Naming:
        provider = config.provider or DEFAULT_PROVIDER
        account = config.billing_account_id or host
        return cls(
            provider, config.publisher or provider, config.invoice_issuer or provider,
            account, config.billing_account_name or account,
            config.region_id, config.region_name, config.availability_zone, labels,
        )  # fmt: skip


def tags(charge: Charge, labels: Labels = NO_LABELS) -> dict[str, str]:
    """The Tags of a charge: the one place they are built. Values are scalars (FOCUS), so
    several models or targets on one GPU are one comma-separated value, sorted. Labels a user
    configures (team, project) are user-defined tags: they go here without the prefix."""
    out = {f"{TAG_PREFIX}host": charge.host, f"{TAG_PREFIX}gpu_index": charge.gpu_index}
    if charge.targets:
        out[f"{TAG_PREFIX}target"] = ",".join(charge.targets)
    if charge.models:
        out[f"{TAG_PREFIX}model"] = ",".join(charge.models)
    if labels.entries and charge.targets:  # "(unlabelled)" where a target has no label
        for key, of in (("team", labels.team), ("project", labels.project)):
            out[key] = ",".join(sorted({of(charge.host, t) for t in charge.targets}))
    return out


def row(charge: Charge, naming: Naming) -> dict[str, str | None]:
    """The FOCUS 1.0 row of a priced charge (``charge.cost_usd`` set), with the custom columns,
    as CSV text; None is NULL."""
    assert charge.cost_usd is not None, "a charge no rate covers has no FOCUS row"
    cost = money(charge.cost_usd)
    hours = gpu_hours(charge.observed_seconds)
    price = unit_price(charge.cost_usd, charge.observed_seconds)
    sku = charge.gpu_name or UNKNOWN_SKU
    values: dict[str, str | None] = {
        "AvailabilityZone": naming.availability_zone,
        "BilledCost": cost, "EffectiveCost": cost, "ListCost": cost, "ContractedCost": cost,
        "ListUnitPrice": price, "ContractedUnitPrice": price,
        "BillingAccountId": naming.billing_account_id,
        "BillingAccountName": naming.billing_account_name,
        "BillingCurrency": "USD",
        "BillingPeriodStart": instant(charge.billing_period[0]),
        "BillingPeriodEnd": instant(charge.billing_period[1]),
        "ChargeCategory": "Usage", "ChargeClass": None, "ChargeFrequency": "Usage-Based",
        "ChargeDescription": f"GPU time of {sku} on {charge.host} (GPU {charge.gpu_index}), "
                             "metered by gpuwatch at its rate card",
        "ChargePeriodStart": instant(charge.start), "ChargePeriodEnd": instant(charge.end),
        "ConsumedQuantity": hours, "ConsumedUnit": UNIT,
        "PricingQuantity": hours, "PricingUnit": UNIT, "PricingCategory": "Standard",
        "InvoiceIssuerName": naming.invoice_issuer, "ProviderName": naming.provider,
        "PublisherName": naming.publisher,
        "RegionId": naming.region_id, "RegionName": naming.region_name,
        "ResourceId": charge.gpu_uuid, "ResourceName": f"{charge.host} GPU {charge.gpu_index}",
        "ResourceType": RESOURCE_TYPE,
        "ServiceCategory": "Compute", "ServiceName": SERVICE_NAME,
        "SkuId": sku, "SkuPriceId": sku,
        "SubAccountId": charge.host, "SubAccountName": charge.host,
        "Tags": json.dumps(tags(charge, naming.labels), sort_keys=True, ensure_ascii=False),
        "x_EnergyConsumedKwh": kwh(charge.energy_joules),
        "x_Co2Grams": grams(charge.co2_grams),
    }  # fmt: skip
    return {column: values.get(column) for column in COLUMNS}


def money(amount: Decimal) -> str:
    return _plain(amount.quantize(_MONEY))


def gpu_hours(seconds: float) -> str:
    return _plain((_seconds(seconds) / _HOUR_SECONDS).quantize(_QUANTITY))


def kwh(joules: float | None) -> str | None:
    if joules is None:
        return None
    return _plain((Decimal(repr(joules)) / _JOULES_PER_KWH).quantize(_KWH))


def grams(amount: float | None) -> str | None:
    return None if amount is None else _plain(Decimal(repr(amount)).quantize(_GRAMS))


def unit_price(cost: Decimal, seconds: float) -> str | None:
    exact = _seconds(seconds)
    if not exact:
        return None  # cost without time cannot happen in the ledger; no price to state
    return _plain((cost * _HOUR_SECONDS / exact).quantize(_PRICE))


@lru_cache(maxsize=1024)  # every GPU's row of an hour repeats its hour and its month
def instant(at: datetime) -> str:
    """FOCUS date-time: UTC, ISO 8601 with a Z."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(seconds: float) -> Decimal:
    # Seconds come from timestamps summed as floats: 6 decimals drop the float noise.
    return Decimal(repr(round(seconds, 6)))


def _plain(value: Decimal) -> str:
    """Plain decimal notation (never 1E-7), always with a point: readers that guess column
    types (pandas, the validator) take a column of whole numbers for integers."""
    text = format(value, "f")
    return text if "." in text else f"{text}.0"


def header(version: str) -> tuple[str, ...]:
    if version not in VERSIONS:
        raise ValueError(f"FOCUS {version}: only {', '.join(VERSIONS)} is written")
    return COLUMNS


def as_csv_values(values: Mapping[str, str | None]) -> list[str]:
    """A row's fields in header order; NULL is an empty field."""
    return ["" if values[c] is None else str(values[c]) for c in COLUMNS]
