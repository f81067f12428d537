"""A target's scrape limits (``[[targets]]`` keys, Prometheus' names; see collectors.limits).

[[targets]]
name = "vllm"
url = "http://127.0.0.1:8000/metrics"
sample_limit = 50000               # 0: no limit
label_limit = 64
label_name_length_limit = 128
label_value_length_limit = 2048
series_per_day_limit = 20000       # ours: new series a target may create in a UTC day
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from agent.config.reader import Reader
from collectors.limits import LIMIT_KEYS, ScrapeLimits

MAX_LIMIT = 10**9  # larger is a typo: no exposition has a billion samples or a 1 GB label


def parse_limits(r: Reader, t: dict[str, Any], path: str) -> ScrapeLimits:
    """The target's limits, each a whole number from 0 (no limit) to a billion."""
    defaults = ScrapeLimits()
    values = {f.name: getattr(defaults, f.name) for f in fields(ScrapeLimits)}
    for key in LIMIT_KEYS:
        full = f"{path}.{key}"
        value = r.number(t, full, float(values[key]), positive=False)
        if not math.isfinite(value) or value != int(value) or not 0 <= value <= MAX_LIMIT:
            r.problem(
                full, f"expected a whole number from 0 (no limit) to {MAX_LIMIT}, got {value:g}"
            )
            continue
        values[key] = int(value)
    return ScrapeLimits(**values)
