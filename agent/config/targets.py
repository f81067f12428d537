"""The ``[[targets]]`` array: the inference engines (and dcgm-exporter) a box scrapes.

[[targets]]
name = "llama-8b"                            # the `target` label on /metrics and in reports
url = "http://127.0.0.1:8000/metrics"
engine = "auto"                              # or one of ENGINES
bearer_token_env = "VLLM_API_KEY"            # optional; or bearer_token_file
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.config import teams
from agent.config.limits import parse_limits
from agent.config.reader import Reader, shown
from agent.config.secret import Secret
from collectors.limits import LIMIT_KEYS, ScrapeLimits
from foundation.printable import printable

DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024
ENGINES = (
    *("auto", "vllm", "sglang", "tgi", "llamacpp", "dcgm"),
    *("triton", "nim", "lmdeploy", "dynamo", "ollama"),  # collectors/engines: docs/engines.md
)
MAX_TARGETS = 1000  # each is a scrape and an HTTP client every tick; a box serves a handful
MAX_TIMEOUT = 3600.0  # a scrape, the database deadline, the central database
MIN_RESPONSE_BYTES, MAX_RESPONSE_BYTES = 1024, 2**31  # a /metrics answer, 1 KiB to 2 GiB


@dataclass(frozen=True, slots=True)
class TargetConfig:
    name: str
    url: str
    engine: str = "auto"
    bearer_token: Secret | None = None
    timeout_seconds: float = 5.0
    model: str | None = None  # names the model for engines that do not label it (TGI, llama.cpp)
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    # Which GPUs serve this target: its systemd unit or container, or explicit GPUs (index/UUID).
    unit: str | None = None
    gpus: tuple[str, ...] = ()
    limits: ScrapeLimits = field(default_factory=ScrapeLimits)  # agent.config.limits
    team: str | None = None  # who pays for its GPU time (agent.config.teams)
    project: str | None = None


def parse_targets(r: Reader, top: dict[str, Any]) -> tuple[TargetConfig, ...]:
    out: list[TargetConfig] = []
    names: set[str] = set()
    allowed = {"name", "url", "engine", "model", "bearer_token_env", "bearer_token_file",
               "timeout", "max_response_bytes", "unit", "gpus", *teams.LABEL_KEYS,
               *LIMIT_KEYS}  # fmt: skip
    items = r.array(top, "targets")
    if len(items) > MAX_TARGETS:
        r.problem("targets", f"at most {MAX_TARGETS} targets per host, got {len(items)}")
        return ()
    for i, item in enumerate(items):
        path = f"targets[{i}]"
        t = r.table(item, path, allowed)
        name = r.optional_string(t, f"{path}.name")
        url = r.http_url(t, f"{path}.url")
        engine = r.string(t, f"{path}.engine", "auto")
        if name is None:
            r.problem(f"{path}.name", "missing (every target needs a unique name)")
        elif name in names:
            r.problem(f"{path}.name", f"duplicate target name {name!r}")
        elif not name.strip() or printable(name) != name:
            # The name is the `target` label on /metrics and in every report.
            r.problem(
                f"{path}.name", f"expected a name without control characters, got {shown(name)}"
            )
        if f"{path}.url" not in t:
            r.problem(f"{path}.url", "missing (the engine's /metrics URL)")
        if engine not in ENGINES:
            r.problem(f"{path}.engine", f"unknown engine {engine!r} (one of {', '.join(ENGINES)})")
        token = r.secret(t, f"{path}.bearer_token")
        timeout = r.duration(t, f"{path}.timeout", 5.0, maximum=MAX_TIMEOUT)
        model = r.optional_string(t, f"{path}.model")
        cap = r.number(
            t, f"{path}.max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES, positive=True,
            minimum=MIN_RESPONSE_BYTES, maximum=MAX_RESPONSE_BYTES, unit=" bytes",
        )  # fmt: skip
        unit = r.optional_string(t, f"{path}.unit")
        gpus = _gpu_list(r, t, f"{path}.gpus")
        limits = parse_limits(r, t, path)
        team, project = (teams.label_value(r, t, f"{path}.{k}") for k in teams.LABEL_KEYS)
        if name is not None and url is not None:
            names.add(name)
            out.append(TargetConfig(name, url, engine, token, timeout, model, int(cap), unit, gpus,
                                    limits, team, project))  # fmt: skip
    return tuple(out)


def _gpu_list(r: Reader, t: dict[str, Any], key: str) -> tuple[str, ...]:
    value = t.get(key, [])
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int | str) and not isinstance(v, bool) for v in items):
        r.problem(key, f'expected GPU indexes or UUIDs like [0, 1] or ["GPU-..."], got {value!r}')
        return ()
    return tuple(str(v) for v in items)
