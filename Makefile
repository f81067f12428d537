# gpuwatch: every target does its own set-up on a fresh Debian machine with Python 3.11.
#   make run    virtualenv, install gpuwatch as users do (`pip install .`: a copy, runtime
#               dependencies only), run the daemon on the embedded SQLite default
#   make test   virtualenv, editable install with the test extra, fake NVML library, throwaway
#               PostgreSQL (and, as root, Debian's prometheus + prometheus-alertmanager), the
#               whole suite on both databases (but the slow fault loops)
#   make test-faults  the slow fault loops against the real daemon and a PostgreSQL of their
#               own (kill -9 around forwarding, a real full disk as root); .ci/run runs it
#   make demo   virtualenv, install gpuwatch as users do with its demo extra (nvml.h for the
#               simulated NVML library the demo compiles with gcc), then `gpuwatch demo`
#               (DEMO_ARGS=--live keeps the daemon running after it)
#   make test-demo  the default month of the demo, end to end (slow); .ci/run runs it
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
PACKAGE_FILES := $(shell find agent collectors alerts migrations -not -path '*/__pycache__*')
FAKENVML := build/fakenvml/libnvidia-ml.so.1
# pytest-xdist workers: one more than the cores, because many tests spend seconds waiting on a
# daemon, a server or PostgreSQL they started, and a waiting worker leaves its core idle. A test
# file stays on one worker (--dist loadfile), so the tests of a file never race each other for a
# port or a build folder.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))

.PHONY: venv run demo test test-faults test-systemd test-demo check lint typecheck bench prometheus-tools clean

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

# Debian's promtool and alertmanager make some tests real, and chromium renders the HTML report
# headless; installed only when we are root (CI and the dev machines are), otherwise those tests
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

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check agent collectors alerts migrations tests bench
	$(VENV)/bin/ruff format --check agent collectors alerts migrations tests bench

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

test-demo: $(TEST_STAMP)
	scripts/pytest-strict -m slow tests/demo/test_demo_month.py $(PYTEST_ARGS)

bench: $(TEST_STAMP) $(FAKENVML)
	GPUWATCH_FAKE_NVML_DIR=$(CURDIR)/build/fakenvml $(PY) bench/tick.py
	$(PY) bench/scrape.py

clean:
	rm -rf build dist gpuwatch.egg-info $(VENV) .pytest_cache .mypy_cache .ruff_cache
