# The two commands a fresh machine needs: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_MINUTES ?= 10
# colcon lives in its own tool venv (cached): it builds the ROS 2 package without a ROS install.
COLCON_VENV := .venv-colcon
COLCON_STAMP := $(COLCON_VENV)/.installed-stamp
COLCON_PACKAGES := colcon-core==0.21.3 colcon-ros==0.5.0 colcon-python-setup-py==0.2.9 catkin-pkg==1.1.1

# ROS 2, where installed (CI provisions it from ../shared/ros2): `make test` then runs the `ros`-marked
# tests against it. The nodes of a colcon overlay run with the interpreter that built it, so
# .venv-ros is a venv over the system Python (which has rclpy's dependencies) with onnxruntime
# added, as the aow_policy README tells users to do on a ROS 2 machine. --without-pip: the system's
# pip (python3-pip) installs into it, so Debian's python3-venv (ensurepip) is not needed.
ROS_SETUP ?= $(firstword $(wildcard /opt/ros2_humble/setup.bash /opt/ros/humble/setup.bash /opt/ros/jazzy/setup.bash))
ROS_ENV = source $(ROS_SETUP) && export RMW_IMPLEMENTATION=$${RMW_IMPLEMENTATION:-rmw_cyclonedds_cpp} ROS_LOCALHOST_ONLY=1 &&
SYSTEM_PYTHON ?= /usr/bin/python3
ROS_VENV := .venv-ros
ROS_VENV_STAMP := $(ROS_VENV)/.installed-stamp

.PHONY: install demo test lint format test-slow colcon-venv colcon-build ros-venv clean

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

$(ROS_VENV_STAMP):
	test -x $(ROS_VENV)/bin/python || $(SYSTEM_PYTHON) -m venv --system-site-packages --without-pip $(ROS_VENV)
	$(ROS_VENV)/bin/python -m pip install --quiet 'onnxruntime>=1.20'
	touch $(ROS_VENV_STAMP)

ros-venv: $(ROS_VENV_STAMP)

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

test: install lint colcon-venv $(if $(ROS_SETUP),ros-venv)
	$(if $(ROS_SETUP),$(ROS_ENV)) $(BIN)/python -m pytest

test-slow: install $(if $(ROS_SETUP),ros-venv)
	$(if $(ROS_SETUP),$(ROS_ENV)) AOW_RUN_SLOW=1 $(BIN)/python -m pytest -m slow

clean:
	rm -rf $(VENV) $(COLCON_VENV) $(ROS_VENV) build ros2_ws/build ros2_ws/install ros2_ws/log
	rm -f ros2_ws/src/aow_policy/aow_policy/_scan*.so ros2_ws/src/aow_policy/aow_policy/_control*.so
