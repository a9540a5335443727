# Two commands do all set-up on a fresh machine:
#   make run    creates .venv, installs, runs the main job (conf=webshop_s2r on the embedded default, CPU)
#   make test   creates .venv, installs, runs the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONF ?= webshop_s2r
ARGS ?=

.PHONY: install run test test-all clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# the CPU build of torch first (a later unpinned resolution would pull a multi-GB CUDA build)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/python experiments/run.py conf=$(CONF) $(ARGS)

test: install
	$(BIN)/python -m pytest -q $(ARGS)

test-all: install
	$(BIN)/python -m pytest -q -m '' $(ARGS)

clean:
	rm -rf $(VENV) outputs
