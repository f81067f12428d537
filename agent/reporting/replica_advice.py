"""Right-sizing by KV cache: a model whose KV cache filled while requests queued needs another
replica, however idle its GPUs look (kind "replica").

Utilization says how often a kernel ran; it does not say whether the engine could take another
request. vLLM admits a waiting request only when KV-cache blocks are free for it (and preempts a
running one when a sequence needs a block that is not there), so a full cache with a queue means
requests waited for memory, not compute: a model at 95 % KV use with queueing needs a replica
even at 40 % utilization, and its GPUs are not spare. The consolidation advice leaves them out
(:func:`agent.reporting.recommendations.recommendations`) and this advice says so.

Both figures are the window's peaks of the engine's gauges as the rollups keep them (the highest
per minute, hour or day row, agent.reporting.serving_reads), per serving target: they need not
fall in the same minute, which the detail says.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from agent.cost.summarize import TokenKey
from agent.reporting.figures import Figures
from agent.reporting.model import GpuRow, Recommendation
from agent.reporting.serving_reads import KV, WAITING, TargetServing

GpuKey = tuple[str, str]  # (host, gpu_uuid)

# At or above this KV-cache usage a target counts as full. Not 100 %: the gauge is one sample
# per scrape (10 s by default) and the cache is handed out in blocks, so a cache that turned
# requests away is seldom caught at exactly 1.0; 95 % leaves that margin and is the level the
# issue names (a model at 95 % KV use with queueing needs a replica).
KV_FULL = 0.95


def replica_advice(
    f: Figures, gpus: Sequence[GpuRow], reads: Mapping[TokenKey, TargetServing]
) -> tuple[list[Recommendation], frozenset[GpuKey]]:
    """One "replica" recommendation per model with a full KV cache and a queue on some target,
    and the GPUs those targets ran on (which consolidation must not release)."""
    full: dict[str, list[tuple[str, str, float, float]]] = defaultdict(list)
    for (host, target, model), read in sorted(reads.items()):
        kv, waiting = read.peak(KV), read.peak(WAITING)
        if kv is not None and waiting is not None and kv >= KV_FULL and waiting > 0:
            full[model].append((host, target, kv, waiting))
    rows = {(g.host, g.gpu_uuid): g for g in gpus}
    held: set[GpuKey] = set()
    out = []
    for model, targets in full.items():
        listed = []
        for host, target, kv, waiting in targets:
            used = _target_gpus(f, host, target)
            held |= used
            busy = ", ".join(_busy(rows[k]) for k in sorted(used) if k in rows) or "no GPU known"
            listed.append(
                f"{host}/{target}: KV cache peaked at {kv:.0%} while up to {waiting:,.0f} "
                f"request(s) waited; its GPU(s) busy {busy}"
            )
        detail = (
            f"{'; '.join(listed)}. Requests queued for KV-cache space, not compute, so low "
            f"utilization here is not spare capacity: add a replica (or give the engine more "
            f"memory for its KV cache). These GPUs are left out of the consolidation advice. "
            f"Full means a peak at or above {KV_FULL:.0%}; both figures are the window's peaks "
            f"of the engine's gauges, not necessarily in the same minute."
        )
        out.append(Recommendation("replica", f"{model}: add a replica", detail, None))
    return out, frozenset(held)


def _target_gpus(f: Figures, host: str, target: str) -> set[GpuKey]:
    """The GPUs the cost ledger allocated to the target in the window."""
    return {
        (h, g)
        for (h, g, t), days in f.window.allocations.items()
        if h == host and t == target and sum(a.seconds for a in days.values()) > 0
    }


def _busy(g: GpuRow) -> str:
    # SM activity where GPM or dcgm-exporter gave it, else NVML's flag: as consolidation reads.
    if g.sm_active_ratio is not None:
        return f"{g.host}/{g.gpu_index} {g.sm_active_ratio:.0%} (SM activity)"
    if g.utilization_ratio is not None:
        return f"{g.host}/{g.gpu_index} {g.utilization_ratio:.0%} (utilization flag)"
    return f"{g.host}/{g.gpu_index} unknown"
