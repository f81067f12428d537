"""Every object the kustomizations render fits its kind's schema: Kubernetes' own for built-in
kinds, the prometheus-operator's CRDs for ServiceMonitor and PrometheusRule (see kube.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest

from tests.deploy.kube import BASE, KUBERNETES, VERSIONS, one, render, validate

FOLDERS = [BASE, *(KUBERNETES / "overlays" / name for name in ("central-postgres", "kubelet-root"))]


def test_the_base_renders_every_object_a_node_needs() -> None:
    kinds = sorted(o["kind"] for o in render(BASE))
    assert kinds == ["ConfigMap", "DaemonSet", "Namespace", "PrometheusRule", "Service",
                     "ServiceAccount", "ServiceMonitor"]  # fmt: skip
    namespaced = [o for o in render(BASE) if o["kind"] != "Namespace"]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"gpuwatch"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_every_object_fits_its_schema(folder: Path, version: str) -> None:
    for obj in render(folder):
        try:
            validate(obj, version)
        except jsonschema.ValidationError as exc:
            pytest.fail(f"{folder.name}: {obj['kind']} {obj['metadata']['name']} on "
                        f"Kubernetes {version}: {exc.message}")  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "spoil"),
    [
        # A field misspelled where Kubernetes' schema is strict...
        ("DaemonSet", lambda o: o["spec"]["template"]["spec"].update(hostPid=True)),
        # ...a value of the wrong type...
        ("Service", lambda o: o["spec"]["ports"][0].update(port="9877")),
        # ...and the same in the CRDs' schemas.
        ("ServiceMonitor", lambda o: o["spec"]["endpoints"][0].update(honorlabels=True)),
        ("PrometheusRule", lambda o: o["spec"]["groups"][0].update(rules="none")),
    ],
    ids=["unknown field", "wrong type", "CRD unknown field", "CRD wrong type"],
)
def test_a_spoiled_object_is_refused(kind: str, spoil: object) -> None:
    obj = copy.deepcopy(one(render(BASE), kind))
    spoil(obj)  # type: ignore[operator]
    with pytest.raises(jsonschema.ValidationError):
        validate(obj, VERSIONS[-1])
