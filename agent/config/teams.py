"""Teams and projects: the ``team`` and ``project`` labels, and budgets per team.

    [[targets]]
    name = "chat"
    url = "http://127.0.0.1:8000/metrics"
    team = "search"             # who pays for this target's GPU time
    project = "assistant"

    [[labels]]                  # targets configured on other hosts of a shared database
    target = "embed"            # optional: without it, every target of the host
    host = "box-2"              # optional: without it, the target's name on any host
    team = "ads"

    [[labels]]                  # a Kubernetes namespace: its pods' GPU time (agent.cost.pods)
    namespace = "ml-prod"       # alone: not with target or host
    team = "search"

A target's own labels are for it on this host (``host``). The most specific label counts: one
naming the target and its host, then the target's name on any host, then the host.

Labels are configuration, not stored data: they apply to the whole stored history by target
name, so relabelling a target relabels its past. A target without a label counts as
``UNLABELLED``, never dropped. Budgets per team: :mod:`agent.config.budget`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.config.reader import Reader, shown
from foundation.printable import printable

UNLABELLED = "(unlabelled)"
LABEL_KEYS = ("team", "project")


@dataclass(frozen=True, slots=True)
class Label:
    """A target's team and project (None: not labelled), on ``host`` or, None, on any host;
    ``target`` None: every target of ``host`` (a host whose GPUs one team pays for)."""

    target: str | None
    team: str | None = None
    project: str | None = None
    host: str | None = None
    namespace: str | None = None  # a Kubernetes namespace's label (then target and host None)


@dataclass(frozen=True, slots=True)
class Labels:
    """Every label the configuration gives: the targets' own and ``[[labels]]``."""

    entries: tuple[Label, ...] = ()

    def of(self, host: str, target: str) -> Label:
        """The label of ``target`` on ``host``, the most specific entry's: one naming both,
        then one for the target's name on any host, then one for every target of the host;
        the empty label when none matches."""
        best, rank = Label(target), 0
        for entry in self.entries:
            if entry.namespace is not None:
                continue
            if entry.target == target and entry.host in (host, None):
                found = 3 if entry.host == host else 2
            elif entry.target is None and entry.host == host:
                found = 1
            else:
                continue
            if found > rank:
                best, rank = entry, found
        return best

    def team(self, host: str, target: str) -> str:
        return self.of(host, target).team or UNLABELLED

    def project(self, host: str, target: str) -> str:
        return self.of(host, target).project or UNLABELLED

    def of_namespace(self, namespace: str) -> Label:
        """A Kubernetes namespace's label; the empty label when none names it."""
        found = (e for e in self.entries if e.namespace is not None and e.namespace == namespace)
        return next(found, Label(None, namespace=namespace))

    @property
    def namespaces(self) -> bool:
        """Whether any label names a namespace."""
        return any(e.namespace is not None for e in self.entries)

    @property
    def teams(self) -> frozenset[str]:
        return frozenset(e.team for e in self.entries if e.team is not None)


def label_value(r: Reader, t: dict[str, Any], key: str) -> str | None:
    """A ``team`` or ``project`` label: a non-empty string without control characters."""
    value = r.optional_string(t, key)
    if value is None:
        return None
    if not value.strip() or printable(value) != value or value == UNLABELLED:
        r.problem(key, f"expected a non-empty name without control characters, got {shown(value)}")
        return None
    return value


def parse_labels(r: Reader, top: dict[str, Any], own: Iterable[Label]) -> Labels:
    """``[[labels]]`` after the targets' ``own`` labels; one target labelled twice (on the same
    host, or on any host) is a problem, so which label counts is never a guess."""
    entries = [label for label in own if label.team or label.project]
    seen = {(e.target, e.host) for e in entries}
    allowed = {"target", "host", "namespace", *LABEL_KEYS}
    for i, item in enumerate(r.array(top, "labels")):
        path = f"labels[{i}]"
        before = len(r.problems)
        t = r.table(item, path, allowed)
        target = label_value(r, t, f"{path}.target")
        host = label_value(r, t, f"{path}.host")
        namespace = label_value(r, t, f"{path}.namespace")
        team, project = (label_value(r, t, f"{path}.{key}") for key in LABEL_KEYS)
        if f"{path}.namespace" in t and (f"{path}.target" in t or f"{path}.host" in t):
            r.problem(path, "a namespace's label names no target or host: give it alone")
        elif f"{path}.namespace" not in t and f"{path}.target" not in t and f"{path}.host" not in t:
            r.problem(path, "missing target or host (a target's name, a host, or both), "
                      "or a Kubernetes namespace")  # fmt: skip
        elif not any(f"{path}.{key}" in t for key in LABEL_KEYS):
            r.problem(path, "no label: give a team, a project or both")
        elif len(r.problems) > before or (team is None and project is None):
            continue  # a wrong value, already reported
        elif namespace is not None:
            if namespace in {e.namespace for e in entries}:
                r.problem(path, f"namespace {namespace!r} is labelled twice")
            else:
                entries.append(Label(None, team, project, namespace=namespace))
        elif (target, host) in seen:
            what = f"target {target!r}" if target else "every target"
            where = f" on {host}" if host else ""
            r.problem(path, f"{what}{where} is labelled twice")
        else:
            seen.add((target, host))
            entries.append(Label(target, team, project, host))
    return Labels(tuple(entries))
