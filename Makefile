# Two commands on a fresh machine: `make demo` and `make test`. Both install into .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements-lock.txt 2>/dev/null | sha256sum | cut -c1-12)
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export DS_BUILD_OPS := 0

.PHONY: install sysdeps demo test bench clean

$(STAMP): pyproject.toml
	@command -v bwrap >/dev/null 2>&1 || $(MAKE) sysdeps
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel
	# torch pinned to the CPU build on disk; everything else from PyPI.
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[embed,llm,train,dev]"
	# DeepSpeed builds no ops on CPU and must see the pinned torch (no build isolation).
	DS_BUILD_OPS=0 $(BIN)/pip install -q --no-build-isolation "deepspeed>=0.15"
	touch $(STAMP)

install: $(STAMP)

sysdeps:
	# bubblewrap: the sandbox's namespace layer (Debian). Needs root, as on CI and dev machines.
	(apt-get update -qq && apt-get install -y -qq bubblewrap) || echo "warning: could not install bubblewrap"

demo: install
	$(BIN)/agentscaler --workspace workspace demo

test: install
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: install
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf workspace .pytest_cache
