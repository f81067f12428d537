"""`gpuwatch mcp`'s server: the official MCP SDK's MCPServer with gpuwatch's tools.

Imported only by `gpuwatch mcp` (agent.cli.mcp_server), once the SDK is known to be installed.
Each tool is a thin closure over :class:`agent.cli.mcp_tools.Tools`; its description and its
arguments' (agent.cli.mcp_text) are what an assistant reads to choose and call it. The argument
types are module-level names because the SDK reads the (string) annotations to build each
tool's JSON schema.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from agent import __version__
from agent.cli import mcp_text
from agent.cli.failures import expected
from agent.cli.mcp_tools import Tools, in_tool_terms

Window = Annotated[str, Field(description=mcp_text.WINDOW)]
Figure = Annotated[float | None, Field(description="a number >= 0; see the tool's description")]


def build_server(tools: Tools, config_path: str | None, *, allow_silence: bool) -> MCPServer:
    """The server and its tools (`silence` only with ``allow_silence``); failures a user
    causes answer as tool errors with the CLI's one line, naming what and where."""
    server = MCPServer("gpuwatch", version=__version__, instructions=mcp_text.INSTRUCTIONS)
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def answer(call: Callable[[], str]) -> str:
        """The CLI's one line for a failure a user causes or meets, as a tool error."""
        try:
            # stdout is the protocol's channel: a stray print (a library's notice) must not
            # reach it. The SDK wrapped the real stdout when it started, so this is safe.
            with contextlib.redirect_stdout(sys.stderr):
                return call()
        except Exception as exc:
            failure = expected(exc, config_path)
            if failure is None:
                raise  # a bug: the SDK answers an error and logs the traceback on stderr
            raise ToolError(in_tool_terms(failure[1])) from None

    @server.tool(description=mcp_text.COST, annotations=reads)
    def cost(window: Window = "30d") -> str:
        return answer(lambda: tools.cost(window))

    @server.tool(description=mcp_text.REPORT, annotations=reads)
    def report(
        month: Annotated[str | None, Field(description=mcp_text.MONTH)] = None,
        last_month: Annotated[bool, Field(description="the last complete month")] = False,
        week: Annotated[bool, Field(description="the current ISO week to date")] = False,
        from_date: Annotated[str | None, Field(description=mcp_text.FROM)] = None,
        to_date: Annotated[str | None, Field(description=mcp_text.TO)] = None,
        hosts: Annotated[list[str], Field(description="only these hosts")] = [],  # noqa: B006
        models: Annotated[list[str], Field(description="only these models")] = [],  # noqa: B006
    ) -> str:
        return answer(
            lambda: tools.report(
                month, last_month, week, from_date, to_date, tuple(hosts), tuple(models)
            )
        )

    @server.tool(description=mcp_text.BREAKEVEN, annotations=reads)
    def breakeven(
        window: Window = "30d",
        requests_per_day: Figure = None,
        gpu_seconds_per_request: Figure = None,
        tokens_per_request: Figure = None,
        bursts_per_day: Figure = None,
        pod_usd_per_hour: Annotated[float | None, Field(description=mcp_text.POD)] = None,
        serverless_usd_per_hour: Figure = None,
        api_usd_per_million_tokens: Figure = None,
        cold_start_seconds: Figure = None,
        scaledown_seconds: Figure = None,
        target_utilization: Annotated[float | None, Field(description=mcp_text.TARGET)] = None,
    ) -> str:
        figures: dict[str, Any] = {
            "requests_per_day": requests_per_day,
            "gpu_seconds_per_request": gpu_seconds_per_request,
            "tokens_per_request": tokens_per_request,
            "bursts_per_day": bursts_per_day,
            "pod_usd_per_hour": pod_usd_per_hour,
            "serverless_usd_per_hour": serverless_usd_per_hour,
            "api_usd_per_million_tokens": api_usd_per_million_tokens,
            "cold_start_seconds": cold_start_seconds,
            "scaledown_seconds": scaledown_seconds,
        }
        return answer(lambda: tools.breakeven(window, target_utilization, **figures))

    @server.tool(description=mcp_text.ALERTS, annotations=reads)
    def alerts() -> str:
        return answer(tools.alerts)

    @server.tool(description=mcp_text.GPUS, annotations=reads)
    def gpus(window: Annotated[str, Field(description=mcp_text.GPUS_WINDOW)] = "1h") -> str:
        return answer(lambda: tools.gpus(window))

    if allow_silence:
        writes = ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False,
            open_world_hint=False,
        )  # fmt: skip

        @server.tool(description=mcp_text.SILENCE, annotations=writes)
        def silence(
            matchers: Annotated[list[str], Field(description=mcp_text.MATCHERS)],
            duration: Annotated[str, Field(description='how long, e.g. "2h" or "30m"')],
            comment: Annotated[str, Field(description="why (shown in `silence list`)")],
            author: Annotated[str | None, Field(description=mcp_text.AUTHOR)] = None,
        ) -> str:
            return answer(lambda: tools.silence(tuple(matchers), duration, comment, author))

    return server
