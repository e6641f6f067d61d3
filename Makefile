# kaisched: `make run` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/pip --disable-pip-version-check
# exact versions with hashes (requirements/lock.py): dev.txt for development and CI (runtime + dev + sim extras),
# lock.txt for the container image (runtime only)
DEV_LOCK := requirements/dev.txt

.PHONY: run test lint typecheck unit bench clean kube-apiserver operators helm compiled unit-compiled lock fuzz chromium prometheus

# The development environment: the locked versions and nothing else, then kaisched itself, editable, with no
# resolution of its own (hatchling, which builds it, is in the lock too). --no-deps: the lock already holds every
# transitive dependency, and pip's resolver, left to follow them, rejects a pinned package asked for with extras
# (lightkube's httpx2[http2,ws]) as soon as a newer release exists; `pip check` then proves the set is complete.
$(STAMP): pyproject.toml $(DEV_LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --require-hashes --no-deps -r $(DEV_LOCK)
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	$(PIP) check
	@touch $(STAMP)

# Re-resolve requirements/dev.txt and lock.txt after changing a dependency in pyproject.toml (the pins that still
# fit are kept); `make lock UPGRADE=1`: the newest versions within the ranges. tests/unit/test_packaging.py fails
# while the lock files are not resolved from the current pyproject.toml.
lock: $(STAMP)
	$(BIN)/python requirements/lock.py $(if $(UPGRADE),--upgrade)

# examples/cluster.yaml deliberately holds one PodGroup in a queue that does not exist, so that the output
# shows how input errors are reported (`kaisched schedule` exits 1 when the input had errors);
# examples/reclaim.yaml shows reclaim and preempt evicting for pending work.
run: $(STAMP)
	$(BIN)/kaisched schedule -f examples/cluster.yaml -o table --now 2026-01-01T02:00:00Z || test $$? -eq 1
	$(BIN)/kaisched schedule -f examples/reclaim.yaml -o table --now 2026-01-01T02:00:00Z
	$(BIN)/kaisched schedule -f examples/gpu-sharing.yaml -o table --now 2026-01-01T02:00:00Z
	$(BIN)/kaisched schedule -f examples/dra-gpus.yaml -o table --now 2026-01-01T02:00:00Z
	$(BIN)/kaisched simulate examples/simulation/three-teams.yaml -o sim-out

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks requirements hatch_build.py
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q

# The scheduling core compiled with mypyc into build/compiled (docs/performance.md; ~1.5 min, then only when a
# source changed). Use it with PYTHONPATH=build/compiled.
compiled: $(STAMP)
	scripts/compiled.sh build

# The compiled core decides as the sources do, and the whole suite passes on it.
unit-compiled: compiled
	$(BIN)/pytest -q -m compiled
	PYTHONPATH=build/compiled $(BIN)/pytest -q -p no:cacheprovider

# The contract tier (tests marked `kube`) runs against a real kube-apiserver v1.35.4 on Debian's etcd 3.4, built
# once from the Go module proxy and cached outside the repository (about 6 min on 2 cores with empty Go caches,
# instant afterwards; `scripts/kube-apiserver.sh version` names the version).
kube-apiserver:
	scripts/kube-apiserver.sh build

# The operator tier (tests marked `operators`, tests/operators) runs the real Kubeflow Training Operator and KubeRay
# operator on that API server, each built once from the Go module proxy and cached outside the repository with the
# CRDs of the same module versions (`scripts/operators.sh version` names them; build times in docs/workloads.md).
operators:
	scripts/operators.sh build

# helm (for the chart's lint/template tests), built once from the Go module proxy and cached likewise.
helm:
	scripts/helm.sh build

# Debian's chromium and chromium-driver for the dashboard's browser test (installed once when missing).
chromium:
	scripts/chromium.sh build

# Debian's Prometheus server for the time-based fair-share contract test (installed once when missing).
prometheus:
	scripts/prometheus.sh build

test: lint typecheck helm chromium unit unit-compiled kube-apiserver prometheus operators
	$(BIN)/python -m benchmarks --smoke
	$(BIN)/python -m benchmarks.dra --smoke
	$(BIN)/python -m benchmarks.busy --smoke
	$(BIN)/python -m benchmarks.fragmentation --smoke
	$(BIN)/python -m benchmarks.dashboard --smoke
	$(BIN)/python -m benchmarks.explain --smoke
	$(BIN)/python -m benchmarks.incremental --smoke
	$(BIN)/python -m benchmarks.kube_scale --smoke
	$(BIN)/python -m benchmarks.kube_client --smoke
	$(BIN)/pytest -q -rfEs -m kube
	$(BIN)/pytest -q -rfEs -m operators

# Nightly: every hypothesis test (tests/property, the unit ones: `-m hypothesis` under FUZZ_TESTS) with fresh random
# examples for FUZZ_MINUTES minutes (`make test` runs them derandomized: the same examples every run). Rounds of the
# whole selection, each with a new seed it prints first, started while time is left (`make fuzz FUZZ_MINUTES=5
# FUZZ_TESTS=tests/property`); the last one runs to its end, so that a failure found late is still shrunk and
# shown (a test may take 15 minutes, shrinking included). The first failure stops it, exit 1, with the falsifying
# example and the seed: `HYPOTHESIS_PROFILE=fuzz .venv/bin/pytest --hypothesis-seed=SEED TEST` replays that test's
# round (tests/conftest.py has the profiles).
FUZZ_MINUTES ?= 30
FUZZ_TESTS ?= tests
fuzz: $(STAMP)
	@end=$$(( $$(date +%s) + 60 * $(FUZZ_MINUTES) )); round=0; \
	while left=$$(( end - $$(date +%s) )); [ $$left -gt 0 ]; do \
	  round=$$(( round + 1 )); seed=$$(od -An -N8 -tu8 /dev/urandom | tr -d ' '); \
	  echo "fuzz round $$round ($$left s left): --hypothesis-seed=$$seed"; \
	  HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q -x -p no:cacheprovider --timeout=900 -m hypothesis \
	    --hypothesis-seed=$$seed $(FUZZ_TESTS) || { status=$$?; \
	    echo "fuzz: round $$round failed (exit $$status); replay it with HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest" \
	         "--hypothesis-seed=$$seed and the failed test"; exit 1; }; \
	done; echo "fuzz: $$round round(s) in $(FUZZ_MINUTES) min or a little more, no failure"

# the benchmarks on the core kaisched ships (compiled with mypyc, docs/performance.md); `.venv/bin/python -m
# benchmarks` runs them on the interpreted sources; then issue 28's write path (kaisched's burst against a plain
# client's in one run on one kube-apiserver, and a steady 100 pods/s), reported even when a target is missed
bench: compiled
	PYTHONPATH=build/compiled $(BIN)/python -m benchmarks
	-PYTHONPATH=build/compiled $(BIN)/python -m benchmarks.kube_scale --nodes 200 --pods 400 --burst 1000 --steady-seconds 5

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build/compiled
