"""`gpuwatch mcp` as an assistant meets it: the official SDK's client starts the real command
over stdio against the demo's database, and each tool's answer is the CLI's JSON.

The server runs with its clock pinned to one instant (tests/agent/mcp_pinned.py), and the
CLI it is compared with (in this process, agent.cli.main.main) with the same: a cost window
ends at `now`, so both must answer for the same one. A one-day demo
history keeps the module to seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[2]
Cli = Callable[..., tuple[int, str]]
READ_TOOLS = {"cost", "report", "breakeven", "alerts", "gpus"}


@dataclass(frozen=True)
class Demo:
    config: Path  # demo-h100.toml
    now: str  # the pinned instant, ISO


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWATCH_", "FAKE_NVML"))}
    return env | {"XDG_STATE_HOME": str(home / "state"), "HOME": str(home)}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    home = tmp_path_factory.mktemp("home")
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "demo", "--days", "1"],
        env=_env(home), cwd=REPO, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Half a minute past the minute: windows and periods that cut at minutes are exercised.
    now = datetime.now(UTC).replace(second=30, microsecond=0).isoformat()
    return Demo(home / "state" / "gpuwatch" / "demo" / "demo-h100.toml", now)


@pytest.fixture
def cli(
    demo: Demo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str]]:
    """`gpuwatch ARGS --config ...` in this process, its clock pinned as the server's is:
    (exit status, stdout)."""
    from agent.cli import main as cli_main

    monkeypatch.setattr(cli_main, "utc_now", lambda: datetime.fromisoformat(demo.now))

    def run(*args: str, config: Path | None = None) -> tuple[int, str]:
        capsys.readouterr()
        status = cli_main.main([*args, "--config", str(config or demo.config)])
        return status, capsys.readouterr().out

    return run


def as_json(done: tuple[int, str]) -> Any:
    status, out = done
    assert status == 0, out
    return json.loads(out)


@dataclass(frozen=True)
class Answer:
    is_error: bool
    text: str

    def json(self) -> Any:
        assert not self.is_error, self.text
        return json.loads(self.text)


@dataclass(frozen=True)
class Session:
    tools: dict[str, Any]  # name -> the SDK's Tool
    answers: list[Answer]


def serve(
    demo: Demo,
    calls: list[tuple[str, dict[str, Any]]],
    *extra: str,
    config: Path | None = None,
    pinned: bool = True,
) -> Session:
    """Start `gpuwatch mcp` through the SDK's stdio client, list its tools, make ``calls``."""
    args = ["mcp", "--config", str(config or demo.config), *extra]
    if pinned:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "tests.agent.mcp_pinned", demo.now, *args],
            cwd=str(REPO),
        )  # fmt: skip
    else:  # the installed console script, exactly as an assistant's configuration names it
        params = StdioServerParameters(command=str(Path(sys.executable).parent / "gpuwatch"),
                                       args=args, cwd=str(REPO))  # fmt: skip

    async def talk() -> Session:
        with (
            anyio.fail_after(120),
            open(os.devnull, "w") as quiet,
        ):  # the server's log lines (stderr)
            async with (
                stdio_client(params, errlog=quiet) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                listed = await session.list_tools()
                answers = []
                for name, arguments in calls:
                    result = await session.call_tool(name, arguments)
                    text = "".join(getattr(c, "text", "") for c in result.content)
                    answers.append(Answer(result.is_error, text))
        return Session({t.name: t for t in listed.tools}, answers)

    return anyio.run(talk)


# Each tool call, and the command whose --json it must equal.
Call = tuple[str, dict[str, Any]]
SAME: list[tuple[Call, tuple[str, ...]]] = [
    (("cost", {}), ("cost", "--json")),
    (("cost", {"window": "6h"}), ("cost", "--json", "--window", "6h")),
    (("report", {}), ("report", "--format", "json")),
    (
        ("report", {"week": True, "models": ["qwen2.5-7b"], "hosts": ["demo-h100"]}),
        ("report", "--format", "json", "--week", "--model", "qwen2.5-7b", "--host", "demo-h100"),
    ),
    (
        ("breakeven", {"pod_usd_per_hour": 2.49}),
        ("breakeven", "--json", "--pod-usd-per-hour", "2.49"),
    ),
    (
        ("breakeven", {"window": "12h", "pod_usd_per_hour": 2.49, "tokens_per_request": 300,
                       "serverless_usd_per_hour": 1.9}),
        ("breakeven", "--json", "--window", "12h", "--pod-usd-per-hour", "2.49",
         "--tokens-per-request", "300", "--serverless-usd-per-hour", "1.9"),
    ),
    (
        ("breakeven", {"requests_per_day": 50000, "gpu_seconds_per_request": 0.8,
                       "pod_usd_per_hour": 2.72, "target_utilization": 0.6}),
        ("breakeven", "--json", "--requests-per-day", "50000", "--gpu-seconds-per-request",
         "0.8", "--pod-usd-per-hour", "2.72", "--target-utilization", "0.6"),
    ),
    (("alerts", {}), ("alerts", "--json")),
    (("gpus", {}), ("gpus", "--json")),
    (("gpus", {"window": "3h"}), ("gpus", "--json", "--window", "3h")),
]  # fmt: skip


def test_every_tool_answers_what_the_cli_prints_as_json(demo: Demo, cli: Cli) -> None:
    session = serve(demo, [call for call, _ in SAME])
    assert set(session.tools) == READ_TOOLS  # no `silence` without --allow-silence
    for (call, command), answer in zip(SAME, session.answers, strict=True):
        assert answer.json() == as_json(cli(*command)), call
    # Real figures, not two empty answers agreeing: the fleet's day cost money and made tokens.
    fleet = session.answers[0].json()["fleet"]
    assert float(fleet["cost_usd"]) > 0 and fleet["useful_tokens"] > 0
    assert session.answers[3].json()["filters"] == {"hosts": ["demo-h100"],
                                                   "models": ["qwen2.5-7b"]}  # fmt: skip
    assert {g["host"] for g in session.answers[8].json()["gpus"]} == {"demo-h100", "demo-l40s"}
    assert session.answers[7].json()["alerts"], "the demo's spare GPU fires GpuIdle"


def test_the_tools_are_read_only_and_say_what_their_figures_mean(demo: Demo) -> None:
    # The installed `gpuwatch` console script, unpinned, as an assistant starts it.
    tools = serve(demo, [], pinned=False).tools
    assert set(tools) == READ_TOOLS
    for tool in tools.values():
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
    cost = tools["cost"].description or ""
    for meaning in ("rate card", "useful_tokens_source", "completed_requests", "null"):
        assert meaning in cost
    assert "withheld" in (tools["breakeven"].description or "")
    assert "sm_active_ratio" in (tools["gpus"].description or "")
    report = tools["report"].input_schema["properties"]
    assert {"month", "last_month", "week", "from_date", "to_date", "hosts", "models"} == set(report)
    assert "pod_usd_per_hour" in tools["breakeven"].input_schema["properties"]


def copy_of(demo: Demo, folder: Path) -> Path:
    """The demo's folder copied, its configuration pointing at the copy's database."""
    shutil.copytree(demo.config.parent, folder)
    config = folder / demo.config.name
    text = config.read_text().replace(str(demo.config.parent), str(folder))
    config.write_text(text)
    return config


def test_silence_is_offered_only_with_the_flag_and_mutes_as_silence_add_does(
    demo: Demo, cli: Cli, tmp_path: Path
) -> None:
    config = copy_of(demo, tmp_path / "copy")
    calls = [
        ("silence", {"matchers": ["alertname=GpuIdle", "host=demo-h100"], "duration": "2h",
                     "comment": "spare GPU, known", "author": "ana"}),
        ("alerts", {}),
        ("silence", {"matchers": ["alertname=~["], "duration": "2h", "comment": "bad"}),
        ("silence", {"matchers": ["alertname=GpuIdle"], "duration": "forever", "comment": "x"}),
    ]  # fmt: skip
    session = serve(demo, calls, "--allow-silence", config=config)
    assert set(session.tools) == READ_TOOLS | {"silence"}
    silence = session.tools["silence"]
    assert silence.annotations is not None and silence.annotations.read_only_hint is False
    added = session.answers[0].json()
    assert added["matchers"] == ['alertname="GpuIdle"', 'host="demo-h100"']
    assert (added["state"], added["created_by"]) == ("active", "ana")
    # Stored where `silence list` finds it, and the idle GPU's alert is muted by it.
    listed = as_json(cli("silence", "list", "--json", config=config))
    assert [s["id"] for s in listed["silences"]] == [added["id"]]
    idle = [a for a in session.answers[1].json()["alerts"] if a["rule"] == "GpuIdle"]
    assert idle and all(a["muted_by"] == f"silence {added['id']}" for a in idle)
    bad_matcher, bad_duration = session.answers[2], session.answers[3]
    assert bad_matcher.is_error and "matchers:" in bad_matcher.text
    assert (
        bad_duration.is_error
        and "duration:" in bad_duration.text
        and "forever" in bad_duration.text
    )


BAD: list[tuple[Call, str]] = [
    (("cost", {"window": "soon"}), r"window: expected a duration .* got 'soon'"),
    (("cost", {"window": 5}), r"window\s+Input should be a valid string"),
    (("gpus", {"window": "10s"}), r"window: at least a minute"),
    (("report", {"month": "2026-13"}), r"month: "),
    (("report", {"week": True, "month": "2026-01"}), r"one period at most, got month and week"),
    (("report", {"from_date": "2026-11-01"}), r"from_date: a range needs both from_date and to_"),
    (("report", {"models": ["gpt-9"]}), r"models: no model 'gpt-9' in the database \(models: "),
    (("breakeven", {"pod_usd_per_hour": -1}), r"pod_usd_per_hour: expected a number >= 0"),
    (("breakeven", {"target_utilization": 70, "pod_usd_per_hour": 2}), r"did you mean 0.7"),
    (("breakeven", {}), r"missing pod_usd_per_hour"),
    (("nope", {}), r"nope"),
]  # fmt: skip


def test_a_bad_argument_is_a_tool_error_naming_it_and_the_server_carries_on(demo: Demo) -> None:
    session = serve(demo, [call for call, _ in BAD] + [("alerts", {})])
    for (call, expected), answer in zip(BAD, session.answers, strict=False):
        assert answer.is_error, call
        assert re.search(expected, answer.text), (call, answer.text)
    assert "alerts" in session.answers[-1].json()  # still serving after every refusal


def test_gpus_is_the_report_s_gpus_section_for_the_same_window(demo: Demo, cli: Cli) -> None:
    gpus = as_json(cli("gpus", "--json", "--window", "2h"))
    start, end = gpus["period"]["start"], gpus["period"]["end"]
    assert end.startswith(demo.now[:16])  # ends at the pinned minute
    report = as_json(cli("report", "--format", "json", "--from", start, "--to", end))
    assert gpus["gpus"] == report["gpus"] and gpus["data"] == report["data"]
    table = cli("gpus", "--window", "2h")[1]
    assert "NVIDIA H100 80GB HBM3" in table and "demo-l40s" in table


def test_without_the_sdk_the_command_says_what_to_install(demo: Demo) -> None:
    # The extra not installed: importing the SDK fails as it would (None in sys.modules).
    code = (
        "import sys; sys.modules['mcp'] = None; from agent.cli.main import main; "
        f"sys.exit(main(['mcp', '--config', {str(demo.config)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gpuwatch: gpuwatch mcp needs the MCP SDK, an optional extra: pip install "
        "'gpuwatch[mcp]' (or pip install 'mcp>=2.3,<3' beside gpuwatch)"
    )
    assert done.stdout == ""


def test_a_bad_configuration_stops_the_server_before_it_serves(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('host = "x"\nnot_a_key = 1\n')
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "mcp", "--config", str(bad)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2 and "not_a_key" in done.stderr and done.stdout == ""


def test_gpus_on_an_empty_database_says_none_was_observed(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "empty.toml"
    config.write_text(f'host = "x"\ndatabase_url = "sqlite:///{tmp_path / "gw.db"}"\n')
    document = as_json(cli("gpus", "--json", config=config))
    assert document["gpus"] == [] and document["data"]["complete_to"] is None
    assert cli("gpus", config=config)[1].endswith("No GPU observed in this window.\n")
