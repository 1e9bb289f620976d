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

# The local LLM engine is compiled here (no wheel on PyPI) and must run on any x86-64 machine of this
# kind: these VMs advertise AMX and AVX-512 that the hypervisor may not allow, so a native build
# (-march=native) dies with an invalid opcode on its first completion. Build with an explicit, safe
# instruction set, into a wheel folder keyed by version + flags, never through pip's own wheel cache
# (which is keyed by the sdist alone and could hand back a native build made elsewhere).
LLAMA_CPP_VERSION ?= 0.3.36
GGML_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
LLAMA_WHEELS := $(HOME)/.cache/agentscaler/llama-cpp-$(LLAMA_CPP_VERSION)-$(shell echo "$(GGML_CMAKE_ARGS)" | sha256sum | cut -c1-10)

.PHONY: install sysdeps llama demo test bench smoke clean

$(STAMP): pyproject.toml
	@{ command -v bwrap && ls /usr/lib/postgresql/*/bin/pg_ctl; } >/dev/null 2>&1 || $(MAKE) sysdeps
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel
	# torch pinned to the CPU build on disk; everything else from PyPI.
	$(BIN)/pip install -q "torch==2.13.0"
	$(MAKE) llama
	$(BIN)/pip install -q -e ".[embed,llm,train,dev,postgres]"
	# DeepSpeed builds no ops on CPU and must see the pinned torch (no build isolation).
	DS_BUILD_OPS=0 $(BIN)/pip install -q --no-build-isolation "deepspeed>=0.15"
	touch $(STAMP)

install: $(STAMP)

llama:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || { \
	  echo "building llama-cpp-python $(LLAMA_CPP_VERSION) portably (about 6 minutes, once per machine)"; \
	  CMAKE_ARGS="$(GGML_CMAKE_ARGS)" FORCE_CMAKE=1 $(BIN)/pip wheel -q --no-cache-dir --no-deps \
	    --no-binary llama-cpp-python -w $(LLAMA_WHEELS).tmp "llama-cpp-python==$(LLAMA_CPP_VERSION)" && \
	  rm -rf $(LLAMA_WHEELS) && mv $(LLAMA_WHEELS).tmp $(LLAMA_WHEELS); }
	# The server extra's dependencies come from PyPI; the engine only from the portable wheel.
	$(BIN)/pip install -q "$$(ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl)[server]"

sysdeps:
	# bubblewrap: the sandbox's namespace layer (Debian). Needs root, as on CI and dev machines.
	(apt-get update -qq && apt-get install -y -qq bubblewrap) || echo "warning: could not install bubblewrap"
	# docker-compose: `compose config` checks docker-compose.yml in tests/deployments (no engine needed).
	apt-get install -y -qq docker-compose || echo "warning: could not install docker-compose"
	# postgresql: the catalog-on-a-server test starts its own cluster in a temporary folder (no service).
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql || echo "warning: could not install postgresql"

demo: install
	$(BIN)/agentscaler --workspace workspace demo

# The local model must generate on this machine before anything else is tested: the smoke check scans
# the engine's libraries for instructions outside the portable set and gets one real completion.
smoke: install
	$(BIN)/python -m agentscaler.llm_server --smoke

test: install smoke
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15

# Every benchmark script in its own process (quick, bounded runs by default; FULL=1 for full runs;
# BENCH=name for one, e.g. BENCH=tau2, or BENCH=closed_loop ARGS="--workspace ws"), then the README figures table is
# rebuilt from benchmarks/results/*.json. Quick mode: 923 s and 1,110 s measured on the shared 2-core
# machine (load 14-23), bench_faults about half of it; at most 900 s per script.
bench: install
	$(BIN)/python benchmarks/run_all.py $(if $(BENCH),--only $(BENCH)) $(if $(FULL),--full) $(if $(ARGS),--args "$(ARGS)")

clean:
	rm -rf workspace .pytest_cache
