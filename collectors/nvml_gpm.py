"""What the SMs actually did, from NVML's GPM API (Hopper and newer), for the NVML collector.

NVML's plain utilization only says that some kernel ran during the sample period; a GPU can
show 100 % while a quarter of its SMs do any work. GPM (``nvmlGpm*``) counts SM activity,
occupancy and the tensor, DRAM and FP pipes, as percentages computed between two samples.

Two samples per tick interval, no extra thread: each device (a GPU, or a MIG instance read
through its parent and GPU instance id) owns two sample buffers, used in turn. Each round
fills the older one and asks nvmlGpmMetricsGet between the previous round's sample and the
new one, so the values cover exactly one tick interval. Reusing the two buffers (rather than
an alloc and a free each round) keeps the round at two extra NVML calls per device, and the
buffers per device bounded at two for the daemon's whole life.

- The first round of a device (after a start, an NVML restart or a failed sample) gives no
  values: absent, never 0. A metric whose own ``nvmlReturn`` is not success is absent.
- GPM support is asked once per NVML session per GPU; an unsupported GPU gives nothing.
- A GPU whose profiling fields already come from a dcgm-exporter target is not armed: GPM
  and DCGM profiling share the GPU's performance counters. Its buffers are freed.
- Buffers are freed when a device is not read in a round (gone, failed, skipped), before NVML
  is restarted, and on close.

Every call goes through the collector's choke point (``collectors.nvml._Nvml``), so an old
driver without these symbols, or a GPU that does not answer, is classified there; a GPU
whose GPM call fails keeps its other samples (the failure is caught here).
"""

from __future__ import annotations

import ctypes
import logging
import struct
from collections.abc import Callable, Mapping
from typing import Any, Protocol

log = logging.getLogger(__name__)

Add = Callable[[str, float | None, Mapping[str, str] | None], None]

# nvml.h NVML_GPM_METRIC_* -> canonical gauge (collectors/signals.py). GPM gives 0-100.
METRICS = (
    (2, "gpuwatch_gpu_sm_active_ratio"),  # SM_UTIL
    (3, "gpuwatch_gpu_sm_occupancy_ratio"),  # SM_OCCUPANCY
    (5, "gpuwatch_gpu_tensor_active_ratio"),  # ANY_TENSOR_UTIL
    (10, "gpuwatch_gpu_dram_active_ratio"),  # DRAM_BW_UTIL
    (11, "gpuwatch_gpu_fp64_active_ratio"),  # FP64_UTIL
    (12, "gpuwatch_gpu_fp32_active_ratio"),  # FP32_UTIL
    (13, "gpuwatch_gpu_fp16_active_ratio"),  # FP16_UTIL
)
# By default the four gauges the cost figures and alerts read. The non-tensor FP pipes are
# near 0 while an LLM serves (its matmuls run on the tensor cores): three more series per GPU
# kept for years, and 47 % more rows a tick instead of 27 %, for a figure few read. Opt in
# with ``[collectors.nvml] gpm_pipes = true``.
CORE = METRICS[:4]
_METRICS_GET_VERSION = 1  # nvml.h NVML_GPM_METRICS_GET_VERSION, when the binding lacks it


class Calls(Protocol):
    """What this module needs of collectors.nvml's choke point (its ``_Nvml``)."""

    def query(self, fn: str, *args: Any, symbol: str | None = None, **kwargs: Any) -> Any: ...

    def constant(self, name: str) -> Any: ...


class _Pair:
    """A device's two sample buffers and which one holds the newest sample (-1: none)."""

    __slots__ = ("buffers", "newest")

    def __init__(self, first: Any, second: Any) -> None:
        self.buffers = (first, second)
        self.newest = -1


class GpmReader:
    """Per-device GPM sample pairs across rounds; not thread-safe (the collector's lock)."""

    def __init__(self, device_failed: type[BaseException], *, pipes: bool = False) -> None:
        self._metrics_read = METRICS if pipes else CORE
        # The choke point's "this device failed" error: caught here so that only GPM is lost.
        self._failed = device_failed
        self._pairs: dict[str, _Pair] = {}  # GPU or MIG device UUID -> its buffers
        self._seen: set[str] = set()  # devices sampled this round
        self._supported: dict[str, bool] = {}  # GPU UUID -> GPM support, per NVML session
        self._instance_ids: dict[str, int] = {}  # MIG device UUID -> its GPU instance id
        self._elsewhere: frozenset[str] = frozenset()
        self._request: Any = None  # one nvmlGpmMetricsGet_t, reused (19 KB of ctypes)
        self._results: struct.Struct | None = None  # reads (nvmlReturn, value) of each slot

    def profiled_elsewhere(self, uuids: frozenset[str]) -> None:
        """GPU UUIDs whose profiling fields come from elsewhere (dcgm-exporter): not armed."""
        self._elsewhere = uuids

    def read_gpu(self, nvml: Calls, uuid: str, handle: Any, add: Add) -> None:
        """This round's GPM values of a whole GPU, added through ``add``."""
        if self._armed(nvml, uuid, handle):
            self._read(nvml, uuid, add, "nvmlGpmSampleGet", handle)

    def read_mig(
        self, nvml: Calls, uuid: str, parent: Any, mig_uuid: str, mig: Any, add: Add
    ) -> None:
        """A MIG instance's values: nvmlGpmMigSampleGet on the parent with its GPU instance."""
        if not self._armed(nvml, uuid, parent):
            return
        instance = self._instance_ids.get(mig_uuid)
        if instance is None:
            try:
                instance = nvml.query("nvmlDeviceGetGpuInstanceId", mig)
            except self._failed as exc:
                log.debug("GPM: no GPU instance id for %s: %s", mig_uuid, exc)
                return
            if instance is None:
                return
            self._instance_ids[mig_uuid] = instance
        self._read(nvml, mig_uuid, add, "nvmlGpmMigSampleGet", parent, instance)

    def end_round(self, nvml: Calls) -> None:
        """Free the buffers of every device not sampled this round (gone, failed, skipped)."""
        for key in [key for key in self._pairs if key not in self._seen]:
            _free(nvml, self._pairs.pop(key))
        for key in [key for key in self._instance_ids if key not in self._seen]:
            del self._instance_ids[key]
        self._seen.clear()

    def release(self, nvml: Calls) -> None:
        """Free every buffer and forget what this NVML session said (before nvmlShutdown)."""
        for pair in self._pairs.values():
            _free(nvml, pair)
        self._pairs.clear()
        self._seen.clear()
        self._supported.clear()
        self._instance_ids.clear()

    def live_buffers(self) -> int:
        """Sample buffers held now (two per armed device)."""
        return 2 * len(self._pairs)

    def _armed(self, nvml: Calls, uuid: str, handle: Any) -> bool:
        if uuid in self._elsewhere:
            return False
        known = self._supported.get(uuid)
        if known is None:
            try:
                support = nvml.query("nvmlGpmQueryDeviceSupport", handle)
            except self._failed as exc:  # not remembered: asked again next round
                log.debug("GPM support of %s not known this round: %s", uuid, exc)
                return False
            known = support is not None and bool(support.isSupportedDevice)
            self._supported[uuid] = known
        return known

    def _read(self, nvml: Calls, key: str, add: Add, fn: str, *args: Any) -> None:
        pair = self._pairs.get(key) or self._allocate(nvml)
        if pair is None:
            return
        self._pairs[key] = pair
        self._seen.add(key)
        target = 1 - pair.newest if pair.newest >= 0 else 0
        try:
            taken = nvml.query(fn, *args, pair.buffers[target])
        except self._failed as exc:
            log.debug("GPM sample of %s failed: %s", key, exc)
            taken = None
        previous, pair.newest = pair.newest, (target if taken is not None else -1)
        if taken is None or previous < 0:  # a first sample, or a gap: nothing to compare
            return
        try:
            results = self._metrics(nvml, pair.buffers[previous], pair.buffers[target])
        except self._failed as exc:
            log.debug("GPM metrics of %s failed: %s", key, exc)
            return
        read = self._metrics_read
        for (_, metric), code, value in zip(read, results[::2], results[1::2], strict=True):
            if code == 0:  # this metric's own nvmlReturn: anything else leaves it absent
                add(metric, value / 100, None)

    def _allocate(self, nvml: Calls) -> _Pair | None:
        first = nvml.query("nvmlGpmSampleAlloc")
        second = None if first is None else nvml.query("nvmlGpmSampleAlloc")
        if second is None:
            if first is not None:
                _free_one(nvml, first)
            return None
        return _Pair(first, second)

    def _metrics(self, nvml: Calls, older: Any, newer: Any) -> tuple[Any, ...]:
        """(nvmlReturn, value) of each of METRICS, flattened; () when nothing was read."""
        request = self._request
        if request is None:
            request = self._request = self._new_request(nvml)
            if request is None:
                return ()
        request.sample1, request.sample2 = older, newer
        if nvml.query("nvmlGpmMetricsGet", request) is None or self._results is None:
            return ()
        return self._results.unpack_from(memoryview(request).cast("B"), 0)

    def _new_request(self, nvml: Calls) -> Any:
        """An nvmlGpmMetricsGet_t asking for METRICS, and the Struct that reads its answers.

        The metric ids stay set across calls (NVML writes only each slot's nvmlReturn, value
        and names). The answers are read in one unpack: pynvml's structs run a Python
        __getattribute__ on every field read, which cost more than the two NVML calls.
        """
        request_type = nvml.constant("c_nvmlGpmMetricsGet_t")
        metric_type = nvml.constant("c_nvmlGpmMetric_t")
        if request_type is None or metric_type is None:  # an nvidia-ml-py without GPM
            return None
        request = request_type()
        request.version = nvml.constant("NVML_GPM_METRICS_GET_VERSION") or _METRICS_GET_VERSION
        request.numMetrics = len(self._metrics_read)
        for slot, (metric_id, _) in enumerate(self._metrics_read):
            request.metrics[slot].metricId = metric_id
        code, value = metric_type.nvmlReturn, metric_type.value
        size = ctypes.sizeof(metric_type)
        slot_format = f"{code.offset}xi{value.offset - code.offset - 4}xd{size - value.offset - 8}x"
        self._results = struct.Struct(
            f"={request_type.metrics.offset}x" + slot_format * len(self._metrics_read)
        )
        return request


def _free(nvml: Calls, pair: _Pair) -> None:
    for buffer in pair.buffers:
        _free_one(nvml, buffer)


def _free_one(nvml: Calls, buffer: Any) -> None:
    try:
        nvml.query("nvmlGpmSampleFree", buffer)
    except Exception as exc:  # noqa: BLE001 - a driver that is gone has let it go already
        log.debug("nvmlGpmSampleFree failed: %s", exc)
