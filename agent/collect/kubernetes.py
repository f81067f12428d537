"""The kubelet collector from the ``[kubernetes]`` settings, and what NVML labels pods from.

It runs before NVML in the tick's own thread (no ``timeout_seconds``: the runner's pool is for
scrapes), so NVML's processes are labelled from this tick's answer; its gRPC deadline bounds it,
and after a failure it waits a minute before asking again (collectors.kubelet.collector).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.config.settings import Config

if TYPE_CHECKING:
    from collectors.kubelet.collector import KubeletCollector


def kubelet_collector(config: Config) -> KubeletCollector | None:
    """The collector when ``[kubernetes]`` is on (``auto``: the socket exists), else None."""
    settings = config.kubernetes
    if not settings.active():
        return None
    # Imported here: grpc and protobuf cost every other gpuwatch process memory and start time.
    from collectors.kubelet.attribution import PodAttribution
    from collectors.kubelet.collector import KubeletCollector
    from collectors.kubelet.podlogs import PodLogNames
    from collectors.kubelet.podresources import PodResourcesClient

    return KubeletCollector(
        host=config.host,
        client=PodResourcesClient(settings.pod_resources_socket, settings.timeout_seconds),
        attribution=PodAttribution(PodLogNames(settings.pod_logs_dir)),
        # Half a tick: each tick asks once, and a second round within the same tick reuses it.
        refresh_seconds=config.daemon.interval_seconds / 2,
    )
