"""`gpuwatch mcp`: a Model Context Protocol server on stdio, for assistants (docs/mcp.md).

    gpuwatch mcp [--config PATH] [--allow-silence]

Its tools answer what the CLI answers, from the same functions (:mod:`agent.cli.mcp_tools`):
`cost`, `report`, `breakeven`, `alerts` and `gpus`, each returning the command's JSON. It only
reads, unless --allow-silence adds the `silence` tool (what `gpuwatch silence add` does). The
official SDK (`mcp`, 2.x) is an optional extra; without it the command says what to install.
"""

from __future__ import annotations

import argparse
import sys

INSTALL_HINT = (
    "gpuwatch mcp needs the MCP SDK, an optional extra: pip install 'gpuwatch[mcp]' "
    "(or pip install 'mcp>=2.3,<3' beside gpuwatch)"
)

_OURS = {"agent", "foundation", "collectors", "alerts", "migrations"}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="a Model Context Protocol server on stdio, for assistants (read-only by default)",
        description="Serve gpuwatch's answers (cost, report, breakeven, alerts, gpus) to an "
        "assistant over MCP on standard input and output; each tool returns the CLI's JSON. "
        "Needs the mcp extra: pip install 'gpuwatch[mcp]'.",
    )
    mcp.add_argument("--config", metavar="PATH", help="TOML file (default as for `run`)")
    mcp.add_argument(
        "--allow-silence",
        action="store_true",
        help="also offer the `silence` tool, which adds a silence as `silence add` does "
        "(the only tool that writes)",
    )


def run(args: argparse.Namespace) -> int:
    from agent.cli.mcp_tools import Tools
    from agent.collect import clock
    from agent.config.settings import load_config

    # The configuration first: a bad one is a setting to change (exit 2) before any serving.
    config = load_config(args.config)
    try:
        from agent.cli.mcp_app import build_server  # the SDK, pydantic and more
    except ImportError as exc:
        # gpuwatch's own module missing is a bug; the SDK or one of its dependencies missing
        # is the extra not (or not wholly) installed.
        if (exc.name or "").split(".")[0] in _OURS:
            raise
        print(f"gpuwatch: {INSTALL_HINT}", file=sys.stderr)
        return 2
    # clock.utc_now looked up at each call: each answer's `now` is taken as the CLI takes it.
    tools = Tools(config, lambda: clock.utc_now())
    build_server(tools, args.config, allow_silence=args.allow_silence).run("stdio")
    return 0
