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

.PHONY: demo demo-text test bench clean

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

clean:
	rm -rf $(VENV) $(OUT) $(TEXT_OUT)
