# The two commands a fresh machine needs: `make demo` and `make test`.
# Both create or refresh .venv from pyproject.toml first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast lint proto docs bench compat compat-torch gpu-bench clean

venv: $(STAMP)

# torch is pinned here (a local CPU wheel); pyproject keeps a normal range for users.
$(STAMP): pyproject.toml
	@echo "make venv: setting up $(VENV) from pyproject.toml (a few minutes the first time)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "make venv: [1/4] pip"
	$(PY) -m pip install -q --upgrade pip
	@echo "make venv: [2/4] torch 2.13.0, the CPU wheel (the largest download)"
	$(PY) -m pip install -q torch==2.13.0
	@echo "make venv: [3/4] xlacache, editable, with its dev extras (jax, grpc, gcsfs, pytest...)"
	$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	@echo "make venv: [4/4] transformers 5.23.0 (the tests' third-party models)"
	$(PY) -m pip install -q --no-deps transformers==5.23.0
	touch $(STAMP)
	@echo "make venv: ready ($(PY))"

demo: venv
	$(PY) examples/demo.py

test: venv
	$(PY) -m ruff check .
	$(PY) -m pytest -n 3 --dist loadgroup -q

# The inner loop: every test not marked slow (marks set by measured time, --durations=0).
test-fast: venv
	$(PY) -m ruff check .
	$(PY) -m pytest -m "not slow" -n 2 --dist loadgroup -q

lint: venv
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

proto: venv
	$(PY) tools/protogen.py

docs: venv
	$(PY) tools/doctables.py

bench: venv
	$(PY) benchmarks/jax_gpt.py
	$(PY) benchmarks/lazy_gpt.py
	$(PY) benchmarks/remote_vs_redis.py

# The JAX compatibility matrix (docs/compat.md): a throwaway venv per supported JAX
# version under /tmp, the project installed with pip, JAX-side tests, cold/warm train step,
# then each upgrade (adjacent pairs, oldest -> newest) on a warm cache with default settings.
# COMPAT_VERSIONS="0.6.2 0.10.2" for a subset; COMPAT_ARGS="--upgrade --lazy 0.10.1:0.10.2"
# also measures xlacache rewarm (the tables of docs/compat.md).
compat: venv
	$(PY) benchmarks/compat.py $(if $(COMPAT_VERSIONS),--versions $(COMPAT_VERSIONS)) $(COMPAT_ARGS)

# The torch compatibility matrix (docs/compat.md): a throwaway venv per tested torch release
# under /tmp (~4.6 GB each, removed after its row), the project's wheel installed with pip,
# the lazy and Dynamo test modules, a small GPT trained cold and warm (lazy and compiled).
# COMPAT_TORCH_VERSIONS="2.9.1 2.14.1" for a subset.
compat-torch: venv
	$(PY) benchmarks/compat_torch.py $(if $(COMPAT_TORCH_VERSIONS),--versions $(COMPAT_TORCH_VERSIONS))

# The GPU benchmark (docs/gpu.md); here, on the CPU, its quick mode.
gpu-bench: venv
	$(PY) benchmarks/gpu.py $(if $(GPU),,--device cpu --quick)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
