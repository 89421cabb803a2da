# Fresh machine: `make lab` sets everything up and opens the workbench;
# `make test` sets up the test tools and runs the test suite (what CI runs).
PYTHON ?= python3
PIP := $(PYTHON) -m pip
PORT ?= 8888

.PHONY: setup setup-dev browser lab run test test-gpu bench lint notebooks

# torch first, pinned: an unpinned torch may pull a multi-GB CUDA build on CPU machines.
setup:
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install torch==2.13.0
	$(PIP) install -e ".[lab]"

# deepmd-kit from source: its binary wheels' operators are built for another torch
# (pyproject.toml, extra `deepmd`); where it cannot build, its interoperability tests skip.
setup-dev: setup
	$(PIP) install -e ".[dev]"
	DP_ENABLE_PYTORCH=0 DP_ENABLE_TENSORFLOW=0 $(PIP) install --no-binary deepmd-kit \
	  "deepmd-kit>=3.1,<3.3" || echo "deepmd-kit did not build: its interoperability tests skip"

# Debian's Chromium for the real-browser test (Playwright drives it; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium; fi; }

# Jupyter refuses to run as root without --allow-root (containers often run as root)
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: setup
	$(PYTHON) -m jupyter lab --ip=127.0.0.1 --port=$(PORT) $(ROOT_FLAG) notebooks/01-quickstart.ipynb

run: setup
	workbench run --protein cln025 --replicas 8 --steps 200 --out runs/demo --overwrite

# one worker per core, each on one thread (torch's threads would otherwise compete);
# worksteal balances the few long tests across the workers
test: setup-dev browser
	OMP_NUM_THREADS=1 $(PYTHON) -m pytest -m "not gpu" -q -n auto --dist worksteal

test-gpu: setup-dev
	$(PYTHON) -m pytest -m gpu -q

bench:
	workbench bench --proteins cln025,2jof,1yrf,1enh,2a3d --replicas 64 \
	  --configs baseline,fused_radial_basis,fused_message_passing,csr_aggregation,fused_update,all,all-fp16,all-bf16 \
	  --breakdown --out artifacts/bench

lint:
	ruff check .

notebooks:
	$(PYTHON) notebooks/build_notebooks.py

# BENCHMARKS.md from the runs in benchmarks/results/ (one file per machine, each run the
# bench.json of `workbench bench --out`; `python -m benchmarks.report --add` adds one)
.PHONY: benchmarks-md
benchmarks-md:
	$(PYTHON) benchmarks/report.py

# Per-kernel roofline of an MD step (a CUDA GPU and Nsight Compute's ncu), written into
# docs/kernels.md; the JSON and the ncu reports stay in artifacts/roofline
.PHONY: roofline
roofline:
	$(PYTHON) -m benchmarks.roofline --out artifacts/roofline/roofline.json
	$(PYTHON) -m benchmarks.roofline --render artifacts/roofline/roofline.json

# The ablation as the paper shows it (a CUDA GPU): baseline, each technique alone, then
# cumulative in FP32 and FP16, captured steps and the tabulated filters, on the five proteins;
# bench.json, ablation.md and ablation.png in artifacts/ablation, the table and chart written
# into docs/kernels.md and the speedup-demo notebook. A run cut short continues where it
# stopped (--resume); remove artifacts/ablation for a fresh one.
.PHONY: ablation
ablation:
	$(PYTHON) -m benchmarks.ablation --out artifacts/ablation --resume --docs; status=$$?; \
	  $(PYTHON) notebooks/build_notebooks.py && exit $$status

# Train the shipped models from their recipes, one job per protein, all at once on one GPU:
# `make train-models`, or `make train-models PROTEINS="1yrf 1enh" TRAIN_ARGS="--time-limit 60"`.
# Each job is `workbench train --config recipes/<protein>.yaml --out $(MODELS_OUT)/<protein>`
# with TRAIN_ARGS appended (options on the command line override the recipe's); its output
# goes to $(MODELS_OUT)/<protein>.out.
PROTEINS ?= cln025 2jof 1yrf 1enh 2a3d
MODELS_OUT ?= artifacts/models
.PHONY: train-models
train-models:
	@for protein in $(PROTEINS); do \
	  mkdir -p "$(MODELS_OUT)/$$protein"; \
	  workbench train --config "recipes/$$protein.yaml" --quiet --out "$(MODELS_OUT)/$$protein" \
	    $(TRAIN_ARGS) > "$(MODELS_OUT)/$$protein.out" 2>&1 & \
	done; wait; tail -n 9 $(MODELS_OUT)/*.out
