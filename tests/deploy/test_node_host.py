"""$GPUWATCH_HOST names the host: a DaemonSet's pods share one file, and their hostnames are pod
names that change at every restart, so the manifests pass the node's name this way."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config.settings import ConfigError, load_config


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(text)
    return str(path)


def test_the_environment_names_the_host_over_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, 'host = "from-the-file"\n')
    assert load_config(path, {"GPUWATCH_HOST": "gpu-node-7"}).host == "gpu-node-7"
    assert load_config(path, {}).host == "from-the-file"


@pytest.mark.parametrize("value", ["", "  ", "node\x1b[2J"])
def test_a_bad_host_from_the_environment_is_refused_by_its_name(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_file(tmp_path, ""), {"GPUWATCH_HOST": value})
    (problem,) = caught.value.problems
    assert problem.startswith("GPUWATCH_HOST: expected a host name without control characters")
    assert "\x1b" not in problem  # shown escaped: an environment cannot drive the terminal
