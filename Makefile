# The set-up commands of the README: `make demo`, `make demo-text` and `make test`.
# Each creates the virtual environment on first use: torch pinned first (a CPU build where
# no GPU is present; a plain `torch` requirement would pull several GB of CUDA packages),
# then the package with its test extras.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
OUT ?= demo-report
BIN := $(VENV)/bin

TEXT_OUT ?= demo-text-report

.PHONY: demo demo-text test bench bench-gpu clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/embeval-report demo --out $(OUT)

demo-text: $(BIN)/.installed
	$(BIN)/embeval-report demo --text --out $(TEXT_OUT)

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n 2

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/bench_knn.py
	$(BIN)/python benchmarks/bench_isotropy.py
	$(BIN)/python benchmarks/bench_retrieval.py

# `make bench-gpu`: on a CUDA machine, the GPU tests (pytest -k cuda) and the GPU benchmarks against plain torch,
# within 6 minutes on an H100 (benchmarks/bench_gpu.py); without CUDA one line and exit 0. It installs nothing:
# it runs with BENCH_PYTHON (default: this checkout's venv python if there is one, else $(PYTHON)) and finds the
# package through PYTHONPATH. On a GPU machine with torch in its system python: `make bench-gpu PYTHON=python3`.
BENCH_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

bench-gpu:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(BENCH_PYTHON) benchmarks/bench_gpu.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(OUT) $(TEXT_OUT)
