"""What the DaemonSet promises a cluster's operator (docs/kubernetes.md), read from what
`kubectl kustomize` renders."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from tests.deploy.kube import BASE, KUBERNETES, ROOT, Obj, one, render

OVERLAY = KUBERNETES / "overlays" / "central-postgres"
ROOT_OVERLAY = KUBERNETES / "overlays" / "kubelet-root"
UID = 65532  # the image's gpuwatch user (container/Containerfile)


def pod(folder: Any = BASE) -> Obj:
    spec: Obj = one(render(folder), "DaemonSet")["spec"]["template"]["spec"]
    return spec


def daemon(folder: Any = BASE) -> Obj:
    found: Obj = next(c for c in pod(folder)["containers"] if c["name"] == "gpuwatch")
    return found


def mounts(container: Obj) -> dict[str, Obj]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def volumes() -> dict[str, Obj]:
    return {v["name"]: v for v in pod()["volumes"]}


def env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env", [])}


def test_it_runs_on_gpu_nodes_only_and_tolerates_their_taint() -> None:
    assert pod()["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod()[
        "tolerations"
    ]


def test_it_sees_the_nodes_processes_but_takes_no_gpu_from_the_scheduler() -> None:
    assert pod()["hostPID"] is True  # NVML's PIDs are the node's
    everything = [daemon(), *pod()["initContainers"]]
    for container in everything:
        for kind in ("requests", "limits"):
            asked = container["resources"][kind]
            assert not [r for r in asked if r.startswith("nvidia.com/")], container["name"]
    variables = env(daemon())
    assert variables["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert variables["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"


def test_the_daemon_runs_unprivileged_on_a_read_only_root() -> None:
    assert pod()["securityContext"]["runAsNonRoot"] is True
    assert pod()["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod()["automountServiceAccountToken"] is False
    context = daemon()["securityContext"]
    assert context["runAsNonRoot"] is True
    assert (context["runAsUser"], context["runAsGroup"]) == (UID, UID)
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in context


def test_only_the_state_directorys_owner_is_set_as_root_with_chown_alone() -> None:
    (init,) = pod()["initContainers"]
    context = init["securityContext"]
    assert context["runAsUser"] == 0
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert list(mounts(init)) == ["/var/lib/gpuwatch"]
    assert init["command"][-1].endswith(f"chown -R {UID}:{UID} /var/lib/gpuwatch")


def test_the_node_is_read_only_but_for_the_state_directory() -> None:
    seen = mounts(daemon())
    writable = sorted(path for path, m in seen.items() if not m.get("readOnly"))
    assert writable == ["/tmp", "/var/lib/gpuwatch"]
    assert volumes()["tmp"] == {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}
    # The kubelet's pod-resources socket and the pod log folders, read-only.
    for path in ("/var/lib/kubelet/pod-resources", "/var/log/pods"):
        assert seen[path]["readOnly"] is True
        assert volumes()[seen[path]["name"]]["hostPath"] == {"path": path, "type": "Directory"}


def test_the_store_outlives_the_pod() -> None:
    state = volumes()[mounts(daemon())["/var/lib/gpuwatch"]["name"]]
    assert state["hostPath"] == {"path": "/var/lib/gpuwatch", "type": "DirectoryOrCreate"}


def test_configuration_comes_from_the_configmap_and_secrets_from_an_optional_secret() -> None:
    config = mounts(daemon())["/etc/gpuwatch/gpuwatch.toml"]
    assert config["readOnly"] is True and config["subPath"] == "gpuwatch.toml"
    generated = one(render(BASE), "ConfigMap")["metadata"]["name"]
    assert volumes()[config["name"]]["configMap"]["name"] == generated
    assert daemon()["args"] == ["run", "--config", "/etc/gpuwatch/gpuwatch.toml"]
    secret = volumes()[mounts(daemon())["/etc/gpuwatch/secrets"]["name"]]["secret"]
    assert secret == {"secretName": "gpuwatch-secrets", "optional": True, "defaultMode": 0o440}
    assert pod()["securityContext"]["fsGroup"] == UID  # the daemon can read its files
    assert daemon()["envFrom"] == [{"secretRef": {"name": "gpuwatch-secrets", "optional": True}}]


@pytest.mark.parametrize("folder", [BASE, OVERLAY], ids=["base", "central-postgres"])
def test_the_host_is_the_node_and_metrics_listen_on_the_pod_ip(folder: Any) -> None:
    names = [e["name"] for e in daemon(folder)["env"]]
    variables = env(daemon(folder))
    assert variables["GPUWATCH_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert variables["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert variables["GPUWATCH_METRICS_LISTEN"]["value"] == "$(POD_IP):9877"
    # Kubernetes expands $(POD_IP) only from a variable listed before it.
    assert names.index("POD_IP") < names.index("GPUWATCH_METRICS_LISTEN")


def test_probes_and_the_service_reach_metrics() -> None:
    (port,) = daemon()["ports"]
    assert port == {"name": "metrics", "containerPort": 9877, "protocol": "TCP"}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert daemon()[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    service = one(render(BASE), "Service")["spec"]
    assert service["clusterIP"] == "None"  # headless: one endpoint per node
    assert service["ports"] == [{"name": "metrics", "port": 9877, "targetPort": "metrics",
                                 "protocol": "TCP"}]  # fmt: skip
    labels = one(render(BASE), "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= labels.items()


def test_the_servicemonitor_scrapes_the_service_and_keeps_gpuwatchs_pod_labels() -> None:
    monitor = one(render(BASE), "ServiceMonitor")["spec"]
    service = one(render(BASE), "Service")["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= service.items()
    (endpoint,) = monitor["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")
    assert endpoint["honorLabels"] is True
    assert endpoint["relabelings"] == [
        {"action": "labeldrop", "regex": "(namespace|pod|container)"}
    ]


def test_the_image_is_the_one_make_image_builds() -> None:
    version = _project_version()
    images = {c["image"] for c in [daemon(), *pod()["initContainers"]]}
    assert images == {f"localhost/gpuwatch:{version}"}


def test_the_central_postgres_overlay_forwards_with_a_required_secret() -> None:
    variables = env(daemon(OVERLAY))
    assert variables["GPUWATCH_CENTRAL_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "gpuwatch-central", "key": "url"}
    }
    # The rest of the pod is the base's.
    rest = {k: v for k, v in pod(OVERLAY).items() if k != "containers"}
    assert rest == {k: v for k, v in pod().items() if k != "containers"} | {
        "volumes": [
            v | {"configMap": {"name": one(render(OVERLAY), "ConfigMap")["metadata"]["name"]}}
            if v["name"] == "config"
            else v
            for v in pod()["volumes"]
        ]
    }


def test_the_kubelet_root_overlay_is_root_without_any_capability() -> None:
    context = daemon(ROOT_OVERLAY)["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (0, 0, False)
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True

    # Everything else is the base's: the same pod but for who runs it.
    def who_aside(spec: Obj) -> Obj:
        out = {k: v for k, v in spec.items() if k not in ("securityContext", "initContainers")}
        out["containers"] = [
            {k: v for k, v in c.items() if k != "securityContext"} for c in spec["containers"]
        ]
        return out

    assert who_aside(pod(ROOT_OVERLAY)) == who_aside(pod())
    assert pod(ROOT_OVERLAY)["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def _project_version() -> str:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    version: str = data["project"]["version"]
    return version
