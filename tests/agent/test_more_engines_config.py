"""check-config accepts every engine gpuwatch maps, and the config's list is the registry's."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.targets import ENGINES
from collectors.engines import ollama
from collectors.engines.registry import ENGINES as MAPPED


def test_the_configurable_engines_are_exactly_those_with_a_mapper() -> None:
    assert set(ENGINES) == {"auto", *MAPPED, ollama.NAME}


@pytest.mark.parametrize("engine", ["triton", "nim", "lmdeploy", "dynamo", "ollama"])
def test_check_config_accepts_each_new_engine(
    engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "box"\n[[targets]]\nname = "{engine}-1"\n'
        f'url = "http://127.0.0.1:8000/metrics"\nengine = "{engine}"\n'
    )
    assert main(["check-config", "--config", str(path)]) == 0
    assert "OK (host box" in capsys.readouterr().out


def test_check_config_names_the_new_engines_when_one_is_misspelt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        '[[targets]]\nname = "t"\nurl = "http://127.0.0.1:8000/metrics"\nengine = "tritn"\n'
    )
    assert main(["check-config", "--config", str(path)]) != 0
    err = capsys.readouterr().err
    assert "targets[0].engine: unknown engine 'tritn'" in err
    assert "triton, nim, lmdeploy, dynamo, ollama" in err
