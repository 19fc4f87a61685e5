"""The controller's C kernels (aow_policy._control) against the NumPy path they replace.

Two controller cores, one on each path, get the same stream of messages (valid ones, and ones
with NaN, implausible values, corrupt orientations, missing joints) and the same actions (also
NaN and out-of-range ones); every command, state, fault and observation must be bit-identical.
"""

from __future__ import annotations

import array

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from aow_policy import controller as controller_module
from aow_policy import messages as messages_module
from aow_policy import observation as observation_module
from aow_policy.controller import ControllerConfig, ControllerCore, ControllerState
from aow_policy.messages import (
    JointStateReader,
    MessageError,
    MessageFactory,
    grid_map_layer,
    grid_map_msg,
    joint_state_msg,
    odometry_msg,
    twist_msg,
)
from aow_policy.observation import ObservationBuilder, RobotInputs
from aow_policy.robot import load_robot
from aow_policy.testing import FakePolicy, locomotion_layout, policy_contract_for

ROBOT = load_robot()
F = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))
NAMES = ROBOT.joint_names
N = len(NAMES)
DT = ROBOT.rates.policy_dt

native_control = controller_module.native_control
needs_kernels = pytest.mark.skipif(
    native_control is None, reason="aow_policy._control is not built (no C compiler at install)"
)


class ActionStream:
    """Random actions, sometimes NaN, inf or far out of range; the same sequence for each core."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        a = self.rng.normal(0.0, 2.0, N).astype(np.float32)
        roll = self.rng.random()
        if roll < 0.03:
            a[self.rng.integers(N)] = np.nan
        elif roll < 0.05:
            a[self.rng.integers(N)] = np.inf
        elif roll < 0.10:
            a *= 1e3
        return a


def message_stream(seed: int, steps: int):
    """Per control period: (joint state, odometry, command, map or None), with injected faults."""
    rng = np.random.default_rng(seed)
    x = np.arange(80) * 0.05
    heights = (0.05 * np.sin(x)[:, None] + 0.03 * np.cos(1.7 * x)[None, :]).astype(np.float32)
    grid = grid_map_msg(F, {"elevation": heights}, 0.05, (0.0, 0.0), stamp=0.0, outer_start=7, inner_start=31)
    order = rng.permutation(N + 1)
    names = [*NAMES, "lidar_spin"]
    for i in range(steps):
        t = i * DT
        q = np.append(ROBOT.default_positions + rng.normal(0, 0.05, N), 0.0)
        qd = np.append(rng.normal(0, 1.0, N), 5.0)
        roll = rng.random()
        if roll < 0.02:
            q[rng.integers(N)] = np.nan
        elif roll < 0.04:
            qd[rng.integers(N)] = 1e3  # implausible
        elif roll < 0.05:
            q[rng.integers(N)] = 10.0  # beyond the limits
        js_names = [names[k] for k in order]
        if rng.random() < 0.02:
            js_names = js_names[1:] if order[0] != N else js_names[2:]  # a joint missing
            js = joint_state_msg(F, js_names, q[order][-len(js_names) :], qd[order][-len(js_names) :], stamp=t)
        else:
            js = joint_state_msg(F, js_names, q[order], qd[order], np.zeros(N + 1), stamp=t)
        yaw = rng.uniform(-np.pi, np.pi)
        quat = [0.02 * rng.normal(), 0.02 * rng.normal(), np.sin(yaw / 2), np.cos(yaw / 2)]
        lin = rng.normal(0, 0.5, 3)
        ang = rng.normal(0, 0.5, 3)
        pos = [rng.uniform(-0.3, 0.3), rng.uniform(-0.3, 0.3), 0.55]
        roll = rng.random()
        if roll < 0.02:
            quat = [q_ * 1.5 for q_ in quat]  # not a unit quaternion
        elif roll < 0.04:
            lin[0] = 50.0  # implausible base speed
        elif roll < 0.05:
            ang[2] = np.nan
        odom = odometry_msg(F, pos, quat, lin, ang, stamp=t)
        twist = twist_msg(F, *rng.uniform(-3, 3, 3))
        yield t, js, odom, twist, grid if i % 5 == 0 else None


def drive(core: ControllerCore, steps: int, seed: int) -> list:
    trace = []
    for t, js, odom, twist, grid in message_stream(seed, steps):
        accepted = (core.on_joint_state(js, t), core.on_odometry(odom, t), core.on_command(twist, t))
        if grid is not None:
            core.on_grid_map(grid, t)
        if core.state is ControllerState.DAMPING or core.state is ControllerState.ZERO_TORQUE:
            core.start(t)
        cmd = core.step(t)
        trace.append(
            (
                accepted,
                cmd.state,
                cmd.fault,
                cmd.position.copy(),
                cmd.velocity.copy(),
                cmd.kp.copy(),
                cmd.kd.copy(),
                core.inputs.vector.copy(),
                core.builder.observation.copy(),
                core.base_yaw,
                core.status["odometry"].last_error,
                core.status["joint_states"].last_error,
            )
        )
    return trace


def assert_traces_equal(native: list, numpy_path: list) -> None:
    assert len(native) == len(numpy_path)
    for step, (a, b) in enumerate(zip(native, numpy_path, strict=True)):
        for field, (x, y) in enumerate(zip(a, b, strict=True)):
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y, err_msg=f"step {step}, field {field}")  # NaN == NaN here
            else:
                assert x == y, f"step {step}, field {field}: {x!r} != {y!r}"


@needs_kernels
@pytest.mark.parametrize("twist_frame", ["child", "parent"])
@pytest.mark.parametrize("action_clip", [None, 2.5])
def test_native_and_numpy_controllers_agree_bit_for_bit(twist_frame, action_clip):
    contract = policy_contract_for(ROBOT, action_clip=action_clip)
    config = ControllerConfig(stand_up_duration=0.1, height_map_stamp_max_age=0.0, twist_frame=twist_frame)
    cores = [
        ControllerCore(ROBOT, FakePolicy(contract, ActionStream(7)), config, native=native) for native in (True, False)
    ]
    assert cores[0].native and cores[0]._map_actions is not None and cores[0].builder.native
    assert not cores[1].native and not cores[1].builder.native
    traces = [drive(core, 1500, seed=3) for core in cores]
    assert_traces_equal(*traces)
    states = {entry[1] for entry in traces[0]}
    faults = {entry[2] for entry in traces[0] if entry[2]}
    # the stream reached every branch: policy steps, and faults of each kind
    assert ControllerState.POLICY in states and ControllerState.DAMPING in states
    assert any("non-finite action" in f for f in faults)
    assert any(f.startswith("odometry:") for f in faults) and any(f.startswith("joint_states:") for f in faults)
    assert cores[0].policy_steps == cores[1].policy_steps > 300


@needs_kernels
def test_native_observation_equals_numpy_on_random_inputs():
    layout = locomotion_layout(ROBOT)
    native = ObservationBuilder(layout, ROBOT, N, native=True)
    numpy_path = ObservationBuilder(layout, ROBOT, N, native=False)
    rng = np.random.default_rng(0)
    inputs = RobotInputs(N, N, ROBOT.height_scan.num_points)
    for _ in range(200):
        inputs.vector[...] = rng.normal(0, 3.0, inputs.vector.size)
        inputs.vector[rng.integers(inputs.vector.size)] = rng.choice([np.nan, np.inf, -np.inf, 1e300])
        with np.errstate(over="ignore"):  # 1e300 -> float32 inf on the NumPy path, as in C
            np.testing.assert_array_equal(native.build(inputs).copy(), numpy_path.build(inputs))
    assert native._kernel is not None  # bound to these inputs after the first call


@needs_kernels
def test_kernel_binding_refuses_bad_buffers_naming_them():
    n = 4
    with pytest.raises(TypeError, match="source: expected a contiguous float64"):
        native_control.plausible_copy(np.zeros(n, np.float32), np.zeros(n), np.ones(n), np.zeros(n))
    with pytest.raises(ValueError, match="half: 3 values, expected 4"):
        native_control.plausible_copy(np.zeros(n), np.zeros(n), np.ones(3), np.zeros(n))
    with pytest.raises(ValueError, match=r"read-only|not writable"):
        dest = np.zeros(n)
        dest.flags.writeable = False
        native_control.plausible_copy(np.zeros(n), np.zeros(n), np.ones(n), dest)
    with pytest.raises(ValueError, match=r"index\[1\] = 9 is outside \[0, 4\)"):
        z = np.zeros(2)
        native_control.observation(np.zeros(n), np.array([0, 9]), z, z, z, 0, z, z, np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="takes 4 arguments"):
        native_control.plausible_copy(np.zeros(n))
    kernel = native_control.plausible_copy(np.zeros(n), np.zeros(n), np.ones(n), np.zeros(n))
    with pytest.raises(TypeError, match="positional"):
        kernel(1)


@needs_kernels
def test_plausible_copy_writes_only_when_every_value_passes():
    source, dest = np.array([0.5, -0.5, 0.9]), np.full(3, 7.0)
    kernel = native_control.plausible_copy(source, np.zeros(3), np.ones(3), dest)
    assert kernel() is True
    np.testing.assert_array_equal(dest, source)
    for bad in (np.nan, np.inf, 1.5):
        source[1] = bad
        dest[...] = 7.0
        assert kernel() is False
        np.testing.assert_array_equal(dest, 7.0)


@needs_kernels
def test_odometry_kernel_refuses_malformed_messages():
    core = ControllerCore(ROBOT, FakePolicy(policy_contract_for(ROBOT)), native=True)
    msg = odometry_msg(F, (0, 0, 0.5), (0, 0, 0, 1), (0, 0, 0), (0, 0, 0))
    assert core.on_odometry(msg, 0.0)
    msg.pose.pose.position.x = "1.0"
    assert not core.on_odometry(msg, 0.01)
    assert core.status["odometry"].last_error.startswith("malformed Odometry")
    del msg.twist
    assert not core.on_odometry(msg, 0.02)
    assert "malformed Odometry" in core.status["odometry"].last_error


def test_native_requested_without_the_module_is_refused(monkeypatch):
    monkeypatch.setattr(controller_module, "native_control", None)
    monkeypatch.setattr(observation_module, "native_control", None)
    with pytest.raises(ValueError, match=r"aow_policy\._control is not built"):
        ControllerCore(ROBOT, FakePolicy(policy_contract_for(ROBOT)), native=True)
    core = ControllerCore(ROBOT, FakePolicy(policy_contract_for(ROBOT)))  # default: the NumPy path
    assert not core.native and not core.builder.native


def joint_state_variants(rng: np.random.Generator):
    """JointStates as rosbags and rclpy deliver them, and malformed ones."""
    names = [*NAMES, "lidar_spin"]
    order = list(rng.permutation(len(names)))
    n = len(names)
    pos, vel, eff = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    yield "numpy", joint_state_msg(F, [names[k] for k in order], pos, vel, eff)
    for field, value in (
        ("velocity", np.empty(0)),
        ("effort", np.empty(0)),
        ("position", pos[:-1]),
        ("velocity", vel[:3]),
        ("effort", eff[:-2]),
        ("position", array.array("d", pos)),
        ("velocity", array.array("d", vel)),
        ("effort", array.array("d", [])),
        ("position", list(pos)),
        ("velocity", vel.astype(np.float32)),
        ("position", pos[::-1][::-1].copy()),
        ("velocity", np.ascontiguousarray(np.stack([vel, vel])[:, 0])),
    ):
        msg = joint_state_msg(F, [names[k] for k in order], pos, vel, eff)
        setattr(msg, field, value)
        yield f"{field}={type(value).__name__}[{len(value)}]", msg


@needs_kernels
@pytest.mark.parametrize("read_effort", [True, False])
def test_joint_state_reader_native_gathers_equal_the_numpy_path(monkeypatch, read_effort):
    rng = np.random.default_rng(5)
    for label, msg in joint_state_variants(rng):
        results = []
        for native in (messages_module._native, None):
            monkeypatch.setattr(messages_module, "_native", native)
            reader = JointStateReader(NAMES, read_effort=read_effort)
            try:
                reader.read(msg)
                results.append((reader.values.copy(), reader.has_velocity, reader.has_effort, None))
            except MessageError as e:
                results.append((None, None, None, str(e)))
        (v1, hv1, he1, e1), (v2, hv2, he2, e2) = results
        assert e1 == e2, label
        assert hv1 == hv2 and he1 == he2, label
        if v1 is not None:
            np.testing.assert_array_equal(v1, v2, err_msg=label)


@needs_kernels
def test_gather_joint_state_checks_its_index():
    out = np.zeros((3, 2))
    with pytest.raises(ValueError, match=r"index\[1\] = 5 is outside \[0, 3\)"):
        native_control.gather_joint_state(np.zeros(3), np.zeros(3), None, np.array([0, 5], dtype=np.intp), 3, out)
    with pytest.raises(ValueError, match="out float64"):
        native_control.gather_joint_state(np.zeros(3), np.zeros(3), None, np.array([0, 1], dtype=np.intp), 3, out[:2])


def grid_map_variants():
    """GridMaps the C reader takes, and ones it must leave to the Python function."""
    rng = np.random.default_rng(11)
    heights = rng.normal(0, 0.1, (30, 24)).astype(np.float32)

    def new(**kw):
        return grid_map_msg(F, {"elevation": heights, "variance": heights * 0}, 0.05, (1.0, -2.0), stamp=3.25, **kw)

    yield "column-major", new(outer_start=4, inner_start=17)
    yield "row-major", new(outer_start=29, inner_start=0, row_major=True)

    def edited(label, edit):
        msg = new(outer_start=2, inner_start=3)
        edit(msg)
        return label, msg

    def set_offset(m):
        arr = m.data[0]
        arr.layout.data_offset = 2
        arr.data = np.concatenate([np.zeros(2, np.float32), arr.data])

    def rotate(m):
        m.info.pose.orientation.z, m.info.pose.orientation.w = 0.38268343, 0.92387953

    def swap_labels(m):
        m.data[0].layout.dim[0].label = "row_index"

    yield edited("data_offset", set_offset)
    yield edited("rotated", rotate)
    yield edited("labels", swap_labels)
    yield edited("no such layer", lambda m: setattr(m, "layers", ["a", "b"]))
    yield edited("layer count", lambda m: setattr(m, "data", m.data[:1]))
    yield edited("length", lambda m: setattr(m.info, "length_x", 2.0))
    yield edited("start index", lambda m: setattr(m, "outer_start_index", 30))
    yield edited("float64 values", lambda m: setattr(m.data[0], "data", m.data[0].data.astype(np.float64)))
    yield edited("array.array values", lambda m: setattr(m.data[0], "data", array.array("f", m.data[0].data)))
    yield edited("short values", lambda m: setattr(m.data[0], "data", m.data[0].data[:-1]))
    yield edited("zero resolution", lambda m: setattr(m.info, "resolution", 0.0))
    yield edited("one dimension", lambda m: setattr(m.data[0].layout, "dim", m.data[0].layout.dim[:1]))


@needs_kernels
def test_grid_map_reader_equals_the_python_conversion(monkeypatch):
    taken = 0
    for label, msg in grid_map_variants():
        results = []
        for native in (messages_module._native, None):
            monkeypatch.setattr(messages_module, "_native", native)
            try:
                results.append(grid_map_layer(msg, "elevation"))
            except MessageError as e:
                results.append(str(e))
        native_result, python_result = results
        if isinstance(python_result, str):
            assert native_result == python_result, label
            continue
        if label.endswith("-major"):  # the message's own buffer, no copy
            assert native_result.values is msg.data[0].data
        for name in ("rows", "cols", "row_stride", "col_stride", "outer_start", "inner_start", "frame_id", "layer"):
            assert getattr(native_result, name) == getattr(python_result, name), (label, name)
        for name in ("resolution", "length_x", "length_y", "center_x", "center_y", "stamp"):
            assert getattr(native_result, name) == getattr(python_result, name), (label, name)
        np.testing.assert_array_equal(native_result.values, python_result.values)
        reader = messages_module._grid_map_readers.get("elevation")
        taken += reader is not None and reader(msg) is not None
    assert taken == 2  # only the two well-formed float32 maps went the C way
