"""Pod UID from /proc/PID/cgroup: real texts captured from public sources (each named beside it).

Where a source shows only the path (systemd-cgls, an error message, `systemctl show`), the test
writes it as the line the kernel prints for that path, and says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.proc import Origin, UnitCache, pod_uid_from_cgroup, unit_from_cgroup

# opencontainers/runc#4620 (comment of 2025-02-13): `cat /proc/21689/cgroup` on a CRI-O node,
# cgroup v1, systemd driver, burstable (its first three lines, as printed).
CRIO_V1_BURSTABLE = (
    "13:freezer:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda5c1f8d5_1919_434d"
    "_add7_4afaafdaef89.slice/crio-5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c"
    ".scope\n"
    "12:cpuset:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda5c1f8d5_1919_434d"
    "_add7_4afaafdaef89.slice/crio-5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c"
    ".scope\n"
    "11:files:/\n"
)
# open-telemetry/opentelemetry-java#4507 (2022-06-09): /proc/self/cgroup in a containerd pod,
# cgroup v1, where containerd writes "<pod slice>:cri-containerd:<id>" as one path part.
CONTAINERD_V1_COLON = (
    "11:perf_event:/kubepods-besteffort-pod0125ec2f_b64a_4868_8f5b_94b56cbab864.slice:cri-containe"
    "rd:ee4b20e90ac7f42a10bd004d05646b13d8ab5e2c5e7cbc01abf8006bac016459\n"
    "10:blkio:/system.slice/containerd.service/kubepods-besteffort-pod0125ec2f_b64a_4868_8f5b_94b5"
    "6cbab864.slice:cri-containerd:ee4b20e90ac7f42a10bd004d05646b13d8ab5e2c5e7cbc01abf8006bac01645"
    "9\n"
)
# elastic/apm-agent-nodejs#3550: the name=systemd line of a containerd pod, burstable.
CONTAINERD_V1_NAME_SYSTEMD = (
    "1:name=systemd:/system.slice/containerd.service/kubepods-burstable-podff49d0be_16b7_4a49_bb9e"
    "_8ec1f1f4e27f.slice:cri-containerd:0f99ad5f45163ed14ab8eaf92ed34bb4a631d007f8755a7d79be614bcb"
    "0df0ef\n"
)
# duckdb/duckdb#16608 (2025-03-13): /proc/self/cgroup "on a kubernetes pod with docker", cgroup
# v1, cgroupfs driver, burstable (three of its lines).
DOCKER_V1_CGROUPFS = (
    "12:rdma:/\n"
    "11:freezer:/kubepods/burstable/podc101fead-5fa2-4525-97af-5894973b336e/2b7a2f7fb72575bb50a46d"
    "68cceaf43a12a597184714cb33af2f6420f5314293\n"
    "10:pids:/kubepods/burstable/podc101fead-5fa2-4525-97af-5894973b336e/2b7a2f7fb72575bb50a46d68c"
    "ceaf43a12a597184714cb33af2f6420f5314293\n"
)
# containers/crun#729: a mountinfo line's cgroup root for name=systemd, cgroupfs driver,
# besteffort; written here as the /proc/PID/cgroup line for that path.
CGROUPFS_BESTEFFORT = (
    "1:name=systemd:/kubepods/besteffort/pod85401dd3-38cd-47b6-a90a-e16c0e1c06e6/dbc9f149296cec5d1"
    "2b78385eb5b2c0cfe20b476f117c15c76d981cff44053c1\n"
)
# kata-containers/kata-containers#11598: `systemctl show` ControlGroup= of a guaranteed pod's
# container (systemd driver, cgroup v2, containerd); written as the unified-hierarchy line.
GUARANTEED_V2 = (
    "0::/kubepods.slice/kubepods-poddc430cd3_34b7_4ea6_be26_ddfd88d7ddff.slice/cri-containerd-856"
    "4224395a4fbf7f2792baa22ee16dfc8f8e862e20342d3b2bcc211a3939af6.scope\n"
)
# containerd/nri#227: a container's cgroup on a kind node (kubelet.slice nesting), cgroup v2.
KIND_V2 = (
    "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-b"
    "esteffort-pod1e597579_417e_482f_bf65_5fe170c3aebd.slice/cri-containerd-a09bc17f5aa29b0dbdec9e"
    "de5f46cf1396d2405917ab02e6f1eb1019f388396e.scope\n"
)
# The same seen from a pod with its own cgroup namespace (hostPID): the kernel prints the path
# relative to the reader's cgroup (Documentation/admin-guide/cgroup-v2.rst, "Namespace"), so
# it starts with "/..". The pod's slice and scope are from kubernetes/minikube#11280 (its
# systemd-cgls tree, CRI-O, besteffort), the "/../.." prefix as the kernel writes it.
CGROUPNS_RELATIVE = (
    "0::/../../kubepods-besteffort.slice/kubepods-besteffort-podae7a96fb_2bdc_46b0_96e2_78e4af948"
    "47b.slice/crio-89e8f450417b56acf3089925dfd8f050dd50e950e18cfe83ea923269df601102.scope\n"
)
# netdata/netdata#4868: a static pod's slice (its UID is a hash without dashes).
STATIC_POD_V1 = (
    "4:blkio:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod187bff14cccb94f179e943"
    "eacce55bb3.slice/cri-containerd-c203a2647ef1ad78e990157c50331f3b6ef0b03336cf08535d6bf7faa5421"
    "415.scope\n"
)


@pytest.mark.parametrize(
    ("text", "uid", "unit"),
    [
        pytest.param(
            CRIO_V1_BURSTABLE,
            "a5c1f8d5-1919-434d-add7-4afaafdaef89",
            "cri-o://5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c",
            id="crio-v1-systemd-burstable",
        ),
        pytest.param(
            CONTAINERD_V1_COLON,
            "0125ec2f-b64a-4868-8f5b-94b56cbab864",
            "containerd://ee4b20e90ac7f42a10bd004d05646b13d8ab5e2c5e7cbc01abf8006bac016459",
            id="containerd-v1-colon-besteffort",
        ),
        pytest.param(
            CONTAINERD_V1_NAME_SYSTEMD,
            "ff49d0be-16b7-4a49-bb9e-8ec1f1f4e27f",
            "containerd://0f99ad5f45163ed14ab8eaf92ed34bb4a631d007f8755a7d79be614bcb0df0ef",
            id="containerd-v1-name-systemd",
        ),
        pytest.param(
            DOCKER_V1_CGROUPFS,
            "c101fead-5fa2-4525-97af-5894973b336e",
            "2b7a2f7fb72575bb50a46d68cceaf43a12a597184714cb33af2f6420f5314293",
            id="cgroupfs-v1-burstable",
        ),
        pytest.param(
            CGROUPFS_BESTEFFORT,
            "85401dd3-38cd-47b6-a90a-e16c0e1c06e6",
            "dbc9f149296cec5d12b78385eb5b2c0cfe20b476f117c15c76d981cff44053c1",
            id="cgroupfs-v1-besteffort",
        ),
        pytest.param(
            GUARANTEED_V2,
            "dc430cd3-34b7-4ea6-be26-ddfd88d7ddff",
            "containerd://8564224395a4fbf7f2792baa22ee16dfc8f8e862e20342d3b2bcc211a3939af6",
            id="systemd-v2-guaranteed",
        ),
        pytest.param(
            KIND_V2,
            "1e597579-417e-482f-bf65-5fe170c3aebd",
            "containerd://a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e",
            id="kind-v2",
        ),
        pytest.param(
            CGROUPNS_RELATIVE,
            "ae7a96fb-2bdc-46b0-96e2-78e4af94847b",
            "cri-o://89e8f450417b56acf3089925dfd8f050dd50e950e18cfe83ea923269df601102",
            id="cgroup-namespace-relative",
        ),
        pytest.param(
            STATIC_POD_V1,
            "187bff14cccb94f179e943eacce55bb3",
            "containerd://c203a2647ef1ad78e990157c50331f3b6ef0b03336cf08535d6bf7faa5421415",
            id="static-pod",
        ),
    ],
)
def test_pod_uid_and_container_from_real_cgroup_texts(text: str, uid: str, unit: str) -> None:
    assert pod_uid_from_cgroup(text) == uid
    assert unit_from_cgroup(text) == unit


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("0::/system.slice/vllm.service\n", id="systemd-service"),
        pytest.param("0::/docker/" + "ab" * 32 + "\n", id="plain-docker"),
        # A folder named like a pod outside the kubepods tree is somebody else's.
        pytest.param("0::/batch/podc101fead-5fa2-4525-97af-5894973b336e/x\n", id="not-kubepods"),
        # The QoS slices above the pod name no pod.
        pytest.param("0::/kubepods.slice/kubepods-burstable.slice\n", id="qos-slice-only"),
        pytest.param("garbage without colons\n", id="garbage"),
    ],
)
def test_no_pod_outside_kubernetes(text: str) -> None:
    assert pod_uid_from_cgroup(text) is None


def test_cache_reads_pod_once_and_forgets_exited_processes(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(GUARANTEED_V2)
    cache = UnitCache(tmp_path)
    expected = Origin(
        "containerd://8564224395a4fbf7f2792baa22ee16dfc8f8e862e20342d3b2bcc211a3939af6",
        "dc430cd3-34b7-4ea6-be26-ddfd88d7ddff",
    )
    assert cache.origin(42) == expected
    (tmp_path / "42" / "cgroup").write_text("0::/system.slice/other.service\n")
    assert cache.origin(42) == expected  # cached: read once per process
    cache.retain([])
    assert cache.origin(42) == Origin("other.service", None)
    assert cache.origin(7) == Origin("", None)  # no such process
