"""The ``[[slo]]`` array: values, which objective a model gets, and every mistake named with its
key path by `check-config`."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.settings import Config, ConfigError, load_config
from agent.config.slo import SloConfig, objective_for


def load(tmp_path: Path, toml: str) -> Config:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(toml)
    return load_config(str(path), {})


def problems(tmp_path: Path, toml: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, toml)
    return info.value.problems


def slo(model: str = "*", objective: float = 0.99, **seconds: float) -> SloConfig:
    get = seconds.get
    return SloConfig(model, get("ttft"), get("itl"), get("e2e"), get("queue"), objective)


def test_without_the_array_there_are_no_objectives(tmp_path: Path) -> None:
    assert load(tmp_path, "").slos == ()


def test_every_threshold_in_seconds_with_sub_second_durations(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[[slo]]
model = "llama-8b"
ttft = "500ms"
itl = "50ms"
e2e = "1m30s"
queue = "1s"
objective = 0.99

[[slo]]
e2e = "10s"
objective = 0.9
""",
    )
    assert config.slos == (
        SloConfig("llama-8b", 0.5, 0.05, 90.0, 1.0, 0.99),
        SloConfig("*", None, None, 10.0, None, 0.9),
    )
    assert config.slos[0].thresholds() == {"ttft": 0.5, "itl": 0.05, "e2e": 90.0, "queue": 1.0}
    assert config.slos[1].thresholds() == {"e2e": 10.0}


def test_the_edges_are_accepted(tmp_path: Path) -> None:
    config = load(tmp_path, '[[slo]]\nitl = "1ms"\nqueue = "1h"\nobjective = 0.999999\n')
    assert config.slos == (SloConfig("*", None, 0.001, None, 3600.0, 0.999999),)


def test_a_model_gets_its_own_objective_else_the_catch_all_else_none() -> None:
    catch_all, llama = slo(e2e=10.0), slo("llama-8b", 0.999, ttft=0.5)
    assert objective_for((catch_all, llama), "llama-8b") is llama
    assert objective_for((llama, catch_all), "llama-8b") is llama
    assert objective_for((catch_all, llama), "qwen-7b") is catch_all
    assert objective_for((llama,), "qwen-7b") is None
    assert objective_for((), "llama-8b") is None
    # "*" is the catch-all's name, not a pattern: a model's own entry is matched exactly.
    assert objective_for((llama,), "llama") is None


@pytest.mark.parametrize(
    ("toml", "key", "says"),
    [
        ('[[slo]]\nttft = "0"\nobjective = 0.99\n', "slo[0].ttft", "longer than 0"),
        ('[[slo]]\nttft = "0ms"\nobjective = 0.99\n', "slo[0].ttft", "longer than 0"),
        ('[[slo]]\ne2e = "2h"\nobjective = 0.99\n', "slo[0].e2e", "at most 1h"),
        ('[[slo]]\ne2e = "500m"\nobjective = 0.99\n', "slo[0].e2e", "at most 1h"),
        ('[[slo]]\nitl = "0.5s"\nobjective = 0.99\n', "slo[0].itl", "expected a duration"),
        ('[[slo]]\nqueue = "1 s"\nobjective = 0.99\n', "slo[0].queue", "expected a duration"),
        ("[[slo]]\nttft = 500\nobjective = 0.99\n", "slo[0].ttft", "write the unit"),
        ("[[slo]]\nttft = 0.5\nobjective = 0.99\n", "slo[0].ttft", 'like "500ms"'),
        ("[[slo]]\nttft = true\nobjective = 0.99\n", "slo[0].ttft", "expected a duration"),
        ('[[slo]]\nttft = "1s"\n', "slo[0].objective", "missing"),
        ('[[slo]]\nttft = "1s"\nobjective = 1\n', "slo[0].objective", "no error budget"),
        ('[[slo]]\nttft = "1s"\nobjective = 1.0\n', "slo[0].objective", "use e.g. 0.999"),
        ('[[slo]]\nttft = "1s"\nobjective = 99\n', "slo[0].objective", "did you mean 0.99?"),
        ('[[slo]]\nttft = "1s"\nobjective = 99.9\n', "slo[0].objective", "did you mean 0.999?"),
        ('[[slo]]\nttft = "1s"\nobjective = 0\n', "slo[0].objective", "greater than 0 and less"),
        ('[[slo]]\nttft = "1s"\nobjective = -0.5\n', "slo[0].objective", "less than 1"),
        ('[[slo]]\nttft = "1s"\nobjective = 100\n', "slo[0].objective", "less than 1, got 100"),
        ('[[slo]]\nttft = "1s"\nobjective = nan\n', "slo[0].objective", "got nan"),
        ('[[slo]]\nttft = "1s"\nobjective = inf\n', "slo[0].objective", "got inf"),
        (
            '[[slo]]\nttft = "1s"\nobjective = ' + "9" * 400 + "\n",
            "slo[0].objective",
            "less than 1",
        ),
        ('[[slo]]\nttft = "1s"\nobjective = "99%"\n', "slo[0].objective", "expected a number"),
        ('[[slo]]\nttft = "1s"\nobjective = true\n', "slo[0].objective", "expected a number"),
        ("[[slo]]\nobjective = 0.99\n", "slo[0]", "at least one of ttft, itl, e2e, queue"),
        ('[[slo]]\nmodel = ""\ne2e = "1s"\nobjective = 0.9\n', "slo[0].model", "model name"),
        ('[[slo]]\nmodel = " "\ne2e = "1s"\nobjective = 0.9\n', "slo[0].model", "model name"),
        ('[[slo]]\nmodel = "a\\u0000"\ne2e = "1s"\nobjective = 0.9\n', "slo[0].model", "\\x00"),
        ('[[slo]]\nmodel = 8\ne2e = "1s"\nobjective = 0.9\n', "slo[0].model", "expected a string"),
        ('[[slo]]\nttl = "1s"\nobjective = 0.9\nitl = "1s"\n', "slo[0].ttl", "unknown key"),
        ("slo = 5\n", "slo", "expected an array of tables ([[slo]])"),
        ('[slo]\nttft = "1s"\nobjective = 0.9\n', "slo", "expected an array of tables"),
        ("slo = [1]\n", "slo[0]", "expected a table, got an integer"),
    ],
)
def test_a_mistake_is_named_with_its_key(tmp_path: Path, toml: str, key: str, says: str) -> None:
    (found,) = problems(tmp_path, toml)
    assert found.startswith(f"{key}: ") and says in found, found


def test_an_empty_entry_lacks_both_a_threshold_and_an_objective(tmp_path: Path) -> None:
    assert [p.split(":", 1)[0] for p in problems(tmp_path, "[[slo]]\n")] == [
        "slo[0].objective",
        "slo[0]",
    ]


def test_a_wrong_threshold_is_not_also_a_missing_one(tmp_path: Path) -> None:
    (found,) = problems(tmp_path, '[[slo]]\nttft = "fast"\nobjective = 0.99\n')
    assert found.startswith("slo[0].ttft: ")


@pytest.mark.parametrize(
    ("model", "whose"), [('"llama-8b"', "'llama-8b'"), ('"*"', "every other model")]
)
def test_two_objectives_for_one_model_name_both_entries(
    tmp_path: Path, model: str, whose: str
) -> None:
    entry = f'[[slo]]\nmodel = {model}\ne2e = "10s"\nobjective = 0.99\n'
    other = '[[slo]]\nmodel = "qwen"\ne2e = "10s"\nobjective = 0.99\n'
    (found,) = problems(tmp_path, entry + other + entry)
    assert found == f"slo[2].model: duplicate: slo[0] already sets the objective for {whose}"


def test_a_missing_model_is_the_catch_all_and_clashes_with_an_explicit_one(
    tmp_path: Path,
) -> None:
    toml = (
        '[[slo]]\ne2e = "1s"\nobjective = 0.9\n[[slo]]\nmodel = "*"\nitl = "1s"\nobjective = 0.9\n'
    )
    (found,) = problems(tmp_path, toml)
    assert found.startswith("slo[1].model: duplicate: slo[0]"), found


def test_check_config_lists_every_slo_problem_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        """
[[slo]]
model = "llama-8b"
ttft = "500ms"
objective = 0.99

[[slo]]
model = "llama-8b"
ttft = 500
objective = 99

[[slo]]
objective = 1
"""
    )
    assert main(["check-config", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuwatch: 5 problem(s) in {path}:\n"), err
    for line in (
        "slo[1].model: duplicate: slo[0] already sets the objective for 'llama-8b'",
        "slo[1].ttft: expected a duration string",
        "slo[1].objective: must be greater than 0 and less than 1, got 99; did you mean 0.99?",
        "slo[2].objective: an objective of 1 leaves no error budget; use e.g. 0.999",
        "slo[2]: no threshold: set at least one of ttft, itl, e2e, queue",
    ):
        assert f"  {path}: {line}" in err, err


def test_check_config_accepts_objectives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text('[[slo]]\nttft = "500ms"\nitl = "50ms"\nobjective = 0.99\n')
    assert main(["check-config", "--config", str(path)]) == 0
    assert "OK" in capsys.readouterr().out
