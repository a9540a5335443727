# Two commands do all set-up on a fresh machine:
#   make run    creates .venv, installs, runs the main job (conf=webshop_s2r on the embedded default, CPU)
#   make test   creates .venv, installs, runs the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONF ?= webshop_s2r
ARGS ?=

.PHONY: install browser run test test-all clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# the CPU build of torch first (a later unpinned resolution would pull a multi-GB CUDA build)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

install: $(BIN)/.installed

# a headless chromium for the browser environments (env=miniwob): the system package, linked into
# playwright by dreamgym_pl/envs/browser.py. Best effort: without root/apt the browser tests are skipped.
SUDO := $(shell [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo)
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  ($(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
	   ($(SUDO) apt-get update -q >/dev/null 2>&1 && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1)) || \
	  echo "warning: could not install chromium (apt); browser tests will be skipped"

run: install
	$(BIN)/python experiments/run.py conf=$(CONF) $(ARGS)

test: install browser
	$(BIN)/python -m pytest -q $(ARGS)

test-all: install browser
	$(BIN)/python -m pytest -q -m '' $(ARGS)

clean:
	rm -rf $(VENV) outputs
