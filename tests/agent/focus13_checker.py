"""A FOCUS 1.3 Cost and Usage checker for the suite: the specification's column requirements
(tests/data/focus13/, quoted and transcribed from the spec) applied to a CSV's rows.

The FinOps Foundation's validator for 1.3 needs Python 3.12 or newer; this project runs 3.11.
So the suite checks what 1.3 requires of the columns gpuwatch writes, row by row and across the
allocated charges of one origin charge:

- presence: the mandatory columns (ServiceProviderName and HostProviderName among them) and,
  once one allocation column is there, the ones the split needs; custom columns prefixed x_;
- types: Decimal (FOCUS numeric format), date-time (UTC, ``YYYY-MM-DDTHH:MM:SSZ``), currency
  code, JSON objects with scalar values (Key-Value format), strings; nullability; allowed values,
  and ServiceSubcategory's parent category;
- the allocation columns' conditional rules: all null when AllocatedMethodId is null;
  AllocatedResourceName null exactly when AllocatedResourceId is; AllocatedMethodDetails'
  object (Elements of AllocatedRatio, UsageUnit where UsageQuantity is, x_ custom keys);
  AllocatedTags repeating no tag of Tags;
- split cost allocation: the allocated charges of one origin (same ResourceId and charge period)
  share its dimensions, unit prices and Tags, their AllocatedRatios add up to 1, and, given the
  origin charges (the same period's 1.0 export), their costs and quantities add up to them.

Each failure names its rule, the CSV line and the column.
"""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from pathlib import Path
from typing import Any

SPEC = Path(__file__).resolve().parents[1] / "data" / "focus13" / "columns.json"
NUMERIC = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
CURRENCY = re.compile(r"[A-Z]{3}")
CUSTOM_KEY = re.compile(r"x_[A-Z][A-Za-z0-9]*")
ORIGIN = ("ResourceId", "ChargePeriodStart", "ChargePeriodEnd")
DETAIL_KEYS = {"AllocatedRatio", "UsageUnit", "UsageQuantity"}
Row = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Failure:
    rule: str
    line: int  # the CSV line (the header is line 1); 0: the file
    column: str
    message: str


@cache
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SPEC.read_text(encoding="utf-8"))
    return loaded


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def check(
    header: Sequence[str], rows: Sequence[Row], origins: Sequence[Row] | None = None
) -> list[Failure]:
    """Every failed requirement of ``rows`` (with their ``header``); ``origins``: the origin
    charges the allocated ones must add up to (rows keyed by ResourceId and charge period)."""
    out = _columns(header)
    for line, values in enumerate(rows, start=2):
        out += _row(line, values)
    out += _splits(rows, origins)
    return out


def _columns(header: Sequence[str]) -> list[Failure]:
    columns: dict[str, Any] = spec()["columns"]
    out = [
        Failure("ColumnPresent", 0, name, f"{column['feature_level']} column missing")
        for name, column in columns.items()
        if column["feature_level"].startswith("Mandatory") and name not in header
    ]
    allocation = spec()["allocation_columns"]
    if any(c in header for c in allocation):
        out += [Failure("ColumnPresent", 0, c, "allocation column missing beside the others")
                for c in allocation if c not in header]  # fmt: skip
    out += [
        Failure("CustomColumnPrefix", 0, name, "not a FOCUS 1.3 column and not prefixed x_")
        for name in header
        if name not in columns and not name.startswith("x_")
    ]
    return out


def _row(line: int, values: Row) -> list[Failure]:
    out: list[Failure] = []
    for name, column in spec()["columns"].items():
        if name not in values:
            continue
        text = values[name]
        if text == "":
            if not column["nullable"]:
                out.append(Failure(f"{name}_NotNull", line, name, "null, and may not be"))
            continue
        problem = _type_problem(column["type"], text)
        if problem:
            out.append(Failure(f"{name}_Type", line, name, problem))
        allowed = column.get("allowed_values")
        if allowed and text not in allowed:
            out.append(Failure(f"{name}_AllowedValues", line, name, f"{text!r} not allowed"))
    return out + _subcategory(line, values) + _allocation(line, values)


def _type_problem(kind: str, text: str) -> str | None:
    if kind == "Decimal":
        return None if NUMERIC.fullmatch(text) else f"{text!r} is not a FOCUS decimal"
    if kind == "DateTime":
        return None if DATETIME.fullmatch(text) else f"{text!r} is not a UTC date-time (Z)"
    if kind == "CurrencyCode":
        return None if CURRENCY.fullmatch(text) else f"{text!r} is not an ISO 4217 code"
    if kind in ("KeyValue", "JsonObject"):
        value = _json(text)
        if not isinstance(value, dict):
            return f"{text[:40]!r} is not a JSON object"
        if kind == "KeyValue" and any(isinstance(v, dict | list) for v in value.values()):
            return "a tag value is not a scalar"
    return None


def _subcategory(line: int, values: Row) -> list[Failure]:
    sub, category = values.get("ServiceSubcategory", ""), values.get("ServiceCategory", "")
    parent = spec()["service_subcategory_parent"].get(sub)
    if sub and parent and parent != category:
        return [Failure("ServiceSubcategory_Parent", line, "ServiceSubcategory",
                        f"{sub!r} belongs to {parent!r}, not {category!r}")]  # fmt: skip
    return []


def _allocation(line: int, values: Row) -> list[Failure]:
    out: list[Failure] = []
    method = values.get("AllocatedMethodId", "")
    rid, name = values.get("AllocatedResourceId", ""), values.get("AllocatedResourceName", "")
    if not method:
        for c in spec()["allocation_columns"]:
            if values.get(c, ""):
                out.append(Failure(f"{c}_NullWithoutSplit", line, c,
                                   "set on a charge that no split allocated"))  # fmt: skip
        return out
    if bool(rid) != bool(name):
        out.append(Failure("AllocatedResourceName_NullWithId", line, "AllocatedResourceName",
                           "null exactly when AllocatedResourceId is null, it is not"))  # fmt: skip
    details = values.get("AllocatedMethodDetails", "")
    if details:
        out += [Failure("AllocatedMethodDetails_Object", line, "AllocatedMethodDetails", m)
                for m in _details_problems(details)]  # fmt: skip
    out += _allocated_tags(line, values)
    return out


def _details_problems(text: str) -> list[str]:
    value = _json(text)
    if not isinstance(value, dict) or not isinstance(value.get("Elements"), list):
        return ["not an object with an Elements array"]
    out = [f"top-level key {k!r} is neither Elements nor x_" for k in value
           if k != "Elements" and not CUSTOM_KEY.fullmatch(k)]  # fmt: skip
    if not value["Elements"]:
        out.append("Elements is empty")
    for element in value["Elements"]:
        if not isinstance(element, dict):
            out.append("an element is not an object")
            continue
        if not isinstance(element.get("AllocatedRatio"), int | float | Decimal):
            out.append("an element has no numeric AllocatedRatio")
        if "UsageQuantity" in element and not isinstance(element.get("UsageUnit"), str):
            out.append("UsageQuantity without UsageUnit")
        if "UsageQuantity" in element and not isinstance(element["UsageQuantity"], int | Decimal):
            out.append("UsageQuantity is not numeric")
        out += [f"key {k!r} is neither FOCUS's nor x_" for k in element
                if k not in DETAIL_KEYS and not CUSTOM_KEY.fullmatch(k)]  # fmt: skip
    return out


def _allocated_tags(line: int, values: Row) -> list[Failure]:
    tags, allocated = _json(values.get("Tags", "") or "{}"), _json(values.get("AllocatedTags", ""))
    if not isinstance(allocated, dict) or not isinstance(tags, dict):
        return []
    return [
        Failure("AllocatedTags_NotInTags", line, "AllocatedTags", f"{key!r} is already in Tags")
        for key in allocated
        if key in tags
    ]


def _splits(rows: Sequence[Row], origins: Sequence[Row] | None) -> list[Failure]:
    groups: dict[tuple[str, ...], list[tuple[int, Row]]] = defaultdict(list)
    for line, values in enumerate(rows, start=2):
        if values.get("AllocatedMethodId"):
            groups[tuple(values.get(c, "") for c in ORIGIN)].append((line, values))
    by_origin = {tuple(o.get(c, "") for c in ORIGIN): o for o in origins or ()}
    out: list[Failure] = []
    for key, parts in groups.items():
        out += _alike(parts) + _ratios(parts)
        if origins is not None:
            out += _adds_up(parts, by_origin.get(key))
    return out


def _alike(parts: Sequence[tuple[int, Row]]) -> list[Failure]:
    """Dimensions, unit prices and Tags: the origin's, so alike across its allocated charges."""
    summable = set(spec()["summable_metrics"])
    own = set(spec()["allocation_columns"])
    first_line, first = parts[0]
    out = []
    for line, values in parts[1:]:
        for column in spec()["columns"]:
            if column in summable or column in own or column not in values:
                continue
            if values[column] != first[column]:
                out.append(
                    Failure(
                        "SplitCostAllocation_MatchesOrigin",
                        line,
                        column,
                        f"differs from line {first_line}'s, of the same origin charge",
                    )
                )
    return out  # fmt: skip


def _ratios(parts: Sequence[tuple[int, Row]]) -> list[Failure]:
    total = Decimal(0)
    for _, values in parts:
        details = _json(values.get("AllocatedMethodDetails", ""))
        if not isinstance(details, dict) or not isinstance(details.get("Elements"), list):
            return []  # reported by the row's own check
        total += sum((Decimal(e.get("AllocatedRatio", 0)) for e in details["Elements"]
                      if isinstance(e, dict)), Decimal(0))  # fmt: skip
    if abs(total - 1) > Decimal("1e-9"):
        line = parts[0][0]
        return [Failure("AllocatedRatio_SumsToOne", line, "AllocatedMethodDetails",
                        f"the ratios of this origin charge add up to {total}")]  # fmt: skip
    return []


def _adds_up(parts: Sequence[tuple[int, Row]], origin: Row | None) -> list[Failure]:
    line = parts[0][0]
    if origin is None:
        return [Failure("SplitCostAllocation_Origin", line, "ResourceId", "no origin charge")]
    out = []
    for column in spec()["summable_metrics"] + spec()["non_summable_metrics"]:
        texts = [values.get(column, "") for _, values in parts]
        if column in spec()["non_summable_metrics"]:
            if any(t != origin.get(column, "") for t in texts):
                out.append(Failure("SplitCostAllocation_UnitPrice", line, column,
                                   "differs from the origin charge's"))  # fmt: skip
            continue
        total = sum((_decimal(t) for t in texts), Decimal(0))
        if total != _decimal(origin.get(column, "")):
            out.append(Failure("SplitCostAllocation_Sum", line, column,
                               f"allocated charges add up to {total}, the origin is "
                               f"{origin.get(column)}"))  # fmt: skip
    return out


def _decimal(text: str) -> Decimal:
    try:
        return Decimal(text) if text else Decimal(0)
    except InvalidOperation:
        return Decimal("NaN")


def _json(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text, parse_float=Decimal)
    except ValueError:
        return None


def rules(failures: Iterable[Failure]) -> set[str]:
    return {f.rule for f in failures}
