"""JSON that every parser reads: a value that is not a finite number is ``null`` (unknown).

Python's json writes ``NaN`` and ``Infinity`` by default, which is not JSON: ``jq`` and
JavaScript refuse the whole document. Every figure gpuwatch prints as JSON goes through here.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` with non-finite floats and Decimals as null; raises if one slips by."""
    return json.dumps(finite(value), allow_nan=False, **options)


def finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal) and not value.is_finite():
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
