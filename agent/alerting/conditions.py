"""Which alert conditions hold now, from :class:`agent.alerting.inputs.AlertInputs` (pure).

Each rule is one small function returning its conditions, or None when its data is unknown
this round (the collector it reads failed): such a rule is left out of the evaluated set, so
``alerts.lifecycle.evaluate`` keeps its alerts as they were instead of resolving them, and a
blind NVML collector never looks like an idle GPU (prometheus#14085). ``for`` is handled by the
lifecycle; a condition here only says "true now for this label set".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

from agent.alerting.inputs import AlertInputs
from agent.alerting.slo_condition import slo_burn_rate
from alerts.model import AlertKey, Condition
from alerts.rules import RuleSpec
from collectors.base import Sample

NVML = "nvml"
GPU_INFO = "gpuwatch_gpu_info"  # one per GPU read this round, from NVML or dcgm-exporter
TARGET_COLLECTOR = "target/"  # a scrape target's collector: "target/<name>"
GPU_LABELS = ("host", "gpu_uuid", "gpu_index", "mig_instance")
UTILIZATION = "gpuwatch_gpu_utilization_ratio"  # NVML's busy flag: "a kernel ran"
SM_ACTIVE = "gpuwatch_gpu_sm_active_ratio"  # GPM or DCGM profiling: the SMs' real work
# GpuIdle's "basis" annotation: which of the two it judged (DESIGN.md "Bases, said out loud").
SM_BASIS, FLAG_BASIS = "sm_active", "utilization_flag"
ENGINE_LABELS = ("host", "target", "model")

# nvml.h clocks event (throttle) reasons that mean the GPU is being held back by heat or a
# power emergency. SW power cap (0x4) is left out: an inference GPU at full load sits at its
# power limit by design, and idle (0x1) or app clocks (0x2) are not problems.
THROTTLE_BITS = {
    0x8: "nvmlClocksEventReasonHwSlowdown",
    0x20: "nvmlClocksEventReasonSwThermalSlowdown",
    0x40: "nvmlClocksEventReasonHwThermalSlowdown",
    0x80: "nvmlClocksEventReasonHwPowerBrakeSlowdown",
}

RuleFn = Callable[[RuleSpec, AlertInputs], list[Condition] | None]
Inputs = TypeVar("Inputs")  # what a table of rules reads: AlertInputs, or the budget rules' inputs


def conditions(
    rules: Mapping[str, RuleSpec], inputs: AlertInputs
) -> tuple[list[Condition], frozenset[str]]:
    """The conditions true now, and the names of the rules that were evaluated."""
    return run_rules(RULES, rules, inputs)


def run_rules(
    table: Mapping[str, Callable[[RuleSpec, Inputs], list[Condition] | None]],
    rules: Mapping[str, RuleSpec],
    inputs: Inputs,
) -> tuple[list[Condition], frozenset[str]]:
    """Each enabled rule of ``table`` over ``inputs``: the conditions that hold, and the rules
    that were evaluated (a rule answering None saw no data and is left out, see above)."""
    found: list[Condition] = []
    evaluated: set[str] = set()
    for name, spec in rules.items():
        rule = table.get(name)
        if rule is None or not spec.enabled:
            continue
        result = rule(spec, inputs)
        if result is not None:
            evaluated.add(name)
            found.extend(result)
    return found, frozenset(evaluated)


# -- helpers ---------------------------------------------------------------------------------


def _key(rule: str, sample: Sample, names: Sequence[str], **extra: str) -> AlertKey:
    labels = {n: sample.labels[n] for n in names if n in sample.labels}
    return AlertKey.of(rule, {**labels, **extra})


def _threshold(spec: RuleSpec, name: str) -> float | None:
    value = spec.thresholds.get(name)
    return None if value is None else float(value)


def _nvml_ok(inputs: AlertInputs) -> bool:
    """The GPU source answered this round: NVML, or, where NVML is not collecting at all
    (``[collectors.nvml] enabled = false``), an exporter whose GPU samples arrived this round
    (dcgm-exporter: its target down leaves none). Otherwise the GPUs are unknown."""
    if inputs.collector_success.get(NVML, False):
        return True
    return NVML not in inputs.collector_success and bool(inputs.samples(GPU_INFO))


def _targets_ok(inputs: AlertInputs) -> bool:
    """Every target scraped this round. The evaluated set is per rule, not per target: a
    down target would otherwise resolve its engine alerts (TargetDown stands in for them)."""
    return all(s.value == 1.0 for s in inputs.samples("gpuwatch_target_up"))


def _by_labels(samples: Sequence[Sample]) -> dict[tuple[tuple[str, str], ...], Sample]:
    return {s.label_key(): s for s in samples}


def _seconds_between(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


# -- GPU rules (NVML) ------------------------------------------------------------------------


def gpu_idle(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    """Billed, nearly unused, and not merely loading a model.

    "Unused" is SM activity where GPM or DCGM profiling gives it for the GPU this round, else
    NVML's busy flag, which only says that some kernel ran: a GPU serving one small request
    at a time shows 100 % there while 3 % of its SMs work. Where both exist SM activity wins
    either way, as it covers the whole interval and the flag only the driver's last sample
    period. The basis is an annotation, not a label, so the alert stays the same alert when
    GPM's gauge arrives a round after the flag (GPM compares two samples)."""
    flag_below = _threshold(spec, "utilization_below")
    if not _nvml_ok(inputs) or flag_below is None:
        return None
    sm_below = _threshold(spec, "sm_active_below")
    sm_below = flag_below if sm_below is None else sm_below
    warmup = _threshold(spec, "warmup_seconds") or 0.0
    # MIG instances have no utilization of their own and no price: the GPU is the unit.
    flags = _whole_gpus(inputs.samples(UTILIZATION))
    sm = _whole_gpus(inputs.samples(SM_ACTIVE))
    if inputs.now <= inputs.started_at and any(
        gpu not in sm and s.value >= flag_below and gpu[1] in inputs.billed_gpus
        for gpu, s in flags.items()
    ):
        # The daemon's first round has no SM activity from GPM yet. Judged by the flag, a GPU
        # busy by it and idle by its SMs would resolve an alert its SMs held before a restart
        # and fire it again 30 minutes later; one round's wait leaves the alerts as they were.
        return None
    out = []
    for gpu in sorted(flags.keys() | sm.keys()):
        uuid = gpu[1]
        if uuid not in inputs.billed_gpus:
            continue
        reading = sm.get(gpu)
        if reading is not None:
            below, basis, text = sm_below, SM_BASIS, f"SM activity {reading.value:.0%} (GPM/DCGM)"
        else:
            reading = flags[gpu]
            below, text = flag_below, f"utilization {reading.value:.0%} (NVML busy flag)"
            basis = FLAG_BASIS
        if reading.value >= below or _warming_up(inputs, uuid, warmup):
            continue
        # The flag's labels where there is one: the key GpuIdle always had.
        key = _key(spec.name, flags.get(gpu, reading), GPU_LABELS)
        usd = inputs.gpu_hourly_usd.get(uuid, 0.0)
        summary = f"{spec.render_summary(key.label_map(), reading.value)}: {text} < {below:.0%}"
        annotations = {"usd_per_hour": f"{usd:g}", "basis": basis, "activity": text}
        out.append(Condition(key, reading.value, {**annotations, "summary": summary}))
    return out


def _whole_gpus(samples: Sequence[Sample]) -> dict[tuple[str, str], Sample]:
    """Whole-GPU samples by (host, gpu_uuid); MIG instances left out."""
    return {
        (s.labels.get("host", ""), s.labels.get("gpu_uuid", "")): s
        for s in samples
        if "mig_instance" not in s.labels
    }


def _warming_up(inputs: AlertInputs, gpu_uuid: str, warmup: float) -> bool:
    """A target on this GPU is down or came up less than ``warmup`` ago: an engine loading
    weights shows an idle GPU that is about to be busy, which is not waste worth a page."""
    for target in inputs.gpu_targets.get(gpu_uuid, frozenset()):
        since = inputs.target_up_since.get(target)
        if since is None or _seconds_between(inputs.now, since) <= warmup:
            return True
    return False


def vram_headroom_low(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    free_below = _threshold(spec, "free_below")
    if not _nvml_ok(inputs) or free_below is None:
        return None
    totals = _by_labels(inputs.samples("gpuwatch_gpu_memory_total_bytes"))
    out = []
    for used in inputs.samples("gpuwatch_gpu_memory_used_bytes"):
        total = totals.get(used.label_key())
        if total is None or total.value <= 0:
            continue
        free = 1.0 - used.value / total.value
        if free < free_below:
            out.append(Condition(_key(spec.name, used, GPU_LABELS), free))
    return out


def gpu_hot(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    limit = _threshold(spec, "celsius_above")
    if not _nvml_ok(inputs) or limit is None:
        return None
    return [
        Condition(_key(spec.name, s, GPU_LABELS), s.value)
        for s in inputs.samples("gpuwatch_gpu_temperature_celsius")
        if s.value > limit
    ]


def gpu_throttling(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    if not _nvml_ok(inputs):
        return None
    out = []
    for s in inputs.samples("gpuwatch_gpu_throttle_reasons"):
        reasons = [name for bit, name in THROTTLE_BITS.items() if int(s.value) & bit]
        if reasons:
            annotations = {"reasons": ", ".join(reasons)}
            out.append(Condition(_key(spec.name, s, GPU_LABELS), s.value, annotations))
    return out


def gpu_hardware_errors(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    """Uncorrected (double-bit) ECC errors since the driver loaded: the count only resets with
    the driver, so the alert holds until the GPU is reset, which is what it needs."""
    if not _nvml_ok(inputs):
        return None
    return [
        Condition(_key(spec.name, s, GPU_LABELS), s.value, {"error": "uncorrected ECC"})
        for s in inputs.samples("gpuwatch_gpu_ecc_errors_total")
        if s.labels.get("type") == "uncorrected" and s.value > 0
    ]


# -- GPU faults (NVML's events and row remapper, dcgm-exporter's fields) ---------------------

# Xids that mean the GPU needs a reset, a reboot or service, not an application fix: NVIDIA's
# Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, "Resolution
# Bucket": RESET_GPU, RESTART_BM, CONTACT_SUPPORT) and anchors 4.2. Application Xids (13, 31,
# 43, 45) are counted on gpuwatch_gpu_xid_errors_total but page nobody.
CRITICAL_XIDS: Mapping[int, str] = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "row remapping or page retirement recorded (reset pending)",
    64: "row remapping or page retirement failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (reset needed)",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
XID_ERRORS = "gpuwatch_gpu_xid_errors_total"
REMAP_PENDING = "gpuwatch_gpu_row_remap_pending"
REMAP_FAILURE = "gpuwatch_gpu_row_remap_failure"


def gpu_faults(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    """GpuHardwareErrors: uncorrected ECC, critical Xids and the row remapper, one alert each
    (an ``xid`` or ``row_remap`` label keeps them apart). An Xid count is this daemon's own,
    so its alert holds until gpuwatch restarts, normally with the reboot the Xid calls for."""
    ecc = gpu_hardware_errors(spec, inputs)
    if ecc is None:
        return None
    return ecc + _xid_conditions(spec, inputs) + _remap_conditions(spec, inputs)


def _xid_conditions(spec: RuleSpec, inputs: AlertInputs) -> list[Condition]:
    out = []
    for s in inputs.samples(XID_ERRORS):
        xid = s.labels.get("xid", "")
        meaning = CRITICAL_XIDS.get(int(xid)) if xid.isdigit() else None
        if meaning is not None and s.value > 0:
            key = _key(spec.name, s, GPU_LABELS, xid=xid)
            out.append(_fault(spec, key, s.value, f"Xid {xid}, {meaning}", "critical"))
    return out


def _fault(spec: RuleSpec, key: AlertKey, value: float, error: str, severity: str) -> Condition:
    """The summary says which fault, so the page reads without a lookup table."""
    summary = f"{spec.render_summary(key.label_map(), value)}: {error}"
    annotations = {"error": error, "severity": severity, "summary": summary}
    return Condition(key, value, annotations)


def _remap_conditions(spec: RuleSpec, inputs: AlertInputs) -> list[Condition]:
    """A failed remap needs the GPU serviced (critical); a pending one is applied by the next
    GPU reset, so it asks for a reset soon rather than a page at night (warning)."""
    out = []
    for metric, kind, severity in (
        (REMAP_FAILURE, "failure", "critical"),
        (REMAP_PENDING, "pending", "warning"),
    ):
        for s in inputs.samples(metric):
            if s.value > 0:
                key = _key(spec.name, s, GPU_LABELS, row_remap=kind)
                out.append(_fault(spec, key, s.value, f"row remap {kind}", severity))
    return out


def gpu_lost(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    """A GPU read earlier no longer answers while NVML does: named by UUID and PCI bus id.
    NVML's alone (dcgm-exporter has no such signal), so it needs NVML itself to answer."""
    if not inputs.collector_success.get(NVML, False):
        return None
    return [
        Condition(_key(spec.name, s, (*GPU_LABELS, "pci_bus_id")), s.value)
        for s in inputs.samples("gpuwatch_gpu_lost")
        if s.value > 0
    ]


# -- collector and target health -------------------------------------------------------------


def collector_down(spec: RuleSpec, inputs: AlertInputs) -> list[Condition]:
    """Always evaluated: this is the alert about being blind, it cannot depend on seeing.
    The host's own collectors only (NVML): a scrape target that fails is TargetDown, with its
    own ``for``, so a redeploy does not page as a blind host. A collector that was failing
    when the daemon stopped counts from its last success before that (or its first stored
    failure), so a restart neither resolves nor re-fires the alert."""
    intervals = _threshold(spec, "intervals") or 3.0
    out = []
    for name, ok in sorted(inputs.collector_success.items()):
        if name.startswith(TARGET_COLLECTOR):
            continue
        last = inputs.collector_last_success.get(name)
        since = last if last is not None else inputs.failing_since.get(name, inputs.started_at)
        # Rounded, as ticks jitter: 29.9 s after the last success at 10 s is three misses.
        missed = int(_seconds_between(inputs.now, since) / inputs.interval_seconds + 0.5)
        if not ok and missed >= intervals:
            labels = {"host": inputs.host, "collector": name}
            seen = "never" if last is None else last.isoformat()
            annotations = {"last_success": seen}
            out.append(Condition(AlertKey.of(spec.name, labels), float(missed), annotations))
    return out


def target_down(spec: RuleSpec, inputs: AlertInputs) -> list[Condition]:
    return [
        Condition(_key(spec.name, s, ("host", "target")), s.value)
        for s in inputs.samples("gpuwatch_target_up")
        if s.value == 0.0
    ]


# -- engine rules ----------------------------------------------------------------------------

KV_USAGE = "gpuwatch_engine_kv_cache_usage_ratio"


def latency_p99_spike(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    """p99 above the larger of the absolute limit and N x its own 24 h p99, with enough
    requests in the window that one slow request is not a p99."""
    if not _targets_ok(inputs):
        return None
    min_requests = _threshold(spec, "min_requests") or 0.0
    out = []
    for key, (p99, count) in sorted(inputs.p99.items()):
        limit = _latency_limit(spec, inputs, key, min_requests)
        if count < min_requests or limit is None or p99 <= limit:
            continue
        target, model, kind = key
        labels = {"host": inputs.host, "target": target, "model": model, "kind": kind}
        annotations = {"limit_seconds": f"{limit:g}", "requests": f"{count:g}"}
        out.append(Condition(AlertKey.of(spec.name, labels), p99, annotations))
    return out


def _latency_limit(
    spec: RuleSpec, inputs: AlertInputs, key: tuple[str, str, str], min_requests: float
) -> float | None:
    limits = []
    absolute = _threshold(spec, f"{key[2]}_seconds")
    if absolute is not None:
        limits.append(absolute)
    factor = _threshold(spec, "baseline_factor")
    baseline = inputs.baseline_p99.get(key)
    # A baseline from a handful of requests is noise; it then does not raise the limit.
    if factor is not None and baseline is not None and baseline[1] >= min_requests:
        limits.append(factor * baseline[0])
    return max(limits) if limits else None


def queue_growing(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    above = _threshold(spec, "waiting_above")
    if not _targets_ok(inputs) or above is None:
        return None
    kv = {
        (s.labels.get("target"), s.labels.get("model")): s.value for s in inputs.samples(KV_USAGE)
    }
    out = []
    for (target, model), points in sorted(inputs.queue_points.items()):
        slope = least_squares_slope(points)
        if not points or points[-1][1] <= above or slope is None or slope <= 0:
            continue
        labels = {"host": inputs.host, "target": target, "model": model}
        usage = kv.get((target, model))
        out.append(_queue_condition(spec, labels, points[-1][1], slope, usage))
    return out


def _queue_condition(
    spec: RuleSpec, labels: Mapping[str, str], waiting: float, slope: float, kv: float | None
) -> Condition:
    """The KV cache tells the two causes apart: full means the replica is out of capacity,
    not full means requests wait although there is room (admission limits, a stuck scheduler)."""
    limit = _threshold(spec, "kv_saturated")
    if kv is None or limit is None:
        saturated, advice = "unknown", "KV cache usage unknown: check capacity and scheduling"
    elif kv >= limit:
        saturated, advice = "yes", f"KV cache {kv:.0%} full: out of capacity, add a replica"
    else:
        saturated = "no"
        advice = f"KV cache only {kv:.0%} used: an admission or scheduling problem, not capacity"
    summary = f"{spec.render_summary(labels, waiting)}; {advice}"
    annotations = {
        "kv_saturated": saturated,
        "slope_per_minute": f"{slope * 60:.2f}",
        "summary": summary,
    }
    return Condition(AlertKey.of(spec.name, labels), waiting, annotations)


def least_squares_slope(points: Sequence[tuple[datetime, float]]) -> float | None:
    """Change per second of the least-squares line through ``points``; None under two instants."""
    if len(points) < 2:
        return None
    origin = points[0][0]
    xs = [_seconds_between(ts, origin) for ts, _ in points]
    ys = [value for _, value in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def kv_cache_saturated(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    above = _threshold(spec, "above")
    if not _targets_ok(inputs) or above is None:
        return None
    return [
        Condition(_key(spec.name, s, ENGINE_LABELS), s.value)
        for s in inputs.samples(KV_USAGE)
        if s.value > above
    ]


RULES: Mapping[str, RuleFn] = {
    "GpuIdle": gpu_idle,
    "CollectorDown": collector_down,
    "TargetDown": target_down,
    "LatencyP99Spike": latency_p99_spike,
    "QueueGrowing": queue_growing,
    "KvCacheSaturated": kv_cache_saturated,
    "VramHeadroomLow": vram_headroom_low,
    "GpuHot": gpu_hot,
    "GpuThrottling": gpu_throttling,
    "GpuHardwareErrors": gpu_faults,
    "GpuLost": gpu_lost,
    "SloBurnRate": slo_burn_rate,
}
