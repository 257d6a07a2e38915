# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RAY_STAMP := $(VENV)/.ray-stamp

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]' 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	$(BIN)/python -c "import specscope, torch; assert torch.__version__.startswith('2.13.0')"
	touch $(STAMP)

# the tests also run sweeps on a local Ray (the optional extra; it must keep torch 2.13.0)
$(RAY_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,ray]' 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	$(BIN)/python -c "import ray, torch; assert torch.__version__.startswith('2.13.0')"
	touch $(RAY_STAMP)

demo: $(STAMP)
	$(BIN)/specscope demo

test: $(RAY_STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -q -n 2 --durations=10

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/optimizers.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
