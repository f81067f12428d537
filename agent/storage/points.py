"""The shapes of raw points as the rollup reads them, shared by its modules."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

Point = tuple[datetime, float]
SeriesMeta = Mapping[int, tuple[str, dict[str, str]]]  # series id -> (metric, labels)
Points = Mapping[int, list[Point]]  # series id -> its points, oldest first
