"""What an assistant reads about `gpuwatch mcp`'s tools: what each figure means and its basis.

Kept apart from the server so the words can be read (and reviewed) as prose; they summarise
docs/cost.md, docs/objectives.md and docs/report-schema.md, which stay the reference.
"""

from __future__ import annotations

INSTRUCTIONS = """\
gpuwatch watches a fleet of GPU inference servers (vLLM, SGLang, TGI, llama.cpp, Triton, ...) \
and prices their work. Each tool returns the JSON that the matching `gpuwatch` command prints \
with --json, from the same code. Conventions in every answer: money in USD, as strings with \
fixed decimals in cost/report/gpus (exact decimals) and as numbers in breakeven; null means \
unknown or not counted (never read it as zero: e.g. an engine without per-request token \
counters has abandoned work null); times are ISO 8601 in the configured timezone. GPU cost is \
metered: the configured rate card ([[rates]], USD per GPU-hour) times the time gpuwatch observed \
each GPU; billed amounts come only from billing imports. Useful tokens are output tokens of \
requests that finished (or the engine's token counters, where it has no per-request counts: \
each model says which in useful_tokens_source); cost per million useful tokens = cost / useful \
tokens x 1e6. Start with `cost` for "what does it cost", `gpus` for "what is each GPU doing", \
`alerts` for "what is wrong now", `report` for a calendar period, `breakeven` for "should we \
move to serverless or an API"."""

WINDOW = 'how far back from now, a duration such as "1h", "7d", "30d" (Prometheus syntax)'

COST = """\
What the fleet cost over the last `window`, and what it produced: `gpuwatch cost --json`.
- fleet, models[], hosts[]: cost_usd (metered: rate card x observed GPU time; null with \
cost_unknown_reason where no rate covers some GPU time), useful_tokens and their basis \
useful_tokens_source ("completed_requests": output tokens of finished requests, exact; \
"token_counters": the engine's generated-token counters), cost_per_million_tokens_usd \
(cost / useful tokens x 1e6; null with no tokens), total_tokens (prompt + output), \
generated_tokens, abandoned_tokens and abandoned_cost_usd (output generated for requests that \
never completed, e.g. dropped streams, priced at the model's cost x abandoned/generated; null \
where the engine cannot tell), requests_completed.
- models[].slo: attainment of the model's latency objective ([[slo]]) and its basis ("spans": \
each request judged from its OpenTelemetry span, exact; "histograms": from latency histograms, \
exact only at bucket bounds, else given with bounds); cost_per_million_good_tokens_usd is the \
whole cost over tokens delivered within the objective; missed_cost_usd the cost share of \
requests that missed it. Models also carry energy_kwh and co2 per million tokens.
- gpu_hours split into busy_gpu_hours (NVML's busy flag), idle_loaded_gpu_hours (held by a \
serving target but not busy) and unallocated_gpu_hours (no target used the GPU); idle_cost_usd \
is the cost of all time not busy. SM-activity figures (where GPM or DCGM profiling covered the \
GPU) show real work beside the coarse busy flag.
- shared_gpus: GPUs several targets used and how their cost was split (sm_utilization, memory \
or equal). targets[], and teams[]/projects[] where labels are configured: the same cost by \
serving target and by team/project label.
- reconciliation: metered_usd against billed_usd from provider APIs or FOCUS imports (null \
with no billing records, never $0), and the difference."""

REPORT = """\
The report of a calendar period, cut in the configured timezone: `gpuwatch report --format \
json`. Give at most one period: month ("YYYY-MM"), last_month, week, or from_date with to_date; \
none is the current month to date. hosts/models restrict it (a name the database never saw is \
refused). Keys (docs/report-schema.md): totals (spend_usd, metered and billed, gpu_hours, \
utilization_ratio = busy/observed, idle_cost_usd, useful_tokens, cost_per_million_tokens_usd \
with the change against the previous period), spend_sources, models[] and hosts[] (as cost's, \
with previous-period comparison), targets[], gpus[] (each GPU's cost, idle cost, utilization, \
activity_basis: "sm_active" where profiling covered it else "utilization_flag", VRAM peak, \
energy), top_waste (highest idle cost), alerts (rules that fired), queue_incidents, budget \
(spent and month-end forecast from the last 24 h pace), teams/projects, recommendations \
(each with what it was measured over; per-month savings are scaled from observed hours and \
withheld below [cost] min_observed), daily_spend. data.complete_to says up to when stored \
data is complete."""

MONTH = 'a calendar month "YYYY-MM" (the current one ends now)'
FROM = 'start of a range: "YYYY-MM-DD" (local midnight) or an ISO datetime; needs to_date'
TO = "end of the range, exclusive, same forms; needs from_date"

BREAKEVEN = """\
Pod vs serverless GPU vs token API for one workload: `gpuwatch breakeven --json`. With \
requests_per_day and gpu_seconds_per_request both given, the workload is those figures; \
otherwise it is measured from stored data over `window`, per day of observed time (not calendar \
time), and tokens_per_request / bursts_per_day given still override the measured ones. \
pod_usd_per_hour is required (USD per GPU-hour of a dedicated pod); serverless defaults to \
$2.50/h. Pods are right-sized: pods = ceil(busy GPU-seconds per day / (86400 x \
target_utilization)). Answer: *_usd_per_day and *_usd_per_million_tokens per option, \
duty_cycle (busy fraction of a day), crossover_requests_per_day (above it right-sized pods cost \
less than serverless at every load; null if never), one_pod_crossover_requests_per_day, \
cheapest and recommendation. Measured over less than [cost] min_observed (default 24h), the \
per-day figures, pods and cheapest are null and `withheld` says why; the crossover, a property \
of one request, is still given. source and measured_hours say what the figures rest on; notes \
say what they hide (e.g. cold starts not counted without bursts_per_day)."""

POD = "a dedicated pod's price, USD per GPU-hour (required)"
TARGET = (
    "how busy right-sized pods run, above 0 and at most 1 (default: [cost] target_utilization "
    "for measured data, else 0.7)"
)

ALERTS = """\
What is firing and pending now on every host in the database: `gpuwatch alerts --json`. Each \
alert: rule (e.g. GpuIdle, SloBurnRate, QueueSaturation, XidError), state (firing, or pending: \
its condition holds but not yet for its `for` duration), severity, labels (host, gpu_uuid, \
target, model, ...), scope (the host that evaluates it), active_at / fired_at, for_seconds \
(how long in this state), value (the measured figure the rule tests) and summary (one line \
with the figure and, for waste, the dollars burnt), muted_by (a silence's id, or the firing \
alert that inhibits it; null when notifications go out). undelivered_notifications counts \
notifications still being retried; spooling is set when this host's daemon cannot reach the \
database (the list is then behind)."""

GPUS = """\
What each GPU cost and did over the last `window` (default the last hour) up to this minute: \
`gpuwatch gpus --json`, the report's GPUs section for that window. Per GPU: host, gpu_uuid, \
gpu_index, gpu_name, cost_usd (metered: rate card x observed time; null with \
cost_unknown_reason when no rate covers it), idle_cost_usd (cost of the time not busy), \
observed_hours and busy_hours, utilization_ratio (busy / observed, by NVML's busy flag: a GPU \
running one tiny kernel counts as busy), activity_basis and sm_active_ratio (SM activity from \
GPM or DCGM profiling where it covered the GPU: the real share of compute in use; null where \
none did) with sm_idle_cost_usd, vram_peak_bytes / vram_total_bytes, energy_kwh (its energy \
counter, or power x time: energy_basis says which) and co2_grams, shared_split (how its cost \
was split among several targets). data.complete_to says up to when stored data is complete."""

GPUS_WINDOW = 'how far back from this minute, e.g. "15m", "1h", "1d" (at least 1m)'

SILENCE = """\
Add a silence, as `gpuwatch silence add` does: alerts whose labels match every matcher send no \
notifications until it ends (they still show in `alerts`, with muted_by). Silences are \
fleet-wide. Offered only because the server was started with --allow-silence. Returns the new \
silence (id, state, matchers, starts_at, ends_at, created_by, comment); `gpuwatch silence \
expire ID` ends it early."""

MATCHERS = (
    'label matchers, each k=v, k!=v, k=~regex or k!~regex; "alertname" is the rule, e.g. '
    '["alertname=GpuIdle", "host=gpu-01"]'
)
AUTHOR = 'who asks (default: the server\'s user, "via gpuwatch mcp")'
