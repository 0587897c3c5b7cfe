# swiftcore: two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install --disable-pip-version-check -q -c constraints.txt
# Every plugin distribution in the repository (a folder with a pyproject.toml under these roots).
PLUGIN_DISTS := $(sort $(dir $(wildcard template_plugins/*/pyproject.toml model_plugins/*/pyproject.toml plugins/*/pyproject.toml megatron_bridges/*/pyproject.toml)))
STAMP  := $(VENV)/.installed
# What `make lint` type-checks (tests/test_types.py checks the same list): the core and the library distributions.
TYPED  := core/src/swiftcore plugins/train/src/swiftcore_train plugins/infer/src/swiftcore_infer \
  plugins/data/src/swiftcore_data plugins/media/src/swiftcore_media plugins/megatron/src/swiftcore_megatron \
  megatron_bridges/gpt/src/swiftcore_bridge_gpt plugins/tiny/src/swiftcore_tiny plugins/testing/src/swiftcore_testing

.PHONY: install test test-all demo lint bench clean

install: $(STAMP)

$(STAMP): constraints.txt Makefile core/pyproject.toml $(addsuffix pyproject.toml,$(PLUGIN_DISTS)) plugins/backend_vllm/requirements-cpu.txt plugins/eval/requirements-evalscope.txt plugins/eagle3/requirements-speculators.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip setuptools wheel
	# torch first, pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PIP) torch==2.13.0
	$(PIP) --no-build-isolation -e './core[train,serve,test]' $(foreach d,$(PLUGIN_DISTS),-e ./$(d)) pytest pytest-xdist pytest-timeout ruff openai httpx matplotlib sentence-transformers schemathesis import-linter playwright \
	  deepspeed ray opentelemetry-api deptry twine check-wheel-contents build uv mypy
	# vLLM's CPU build, pinned, without dependencies: its metadata would pull CUDA torchvision/triton wheels
	# that break a CPU torch (see plugins/backend_vllm/requirements-cpu.txt).
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -r plugins/backend_vllm/requirements-cpu.txt
	# EvalScope (swiftcore eval), pinned, without dependencies: its modelscope[datasets] caps datasets below our pin
	# (see plugins/eval/requirements-evalscope.txt).
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -r plugins/eval/requirements-evalscope.txt
	# speculators (swiftcore-plugin-eagle3), pinned, without dependencies: it declares CUDA torchvision/torchaudio and
	# caps datasets below our pin (see plugins/eagle3/pyproject.toml).
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -r plugins/eagle3/requirements-speculators.txt
	touch $(STAMP)

# --durations: CI's log names the slowest tests, so a suite growing toward CI's 90 minutes shows where.
# --no-loadscope-reorder: the workers take the modules in the order conftest.py plans from tests/module_seconds.json
# (scripts/suite_order.py: longest first, rank-lock modules spread out), not xdist's most-tests-first.
# make test is CI's tier: every test but those marked `extended` (second proofs of paths it already proves, too slow
# for CI's 90 minutes on the slower CI machines); make test-all runs those too (docs/testing.md, "Two tiers").
TEST_TIER ?= -m "not extended"
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=30 $(TEST_TIER); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

test-all: install
	$(MAKE) test TEST_TIER=

demo: install
	$(BIN)/python -m swiftcore.demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check core/src
	$(BIN)/lint-imports pyproject.toml
	# Every distribution declares what its sources import (deptry, one distribution at a time).
	$(BIN)/python scripts/check_deps.py
	# The typed spine: the core and the library distributions' faces (mypy, settings in pyproject.toml).
	$(BIN)/mypy $(TYPED)

# py-spy profiles the figures that miss a goal (figures 12 and 15); only the benchmarks need it.
bench: install
	$(PIP) py-spy
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
