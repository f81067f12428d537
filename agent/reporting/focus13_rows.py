"""A metered charge as FOCUS 1.3 Cost and Usage rows: the 1.0 row's values, 1.3's new columns,
and where something used the GPU, its allocated charges in place of the GPU's row.

FOCUS 1.3 adds, for this export: ServiceProviderName and HostProviderName (mandatory, replacing
the deprecated ProviderName, which 1.3 still requires and which stays, as PublisherName does),
ServiceSubcategory, and the split cost allocation columns (AllocatedMethodId,
AllocatedMethodDetails, AllocatedResourceId, AllocatedResourceName, AllocatedTags). A charge
that :mod:`agent.reporting.focus_allocation` splits is written as its allocated charges: every
dimension, unit price and Tag as the GPU's row has it, and the costs, quantities and custom
energy columns apportioned so that they add up to the GPU's row to the digit. A charge nobody
used is one row, with the allocation columns null.

Tags of a 1.3 row are the GPU's own (host and index): who used it (target, model, team,
project) is in AllocatedTags, which FOCUS forbids to repeat a tag of Tags. Tokens go in the
custom columns ``x_OutputTokens`` and ``x_PromptTokens``, on each target's first allocated row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal

from agent.reporting.focus_allocation import (
    METHODS,
    Allocation,
    AllocationSource,
    Part,
    allocate,
)
from agent.reporting.focus_charges import Charge
from agent.reporting.focus_rows import (
    COLUMNS_1_0,
    TAG_PREFIX,
    Naming,
    gpu_hours,
    grams,
    kwh,
    money,
    row,
)

NEW_IN_1_3 = (
    "AllocatedMethodDetails", "AllocatedMethodId", "AllocatedResourceId",
    "AllocatedResourceName", "AllocatedTags", "HostProviderName", "ServiceProviderName",
    "ServiceSubcategory",
)  # fmt: skip
COLUMNS_1_3 = tuple(sorted((*COLUMNS_1_0, *NEW_IN_1_3)))  # the spec's (alphabetical) order
CUSTOM_COLUMNS_1_3 = ("x_EnergyConsumedKwh", "x_Co2Grams", "x_OutputTokens", "x_PromptTokens")
COLUMNS = (*COLUMNS_1_3, *CUSTOM_COLUMNS_1_3)
SERVICE_SUBCATEGORY = "Other (Compute)"  # GPU time: none of Compute's named subcategories
USAGE_UNIT = "Hours"  # AllocatedMethodDetails: the GPU-hours each part was allocated
_RATIO = Decimal("1e-12")
_KWH = Decimal("1e-9")
_GRAMS = Decimal("1e-6")
_HOURS = Decimal("1e-9")
_HOUR = Decimal(3600)


def rows(
    charge: Charge, naming: Naming, among: Sequence[AllocationSource]
) -> list[dict[str, str | None]]:
    """The FOCUS 1.3 rows of a priced charge: its allocated charges, or its own row."""
    base = _base(charge, naming)
    allocation = allocate(charge, among)
    if allocation is None:
        return [base]
    return _allocated(charge, base, allocation)


def _base(charge: Charge, naming: Naming) -> dict[str, str | None]:
    values = row(charge, naming)
    own = {f"{TAG_PREFIX}host": charge.host, f"{TAG_PREFIX}gpu_index": charge.gpu_index}
    values.update({
        "ServiceProviderName": naming.provider,
        # FOCUS: HostProviderName MAY equal ServiceProviderName when the service provider gives
        # no view of the infrastructure under it; gpuwatch knows no more than the provider named.
        "HostProviderName": naming.provider,
        "ServiceSubcategory": SERVICE_SUBCATEGORY,
        "Tags": json.dumps(own, sort_keys=True, ensure_ascii=False) if charge.shares.uses
        else values["Tags"],
    })  # fmt: skip
    return {column: values.get(column) for column in COLUMNS}


def _allocated(
    charge: Charge, base: dict[str, str | None], allocation: Allocation
) -> list[dict[str, str | None]]:
    assert charge.cost_usd is not None
    parts = allocation.parts
    ratios = _shares(parts, charge.cost_usd)
    hours = _apportion(Decimal(gpu_hours(charge.observed_seconds)),
                       [p.seconds / _HOUR for p in parts], _HOURS)  # fmt: skip
    energy = _split(kwh(charge.energy_joules), ratios, _KWH)
    co2 = _split(grams(charge.co2_grams), ratios, _GRAMS)
    out = []
    for i, part in enumerate(parts):
        cost = money(part.cost)
        quantity = _plain(hours[i])
        values = dict(base)
        values.update({
            "BilledCost": cost, "EffectiveCost": cost, "ListCost": cost, "ContractedCost": cost,
            "ConsumedQuantity": quantity, "PricingQuantity": quantity,
            "AllocatedMethodId": allocation.method_id,
            "AllocatedMethodDetails": _details(allocation.method_id, ratios[i], quantity, part),
            "AllocatedResourceId": part.resource_id,
            "AllocatedResourceName": part.resource_name,
            "AllocatedTags": json.dumps(dict(part.tags), sort_keys=True, ensure_ascii=False),
            "x_EnergyConsumedKwh": None if energy is None else _plain(energy[i]),
            "x_Co2Grams": None if co2 is None else _plain(co2[i]),
            "x_OutputTokens": _tokens(part.output_tokens),
            "x_PromptTokens": _tokens(part.prompt_tokens),
        })  # fmt: skip
        out.append(values)
    return out


def _details(method: str, ratio: Decimal, hours: str, part: Part) -> str:
    """AllocatedMethodDetails: FOCUS's object (Elements of AllocatedRatio, UsageUnit,
    UsageQuantity) with gpuwatch's ``x_`` keys. Written by hand: the ratio stays the exact
    decimal that makes a charge's ratios add up to 1, which a float would not."""
    element = (
        f'{{"AllocatedRatio": {_plain(ratio)}, "UsageUnit": "{USAGE_UNIT}", '
        f'"UsageQuantity": {hours}, "x_Portion": {json.dumps(part.portion)}}}'
    )
    return f'{{"Elements": [{element}], "x_Method": {json.dumps(METHODS[method])}}}'


def _shares(parts: Sequence[Part], cost: Decimal) -> list[Decimal]:
    """Each part's share of the origin charge, adding up to exactly 1: by cost, or by time
    where the charge cost nothing."""
    weights = [p.cost for p in parts] if cost else [p.seconds for p in parts]
    total = sum(weights, Decimal(0))
    if not total:
        weights, total = [Decimal(1)] * len(parts), Decimal(len(parts))
    return _apportion(Decimal(1), [w / total for w in weights], _RATIO)


def _split(total: str | None, ratios: Sequence[Decimal], step: Decimal) -> list[Decimal] | None:
    if total is None:
        return None
    whole = Decimal(total)
    return _apportion(whole, [whole * r for r in ratios], step)


def _apportion(total: Decimal, values: Sequence[Decimal], step: Decimal) -> list[Decimal]:
    """``values`` rounded to ``step``, the rounding's residue on the largest, so that they add
    up to ``total`` exactly."""
    out = [v.quantize(step) for v in values]
    if out:
        i = max(range(len(out)), key=lambda k: abs(out[k]))
        out[i] += total - sum(out, Decimal(0))
    return out


def _tokens(count: float | None) -> str | None:
    return None if count is None else _plain(Decimal(repr(round(count, 3))))


def _plain(value: Decimal) -> str:
    text = format(value, "f")
    return text if "." in text else f"{text}.0"


def header() -> tuple[str, ...]:
    return COLUMNS


def as_csv_values(values: dict[str, str | None]) -> list[str]:
    return ["" if values[c] is None else str(values[c]) for c in COLUMNS]
