"""The ``[export.focus]`` section: who `gpuwatch export focus` names as provider and payer.

    [export.focus]
    provider = "CoreWeave"          # ProviderName, and PublisherName and InvoiceIssuerName
    publisher = "CoreWeave"         #   unless set apart (default: provider)
    invoice_issuer = "CoreWeave"
    billing_account_id = "acme"     # default: the configured host
    billing_account_name = "ACME"   # default: billing_account_id
    region_id = "us-east-04"        # RegionId; default NULL (unknown)
    region_name = "US East 04"      # RegionName; default NULL
    availability_zone = "us-east-04a"

Nothing in gpuwatch knows who hosts its GPUs (the rate card is prices, and a `[billing.*]`
provider may bill only some of them), so a file without this section exports
``DEFAULT_PROVIDER`` and the command says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.config.reader import Reader, shown

DEFAULT_PROVIDER = "self-hosted"
MAX_CHARS = 200  # a name or an identifier; FOCUS readers store them in short columns
_NAMES = ("provider", "publisher", "invoice_issuer", "billing_account_id", "billing_account_name",
          "region_id", "region_name", "availability_zone")  # fmt: skip


@dataclass(frozen=True, slots=True)
class FocusExportConfig:
    """What the FOCUS export names; None where the file leaves it to the default."""

    provider: str | None = None
    publisher: str | None = None
    invoice_issuer: str | None = None
    billing_account_id: str | None = None
    billing_account_name: str | None = None
    region_id: str | None = None
    region_name: str | None = None
    availability_zone: str | None = None


@dataclass(frozen=True, slots=True)
class ExportConfig:
    focus: FocusExportConfig = FocusExportConfig()


def parse_export(r: Reader, top: dict[str, Any]) -> ExportConfig:
    t = r.sub(top, "export", {"focus"})
    focus = r.table(t.get("export.focus", {}), "export.focus", set(_NAMES))
    values = {name: _name(r, focus, f"export.focus.{name}") for name in _NAMES}
    return ExportConfig(focus=FocusExportConfig(**values))


def _name(r: Reader, table: dict[str, Any], key: str) -> str | None:
    value = r.optional_string(table, key)
    if value is None:
        return None
    if not value.strip() or len(value) > MAX_CHARS or not value.isprintable():
        r.problem(key, f"expected a name of 1 to {MAX_CHARS} printable characters, got "
                       f"{shown(value)}")  # fmt: skip
        return None
    return value
