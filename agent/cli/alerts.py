"""`gpuwatch alerts` and `gpuwatch silence add|list|expire`, over the shared store.

Alerts are listed for every host in the database (a shared PostgreSQL shows the fleet);
silences are fleet-wide too, as in Alertmanager: one `silence add` on any box mutes the
matching alerts wherever they are evaluated, from the next evaluation on.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from agent.cli.columns import aligned
from agent.reporting import json_text
from agent.reporting.render.values import duration_text
from alerts.duration import DurationError, parse_duration
from alerts.inhibit import ALERTNAME, DEFAULT_INHIBIT_RULES, inhibited_by
from alerts.model import AlertKey, AlertState, State
from alerts.silence import Silence, SilenceState, parse_matchers, silenced_by
from foundation.errors import GpuwatchError

if TYPE_CHECKING:
    from agent.config.settings import Config

# The database's modules (SQLAlchemy) are imported by the commands that run, not at the top:
# `gpuwatch --help` builds this module's parsers and needs none of them.

_SHOWN = (State.FIRING, State.PENDING)


class CliError(GpuwatchError):
    """A command-line argument that cannot be used; the message names it."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    alerts = sub.add_parser("alerts", help="what is firing and pending, on every host")
    alerts.add_argument("--config", metavar="PATH", help="TOML file (default as for `run`)")
    alerts.add_argument("--json", action="store_true", help="one JSON object")
    silence = sub.add_parser("silence", help="mute matching alerts for a while")
    actions = silence.add_subparsers(dest="silence_command", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add a silence")
    add.add_argument(
        "--match",
        action="append",
        required=True,
        metavar="MATCHER",
        help='label matcher: k=v, k!=v, k=~regex or k!~regex (repeatable; "alertname" is the rule)',
    )
    add.add_argument("--duration", required=True, help='how long, e.g. "2h" or "30m"')
    add.add_argument("--comment", required=True, help="why (shown in `silence list`)")
    add.add_argument("--author", default=None, help="default: the current user")
    listing = actions.add_parser("list", help="active and pending silences")
    listing.add_argument("--all", action="store_true", help="expired ones too")
    listing.add_argument("--json", action="store_true", help="one JSON object")
    expire = actions.add_parser("expire", help="end a silence now")
    expire.add_argument("id", metavar="ID")
    for parser in (add, listing, expire):
        parser.add_argument("--config", metavar="PATH", help="TOML file (default as for `run`)")


# -- gpuwatch alerts -------------------------------------------------------------------------


def run_alerts(args: argparse.Namespace, config: Config, now: datetime) -> int:
    from sqlalchemy.exc import OperationalError

    spooling = _spooling(config, now)
    if spooling and not args.json:
        print(spooling)
    try:
        shown, undelivered, muted = _read(config, now)
    except OperationalError:
        if spooling and args.json:
            print(json_text.dumps({"spooling": spooling}, indent=2))
        raise  # the one line naming the database follows (agent.cli.main)
    if args.json:
        print(json_text.dumps(_alerts_json(shown, undelivered, muted, spooling, now), indent=2))
        return 0
    # Label values come from scraped engines: no control character reaches the terminal
    # (columns.aligned makes each cell printable before measuring it).
    print("\n".join(_alert_table(shown, now, undelivered, muted)))
    return 0


def alerts_document(config: Config, now: datetime) -> dict[str, Any]:
    """`gpuwatch alerts --json`'s object (the MCP server's `alerts` tool answers the same)."""
    spooling = _spooling(config, now)
    shown, undelivered, muted = _read(config, now)
    return _alerts_json(shown, undelivered, muted, spooling, now)


def _read(
    config: Config, now: datetime
) -> tuple[list[tuple[str, AlertState]], int, dict[AlertKey, str]]:
    """The alerts shown (firing first), how many notifications wait, and what mutes each."""
    from agent.alerting import store as alert_store
    from agent.storage.db import open_database

    engine = open_database(config.database_url)
    try:
        with engine.connect() as conn:
            scoped = alert_store.all_states(conn)
            undelivered = alert_store.outbox_rows(conn, status=alert_store.PENDING)
            silences = alert_store.load_silences(conn)
    finally:
        engine.dispose()
    shown = [(scope, s) for scope, s in scoped if s.state in _SHOWN]
    shown.sort(key=lambda item: (item[1].state is not State.FIRING, item[1].key))
    return shown, len(undelivered), _muted([s for _, s in scoped], silences, now)


def _alerts_json(
    shown: Sequence[tuple[str, AlertState]],
    undelivered: int,
    muted: Mapping[AlertKey, str],
    spooling: str | None,
    now: datetime,
) -> dict[str, Any]:
    return {
        "alerts": [
            {**_alert_json(scope, s, now), "muted_by": muted.get(s.key)} for scope, s in shown
        ],
        "undelivered_notifications": undelivered,
        "spooling": spooling,
    }


def _muted(
    states: Sequence[AlertState], silences: Sequence[Silence], now: datetime
) -> dict[AlertKey, str]:
    """What mutes each alert, as the daemon's notification plan decides it (alerts.dedup): a
    silence (its id) or a firing alert that inhibits it; absent when nothing does."""
    firing = [_alert_labels(s) for s in states if s.state is State.FIRING]
    out: dict[AlertKey, str] = {}
    for state in states:
        labels = _alert_labels(state)
        ids = silenced_by(labels, silences, now)
        source = inhibited_by(labels, firing, DEFAULT_INHIBIT_RULES)
        if ids:
            out[state.key] = "silence " + ", ".join(ids)
        elif source is not None:
            out[state.key] = f"inhibited by {source}"
    return out


def _alert_labels(state: AlertState) -> dict[str, str]:
    return {**state.key.label_map(), ALERTNAME: state.key.rule}


def _spooling(config: Config, now: datetime) -> str | None:
    """One line when this host's daemon is spooling (its database did not take its latest
    rounds): the alerts listed from the database are then behind, and this host's rules run
    from the daemon's memory (see README, Outages)."""
    from agent.alerting.local_outbox import outbox_path, pending_in
    from agent.storage.spool import peek

    path = config.spool.file(config.database_url, os.environ)
    stats = peek(path)
    if stats is None or not stats.rounds:
        return None
    since = stats.oldest or now
    queued = pending_in(outbox_path(path))
    when = _when(since, ZoneInfo(config.timezone))
    return (
        f"host {config.host} is spooling: {stats.rounds} round(s) since {when}"
        f" ({duration_text(max(0, round((now - since).total_seconds())))} ago) are waiting"
        f" for the database; {queued} notification(s) queued locally ({path})"
    )


def _alert_json(scope: str, state: AlertState, now: datetime) -> dict[str, Any]:
    since = state.fired_at if state.state is State.FIRING else state.active_at
    return {
        "rule": state.key.rule,
        "state": state.state.value,
        "severity": state.severity.value,
        "labels": state.key.label_map(),
        "scope": scope,
        "active_at": _iso(state.active_at),
        "fired_at": _iso(state.fired_at),
        "for_seconds": (now - since).total_seconds() if since else None,
        "value": state.value,
        "summary": state.annotations.get("summary"),
    }


def _alert_table(
    shown: Sequence[tuple[str, AlertState]],
    now: datetime,
    waiting: int,
    muted: Mapping[AlertKey, str],
) -> list[str]:
    if not shown:
        lines = ["No alerts firing or pending."]
    else:
        rows = [["STATE", "SEVERITY", "FOR", "RULE", "SUMMARY"]]
        for _, s in shown:
            since = s.fired_at if s.state is State.FIRING else s.active_at
            # Two units read at a glance ("30d 06h", "6m 27s"); --json has the seconds.
            age = duration_text(max(0, round((now - since).total_seconds()))) if since else "?"
            summary = s.annotations.get("summary") or _labels(s)
            if s.key in muted:
                summary += f"  [muted: {muted[s.key]}]"
            rows.append([s.state.value, s.severity.value, age, s.key.rule, summary])
        lines = aligned(rows, right={2})
    if waiting:
        lines.append(f"{waiting} notification(s) waiting to be delivered (retrying).")
    return lines


def _labels(state: AlertState) -> str:
    return ", ".join(f"{k}={v}" for k, v in state.key.labels)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


# -- gpuwatch silence ------------------------------------------------------------------------


def run_silence(args: argparse.Namespace, config: Config, now: datetime) -> int:
    from agent.storage.db import open_database

    engine = open_database(config.database_url)
    try:
        with engine.begin() as conn:
            zone = ZoneInfo(config.timezone)
            if args.silence_command == "list":
                return _list(args, conn, now, zone)
            if args.silence_command == "expire":
                return _expire(args, conn, now, zone)
            return _add(args, conn, now)
    finally:
        engine.dispose()


def _add(args: argparse.Namespace, conn: Any, now: datetime) -> int:
    silence = add_silence(conn, args.match, args.duration, args.comment, args.author, now)
    print(silence.id)
    return 0


def add_silence(
    conn: Any,
    match: Sequence[str],
    duration: str,
    comment: str,
    author: str | None,
    now: datetime,
) -> Silence:
    """What `gpuwatch silence add` stores (the MCP server's `silence` tool adds the same); a
    bad matcher or duration raises CliError naming its flag."""
    import getpass
    import secrets  # with its hashing modules, a tenth of `gpuwatch --help`'s time

    from agent.alerting import store as alert_store

    try:
        matchers = [m for text in match for m in parse_matchers(text)]
    except ValueError as exc:
        raise CliError(f"--match: {exc}") from None
    try:
        seconds = parse_duration(duration)
    except DurationError as exc:
        raise CliError(f"--duration: {exc}") from None
    by = author or getpass.getuser()
    try:
        silence = Silence.starting(
            secrets.token_hex(8), matchers, now, timedelta(seconds=seconds), by, comment
        )
    except ValueError as exc:
        raise CliError(f"silence add: {exc}") from None
    alert_store.add_silence(conn, silence, now)
    return silence


def _list(args: argparse.Namespace, conn: Any, now: datetime, zone: tzinfo) -> int:
    from agent.alerting import store as alert_store

    found = alert_store.load_silences(conn)
    if not args.all:
        found = [s for s in found if s.state(now) is not SilenceState.EXPIRED]
    if args.json:
        print(json_text.dumps({"silences": [silence_json(s, now) for s in found]}, indent=2))
        return 0
    if not found:
        print("No silences." if args.all else "No active or pending silences.")
        return 0
    rows = [["ID", "STATE", "STARTS", "ENDS", "BY", "MATCHERS / COMMENT"]]
    for s in found:
        matchers = " ".join(str(m) for m in s.matchers)
        when = [_when(s.starts_at, zone), _when(s.ends_at, zone)]
        rows.append([s.id, s.state(now).value, *when, s.created_by, f"{matchers}  # {s.comment}"])
    # Authors and comments are anyone's text: no control character reaches the terminal.
    print("\n".join(aligned(rows)))
    return 0


def _when(moment: datetime, zone: tzinfo) -> str:
    """A time for people: in the configured timezone, to the second, with the zone's name."""
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def silence_json(s: Silence, now: datetime) -> dict[str, Any]:
    return {
        "id": s.id,
        "state": s.state(now).value,
        "matchers": [str(m) for m in s.matchers],
        "starts_at": s.starts_at.isoformat(),
        "ends_at": s.ends_at.isoformat(),
        "created_by": s.created_by,
        "comment": s.comment,
    }


def _expire(args: argparse.Namespace, conn: Any, now: datetime, zone: tzinfo) -> int:
    from agent.alerting import store as alert_store

    found = {s.id: s for s in alert_store.load_silences(conn)}
    silence = found.get(args.id)
    if silence is None:
        raise CliError(f"silence expire: no silence with id {args.id!r} (see `silence list`)")
    ended = silence.expire(now)
    if ended is silence:
        # Alertmanager's Expire is idempotent: nothing to do is not a failure (a script that
        # expires a silence twice, or one that ran out meanwhile, succeeds).
        print(f"silence {silence.id} had already expired at {_when(silence.ends_at, zone)}; "
              "nothing changed")  # fmt: skip
        return 0
    alert_store.save_silence_end(conn, ended)
    print(f"silence {silence.id} expired")
    return 0
