"""The daemon's requests and limits are docs/kubernetes.md's table, whose figures come from
BENCHMARKS.md: a DaemonSet edited alone, or a benchmark whose figures outgrow them, fails here."""

from __future__ import annotations

import re

from tests.deploy.kube import BASE, ROOT, one, render

DOC = ROOT / "docs" / "kubernetes.md"
BENCHMARKS = ROOT / "BENCHMARKS.md"
ROW = re.compile(r"^\| `(requests|limits)\.(cpu|memory)` \| `([^`]+)` \|", re.MULTILINE)


def documented() -> dict[str, dict[str, str]]:
    """docs/kubernetes.md's table: each request and limit of the daemon, once."""
    rows = ROW.findall(DOC.read_text(encoding="utf-8"))
    assert sorted((kind, resource) for kind, resource, _ in rows) == [
        ("limits", "cpu"), ("limits", "memory"), ("requests", "cpu"), ("requests", "memory")
    ], f"docs/kubernetes.md's resource table: {rows}"  # fmt: skip
    table: dict[str, dict[str, str]] = {}
    for kind, resource, value in rows:
        table.setdefault(kind, {})[resource] = value
    return table


def daemon_resources() -> dict[str, dict[str, str]]:
    spec = one(render(BASE), "DaemonSet")["spec"]["template"]["spec"]
    (daemon,) = (c for c in spec["containers"] if c["name"] == "gpuwatch")
    resources: dict[str, dict[str, str]] = daemon["resources"]
    return resources


def mebibytes(quantity: str) -> float:
    assert quantity.endswith("Mi"), quantity
    return float(quantity.removesuffix("Mi"))


def millicores(quantity: str) -> float:
    assert quantity.endswith("m"), quantity
    return float(quantity.removesuffix("m"))


def benchmark(pattern: str, what: str) -> list[float]:
    found = re.search(pattern, BENCHMARKS.read_text(encoding="utf-8"), re.MULTILINE)
    assert found, f"BENCHMARKS.md no longer states {what}: update docs/kubernetes.md and this test"
    return [float(x) for x in re.findall(r"\d+\.\d+", found.group(1))]


def test_the_daemonset_asks_for_what_the_page_documents() -> None:
    assert daemon_resources() == documented()


def test_the_figures_cover_what_benchmarks_md_measured() -> None:
    table = daemon_resources()
    (peak,) = benchmark(r"^\| the daemon's memory[^|]*\|[^|]*\| peak (\d+\.\d+) MiB", "the peak")
    assert mebibytes(table["requests"]["memory"]) >= peak * 1.15  # a margin over the peak
    assert mebibytes(table["limits"]["memory"]) >= 2 * mebibytes(table["requests"]["memory"])
    # The full box's tick (ms) over 4 hours: at the default 10 s it is the request's CPU; at
    # the shortest interval, 1 s, it must fit well under the limit.
    ticks = benchmark(r"^\| tick, median \(ms\) \|(.*)$", "the full box's tick times")
    assert len(ticks) == 8
    assert millicores(table["requests"]["cpu"]) >= max(ticks) / 10
    assert millicores(table["limits"]["cpu"]) >= 2 * max(ticks)
