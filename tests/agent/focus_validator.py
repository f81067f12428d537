"""The FinOps Foundation's FOCUS validator (PyPI `focus-validator`, in the test extra), run as a
command on a CSV: which of its checks fail.

Version 1.0.0 is what installs on Python 3.11. Three things about it shape this helper:

* Its exit status is 0 whatever it finds: the verdict is read from its JUnit report
  (``--output-type unittest``), every check a test case.
* Its "1.0" rules name four columns and one value by their pre-release names, which FOCUS 1.0
  renamed: ``InvoiceIssuer``, ``Provider``, ``Publisher`` and ``ResourceID`` (1.0:
  ``InvoiceIssuerName``, ``ProviderName``, ``PublisherName``, ``ResourceId``), and the
  SkuPriceId rule's ``ChargeType`` (1.0: ``ChargeCategory``). A FOCUS 1.0 file fails their
  "required column" checks, and a file with the old names would not be FOCUS 1.0. So the
  rules run from a copy in which exactly those names are the 1.0 ones
  (:data:`RENAMED`); every other rule is the validator's, unchanged.
* It reads the ISO 4217 code list from a path relative to the working directory
  (``focus_validator/utils/currency_codes.csv``), so it runs from the folder holding the
  package; from anywhere else every currency fails.

Under `make test` (GPUWATCH_REQUIRE_FOCUS_VALIDATOR=1) a missing validator fails the test that
needs it; elsewhere that test skips and says how to install it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

# The validator's names -> FOCUS 1.0's, as whole words in its 1.0 rule files.
RENAMED = {
    "InvoiceIssuer": "InvoiceIssuerName",
    "Provider": "ProviderName",
    "Publisher": "PublisherName",
    "ResourceID": "ResourceId",
    "ChargeType": "ChargeCategory",
}
# The rule files those names are in: if an upgrade of the validator fixes them, this says so.
PATCHED_FILES = {
    "InvoiceIssuer_IsString.yaml", "InvoiceIssuer_NotNull.yaml", "InvoiceIssuer_Required.yaml",
    "Provider_IsString.yaml", "Provider_NotNull.yaml", "Provider_Required.yaml",
    "Publisher_IsString.yaml", "Publisher_NotNull.yaml", "Publisher_Required.yaml",
    "ResourceID_IsString.yaml", "ResourceID_Nullable.yaml", "ResourceID_Required.yaml",
    "SkuPriceId_Nullable.yaml",
}  # fmt: skip
INSTALL = "pip install 'focus-validator==1.0.0' 'multimethod<2' (the test extra has them)"


@dataclass(frozen=True, slots=True)
class Verdict:
    checks: int  # how many checks ran
    failed: dict[str, str]  # check name -> the validator's message
    errors: int
    skipped: int

    @property
    def passed(self) -> bool:
        return self.checks > 0 and not self.failed and not self.errors and not self.skipped


@dataclass(frozen=True, slots=True)
class Validator:
    command: Path
    package_root: Path  # the folder holding focus_validator/
    rules: Path  # a rule-set folder with the patched "1.0"

    def check(self, csv: Path, report: Path) -> Verdict:
        done = subprocess.run(
            [str(self.command), "--data-file", str(csv), "--validate-version", "1.0",
             "--rule-set-path", str(self.rules),
             "--output-type", "unittest", "--output-destination", str(report)],
            cwd=self.package_root, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0 and report.exists(), done.stdout + done.stderr
        return _verdict(report)


def find_validator(work: Path) -> Validator:
    """The validator beside this interpreter, with its rules patched into ``work``."""
    command = Path(sys.executable).with_name("focus-validator")
    spec = importlib.util.find_spec("focus_validator")  # finds it without importing pandas
    if not command.exists() or spec is None or spec.origin is None:
        reason = f"the FOCUS validator is not installed: {INSTALL}"
        if os.environ.get("GPUWATCH_REQUIRE_FOCUS_VALIDATOR") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    package = Path(spec.origin).parent
    return Validator(command, package.parent, patched_rules(package, work))


def patched_rules(package: Path, work: Path) -> Path:
    source = package / "rules" / "version_sets" / "1.0"
    target = work / "rules" / "1.0"
    shutil.copytree(source, target)
    pattern = re.compile(r"\b(" + "|".join(RENAMED) + r")\b")
    patched = set()
    for rule in sorted(target.glob("*.yaml")):
        text = rule.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        # Only the column a rule checks and the SQL it runs: the friendly text may say anything.
        new = "".join(
            pattern.sub(lambda m: RENAMED[m.group(1)], line)
            if line.startswith("column_id:") or "ChargeType" in line
            else line
            for line in lines
        )
        if new != text:
            rule.write_text(new, encoding="utf-8")
            patched.add(rule.name)
    assert patched == PATCHED_FILES, f"the validator's 1.0 rules changed: patched {patched}"
    return target.parent


def _verdict(report: Path) -> Verdict:
    root = ET.parse(report).getroot()
    failed = {
        str(f.get("name")): str(f.get("message"))
        for f in root.iter("failure")
    }  # fmt: skip
    return Verdict(
        checks=int(root.get("tests", "0")),
        failed=failed,
        errors=int(root.get("errors", "0")),
        skipped=int(root.get("skipped", "0")),
    )
