"""Render the kustomizations under deploy/kubernetes and validate their objects offline.

Rendering runs the real ``kubectl kustomize`` ($GPUWATCH_KUBECTL, else the first on PATH: Debian's
kubernetes-client, which `make test` installs as root); without one the tests skip and say so.
Built-in kinds are checked against Kubernetes' own OpenAPI schemas (the kubernetes-validate
package, strict: an unknown field is an error, as `kubectl apply --validate=strict` makes it);
the prometheus-operator's kinds against the schemas of its CRDs (crds/README.md), made strict
the same way, since the API server's field validation rejects unknown fields there too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
CRDS = Path(__file__).parent / "crds"
# The oldest and the newest Kubernetes whose schemas kubernetes-validate carries.
VERSIONS = ("1.25.0", kubernetes_validate.latest_version())

Obj = dict[str, Any]


def kubectl() -> str:
    found = os.environ.get("GPUWATCH_KUBECTL") or shutil.which("kubectl")
    if not found:
        pytest.skip(
            "kubectl not found: install Debian's kubernetes-client (make test does, as root)"
        )
    return found


@cache
def render(folder: Path) -> tuple[Obj, ...]:
    """The objects ``kubectl kustomize folder`` prints (it fails the test when kustomize does)."""
    done = subprocess.run([kubectl(), "kustomize", str(folder)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, f"kubectl kustomize {folder} failed:\n{done.stderr}"
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d is not None)


def one(objects: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def validate(obj: Obj, version: str) -> None:
    """Raise ValidationError when ``obj`` does not fit its kind's schema."""
    if obj["apiVersion"].startswith("monitoring.coreos.com/"):
        # OpenAPI v3 schemas are JSON Schema draft 4 with extensions (x-kubernetes-*), which
        # validators ignore.
        jsonschema.Draft4Validator(crd_schema(obj["kind"], obj["apiVersion"])).validate(obj)
    else:
        kubernetes_validate.validate(obj, version, strict=True)


@cache
def crd_schema(kind: str, api_version: str) -> Obj:
    group, version = api_version.split("/")
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        if crd["spec"]["names"]["kind"] != kind or crd["spec"]["group"] != group:
            continue
        for served in crd["spec"]["versions"]:
            if served["name"] == version:
                schema = strict(served["schema"]["openAPIV3Schema"])
                jsonschema.Draft4Validator.check_schema(schema)
                return schema
    raise LookupError(f"no CRD for {kind} {api_version} under {CRDS}")


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists its fields (and does not ask
    to keep unknown ones), as the API server's strict field validation does."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    pattern = out.get("pattern")
    if isinstance(pattern, str) and pattern.startswith("^(?i)"):
        # Go's regexp takes a flag group anywhere; Python's only at the start.
        out["pattern"] = "(?i)^" + pattern.removeprefix("^(?i)")
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out
