"""The names of `gpuwatch report`'s formats, apart from their renderers.

The command line offers them as choices whatever the command; the renderers
(:mod:`agent.reporting.render`) are imported only by a report, not by `gpuwatch run`.
"""

from __future__ import annotations

FORMATS = ("table", "json", "csv", "markdown", "html")
# The renderings that print the daily series (the others are built without them).
DAILY_FORMATS = frozenset({"json", "csv", "html"})
