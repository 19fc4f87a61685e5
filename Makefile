# The two commands a fresh machine needs: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_MINUTES ?= 10
# colcon lives in its own tool venv (cached): it builds the ROS 2 package without a ROS install.
COLCON_VENV := .venv-colcon
COLCON_STAMP := $(COLCON_VENV)/.installed-stamp
COLCON_PACKAGES := colcon-core==0.21.3 colcon-ros==0.5.0 colcon-python-setup-py==0.2.9 catkin-pkg==1.1.1

.PHONY: install demo test lint format test-slow colcon-venv colcon-build clean

$(STAMP): pyproject.toml ros2_ws/src/aow_policy/setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ros2_ws/src/aow_policy -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

$(COLCON_STAMP):
	test -x $(COLCON_VENV)/bin/python || $(PYTHON) -m venv $(COLCON_VENV)
	$(COLCON_VENV)/bin/python -m pip install --quiet $(COLCON_PACKAGES)
	touch $(COLCON_STAMP)

colcon-venv: $(COLCON_STAMP)

# Builds ros2_ws/src/aow_policy with colcon (ament_python) into ros2_ws/install, as in a ROS 2 workspace.
colcon-build: $(COLCON_STAMP)
	cd ros2_ws && ../$(COLCON_VENV)/bin/colcon build --base-paths src

demo: install
	DEMO_MINUTES=$(DEMO_MINUTES) $(BIN)/python -m demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: install lint colcon-venv
	$(BIN)/python -m pytest

test-slow: install
	AOW_RUN_SLOW=1 $(BIN)/python -m pytest -m slow

clean:
	rm -rf $(VENV) $(COLCON_VENV) build ros2_ws/build ros2_ws/install ros2_ws/log
	rm -f ros2_ws/src/aow_policy/aow_policy/_scan*.so ros2_ws/src/aow_policy/aow_policy/_control*.so
