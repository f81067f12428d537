"""The `gpuwatch` command line: a thin layer over the agent; ``main(argv) -> exit code``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

# Only what building the parser needs: each command imports its own libraries (SQLAlchemy,
# Alembic, httpx, the daemon) when it runs, so `gpuwatch --help` and `breakeven` with given
# figures start in a fraction of the time (bench/cli_start.py; tests/agent/test_cli_start.py).
from agent import __version__
from agent.cli import alerts as alerts_cli
from agent.cli import breakeven as breakeven_cli
from agent.cli import cost as cost_cli
from agent.cli import demo as demo_cli
from agent.cli import digest as digest_cli
from agent.cli import export as export_cli
from agent.cli import focus_import, mcp_server
from agent.cli import gpus as gpus_cli
from agent.cli import report as report_cli
from agent.cli.failures import expected, quietly
from agent.collect.clock import utc_now

if TYPE_CHECKING:
    from agent.config.settings import Config

log = logging.getLogger("gpuwatch")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        description="GPU fleet monitoring: telemetry, real cost per million tokens, alerts.",
    )
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("GPUWATCH_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="default: INFO",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the daemon (what systemd starts)")
    _config_arg(run)

    collect = sub.add_parser("collect", help="one pass of every enabled collector, stored")
    _config_arg(collect)
    collect.add_argument(
        "--once",
        action="store_true",
        required=True,
        help="run a single pass and exit (required; the loop is `gpuwatch run`)",
    )
    collect.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per sample: collector, metric, labels, value, ts",
    )

    check = sub.add_parser("check-config", help="validate the configuration offline")
    _config_arg(check)

    breakeven_cli.add_parser(sub)
    cost_cli.add_parsers(sub)
    alerts_cli.add_parsers(sub)
    digest_cli.add_parser(sub)
    report_cli.add_parser(sub)
    export_cli.add_parser(sub)
    gpus_cli.add_parser(sub)
    mcp_server.add_parser(sub)
    demo_cli.add_parser(sub)

    db = sub.add_parser("db", help="database schema migrations (Alembic)")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    for name, text in (
        ("upgrade", "upgrade the schema to this version's head"),
        ("current", "show the schema revision of the database"),
    ):
        _config_arg(db_sub.add_parser(name, help=text))
    return parser


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="TOML file (default: $GPUWATCH_CONFIG, else /etc/gpuwatch/gpuwatch.toml "
        "if present, else built-in defaults)",
    )


_CHATTY_LOGGERS = ("apscheduler", "httpx", "alembic")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Libraries that log routine work at INFO: APScheduler every job run, httpx every request (a
    # line per target per tick), Alembic its plugins and context. One line per tick would drown
    # the journal; gpuwatch logs what matters itself, and a migration that runs says which
    # (migrations.runner lets Alembic's line per migration through).
    for chatty in _CHATTY_LOGGERS:
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger().level))
    handlers = {
        "run": cmd_run,
        "collect": cmd_collect,
        "check-config": cmd_check_config,
        "db": cmd_db,
        "breakeven": cmd_breakeven,
        "cost": cmd_cost,
        "import": cmd_import,
        "alerts": lambda a: alerts_cli.run_alerts(a, _config(a), utc_now()),
        "silence": lambda a: alerts_cli.run_silence(a, _config(a), utc_now()),
        "digest": lambda a: digest_cli.run(a, _config(a), utc_now()),
        "report": lambda a: report_cli.run(a, _config(a), utc_now()),
        "export": lambda a: export_cli.run(a, _config(a), utc_now()),
        "gpus": lambda a: gpus_cli.run(a, _config(a), utc_now()),
        "mcp": mcp_server.run,
        "demo": demo_cli.run,
    }
    try:
        return quietly(lambda: handlers[args.command](args))
    except Exception as exc:
        failure = expected(exc, getattr(args, "config", None))
        if failure is None:
            raise
        status, line = failure
        print(f"gpuwatch: {line}", file=sys.stderr)
        return status


def _config(args: argparse.Namespace) -> Config:
    from agent.config.settings import load_config

    return load_config(args.config)


def cmd_run(args: argparse.Namespace) -> int:
    from agent.daemon.service import Daemon, ListenError  # APScheduler is only needed here

    config = _config(args)
    try:
        return Daemon(args.config, config).serve()
    except ListenError as exc:  # a setting to change, like a bad config: exit 2, one line
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return 2


def cmd_collect(args: argparse.Namespace) -> int:
    from agent.daemon.app import App  # the daemon's collectors, for this command only
    from agent.reporting import json_text

    app = App.open(_config(args))
    runner_log = logging.getLogger("agent.collect.runner")
    runner_log.addFilter(_said_below)
    try:
        round_ = app.tick(utc_now())
    finally:
        runner_log.removeFilter(_said_below)
        app.close()
    if args.json:
        for collector, s in round_.tagged_samples():
            print(
                json_text.dumps(
                    {
                        "collector": collector,
                        "metric": s.metric,
                        "labels": s.labels,
                        "value": s.value,
                        "ts": s.ts.isoformat(),
                    }
                )
            )
    else:
        for run in round_.runs:
            state = "ok" if run.success else "FAILED"
            took = f"{run.duration_seconds:.3f}s"
            print(f"{run.collector}: {len(run.samples)} samples in {took}, {state}")
    failed = [r for r in round_.runs if not r.success]
    for run in failed:  # the reason, once: on stderr, whatever stdout holds (a table, JSON)
        print(
            f"gpuwatch: collector {run.collector} failed: {_error_text(run.error)}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _said_below(record: logging.LogRecord) -> bool:
    """The daemon's journal line for a failing collector: `collect --once` names each failure
    itself, once, so the same sentence does not come twice more (a log line and a table)."""
    return not str(record.msg).startswith("collector %s failed")


def _error_text(error: str | None) -> str:
    """A collector's error as the terminal shows it: a URL in it (a target's, a redirect's)
    without its credentials, and no control character from a hostile answer."""
    from foundation.printable import printable
    from foundation.redact import redact_urls

    return printable(redact_urls(error or "unknown error"))


def cmd_breakeven(args: argparse.Namespace) -> int:
    if breakeven_cli.figures_given(args):  # nothing to measure: no configuration, no database
        return breakeven_cli.run(args)
    config = _config(args)  # a bad one is a setting to change (exit 2), like everywhere
    measured, target = breakeven_cli.configured(config, utc_now())
    return breakeven_cli.run(args, measured=measured, target_utilization=target)


def cmd_cost(args: argparse.Namespace) -> int:
    return cost_cli.run_cost(args, _config(args), utc_now())


def cmd_import(args: argparse.Namespace) -> int:
    return focus_import.run_import_focus(args, _config(args), utc_now())


def cmd_check_config(args: argparse.Namespace) -> int:
    print(_summary(_config(args)))
    return 0


def _summary(config: Config) -> str:
    from agent.storage.db import is_sqlite

    collectors = ["nvml"] if config.collectors.nvml.enabled else []
    listen = config.daemon.metrics_listen or "disabled"
    gateways = f"{len(config.gateways)} gateway(s), " if config.gateways else ""
    return (
        f"{config.source}: OK (host {config.host}, every {config.daemon.interval_seconds:g}s, "
        f"/metrics {listen}, collectors: {', '.join(collectors) or 'none'}, "
        f"{len(config.targets)} target(s), {gateways}{len(config.rates)} rate(s), "
        f"database {'SQLite' if is_sqlite(config.database_url) else 'PostgreSQL'})"
    )


def cmd_db(args: argparse.Namespace) -> int:
    from agent.storage.db import create_engine, is_sqlite, sqlite_path
    from migrations.runner import current_revision, head_revision, upgrade_to_head

    url = _config(args).database_url
    path = sqlite_path(url) if is_sqlite(url) else None
    if args.db_command == "current" and path is not None and not path.exists():
        print(
            f"no database yet at {path} (it is created on first start); head is {head_revision()}"
        )
        return 0
    engine = create_engine(url)
    try:
        if args.db_command == "upgrade":
            before, after = upgrade_to_head(engine)
            print(
                f"database at {after}" + ("" if before == after else f" (was {before or 'empty'})")
            )
            return 0
        current, head = current_revision(engine), head_revision()
        state = "up to date" if current == head else "outdated: run `gpuwatch db upgrade`"
        print(f"current {current or 'none (empty database)'}, head {head} ({state})")
        return 0
    finally:
        engine.dispose()


if __name__ == "__main__":
    sys.exit(main())
