# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RAY_STAMP := $(VENV)/.ray-stamp

.PHONY: demo test lint bench clean chromium gpu-carry research-loops

# The executor extra (pyproject.toml) gives ranges; make pins the versions the suite runs with:
# torch's CPU wheel, so that torch>=2.5 can never resolve to a CUDA build, and transformers.
PINS := torch==2.13.0 transformers==5.23.0

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(PINS) \
		-e '.[dev,executor]' 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	$(BIN)/python -c "import specscope, torch; assert torch.__version__.startswith('2.13.0')"
	touch $(STAMP)

# the tests also run sweeps on a local Ray (the optional extra; it must keep torch 2.13.0)
$(RAY_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(PINS) \
		-e '.[dev,executor,ray]' 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	$(BIN)/python -c "import ray, torch; assert torch.__version__.startswith('2.13.0')"
	touch $(RAY_STAMP)

# a re-run replaces the earlier demo's results in out/demo
demo: $(STAMP)
	$(BIN)/specscope demo --force

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

# The wheels the GPU runbook carries to the GPU image (benchmarks/gpu_carry.txt: its Python 3.12 on
# x86-64), and the oldest typer pyproject.toml allows, which tests/test_gpu_run.py runs the CLI with.
GPU_CARRY := .gpu-carry
TYPER_OLDEST := $(shell sed -n 's/.*"typer>=\([0-9.]*\)".*/\1/p' pyproject.toml)
PIP_DOWNLOAD := $(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps

gpu-carry: $(GPU_CARRY)/.stamp

$(GPU_CARRY)/.stamp: benchmarks/gpu_carry.txt pyproject.toml | $(STAMP)
	rm -rf $(GPU_CARRY) && mkdir -p $(GPU_CARRY)/oldest
	$(PIP_DOWNLOAD) --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d $(GPU_CARRY) -r benchmarks/gpu_carry.txt 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	$(PIP_DOWNLOAD) -d $(GPU_CARRY)/oldest "typer==$(TYPER_OLDEST)" 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	test $$(ls $(GPU_CARRY)/*.whl | wc -l) -eq $$(grep -c . benchmarks/gpu_carry.txt)
	test -f $(GPU_CARRY)/oldest/typer-$(TYPER_OLDEST)*.whl
	@echo "carried: $$(du -cb $(GPU_CARRY)/*.whl | tail -1 | cut -f1) bytes of wheels beside" \
	      "$$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null \
	          | awk '$$2 == "total" {s += $$1} END {print s}') bytes of working tree"
	touch $@

test: $(RAY_STAMP) chromium gpu-carry
	$(BIN)/ruff check .
	$(BIN)/pytest -q -n 2 --durations=10

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/optimizers.py

# benchmarks/research_loops.py times EAGLE-2's and Medusa's own loops in a venv of their own: their
# copied Llama code needs transformers 4.x (4.57.6, the newest 4.x; 5.0 fails in their
# modeling_llama_kv.py, rope_scaling["type"]), and their pins (accelerate, fschat, gradio, protobuf)
# are not runtime needs, so they install without dependencies beside torch's CPU wheel. EAGLE-2 is
# not on PyPI (eagle-llm 1.2.1 is EAGLE-1): the last EAGLE-2-only commit, from GitHub or a local
# archive of it (EAGLE_SRC=path).
RESEARCH_VENV := .venv-research
RESEARCH_STAMP := $(RESEARCH_VENV)/.installed-stamp
EAGLE_COMMIT := 79d6f7900be89d8d8cabe2d14be929d9b3861a21
EAGLE_SRC ?= git+https://github.com/SafeAILab/EAGLE@$(EAGLE_COMMIT)
RESEARCH_PINS := torch==2.13.0 transformers==4.57.6 rich numpy

$(RESEARCH_STAMP):
	$(PYTHON) -m venv $(RESEARCH_VENV)
	$(RESEARCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		$(RESEARCH_PINS) 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
	$(RESEARCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
		"$(EAGLE_SRC)" medusa-llm==0.1 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	$(RESEARCH_VENV)/bin/python -c "import torch, eagle.model.ea_model, medusa.model.medusa_model; \
		assert torch.__version__.startswith('2.13.0')"
	touch $(RESEARCH_STAMP)

research-loops: $(STAMP) $(RESEARCH_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/research_loops.py

clean:
	rm -rf $(VENV) $(RESEARCH_VENV) .pytest_cache .ruff_cache .hypothesis $(GPU_CARRY)
