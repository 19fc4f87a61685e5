"""What the launch files share: argument checks that end a launch with one line, and a clean stop on SIGTERM.

Imports ``launch`` inside the functions, so the module imports without ROS 2 (the checks are
plain functions, tested without launch).

- A wrong ``policy:=`` must end the launch at once with one line naming the file and the reason,
  not leave the monitor running alone behind a traceback: :func:`check_policy_argument` runs in
  the launch process before any node starts and loads the policy against the robot contract as
  the node will (``ros2 launch`` runs under the system Python, which may lack onnxruntime: then
  the check runs with the interpreter of the installed node scripts). Should a node still fail
  to start, it says why in one line and the launch ends through the controller's ``on_exit``.
- Humble's launch treats SIGTERM as an abort: it cancels itself at once and leaves its processes
  to die without their shutdown (no last DAMPING command, no monitor summary). systemd and docker
  stop services with SIGTERM, so :func:`graceful_sigterm` makes SIGTERM take the SIGINT path:
  a Shutdown event, SIGINT to every process, escalation after ``sigterm_timeout``.
- Both launch files declare their arguments from one ``ARGUMENTS`` table each
  (:func:`declare_arguments`).
- ``sim.launch.py`` resolves the sim bridge program before starting anything
  (:func:`resolve_executable`) and runs it without a shell, so signals reach it directly.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any


class LaunchArgumentError(ValueError):
    """A launch argument that cannot work; the message names the argument, the value and the fix."""


def policy_problem(path_text: str, robot_config: str = "", node_python: str | None = None) -> str | None:
    """Why ``policy:=path_text`` cannot be run, or None.

    Loads the policy against the robot contract as the controller node will: here when this
    interpreter has onnxruntime, else with ``node_python`` (the interpreter of the installed node
    scripts) in a subprocess; with neither, only that the file exists and is readable."""
    if not path_text:
        return "policy:= is empty: pass the exported ONNX policy (policy:=/path/to/policy.onnx)"
    path = Path(os.path.expanduser(path_text))
    if not path.exists():
        return f"policy:={path_text}: no such file"
    if not path.is_file():
        return f"policy:={path_text}: not a file"
    if not os.access(path, os.R_OK):
        return f"policy:={path_text}: not readable by this user"
    try:
        import onnxruntime  # noqa: F401 - only whether this interpreter has it
    except ImportError:
        return _policy_problem_in(node_python, path, robot_config) if node_python else None
    from aow_policy.policy import PolicyRunner
    from aow_policy.robot import load_robot

    try:
        PolicyRunner.load(path, load_robot(robot_config or None))
    except (OSError, ValueError, RuntimeError) as e:
        return "policy: " + " ".join(str(e).split())  # one line: onnxruntime's messages may span several
    return None


def _policy_problem_in(python: str, path: Path, robot_config: str) -> str | None:
    import subprocess

    argv = [python, "-m", "aow_policy.launch_support", "check-policy", str(path), robot_config]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"policy: could not check {path} with {python}: {e}"
    if result.returncode == 0:
        return None
    lines = (result.stdout.strip() or result.stderr.strip() or f"exit code {result.returncode}").splitlines()
    return lines[-1]


def node_interpreter(package: str = "aow_policy", executable: str = "controller_node") -> str | None:
    """The interpreter on the installed node script's ``#!`` line (colcon writes the building Python)."""
    try:
        from ament_index_python.packages import get_package_prefix

        script = Path(get_package_prefix(package)) / "lib" / package / executable
        first = script.read_text(errors="replace").splitlines()[0]
    except (LookupError, OSError, IndexError, ImportError):
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    return words[0] if words and Path(words[0]).exists() else None


def resolve_executable(value: str, argument: str) -> str:
    """A program given as a path or a name on PATH -> its path; LaunchArgumentError saying how to fix it."""
    if os.sep in value:
        path = Path(os.path.expanduser(value))
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        why = "no such file" if not path.exists() else "not an executable file"
        raise LaunchArgumentError(f"{argument}:={value}: {why}")
    found = shutil.which(value)
    if found is None:
        raise LaunchArgumentError(
            f"{argument}:={value}: not found on PATH. The sim bridge comes with the toolkit's Python packages "
            f"(`make install` in the repository); pass {argument}:=<repository>/.venv/bin/aow-sim-bridge "
            f"or put that directory on PATH"
        )
    return found


def declare_arguments(arguments: dict[str, tuple[str | None, str]], share: str) -> list:
    """DeclareLaunchArgument actions of a launch file's ``ARGUMENTS`` table (name: (default,
    description)); a default of None makes the argument required, ``<share>`` in a default is the
    package's share directory."""
    from launch.actions import DeclareLaunchArgument

    actions = []
    for name, (default, description) in arguments.items():
        if default is None:
            actions.append(DeclareLaunchArgument(name, description=description))
        else:
            default = default.replace("<share>", share).replace("/", os.sep)
            actions.append(DeclareLaunchArgument(name, default_value=default, description=description))
    return actions


_CHECKED_KEY = "_aow_policy_checked"  # a launch configuration: the (policy, robot_config) already checked


def check_policy_argument(context: Any) -> list:
    """OpaqueFunction body: raise (one line from launch) if ``policy:=`` cannot be run."""
    from launch.substitutions import LaunchConfiguration

    policy = LaunchConfiguration("policy").perform(context)
    robot_config = LaunchConfiguration("robot_config").perform(context)
    checked = (policy, robot_config)
    # sim.launch.py checks before it starts the bridge, then includes controller.launch.py, which
    # checks too: the load (a subprocess with the nodes' interpreter) runs once per launch
    if context.launch_configurations.get(_CHECKED_KEY) == repr(checked):
        return []
    problem = policy_problem(policy, robot_config, node_interpreter())
    if problem:
        raise LaunchArgumentError(problem)
    context.launch_configurations[_CHECKED_KEY] = repr(checked)
    return []


def graceful_sigterm(context: Any) -> list:
    """OpaqueFunction body: SIGTERM to the launch process shuts the launch down as SIGINT does.

    launch's signal manager dispatches what arrives on Python's wakeup fd to its handlers; its
    SIGTERM handler cancels the launch. Here SIGTERM gets a handler that emits a Shutdown event
    (every process then gets SIGINT and its ``sigterm_timeout``), and a Python-level handler so the
    signal reaches the manager at all (without one SIGTERM kills the launch process outright).
    """
    import signal

    from launch.events import Shutdown
    from launch.utilities.signal_management import AsyncSafeSignalManager

    manager = getattr(AsyncSafeSignalManager, "_AsyncSafeSignalManager__current", None)
    if manager is None:  # another launch version: keep its own handling
        return []
    received = []

    def on_sigterm(signum: int) -> None:
        if received:
            return
        received.append(signum)
        context.emit_event_sync(Shutdown(reason="SIGTERM"))

    manager.handle(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    return []


def main(argv: list[str] | None = None) -> int:
    """``python -m aow_policy.launch_support check-policy PATH [ROBOT_CONFIG]``: the problem on one line
    (exit 1), or nothing (exit 0). The launch files run it with the nodes' interpreter."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3) or args[0] != "check-policy":
        print("usage: python -m aow_policy.launch_support check-policy PATH [ROBOT_CONFIG]", file=sys.stderr)
        return 2
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print(f"policy: onnxruntime is not importable by {sys.executable}: install it for the nodes' interpreter")
        return 1
    problem = policy_problem(args[1], args[2] if len(args) == 3 else "")
    if problem:
        print(problem)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
