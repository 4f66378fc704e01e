# The two commands a fresh machine needs: `make demo` and `make test`.
# Both create or refresh .venv from pyproject.toml first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast lint proto docs bench compat clean

venv: $(STAMP)

# torch is pinned here (a local CPU wheel); pyproject keeps a normal range for users.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	$(PY) -m pip install -q --no-deps transformers==5.23.0
	touch $(STAMP)

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

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
