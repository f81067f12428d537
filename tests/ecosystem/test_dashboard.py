"""contrib/grafana's dashboard and contrib/prometheus' rules against a real Prometheus scraping a
real running gpuwatch daemon (tests/ecosystem/live_daemon.py): every panel's query returns data.

One daemon and one Prometheus for the module (about 20 s together: the daemon's history, its
start, Prometheus' first scrapes); the dashboard's own structure is checked without them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agent.cost.slo_math import WORKBOOK_WINDOWS
from agent.cost.slo_signals import WINDOWS as SLO_WINDOWS
from alerts.duration import format_duration
from alerts.rules import DEFAULT_RULES
from collectors.signals import signal_of
from tests.ecosystem import dashboard as dash
from tests.ecosystem.live_daemon import LiveDaemon, live_daemon
from tests.ecosystem.prometheus import Prometheus, finite, prometheus_binary, running_prometheus

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


# -- the JSON itself ----------------------------------------------------------------------------


def test_the_dashboard_imports_anywhere_through_its_datasource_variable() -> None:
    board = dash.load()
    assert board["uid"] == "gpuwatch-fleet" and board["schemaVersion"] >= 41
    assert "id" not in board or board["id"] is None  # an id would clash on import
    variables = dash.variables(board)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("host", "model"):
        assert variables[name]["datasource"] == DATASOURCE
    panels = list(dash.panels(board))
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    # No data source is named anywhere but through the variable (a uid would not exist there).
    text = dash.DASHBOARD.read_text()
    assert text.count('"uid": "${datasource}"') == text.count('"type": "prometheus"')


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    exprs = " ".join(q.expr for q in dash.queries(dash.load()))
    for needed in (
        'gpuwatch_cost_per_million_tokens_usd{scope="fleet"',
        'gpuwatch_cost_per_million_tokens_usd{scope="host"',
        "gpuwatch_gpu_hourly_cost_usd",  # idle dollars by GPU
        "gpuwatch_idle_cost_usd_total",
        "histogram_quantile(0.99, sum by (le, host, target, model) (rate(gpuwatch_engine_ttft",
        "histogram_quantile(0.99, sum by (le, host, target, model) (rate(gpuwatch_engine_e2e",
        "gpuwatch_engine_requests_waiting",
        "gpuwatch_engine_kv_cache_usage_ratio",
        "gpuwatch_alerts",
        "gpuwatch_spool_rounds",
        "gpuwatch_collector_success",
        "gpuwatch_gpu_sm_active_ratio",
        "gpuwatch_gpu_tensor_active_ratio",
        "gpuwatch_gpu_dram_active_ratio",
        "unless on (host, gpu_uuid) gpuwatch_gpu_sm_active_ratio",  # GPUs without SM activity
    ):
        assert needed in exprs, needed
    assert any(p["type"] == "heatmap" for p in dash.panels(dash.load()))


def test_idle_and_activity_panels_prefer_sm_activity_and_name_their_basis() -> None:
    """NVML's utilization only says a kernel ran: where a GPU has SM activity the idle dollars
    and the heatmap use it, the flag elsewhere, and each series' legend says which."""
    by_title = {p["title"]: p for p in dash.panels(dash.load())}
    for title in (
        "Idle dollars per hour by GPU (now)",
        "Idle dollars per hour by GPU",
        "GPU activity (SM activity where known, else NVML utilization)",
    ):
        panel = by_title[title]
        [target] = panel["targets"]
        sm = target["expr"].index("gpuwatch_gpu_sm_active_ratio")
        fallback = target["expr"].index("or on (host, gpu_uuid, gpu_index)")
        assert sm < fallback < target["expr"].index("gpuwatch_gpu_utilization_ratio"), title
        assert target["expr"].count('mig_instance=""') == 2, title  # a GPU, not its instances
        assert "{{basis}}" in target["legendFormat"], title
        assert "SM activity" in panel["description"], title
    legends = [
        t["legendFormat"] for t in by_title["SM activity vs NVML utilization by GPU"]["targets"]
    ]
    assert legends == [
        "{{host}} GPU {{gpu_index}} SM activity (GPM/DCGM)",
        "{{host}} GPU {{gpu_index}} utilization (NVML busy flag)",
    ]


def test_every_series_a_panel_names_is_one_gpuwatch_exports() -> None:
    """Each gpuwatch_* name in a query (or a variable's) is a declared signal (a histogram's
    _bucket/_count/_sum included) or a recording rule of the contrib rules file: a typo or a
    series gpuwatch never exports would draw an empty panel, not fail."""
    board = dash.load()
    records = {r["record"] for g in yaml.safe_load(dash.RULES.read_text())["groups"]
               for r in g["rules"] if "record" in r}  # fmt: skip
    texts = [q.expr for q in dash.queries(board)]
    texts += [v["definition"] for v in dash.variables(board).values() if "definition" in v]
    named: set[str] = set()
    for text in texts:
        for histogram in dash.choices(board, "slo_histogram"):
            unquoted = re.sub(r'"[^"]*"', '""', text.replace("${slo_histogram}", histogram))
            named |= {n for n in re.findall(r"[A-Za-z_:][\w:]*", unquoted) if "gpuwatch_" in n}
    unknown = sorted(n for n in named if signal_of(n) is None and n not in records)
    assert unknown == []
    for needed in ("gpuwatch_slo_attainment_ratio", "gpuwatch_slo_objective_ratio",
                   "gpuwatch_engine_prompt_tokens_computed_total",
                   "gpuwatch_engine_ttft_seconds_bucket",
                   "gpuwatch_engine_queue_time_seconds_bucket"):  # fmt: skip
        assert needed in named, needed


def test_the_objectives_row_draws_attainment_its_objective_and_the_page_burn_rates() -> None:
    board = dash.load()
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows.index("Objectives") == rows.index("Latency") + 1
    by_title = {p["title"]: p for p in dash.panels(board)}
    trend = by_title["Requests within the objective by model ($slo_window window)"]
    attained, objective = trend["targets"]
    assert attained["expr"] == (
        'gpuwatch_slo_attainment_ratio{host=~"$host", model=~"$model", window="$slo_window"}'
    )
    assert "{{estimate}}" in attained["legendFormat"]  # exact, interpolated or lower bound
    assert objective["expr"] == 'gpuwatch_slo_objective_ratio{host=~"$host", model=~"$model"}'
    (dashed,) = trend["fieldConfig"]["overrides"]
    assert dashed["matcher"] == {"id": "byFrameRefID", "options": "B"}
    assert {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}} in dashed[
        "properties"
    ]
    # The windows gpuwatch computes the attainment over, and no other.
    assert dash.choices(board, "slo_window") == list(SLO_WINDOWS)
    table = by_title["Requests within the objective, every window (now)"]
    assert (
        table["targets"][0]["instant"]
        and "gpuwatch_slo_attainment_ratio" in (table["targets"][0]["expr"])
    )
    # The page pairs' windows, each over the error budget; their factors drawn as thresholds.
    [burn] = [p for t, p in by_title.items() if t.startswith("Error-budget burn rate")]
    pages = [w for w in WORKBOOK_WINDOWS if w.severity == "page"]
    windows = [format_duration(s) for w in pages for s in (w.long_seconds, w.short_seconds)]
    assert [re.findall(r"\[(\w+)\]", t["expr"]) for t in burn["targets"]] == [
        [w, w] for w in windows
    ]
    for target in burn["targets"]:
        assert target["expr"].endswith(
            ' / on (host, model) (1 - gpuwatch_slo_objective_ratio{host=~"$host", model=~"$model"})'
        )
    steps = burn["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps[1:]] == sorted(w.factor for w in pages)


def test_the_burn_rate_panel_is_the_rules_file_s_bad_fraction_over_the_budget(
    tmp_path: Path,
) -> None:
    """On the rules file's example objective (llama-8b, e2e <= 1 s for 99 %) and one set of
    series, promtool evaluates the panel's four queries and the rules' recorded bad fractions:
    20 % of requests slow is a burn of 20 in every window, both ways."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (`make test` installs Debian's prometheus as root)")
    board = dash.load()
    [burn] = [p for p in dash.panels(board) if p["title"].startswith("Error-budget burn rate")]
    values = dash.chosen(board) | {"host": ".*", "model": "llama-8b"}
    assert values["slo_histogram"] == "gpuwatch_engine_e2e_latency_seconds"
    assert values["slo_le"] == "1.0"  # the example's bound, as vLLM spells it
    windows = [re.findall(r"\[(\w+)\]", t["expr"])[0] for t in burn["targets"]]
    panel_rules = [
        {"record": f"dashboard:burn_{w}", "expr": dash.substitute(t["expr"], values)}
        for w, t in zip(windows, burn["targets"], strict=True)
    ]
    (tmp_path / "panel.yml").write_text(
        json.dumps({"groups": [{"name": "panel", "rules": panel_rules}]})
    )
    series = 'gpuwatch_engine_e2e_latency_seconds_bucket{host="box",target="t",engine="vllm",' \
        'model="llama-8b",instance="box:9877",job="gpuwatch",le='  # fmt: skip
    checks = []
    for w in windows:
        rule = f"model:gpuwatch_slo_e2e_bad_fraction:ratio_rate{w}"
        checks += [
            {"expr": f"round(dashboard:burn_{w}, 0.0001)", "eval_time": "7h",
             "exp_samples": [{"labels": '{host="box", model="llama-8b"}', "value": 20}]},
            {"expr": f"round({rule} / (1 - 0.99), 0.0001)", "eval_time": "7h",
             "exp_samples": [{"labels": '{model="llama-8b"}', "value": 20}]},
        ]  # fmt: skip
    unit = {
        "rule_files": [str(dash.RULES), str(tmp_path / "panel.yml")],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": series + '"1.0"}', "values": "0+80x450"},
                {"series": series + '"+Inf"}', "values": "0+100x450"},
                {"series": 'gpuwatch_slo_objective_ratio{host="box",model="llama-8b",'
                           'instance="box:9877",job="gpuwatch"}', "values": "0.99x450"},
            ],
            "promql_expr_test": checks,
        }],
    }  # fmt: skip
    (tmp_path / "unit.yml").write_text(json.dumps(unit))
    done = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "unit.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_panel_query_parses_with_promtool(tmp_path: Path) -> None:
    """Without a running Prometheus: each query, its variables filled as Grafana would, as a
    recording rule that ``promtool check rules`` parses."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (`make test` installs Debian's prometheus as root)")
    board = dash.load()
    values = dash.chosen(board) | {"host": "(box-a|box-b)", "model": "llama"}
    values |= {"__rate_interval": dash.RATE_INTERVAL, "__range": dash.range_of(board)}
    exprs = {  # each histogram an objective can name
        dash.substitute(q.expr, values | {"slo_histogram": histogram})
        for q in dash.queries(board)
        for histogram in dash.choices(board, "slo_histogram")
    }
    rules = [
        {"record": f"dashboard:panel_{i}", "expr": expr} for i, expr in enumerate(sorted(exprs))
    ]
    path = tmp_path / "panels.yml"
    path.write_text(json.dumps({"groups": [{"name": "panels", "rules": rules}]}))  # YAML too
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


# -- against the live daemon ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, fake_nvml_library: Path, fake_nvml_dir: Path
) -> Iterator[tuple[LiveDaemon, Prometheus]]:
    prometheus_binary()  # skip before starting anything when Prometheus is not installed
    work = tmp_path_factory.mktemp("ecosystem")
    with live_daemon(work / "daemon", fake_nvml_dir) as daemon:
        target = urlsplit(daemon.metrics_url).netloc
        with running_prometheus(work / "prometheus", [target], [dash.RULES]) as prometheus:
            prometheus.wait_until(
                "the daemon's cost series in Prometheus",
                lambda: finite(prometheus.query("gpuwatch_cost_per_million_tokens_usd")),
            )
            yield daemon, prometheus


def grafana_values(board: dict[str, Any], prometheus: Prometheus) -> dict[str, str]:
    """Each variable as Grafana would fill it: every value the data source offers ("All")."""
    variables = dash.variables(board)
    values = dash.chosen(board)
    for name in ("host", "model"):  # model's query reads $host: in order
        label, match = dash.label_values_query(variables[name])
        found = prometheus.label_values(label, dash.substitute(match, values))
        assert found, f"variable {name}: no values for {match}"
        values[name] = dash.regex_of(found)
    return values | {"__rate_interval": dash.RATE_INTERVAL, "__range": dash.range_of(board)}


def test_the_variables_offer_the_live_hosts_and_models(
    live: tuple[LiveDaemon, Prometheus],
) -> None:
    daemon, prometheus = live
    variables = dash.variables(dash.load())
    label, match = dash.label_values_query(variables["host"])
    assert prometheus.label_values(label, match) == [daemon.host]
    label, match = dash.label_values_query(variables["model"])
    match = dash.substitute(match, {"host": daemon.host})
    assert prometheus.label_values(label, match) == sorted(daemon.models)


def test_every_panel_query_returns_data(live: tuple[LiveDaemon, Prometheus]) -> None:
    _, prometheus = live
    board = dash.load()
    values = grafana_values(board, prometheus)
    queries = {q: dash.substitute(q.expr, values) for q in dash.queries(board)}
    missing: dict[dash.Query, str] = {}

    def all_answer() -> bool:
        missing.clear()
        for query, expr in queries.items():
            if not finite(prometheus.query(expr)):
                missing[query] = expr
        return not missing

    # The rates need two scrapes, a moving histogram a request in between: poll a little.
    try:
        prometheus.wait_until("every panel's query", all_answer, timeout=30)
    except AssertionError:
        lines = [f"{q.panel} [{q.ref}]: {expr}" for q, expr in missing.items()]
        raise AssertionError("panels without data:\n" + "\n".join(lines)) from None
    cost = prometheus.query(queries[dash.queries(board)[0]])
    assert {s["metric"]["model"] for s in cost} == set(live[0].models)
    assert all(float(s["value"][1]) > 0 for s in cost)  # real dollars per real tokens


def test_the_rules_load_and_evaluate_on_live_data(live: tuple[LiveDaemon, Prometheus]) -> None:
    daemon, prometheus = live
    rules = prometheus.rules()
    assert len(rules) == 34
    prometheus.wait_until(
        "every rule evaluated", lambda: all(r["health"] == "ok" for r in prometheus.rules())
    )
    records = (
        "gpu:gpuwatch_idle_cost_usd_per_hour",
        "host:gpuwatch_spend_usd_per_hour:rate1h",
        "model:gpuwatch_cost_per_million_tokens_usd:max",
        "fleet:gpuwatch_cost_per_million_output_tokens_usd:rate1h",
    )
    prometheus.wait_until(
        "every recording rule's series", lambda: all(finite(prometheus.query(r)) for r in records)
    )
    # Each GPU's idle dollars per hour, as the daemon's own /metrics gives its price and use.
    recorded = prometheus.query("gpu:gpuwatch_idle_cost_usd_per_hour")
    by_gpu = {
        (s["metric"]["host"], s["metric"]["gpu_uuid"]): float(s["value"][1]) for s in recorded
    }
    assert by_gpu == pytest.approx(idle_usd_per_hour(httpx.get(daemon.metrics_url).text))
    assert any(usd > 0 for usd in by_gpu.values())


def idle_usd_per_hour(exposition: str) -> dict[tuple[str, str], float]:
    """Price x (1 - utilization) per physical GPU, read from the daemon's exposition."""
    price: dict[tuple[str, str], float] = {}
    busy: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            gpu = (sample.labels.get("host", ""), sample.labels.get("gpu_uuid", ""))
            if sample.name == "gpuwatch_gpu_hourly_cost_usd":
                price[gpu] = sample.value
            elif (
                sample.name == "gpuwatch_gpu_utilization_ratio"
                and "mig_instance" not in sample.labels
            ):
                busy[gpu] = sample.value
    return {gpu: usd * (1 - busy[gpu]) for gpu, usd in price.items() if gpu in busy}


def test_gpuwatch_and_prometheus_agree_on_idle_gpus(live: tuple[LiveDaemon, Prometheus]) -> None:
    """The same condition, judged by both: as many GpuIdle alerts active (pending or firing) in
    Prometheus as in gpuwatch, and at least one (the live box has a billed GPU at 2 %)."""
    _, prometheus = live
    own = 'sum(gpuwatch_alerts{rule="GpuIdle"})'
    theirs = 'ALERTS{alertname="GpuIdle"}'
    prometheus.wait_until("GpuIdle active in Prometheus", lambda: bool(prometheus.query(theirs)))
    alerts = prometheus.query(theirs)
    assert all("instance" not in a["metric"] for a in alerts)  # gpuwatch's own label sets
    [count] = prometheus.query(own)
    assert len(alerts) == float(count["value"][1]) >= 1


def test_the_alerting_rules_are_gpuwatch_s_own(live: tuple[LiveDaemon, Prometheus]) -> None:
    """Same names, `for`, severities and descriptions as the built-in rules' defaults, but
    where the rules file says it differs (CollectorDown counts intervals, which Prometheus
    cannot; some faults carry their own severity in gpuwatch too)."""
    _, prometheus = live
    alerting = [r for r in prometheus.rules() if r["type"] == "alerting"]
    assert {r["name"] for r in alerting} == set(DEFAULT_RULES)
    own_severity = {
        ("BudgetThreshold", "100%"),
        ("GpuHardwareErrors", "pending"),
        ("SloBurnRate", "3d"),
    }
    for rule in alerting:
        spec = DEFAULT_RULES[rule["name"]]
        expected_for = 30.0 if spec.name == "CollectorDown" else spec.for_seconds
        assert rule["duration"] == expected_for, rule["name"]
        assert rule["annotations"]["description"] == spec.description, rule["name"]
        tag = (
            spec.name,
            rule["labels"].get("level")
            or rule["labels"].get("row_remap")
            or rule["labels"].get("window"),
        )
        if tag not in own_severity:
            assert rule["labels"]["severity"] == spec.severity.value, rule["name"]
