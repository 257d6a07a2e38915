# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RAY_STAMP := $(VENV)/.ray-stamp

.PHONY: demo test lint bench clean chromium

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

# the dashboard's browser test opens the report in Debian's headless Chromium
chromium:
	@command -v chromium >/dev/null || { \
	  echo "installing chromium (apt-get) for the dashboard's browser test"; \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  $$sudo apt-get install -y -q chromium >/dev/null 2>&1 \
	  || { $$sudo apt-get update -q >/dev/null 2>&1 \
	       && $$sudo apt-get install -y -q chromium >/dev/null 2>&1; } \
	  || echo "could not install chromium with apt-get (it needs Debian or Ubuntu, and root or sudo):" \
	          "the browser test will fail; install it, or set SPECSCOPE_SKIP_BROWSER=1 to skip it"; }

test: $(RAY_STAMP) chromium
	$(BIN)/ruff check .
	$(BIN)/pytest -q -n 2 --durations=10

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/optimizers.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
