"""Controller core: state machine, stand-up, watchdogs, fail-safe on bad input, action mapping, ranges."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rosbags.typesys import Stores, get_typestore

from aow_policy import controller as controller_module
from aow_policy import observation as observation_module
from aow_policy.controller import ConfigError, ControllerConfig, ControllerCore, ControllerState
from aow_policy.layout import ObservationLayout
from aow_policy.messages import MessageFactory, grid_map_msg, joint_state_msg, odometry_msg, twist_msg
from aow_policy.observation import ObservationBuilder, ObservationError
from aow_policy.policy_contract import PolicyContractError
from aow_policy.robot import load_robot
from aow_policy.testing import FakePolicy, locomotion_layout, policy_contract_for

ROBOT = load_robot()
F = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))
DT = ROBOT.rates.policy_dt
NAMES = ROBOT.joint_names
N = len(NAMES)
LEGS = np.array([j.kind == "leg" for j in ROBOT.joints])
WHEELS = ~LEGS
CFG = ControllerConfig(stand_up_duration=0.5)
S, Z = ControllerState, np.zeros(N)
MAP_HEIGHT = 0.1
BASE_Z = 0.55


@pytest.fixture(autouse=True, params=["native", "numpy"])
def control_path(request, monkeypatch):
    """Every test here runs on both paths: the C kernels (aow_policy._control) and NumPy."""
    if request.param == "native":
        if controller_module.native_control is None:
            pytest.skip("the C controller kernels aow_policy._control are not built (no C compiler at install)")
    else:
        monkeypatch.setattr(controller_module, "native_control", None)
        monkeypatch.setattr(observation_module, "native_control", None)
    return request.param


class Rig:
    """A controller fed with rosbags messages at the control rate; each input can be switched off."""

    def __init__(self, fn=None, config=CFG, record=False, contract=None):
        self.policy = FakePolicy(contract or policy_contract_for(ROBOT), fn, record=record)
        self.core = ControllerCore(ROBOT, self.policy, config)
        self.q = ROBOT.default_positions.copy()
        self.qd = np.zeros(N)
        self.base_pos = [0.0, 0.0, BASE_Z]
        self.quat = (0.0, 0.0, 0.0, 1.0)
        self.lin, self.ang = (0.1, 0.0, 0.0), (0.0, 0.0, 0.0)
        self.twist = (0.5, 0.0, 0.0)
        self.heights = np.full((60, 60), MAP_HEIGHT)
        self.map_frame = "odom"
        self.map_stamp_lag = 0.0
        self.feeding = {"joint_states": True, "odometry": True, "height_map": True, "command": True}
        self.t = 0.0

    def feed(self, t):
        core = self.core
        if self.feeding["joint_states"]:
            core.on_joint_state(joint_state_msg(F, NAMES, self.q, self.qd, Z, stamp=t), t)
        if self.feeding["odometry"]:
            core.on_odometry(odometry_msg(F, self.base_pos, self.quat, self.lin, self.ang, stamp=t), t)
        if self.feeding["command"]:
            core.on_command(twist_msg(F, *self.twist), t)
        if self.feeding["height_map"]:
            msg = grid_map_msg(
                F, {"elevation": self.heights}, 0.05, (0.0, 0.0), stamp=t - self.map_stamp_lag, frame_id=self.map_frame
            )
            core.on_grid_map(msg, t)

    def step(self, feed=True):
        if feed:
            self.feed(self.t)
        cmd = self.core.step(self.t)
        snapshot = (self.t, cmd.state, cmd.position.copy(), cmd.velocity.copy(), cmd.kp.copy(), cmd.kd.copy())
        self.t += DT
        return snapshot

    def run(self, seconds):
        return [self.step() for _ in range(round(seconds / DT))]

    def to_policy(self):
        self.feed(self.t)
        ok, why = self.core.start(self.t)
        assert ok, why
        for _ in range(round(CFG.stand_up_duration / DT) + 2):
            self.step()
        assert self.core.state is S.POLICY, self.core.fault
        return self


# ---- states and services -----------------------------------------------------------------------


def test_zero_torque_at_start_tracks_the_measured_state_with_zero_gains():
    rig = Rig()
    rig.qd[:] = 0.3
    cmd = rig.core.step(0.0)
    assert cmd.state is S.ZERO_TORQUE and not cmd.has_measurement  # nothing to publish yet
    _, state, pos, vel, kp, kd = rig.step()
    assert state is S.ZERO_TORQUE
    np.testing.assert_array_equal(pos, rig.q)
    np.testing.assert_array_equal(vel, rig.qd)
    assert not kp.any() and not kd.any()


def test_start_refused_without_fresh_joint_states():
    rig = Rig()
    ok, why = rig.core.start(0.0)
    assert not ok and "no valid joint state" in why
    rig.feed(0.0)
    ok, why = rig.core.start(1.0)  # 1 s later the joint state is stale
    assert not ok and "old" in why
    assert rig.core.state is S.ZERO_TORQUE


def test_stand_up_interpolates_and_ends_exactly_at_the_default_pose():
    rig = Rig()
    crouch = ROBOT.default_positions.copy()
    crouch[LEGS] += np.linspace(-0.4, 0.4, LEGS.sum())
    crouch = np.clip(crouch, ROBOT.position_lower, ROBOT.position_upper)
    rig.q = crouch
    rig.feed(0.0)
    assert rig.core.start(0.0)[0]
    steps = [rig.step() for _ in range(round(CFG.stand_up_duration / DT) + 1)]
    states = [s[1] for s in steps]
    assert states == [S.STAND_UP] * len(steps)
    for t, _, pos, *_ in steps:  # smoothstep from the measured pose to the default pose
        s = min(t / CFG.stand_up_duration, 1.0)
        a = s * s * (3 - 2 * s)
        np.testing.assert_allclose(pos[LEGS], ((1 - a) * crouch + a * ROBOT.default_positions)[LEGS], atol=1e-12)
    first, last = steps[0][2], steps[-1][2]
    np.testing.assert_array_equal(first[LEGS], crouch[LEGS])  # starts at the measured pose
    np.testing.assert_array_equal(last[LEGS], ROBOT.default_positions[LEGS])  # exactly, not approximately
    np.testing.assert_array_equal(steps[-1][4], ROBOT.kp)
    assert not steps[-1][3].any()  # zero velocity targets, wheels included
    assert rig.core.state is S.POLICY  # the inputs were fresh at the end


def test_start_and_stop_services_change_state_as_specified():
    rig = Rig()
    rig.feed(0.0)
    assert rig.core.stop(0.0) == (True, "damping")
    assert rig.core.state is S.DAMPING  # stop from ZERO_TORQUE damps too
    assert rig.core.start(0.0)[0] and rig.core.state is S.STAND_UP
    assert rig.core.start(0.0) == (True, "already STAND_UP")
    rig.core.stop(0.0)
    assert rig.core.state is S.DAMPING and rig.core.fault is None  # a requested stop is no fault
    rig.t = 0.0
    rig.to_policy()
    rig.q = rig.q + 0.05
    assert rig.core.stop(rig.t)[0]
    _, state, pos, vel, kp, kd = rig.step()
    assert state is S.DAMPING
    np.testing.assert_array_equal(pos, np.clip(rig.q, ROBOT.position_lower, ROBOT.position_upper))
    assert not vel.any() and not kp.any()
    np.testing.assert_array_equal(kd, ROBOT.kd)
    assert rig.core.start(rig.t)[0] and rig.core.state is S.STAND_UP  # DAMPING -> STAND_UP again


def test_stand_up_end_without_policy_inputs_damps():
    rig = Rig()
    rig.feeding["odometry"] = False
    rig.feed(0.0)
    rig.core.start(0.0)
    rig.run(CFG.stand_up_duration + 2 * DT)
    assert rig.core.state is S.DAMPING
    assert "cannot enter POLICY: odometry: none received" in rig.core.fault


# ---- watchdogs ---------------------------------------------------------------------------------

MAX_AGE = {
    "joint_states": CFG.joint_states_max_age,
    "odometry": CFG.odometry_max_age,
    "height_map": CFG.height_map_max_age,
}


@pytest.mark.parametrize("name", list(MAX_AGE))
def test_watchdog_robot_state_input_stopped_damps_within_two_periods(name):
    rig = Rig().to_policy()
    rig.run(0.2)
    t_last = rig.t - DT  # the last message went in with the last step
    rig.feeding[name] = False
    history = rig.run(MAX_AGE[name] + 3 * DT)
    damped = [t for t, state, *_ in history if state is S.DAMPING]
    assert damped, f"no DAMPING after {name} stopped"
    assert damped[0] <= t_last + MAX_AGE[name] + 2 * DT + 1e-9
    # and not before the input was actually too old
    assert all(state is S.POLICY for t, state, *_ in history if t - t_last <= MAX_AGE[name] - 1e-9)
    assert rig.core.fault.startswith(f"{name}:")


def test_watchdog_command_stopped_gives_zero_velocity_command_not_damping():
    rig = Rig(record=True).to_policy()
    cmd_slice = locomotion_layout(ROBOT).term("velocity_commands").slice
    rig.run(0.1)
    assert rig.policy.observations[-1][cmd_slice].tolist() == pytest.approx([0.5, 0.0, 0.0])
    t_last = rig.t - DT
    rig.feeding["command"] = False
    history = rig.run(CFG.command_max_age + 3 * DT)
    assert all(state is S.POLICY for _, state, *_ in history)
    zero_from = [
        t
        for (t, *_), obs in zip(history, rig.policy.observations[-len(history) :], strict=True)
        if not obs[cmd_slice].any()
    ]
    assert zero_from and zero_from[0] <= t_last + CFG.command_max_age + 2 * DT + 1e-9
    assert rig.core.command_active is False


# ---- bad input -> DAMPING ------------------------------------------------------------------------


def _nan_joint_position(rig):
    rig.q[3] = np.nan


def _nan_joint_velocity(rig):
    rig.qd[14] = np.nan


def _inf_joint_velocity(rig):
    rig.qd[0] = np.inf


def _nan_odometry_position(rig):
    rig.base_pos[2] = np.nan


def _nan_quaternion(rig):
    rig.quat = (0.0, np.nan, 0.0, 1.0)


def _nan_twist_of_base(rig):
    rig.ang = (0.0, 0.0, np.nan)


def _nan_command(rig):
    rig.twist = (np.nan, 0.0, 0.0)


def _all_nan_map(rig):
    rig.heights = np.full((60, 60), np.nan)


def _joint_beyond_limits(rig):
    rig.q[0] = ROBOT.position_upper[0] + 0.5


def _implausible_joint_speed(rig):
    rig.qd[1] = 100.0


def _corrupt_quaternion(rig):
    rig.quat = (0.0, 0.0, 0.0, 2.0)


def _base_speed(rig):
    rig.lin = (50.0, 0.0, 0.0)


def _map_in_another_frame(rig):
    rig.map_frame = "map"


def _old_map_stamp(rig):
    rig.map_stamp_lag = 5.0


BAD_INPUTS = [
    (_nan_joint_position, "joint_states: non-finite values for ['RF_HAA']"),
    (_nan_joint_velocity, "joint_states: non-finite values for ['LH_WHEEL']"),
    (_inf_joint_velocity, "joint_states: non-finite"),
    (_nan_odometry_position, "odometry: non-finite"),
    (_nan_quaternion, "odometry: non-finite"),
    (_nan_twist_of_base, "odometry: non-finite"),
    (_nan_command, "command: non-finite"),
    (_all_nan_map, "height_map: only 0% of the scan points"),
    (_joint_beyond_limits, "joint_states: positions outside the joint limits (+ margin) for ['LF_HAA']"),
    (_implausible_joint_speed, "joint_states: implausible velocities for ['LF_HFE']"),
    (_corrupt_quaternion, "odometry: orientation quaternion has norm 2.000"),
    (_base_speed, "odometry: implausible base velocity"),
    (_map_in_another_frame, "height_map: frame 'map' differs"),
    (_old_map_stamp, "height_map: header stamp is 5.000 s old"),
]


@pytest.mark.parametrize(("corrupt", "reason"), BAD_INPUTS, ids=[f.__name__.strip("_") for f, _ in BAD_INPUTS])
def test_bad_input_damps_at_the_next_step(corrupt, reason):
    rig = Rig().to_policy()
    rig.run(0.1)
    corrupt(rig)
    _, state, pos, vel, *_ = rig.step()
    assert state is S.DAMPING
    assert rig.core.fault.startswith(reason), rig.core.fault
    assert np.isfinite(pos).all() and np.isfinite(vel).all()  # the last valid measurement, never NaN


def test_missing_joint_refused_and_damps():
    rig = Rig().to_policy()
    names = [n for n in NAMES if n != "LH_KFE"]
    keep = [i for i, n in enumerate(NAMES) if n != "LH_KFE"]
    msg = joint_state_msg(F, names, rig.q[keep], rig.qd[keep], [], stamp=rig.t)
    assert rig.core.on_joint_state(msg, rig.t) is False
    assert rig.core.step(rig.t).state is S.DAMPING
    assert "missing joint(s) ['LH_KFE']" in rig.core.fault
    assert rig.core.status["joint_states"].refused == 1


def test_command_out_of_range_is_clipped_not_a_fault():
    rig = Rig(record=True).to_policy()
    rig.twist = (9.0, -9.0, 9.0)
    rig.step()
    obs = rig.policy.observations[-1]
    sl = locomotion_layout(ROBOT).term("velocity_commands").slice
    np.testing.assert_array_equal(obs[sl], np.array([2.0, -1.0, 1.5], dtype=np.float32))
    assert rig.core.state is S.POLICY


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (lambda obs: np.full(N, np.nan), "policy: non-finite action"),
        (lambda obs: 1 / 0, "policy: ZeroDivisionError"),
        (lambda obs: np.zeros(3), "policy: returned shape (3,)"),
    ],
)
def test_policy_failure_damps(fn, reason):
    rig = Rig().to_policy()
    rig.policy.fn = fn
    assert rig.step()[1] is S.DAMPING
    assert rig.core.fault.startswith(reason)


# ---- action mapping and observation --------------------------------------------------------------


def test_actions_map_to_joint_targets_by_the_policy_contract():
    actions = np.linspace(-3.0, 3.0, N).astype(np.float32)
    contract = policy_contract_for(ROBOT, action_clip=2.5)
    rig = Rig(fn=lambda obs: actions, contract=contract).to_policy()
    rig.q = rig.q + 0.01
    _, state, pos, vel, kp, kd = rig.step()
    assert state is S.POLICY
    a = np.clip(actions.astype(np.float64), -2.5, 2.5)
    for i, joint in enumerate(ROBOT.joints):
        if joint.kind == "leg":
            lo, hi = joint.position_limits
            assert pos[i] == pytest.approx(min(max(joint.default_position + 0.5 * a[i], lo), hi), abs=1e-12), joint.name
            assert vel[i] == 0.0
        else:
            assert vel[i] == pytest.approx(min(max(5.0 * a[i], -30.0), 30.0)), joint.name
            assert pos[i] == rig.q[i]  # wheels: no position target, the measured position
    np.testing.assert_array_equal(kp, ROBOT.kp)
    np.testing.assert_array_equal(kd, ROBOT.kd)
    assert pos[0] == ROBOT.position_lower[0]  # LF_HAA: -0.72 limit reached by 0 + 0.5 * -2.5
    np.testing.assert_array_equal(rig.core.inputs.last_action, a)  # raw clipped action, fed back


def test_observation_follows_the_layout():
    actions = np.linspace(-0.5, 0.5, N).astype(np.float32)
    rig = Rig(fn=lambda obs: actions, record=True)
    pitch = 0.2
    rig.quat = (0.0, math.sin(pitch / 2), 0.0, math.cos(pitch / 2))
    rig.lin, rig.ang = (0.4, -0.2, 0.05), (0.1, 0.2, -0.3)
    rig.twist = (1.0, 0.25, -0.5)
    rig.qd = np.linspace(-1, 1, N)
    rig.to_policy()
    rig.q = ROBOT.default_positions + 0.1
    rig.step()
    obs = rig.policy.observations[-1]
    layout = locomotion_layout(ROBOT)

    def part(name):
        return obs[layout.term(name).slice]

    np.testing.assert_allclose(part("base_lin_vel"), 2.0 * np.array(rig.lin), rtol=1e-6)
    np.testing.assert_allclose(part("base_ang_vel"), 0.25 * np.array(rig.ang), rtol=1e-6)
    np.testing.assert_allclose(part("projected_gravity"), (math.sin(pitch), 0, -math.cos(pitch)), atol=1e-7)
    np.testing.assert_allclose(part("velocity_commands"), rig.twist, rtol=1e-6)
    np.testing.assert_allclose(part("joint_pos"), np.full(12, 0.1), rtol=1e-5)
    np.testing.assert_allclose(part("joint_vel"), 0.05 * rig.qd, rtol=1e-6)
    np.testing.assert_allclose(part("last_action"), actions, rtol=1e-6)  # the previous step's action
    np.testing.assert_allclose(part("height_scan"), (BASE_Z - 0.5 - MAP_HEIGHT) * 5.0, rtol=1e-5)
    assert obs.dtype == np.float32 and obs.shape == (layout.dim,)


def test_unknown_observation_terms_refused_at_load():
    terms = [*locomotion_layout(ROBOT, height_scan=False).to_list(), {"name": "foot_contacts", "size": 4}]
    terms[-1]["offset"] = sum(t["size"] for t in terms[:-1])
    layout = ObservationLayout.from_list(terms, known_only=False)
    with pytest.raises(ObservationError, match="'foot_contacts' has no builder"):
        ObservationBuilder(layout, ROBOT, N)
    contract = policy_contract_for(ROBOT, locomotion_layout(ROBOT, height_scan=False))
    contract["observation"] = {"dim": layout.dim, "terms": terms}
    with pytest.raises(PolicyContractError, match="foot_contacts"):
        ControllerCore(ROBOT, _RawPolicy(contract, layout.dim))


class _RawPolicy:
    """A policy object whose contract is not pre-validated (as a third-party runner might be)."""

    def __init__(self, contract, obs_dim):
        self.contract, self.obs_dim, self.num_actions = contract, obs_dim, N

    def __call__(self, obs):
        return np.zeros(N, dtype=np.float32)


def test_policy_without_height_scan_needs_no_map():
    contract = policy_contract_for(ROBOT, locomotion_layout(ROBOT, height_scan=False))
    rig = Rig(contract=contract)
    rig.feeding["height_map"] = False
    rig.to_policy()
    assert rig.core.scanner is None
    assert rig.run(0.2)[-1][1] is S.POLICY


def test_config_ranges_checked():
    with pytest.raises(ConfigError, match="odometry_max_age"):
        ControllerConfig(odometry_max_age=0.0)
    with pytest.raises(ConfigError, match="initial_state"):
        ControllerConfig(initial_state="POLICY")


# ---- commands never leave the contract's ranges ---------------------------------------------------


def _in_ranges(core, cmd):
    r = core.ranges
    return (
        np.isfinite(cmd.position).all()
        and np.isfinite(cmd.velocity).all()
        and (cmd.position >= r.position_low).all()
        and (cmd.position <= r.position_high).all()
        and (cmd.velocity >= r.velocity_low).all()
        and (cmd.velocity <= r.velocity_high).all()
    )


def test_ranges_are_the_contract_limits():
    core = Rig().core
    r = core.ranges
    np.testing.assert_array_equal(r.position_low[LEGS], ROBOT.position_lower[LEGS])
    np.testing.assert_array_equal(r.position_high[LEGS], ROBOT.position_upper[LEGS])
    np.testing.assert_array_equal(r.velocity_high, ROBOT.velocity_limits)
    np.testing.assert_array_equal(r.velocity_low, -ROBOT.velocity_limits)


def test_commands_stay_in_range_under_10000_random_inputs():
    """Seeded fuzz: wild actions (huge, inf, NaN), wild measurements, random start/stop."""
    rng = np.random.default_rng(1234)
    state = {"action": np.zeros(N, dtype=np.float32)}
    rig = Rig(fn=lambda obs: state["action"])
    core = rig.core
    for i in range(10_000):
        kind = rng.integers(10)
        if kind == 0:
            action = rng.choice([np.nan, np.inf, -np.inf, 1e30, -1e30], size=N)
        else:
            action = rng.normal(scale=10.0 ** rng.uniform(-2, 3), size=N)
        state["action"] = action.astype(np.float32)
        wild = rng.random() < 0.003  # out-of-range or NaN measurements: each one ends in DAMPING
        rig.q = ROBOT.default_positions + rng.normal(scale=20.0 if wild else 0.05, size=N)
        rig.qd = rng.normal(scale=3.0, size=N)
        if rng.random() < 0.002:
            rig.q[rng.integers(N)] = np.nan
        rig.twist = tuple(rng.normal(scale=3.0, size=3))
        rig.feed(rig.t)
        if core.state not in (S.STAND_UP, S.POLICY) and rng.random() < 0.2:
            core.start(rig.t)
        elif rng.random() < 0.002:
            core.stop(rig.t)
        cmd = core.step(rig.t)
        assert _in_ranges(core, cmd), (i, cmd.state, cmd.position, cmd.velocity)
        rig.t += DT
    assert core.policy_steps > 1000  # the fuzz really exercised the policy path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    action=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=N, max_size=N),
    offsets=st.lists(st.floats(-5, 5), min_size=N, max_size=N),
)
def test_commands_stay_in_range_hypothesis(action, offsets):
    rig = _HYPOTHESIS_RIG
    rig.policy.fn = lambda obs: np.asarray(action, dtype=np.float32)
    rig.q = np.clip(
        ROBOT.default_positions + np.asarray(offsets), ROBOT.position_lower - 0.1, ROBOT.position_upper + 0.1
    )
    if rig.core.state is not S.POLICY:
        rig.core.start(rig.t)
    rig.feed(rig.t)
    cmd = rig.core.step(rig.t)
    assert _in_ranges(rig.core, cmd)
    rig.t += DT


_HYPOTHESIS_RIG = Rig(config=ControllerConfig(stand_up_duration=0.0))
_HYPOTHESIS_RIG.feed(0.0)


# ---- hot path --------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["POLICY", "STAND_UP", "DAMPING"])
def test_step_allocates_no_arrays(state):
    """Over 200 steps the traced peak grows by small temporaries only (numpy scalars, views).

    A single array of the scan's size (187 float64 = 1496 bytes of data) would exceed the bound.
    """
    out = np.zeros(N, dtype=np.float32)
    rig = Rig(fn=lambda obs: out, config=ControllerConfig(stand_up_duration=100.0))
    rig.feed(0.0)
    core = rig.core
    if state == "POLICY":
        rig.core = core = ControllerCore(ROBOT, rig.policy, CFG)
        rig.to_policy()
    elif state == "STAND_UP":
        assert core.start(0.0)[0]
    else:
        core.stop(0.0)
    for i in range(20):  # warm caches (scanner tables, ufunc loops)
        core.step(rig.t + i * 1e-4)
    # tracemalloc sees every thread: a thread another test left running (tqdm's monitor, a DDS
    # listener) can allocate during one window. step()'s own allocations repeat in every window,
    # so the smallest of three windows is step()'s figure.
    growths = []
    t = rig.t + 0.002
    tracemalloc.start()
    for _window in range(3):
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(200):
            cmd = core.step(t)
            t += 3e-5  # 600 steps inside the input watchdog's window, as the 200 steps of 1e-4 were
        _, peak = tracemalloc.get_traced_memory()
        growths.append(peak - base)
    tracemalloc.stop()
    assert cmd.state.value == state
    assert min(growths) < 1400, f"step() allocated {growths} bytes at peak in three windows"
