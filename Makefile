# The two commands a fresh machine needs: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_MINUTES ?= 10

.PHONY: install demo test lint format test-slow colcon-build clean

$(STAMP): pyproject.toml ros2_ws/src/aow_policy/setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ros2_ws/src/aow_policy -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/python -m training.sim.demo_stand_roll

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: install lint
	$(BIN)/python -m pytest

test-slow: install
	AOW_RUN_SLOW=1 $(BIN)/python -m pytest -m slow

clean:
	rm -rf $(VENV) build ros2_ws/build ros2_ws/install ros2_ws/log
