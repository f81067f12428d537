"""The canonical signals of DESIGN.md as data: name, kind and help text.

The /metrics exposition and ``collect --json`` use these names verbatim; a collector that emits a
name missing here is a bug caught by tests, not something to expose under a guessed type.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class Signal:
    name: str
    kind: Kind
    help: str


def _g(name: str, help_: str) -> Signal:
    return Signal(name, Kind.GAUGE, help_)


def _c(name: str, help_: str) -> Signal:
    return Signal(name, Kind.COUNTER, help_)


def _h(name: str, help_: str) -> Signal:
    return Signal(name, Kind.HISTOGRAM, help_)


GPU_SIGNALS = (
    _g("gpuwatch_gpu_info", "Constant 1; gpu_name, driver_version and mig_mode as labels."),
    _g("gpuwatch_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran (0-1)."),
    _g(
        "gpuwatch_gpu_memory_utilization_ratio",
        "Fraction of time device memory was read or written (0-1).",
    ),
    _g("gpuwatch_gpu_memory_used_bytes", "Device memory in use, bytes."),
    _g("gpuwatch_gpu_memory_total_bytes", "Device memory installed, bytes."),
    _g(
        "gpuwatch_gpu_mig_slices",
        "MIG slices: a GPU's (its MIG device slots) or, with mig_instance, its GPU instance's.",
    ),
    _g("gpuwatch_gpu_power_watts", "Power draw, watts."),
    _g("gpuwatch_gpu_power_limit_watts", "Enforced power limit, watts."),
    _g("gpuwatch_gpu_temperature_celsius", "GPU core temperature, degrees Celsius."),
    _c("gpuwatch_gpu_energy_joules_total", "Energy consumed since the driver was loaded, joules."),
    _g("gpuwatch_gpu_sm_clock_hertz", "Current SM clock, hertz."),
    _c(
        "gpuwatch_gpu_ecc_errors_total",
        "ECC errors since the driver was loaded (volatile), by type.",
    ),
    _g(
        "gpuwatch_gpu_throttle_reasons",
        "Clock throttle reasons bitmask (NVML clocks event reasons).",
    ),
    _g("gpuwatch_gpu_process_memory_bytes", "Device memory used by one process, bytes."),
    _g(
        "gpuwatch_gpu_process_utilization_ratio",
        "SM utilization of one process since the previous tick (0-1), where NVML gives it.",
    ),
    # Kubernetes (collectors.kubelet): the kubelet's record of which container holds a device.
    _g(
        "gpuwatch_gpu_pod_info",
        "1 per container the kubelet gave a GPU (gpu_uuid) or MIG instance (mig_instance);"
        " namespace, pod, container and resource as labels (several on a time-sliced GPU).",
    ),
    _g(
        "gpuwatch_gpu_allocatable_info",
        "1 per GPU (gpu_uuid) or MIG instance (mig_instance) the kubelet can give to pods;"
        " resource as a label.",
    ),
    _c(
        "gpuwatch_gpu_remapped_rows_total",
        "Memory rows remapped over the GPU's life, by cause (correctable, uncorrectable).",
    ),
    _g(
        "gpuwatch_gpu_row_remap_pending",
        "1 while a row remap waits for a GPU reset to take effect, else 0.",
    ),
    _g("gpuwatch_gpu_row_remap_failure", "1 if a row remap failed (the GPU needs service)."),
    _c(
        "gpuwatch_gpu_xid_errors_total",
        "Xid events seen by this daemon (NVML events) since it started, by xid code.",
    ),
    _g(
        "gpuwatch_gpu_lost",
        "1 while a GPU read earlier no longer answers (fallen off the bus) and NVML still does;"
        " pci_bus_id names it.",
    ),
    _g(
        "gpuwatch_target_gpu_memory_bytes",
        "Device memory used by a serving target's processes on a GPU (the allocation basis).",
    ),
    _g(
        "gpuwatch_target_mig_memory_bytes",
        "Device memory used by a serving target's processes on a MIG instance (mig_instance):"
        " the instance is attributed to the target.",
    ),
    _g(
        "gpuwatch_target_gpu_sm_utilization_ratio",
        "Summed SM utilization of a serving target's processes on a GPU, where NVML gives every"
        " process on it one (then the allocation basis).",
    ),
    # Real work (GPM on Hopper and newer, or dcgm-exporter's DCGM_FI_PROF_* fields): absent
    # where neither gives it, never borrowed from gpuwatch_gpu_utilization_ratio.
    _g(
        "gpuwatch_gpu_sm_active_ratio",
        "Fraction of time the SMs had at least one warp resident, averaged over all SMs (0-1).",
    ),
    _g(
        "gpuwatch_gpu_sm_occupancy_ratio",
        "Resident warps over the SMs' theoretical maximum, averaged over time (0-1).",
    ),
    _g(
        "gpuwatch_gpu_tensor_active_ratio",
        "Fraction of time the tensor cores were doing any tensor operation (0-1).",
    ),
    _g(
        "gpuwatch_gpu_dram_active_ratio",
        "Device memory bandwidth used over the theoretical maximum (0-1).",
    ),
    _g("gpuwatch_gpu_fp16_active_ratio", "Fraction of time the FP16 (non-tensor) pipes were busy."),
    _g("gpuwatch_gpu_fp32_active_ratio", "Fraction of time the FP32 (non-tensor) pipes were busy."),
    _g("gpuwatch_gpu_fp64_active_ratio", "Fraction of time the FP64 (non-tensor) pipes were busy."),
    _g(
        "gpuwatch_gpu_split_basis_info",
        "1 for a GPU used by several targets; basis: the rule its cost is split by"
        " (sm_utilization or memory).",
    ),
)

# Engine signals carry host, target, engine (the engine's NAME) and model. Counters and
# histograms are the engine's raw cumulative values (they reset when the engine restarts); the
# increase over a window is computed later, restart-safe. Histograms keep the engine's buckets.
ENGINE_SIGNALS = (
    _g("gpuwatch_engine_requests_running", "Requests being processed (in a running batch)."),
    _g("gpuwatch_engine_requests_waiting", "Requests queued, waiting to be scheduled."),
    _g("gpuwatch_engine_kv_cache_usage_ratio", "Fraction of the KV cache in use (0-1)."),
    _g(
        "gpuwatch_engine_model_memory_bytes",
        "Device memory a loaded model holds, bytes, where the engine says (Ollama's size_vram).",
    ),
    _c("gpuwatch_engine_prompt_tokens_total", "Prompt tokens processed, cached ones included."),
    _c(
        "gpuwatch_engine_prompt_tokens_computed_total",
        "Prompt tokens actually computed (prefix-cache hits excluded), where the engine says.",
    ),
    _c("gpuwatch_engine_generation_tokens_total", "Tokens generated."),
    _c("gpuwatch_engine_requests_finished_total", "Requests finished, by reason."),
    _c("gpuwatch_engine_preemptions_total", "Requests preempted by the scheduler."),
    _c(
        "gpuwatch_engine_completed_generation_tokens_total",
        "Tokens generated for requests that finished (per-request count; abandoned excluded).",
    ),
    _c(
        "gpuwatch_engine_completed_prompt_tokens_total",
        "Prompt tokens of requests that finished, cached ones included (per-request count).",
    ),
    _c(
        "gpuwatch_engine_completed_prompt_tokens_computed_total",
        "Prompt tokens computed for requests that finished, cache hits excluded.",
    ),
    _c(
        "gpuwatch_engine_requests_completed_total",
        "Requests that finished, as the engine's per-request histograms count them.",
    ),
    # vLLM's estimates (--enable-mfu-metrics), per GPU: model FLOPs and memory-bandwidth
    # utilization come from these against the GPU's peak (agent.cost.gpu_peaks).
    _c(
        "gpuwatch_engine_estimated_flops_total",
        "Floating-point operations the engine estimates it ran, per GPU.",
    ),
    _c(
        "gpuwatch_engine_estimated_read_bytes_total",
        "Bytes the engine estimates it read from device memory, per GPU.",
    ),
    _c(
        "gpuwatch_engine_estimated_write_bytes_total",
        "Bytes the engine estimates it wrote to device memory, per GPU.",
    ),
    # Speculative decoding, where the engine reports it (vLLM with a draft method): accepted
    # over draft tokens is the acceptance rate.
    _c(
        "gpuwatch_engine_spec_decode_draft_tokens_total",
        "Draft tokens proposed by speculative decoding.",
    ),
    _c(
        "gpuwatch_engine_spec_decode_accepted_tokens_total",
        "Draft tokens the target model accepted (speculative decoding).",
    ),
    _h("gpuwatch_engine_ttft_seconds", "Time to first token, seconds."),
    _h("gpuwatch_engine_inter_token_latency_seconds", "Time between output tokens, seconds."),
    _h("gpuwatch_engine_e2e_latency_seconds", "End-to-end request latency, seconds."),
    _h("gpuwatch_engine_queue_time_seconds", "Time requests spent queued, seconds."),
)

COST_SIGNALS = (
    _g("gpuwatch_gpu_hourly_cost_usd", "What the GPU costs per hour now, by the rate card (USD)."),
    _c("gpuwatch_spend_usd_total", "Spend stored: metered by the rate card, or billed per source."),
    _c("gpuwatch_idle_cost_usd_total", "Metered cost of GPU time that was not busy (USD)."),
    _g("gpuwatch_cost_per_million_tokens_usd", "Cost per million useful tokens over a window."),
    _g("gpuwatch_budget_used_ratio", "Month-to-date spend over budget.monthly_usd."),
    _g(
        "gpuwatch_slo_attainment_ratio",
        "Share of a model's requests within its [[slo]] objective over a window, from its"
        " latency histograms (estimate: exact, interpolated or lower_bound).",
    ),
    _g(
        "gpuwatch_slo_objective_ratio",
        "The fraction of a model's requests its [[slo]] objective asks to be within it.",
    ),
    _c(
        "gpuwatch_slo_span_requests_total",
        "Requests judged from their own OTLP span against their model's [[slo]] objective,"
        " by result (met: within every threshold; missed).",
    ),
    _c(
        "gpuwatch_slo_span_output_tokens_total",
        "Output tokens of the requests judged from their OTLP spans, by result (met, missed).",
    ),
)

HEALTH_SIGNALS = (
    _g("gpuwatch_collector_success", "1 if the collector's last run succeeded, else 0."),
    _g("gpuwatch_collector_duration_seconds", "Duration of the collector's last run, seconds."),
    _g(
        "gpuwatch_collector_last_success_timestamp_seconds",
        "Unix time of the collector's last successful run.",
    ),
    _g("gpuwatch_target_up", "1 if the last scrape of the target succeeded, else 0."),
    _g("gpuwatch_target_scrape_duration_seconds", "Duration of the last scrape of the target."),
    _g("gpuwatch_alerts", "This host's alerts by rule and state (pending or firing)."),
    _c(
        "gpuwatch_ticks_missed_total",
        "Scheduled ticks not started because the previous tick was still running.",
    ),
    _g(
        "gpuwatch_fleet_leader",
        "1 while this daemon does the fleet's work (billing, budget alerts, digest), else 0.",
    ),
    _g("gpuwatch_spool_bytes", "Compressed size of the rounds waiting in the spool, bytes."),
    _g("gpuwatch_spool_rounds", "Rounds waiting in the spool for the database to take them."),
    _g(
        "gpuwatch_spool_oldest_age_seconds",
        "Age of the oldest spooled round, seconds (0 when the spool is empty).",
    ),
    _c(
        "gpuwatch_samples_dropped_total",
        "Samples dropped by a collector because their value cannot be true (NaN, infinite,"
        " a negative count), by reason; the rest of the round is kept.",
    ),
    _c(
        "gpuwatch_otlp_spans_total",
        "Spans the OTLP receiver took or refused since start, by outcome (counted, unjudged,"
        " no_objective, not_a_request, refused_rate, dropped_backlog, malformed, ...).",
    ),
    _c(
        "gpuwatch_spool_dropped_rounds_total",
        "Rounds dropped, oldest first, because the spool was full (spool.max_bytes).",
    ),
)

# A gateway's counters per tenant (collectors.gateways), labelled host, target (the gateway),
# model and tenant: the gateway's raw cumulative values, never counted as engine tokens.
GATEWAY_SIGNALS = (
    _c("gpuwatch_gateway_prompt_tokens_total", "Prompt tokens a gateway sent for a tenant."),
    _c("gpuwatch_gateway_generation_tokens_total", "Output tokens a gateway got for a tenant."),
    _c("gpuwatch_gateway_spend_usd_total", "A gateway's list-price spend for a tenant (USD)."),
)

SIGNALS: dict[str, Signal] = {
    s.name: s
    for s in GPU_SIGNALS + ENGINE_SIGNALS + COST_SIGNALS + HEALTH_SIGNALS + GATEWAY_SIGNALS
}

_HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum", "_created")


def signal_of(metric: str) -> Signal | None:
    """The signal a sample's metric name belongs to.

    That is the name itself, a histogram's ``_bucket``/``_count``/``_sum``/``_created`` series,
    or a counter's ``_created`` series (``foo_total`` -> ``foo_created``); None when unknown.
    """
    if metric in SIGNALS:
        return SIGNALS[metric]
    for suffix in _HISTOGRAM_SUFFIXES:
        base = metric.removesuffix(suffix)
        if base == metric:
            continue
        signal = SIGNALS.get(base) or SIGNALS.get(base + "_total")
        if signal is not None and (signal.kind is Kind.HISTOGRAM or suffix == "_created"):
            return signal
    return None


def created_name(signal: Signal) -> str:
    """The ``_created`` series of a counter or histogram, as prometheus_client names it."""
    return signal.name.removesuffix("_total") + "_created"
