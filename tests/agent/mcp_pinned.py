"""`gpuwatch` with its clock pinned: ``python -m tests.agent.mcp_pinned ISO-INSTANT ARGS...``.

The MCP server and the CLI it is compared with must answer for the same `now` (a cost window
ends at it); the clock is the process's outer edge, so it is the one part replaced. Everything
else (argument parsing, the database, the SDK's stdio transport) is the real command's.
"""

from __future__ import annotations

import sys
from datetime import datetime

from agent.collect import clock

if __name__ == "__main__":
    pinned = datetime.fromisoformat(sys.argv[1])
    clock.utc_now = lambda: pinned  # before agent.cli.main binds it
    from agent.cli.main import main

    sys.exit(main(sys.argv[2:]))
