"""Latency of one control step of the deployment runtime, as the controller node runs it.

    python -m bench.controller_step [--json] [--quick] [--steps N] [--rclpy-like] [--numpy] [--realtime [PRIO]]
    python -m bench.controller_step --ros [--seconds S] [--json] [--quick]   # the node on a real ROS 2 graph

One timed step = converting a JointState (16 joints, shuffled order, with an extra joint), an
Odometry and the latest GridMap (200 x 200 cells, 0.05 m, non-zero circular start indices) into
the controller core (``on_joint_state``, ``on_odometry``, ``on_grid_map``) plus ``core.step(now)``
in POLICY: watchdogs, the 187-point bilinear height scan, the observation and ONNX inference
(an ELU MLP 243 -> 256 -> 128 -> 64 -> 16 with the policy contract in its metadata, run by
:class:`aow_policy.policy.PolicyRunner`). Where the runtime's C modules are built (as on the robot),
the scan runs in :mod:`aow_policy._scan` and the measurement checks, odometry, observation and
action mapping in :mod:`aow_policy._control`; ``--numpy`` times the NumPy path of both instead.
Messages are rosbags' classes (numpy sequences) or, with
``--rclpy-like``, objects whose sequences are ``array.array`` as rclpy delivers them. The robot
pose changes every step, so nothing is cached across steps.

Baselines in the same run: ONNX inference alone on the same observations; and, where the C
modules are built, the step with them against the step on the NumPy path (two cores timed in
alternating blocks of 500 steps: ab_native_p50_us/_p99_us, ab_numpy_p50_us/_p99_us,
native_speedup_p50).
The last stdout line with --json is one object with p50_us and p99_us of the step (goal: p99 <=
200 us) and the baseline's inference_p50_us / inference_p99_us. The CPU is shared: timings vary
with the load, which is reported (loadavg_1min), together with the thread's CPU time per step
(cpu_p50_us, cpu_p99_us) and how often the process was preempted during the timed steps
(involuntary_context_switches): a wall-clock p99 far above the CPU-time p99 is time spent
waiting for a core, not work of the step.

``--realtime`` times the steps as the controller node runs with ``realtime_priority`` set: the
timing thread under SCHED_FIFO (:mod:`aow_policy.realtime`; default priority 50), so other
processes cannot preempt it. ``realtime`` in the JSON says what was set, or why not.

``--ros`` times the node itself on a real ROS 2 graph instead (needs ROS 2 sourced and
``make ros-venv``): the controller's own loop figures from /diagnostics over ``--seconds`` (60;
``--quick`` 10) at 50 Hz with 400 Hz inputs, first with a robot stand-in, then with the MuJoCo sim
bridge (:mod:`bench.controller_loop_ros`); with ``--realtime`` the node runs its control loop under
SCHED_FIFO (``realtime_priority``).
"""

from __future__ import annotations

import argparse
import array
import gc
import json
import math
import os
import resource
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from rosbags.typesys import Stores, get_typestore

from aow_policy import heightmap
from aow_policy.controller import ControllerConfig, ControllerCore, ControllerState
from aow_policy.messages import MessageFactory, grid_map_msg, joint_state_msg, odometry_msg, twist_msg
from aow_policy.policy import PolicyRunner
from aow_policy.realtime import enable_realtime, restore_normal_scheduling
from aow_policy.robot import Robot, load_robot
from aow_policy.testing import policy_contract_for, write_onnx_policy

GOAL_P99_US = 200.0
MAP_CELLS = 200
MAP_RESOLUTION = 0.05
POOL = 64  # distinct messages cycled through (values and stamps differ per step)


def _rclpy_like(msg: Any) -> Any:
    """The same message with float64[] / float32[] as array.array, as rclpy's classes hold them."""
    if isinstance(msg, np.ndarray):
        return array.array("f" if msg.dtype == np.float32 else "d", msg.tobytes())
    if hasattr(msg, "__dataclass_fields__"):
        return SimpleNamespace(**{k: _rclpy_like(getattr(msg, k)) for k in msg.__dataclass_fields__})
    if isinstance(msg, list):
        return [_rclpy_like(m) for m in msg]
    return msg


def build_messages(robot: Robot, factory: MessageFactory, rclpy_like: bool, seed: int = 0) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    n = len(robot.joint_names)
    names = [*robot.joint_names, "lidar_spin"]
    order = rng.permutation(len(names))
    joint_states, odometry = [], []
    for i in range(POOL):
        t = i * 0.0025
        pos = np.append(robot.default_positions + rng.normal(0, 0.02, n), 0.0)
        vel = np.append(rng.normal(0, 0.5, n), 3.0)
        eff = np.append(rng.normal(0, 10.0, n), 0.0)
        joint_states.append(
            joint_state_msg(factory, [names[k] for k in order], pos[order], vel[order], eff[order], stamp=t)
        )
        yaw = 0.3 * math.sin(0.1 * i)
        quat = (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))
        odometry.append(
            odometry_msg(factory, (0.01 * i, 0.02 * i, 0.55), quat, (0.5, 0.0, 0.0), (0.0, 0.0, 0.1), stamp=t)
        )
    x = np.arange(MAP_CELLS) * MAP_RESOLUTION
    heights = (0.05 * np.sin(x)[:, None] + 0.03 * np.cos(1.7 * x)[None, :]).astype(np.float32)
    maps = [
        grid_map_msg(
            factory,
            {"elevation": heights + 0.01 * k},
            MAP_RESOLUTION,
            (0.0, 0.0),
            stamp=0.0,
            outer_start=37 + k,
            inner_start=101,
        )
        for k in range(2)
    ]
    command = [twist_msg(factory, 0.8, 0.1, 0.2)]
    msgs = {"joint_states": joint_states, "odometry": odometry, "maps": maps, "command": command}
    if rclpy_like:
        msgs = {k: [_rclpy_like(m) for m in v] for k, v in msgs.items()}
    return msgs


def _involuntary_switches() -> int:
    """Times this thread was preempted so far (-1 where RUSAGE_THREAD is not available)."""
    if not hasattr(resource, "RUSAGE_THREAD"):
        return -1
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


def percentiles(samples_ns: np.ndarray) -> dict[str, float]:
    us = samples_ns / 1e3
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "mean_us": float(us.mean()),
        "max_us": float(us.max()),
    }


class StepDriver:
    """A controller core in POLICY fed from the message pool, one timed-step function."""

    def __init__(self, robot: Robot, policy_path: Path, msgs: dict[str, list], numpy_only: bool):
        self.policy = PolicyRunner.load(policy_path, robot)
        native_default = heightmap.NATIVE_AVAILABLE
        heightmap.NATIVE_AVAILABLE = native_default and not numpy_only  # the scanner reads it when built
        try:
            # the map's stamp does not advance in this loop: its age is checked against arrival only
            config = ControllerConfig(stand_up_duration=0.0, height_map_stamp_max_age=0.0)
            self.core = ControllerCore(robot, self.policy, config, native=False if numpy_only else None)
        finally:
            heightmap.NATIVE_AVAILABLE = native_default
        self.msgs, self.dt, self.t = msgs, robot.rates.policy_dt, 0.0
        core = self.core
        core.on_joint_state(msgs["joint_states"][0], 0.0)
        core.on_odometry(msgs["odometry"][0], 0.0)
        core.on_grid_map(msgs["maps"][0], 0.0)
        core.on_command(msgs["command"][0], 0.0)
        ok, why = core.start(0.0)
        if not ok:
            raise RuntimeError(why)
        for i in range(200):  # warm-up: stand-up, then POLICY
            self.advance(i)
            self.step(i)
        self.check()

    @property
    def native_scan(self) -> bool:
        return self.core.scanner is not None and self.core.scanner.native

    @property
    def native(self) -> bool:
        """Some C fast path in use (scan or controller kernels)."""
        return self.native_scan or self.core.native

    def advance(self, i: int) -> None:
        """Moves the clock one period on; every 20th period a velocity command (not timed)."""
        self.t += self.dt
        if i % 20 == 0:
            self.core.on_command(self.msgs["command"][0], self.t)

    def step(self, i: int) -> int:
        """The timed part of period ``i``; returns the clock after the conversions."""
        core, msgs, t = self.core, self.msgs, self.t
        core.on_joint_state(msgs["joint_states"][i % POOL], t)
        core.on_odometry(msgs["odometry"][i % POOL], t)
        core.on_grid_map(msgs["maps"][(i // 5) % 2], t)  # a new map every 5th step (10 Hz at 50 Hz)
        converted = time.perf_counter_ns()
        core.step(t)
        return converted

    def check(self) -> None:
        if self.core.state is not ControllerState.POLICY:
            raise RuntimeError(f"controller not in POLICY: {self.core.state} ({self.core.fault})")


def _alternating_blocks(drivers: list[StepDriver], steps: int, block: int = 500) -> list[np.ndarray]:
    """Step latencies of each driver, timed in alternating blocks so that drifts of the shared
    machine's speed fall on all of them alike."""
    samples = [np.empty(steps, dtype=np.int64) for _ in drivers]
    clock = time.perf_counter_ns
    for first in range(0, steps, block):
        for driver, out in zip(drivers, samples, strict=True):
            for i in range(first, min(first + block, steps)):
                driver.advance(i)
                start = clock()
                driver.step(i)
                out[i] = clock() - start
    for driver in drivers:
        driver.check()
    return samples


def run(
    steps: int, rclpy_like: bool, progress: bool = True, numpy_only: bool = False, realtime: int | None = None
) -> dict[str, Any]:
    robot = load_robot()
    factory = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))
    msgs = build_messages(robot, factory, rclpy_like)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_onnx_policy(Path(tmp) / "policy.onnx", policy_contract_for(robot))
        driver = StepDriver(robot, path, msgs, numpy_only)
        # same-run baseline of the C fast paths: a second core on the NumPy path
        numpy_driver = StepDriver(robot, path, msgs, numpy_only=True) if driver.native else None
    policy = driver.policy

    gc.freeze()  # as the controller node does after start-up
    scheduling = "normal"
    if realtime is not None:
        ok, why = enable_realtime(realtime)
        scheduling = why if ok else f"normal ({why})"
    samples = np.empty(steps, dtype=np.int64)
    conversions = np.empty(steps, dtype=np.int64)
    cpu = np.empty(steps, dtype=np.int64)
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    report_every = max(steps // 10, 1)
    switches_before = _involuntary_switches()
    try:
        for i in range(steps):
            driver.advance(i)
            cpu_start = cpu_clock()
            start = clock()
            converted = driver.step(i)
            end = clock()
            cpu[i] = cpu_clock() - cpu_start
            samples[i] = end - start
            conversions[i] = converted - start
            if progress and (i + 1) % report_every == 0:
                print(f"  {i + 1}/{steps} steps", flush=True)
        preemptions = _involuntary_switches() - switches_before
        driver.check()
        native_ab = None
        if numpy_driver is not None:
            ab = _alternating_blocks([driver, numpy_driver], steps)
            c_path, numpy_path = percentiles(ab[0]), percentiles(ab[1])
            native_ab = {
                "ab_native_p50_us": c_path["p50_us"],
                "ab_native_p99_us": c_path["p99_us"],
                "ab_numpy_p50_us": numpy_path["p50_us"],
                "ab_numpy_p99_us": numpy_path["p99_us"],
                "native_speedup_p50": numpy_path["p50_us"] / c_path["p50_us"],
            }
    finally:
        gc.unfreeze()
        if realtime is not None:
            restore_normal_scheduling()

    # baseline: inference alone on the observation the core built
    obs = driver.core.builder.observation.copy()
    out = np.empty(policy.num_actions, dtype=np.float32)
    baseline = np.empty(steps, dtype=np.int64)
    for i in range(steps):
        start = clock()
        policy(obs, out=out)
        baseline[i] = clock() - start

    step_stats, inference = percentiles(samples), percentiles(baseline)
    return {
        **step_stats,
        "conversions_p50_us": float(np.percentile(conversions, 50)) / 1e3,
        "core_step_p50_us": float(np.percentile(samples - conversions, 50)) / 1e3,
        "inference_p50_us": inference["p50_us"],
        "inference_p99_us": inference["p99_us"],
        "step_over_inference_p50": step_stats["p50_us"] / inference["p50_us"],
        # CPU time of this thread per step (clock_gettime(CLOCK_THREAD_CPUTIME_ID) around the step,
        # so it also holds two clock reads): time spent preempted by other processes is not in it
        "cpu_p50_us": float(np.percentile(cpu, 50)) / 1e3,
        "cpu_p99_us": float(np.percentile(cpu, 99)) / 1e3,
        "involuntary_context_switches": preemptions,
        "goal_p99_us": GOAL_P99_US,
        "meets_goal": step_stats["p99_us"] <= GOAL_P99_US,
        "steps": steps,
        "messages": "rclpy-like (array.array)" if rclpy_like else "rosbags classes (numpy)",
        "map_cells": f"{MAP_CELLS}x{MAP_CELLS}",
        "scan_points": robot.height_scan.num_points,
        "native_scan": driver.native_scan,
        "native_control": driver.core.native,
        **(native_ab or {}),
        "loadavg_1min": os.getloadavg()[0],
        "scheduling": scheduling,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="last stdout line: one JSON object with the figures")
    parser.add_argument("--quick", action="store_true", help="2,000 steps instead of 10,000 (well under a minute)")
    parser.add_argument("--steps", type=int, default=None, help="number of timed steps (default 10,000)")
    parser.add_argument("--rclpy-like", action="store_true", help="messages with array.array sequences, as from rclpy")
    parser.add_argument(
        "--numpy",
        action="store_true",
        help="the NumPy path (height scan and controller kernels) even where the C modules are built",
    )
    parser.add_argument(
        "--realtime",
        type=int,
        nargs="?",
        const=50,
        metavar="PRIO",
        help="time the steps under SCHED_FIFO (priority PRIO, default 50), as the node with realtime_priority",
    )
    parser.add_argument(
        "--ros", action="store_true", help="the controller node's own loop timing on a real ROS 2 graph (see above)"
    )
    parser.add_argument("--seconds", type=float, default=None, help="with --ros: seconds per run (default 60)")
    args = parser.parse_args(argv)
    if args.ros:
        from bench import controller_loop_ros

        seconds = args.seconds or (10.0 if args.quick else 60.0)
        result = controller_loop_ros.run(seconds, progress=not args.json, realtime_priority=args.realtime or 0)
        print(controller_loop_ros.describe(result))
        if args.json:
            print(json.dumps(result))
        return 0
    steps = args.steps or (2_000 if args.quick else 10_000)
    if steps < 100:
        parser.error("--steps must be at least 100 (p99 needs samples)")
    result = run(steps, args.rclpy_like, progress=not args.json, numpy_only=args.numpy, realtime=args.realtime)
    print(
        f"controller step ({result['messages']}, {steps} steps): p50 {result['p50_us']:.1f} us, "
        f"p99 {result['p99_us']:.1f} us, max {result['max_us']:.0f} us (goal p99 <= {GOAL_P99_US:.0f} us: "
        f"{'met' if result['meets_goal'] else 'NOT met'}; {'C' if result['native_control'] else 'NumPy'} kernels, "
        f"scan in {'C' if result['native_scan'] else 'NumPy'}); "
        f"ONNX inference alone p50 {result['inference_p50_us']:.1f} "
        f"us, p99 {result['inference_p99_us']:.1f} us; thread CPU time per step p50 {result['cpu_p50_us']:.1f} us, "
        f"p99 {result['cpu_p99_us']:.1f} us; preempted {result['involuntary_context_switches']} times; "
        f"load {result['loadavg_1min']:.2f}; scheduling {result['scheduling']}"
    )
    if "native_speedup_p50" in result:
        print(
            f"same run, alternating blocks: C fast paths p50 {result['ab_native_p50_us']:.1f} / p99 "
            f"{result['ab_native_p99_us']:.1f} us, NumPy path p50 {result['ab_numpy_p50_us']:.1f} / p99 "
            f"{result['ab_numpy_p99_us']:.1f} us ({result['native_speedup_p50']:.2f}x at p50)"
        )
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
