"""Violation monitor on synthetic joint traces with known overruns: exact events, counts, per-step indicators."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from aow_policy import violations
from aow_policy.messages import MessageError, MessageFactory, joint_state_msg
from aow_policy.monitor import ViolationMonitor
from aow_policy.monitor_log import ViolationLog, read_log
from aow_policy.robot import load_robot

ROBOT = load_robot()
NAMES = ROBOT.joint_names
N = len(NAMES)
RATE = 400.0
SAMPLES = 800  # 2 s: 100 policy steps of 8 samples
IDX = {name: i for i, name in enumerate(NAMES)}
F = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))


def synthetic_trace():
    """Velocities and efforts (SAMPLES, N) with hand-placed overruns (see the expectations below)."""
    vel = np.ones((SAMPLES, N))
    eff = np.full((SAMPLES, N), 10.0)
    wheels = ROBOT.index_of(ROBOT.wheel_joint_names)
    vel[:, wheels] = 20.0  # wheels are not speed-constrained
    eff[:, wheels] = 50.0  # nor torque-constrained
    vel[200:210, IDX["LF_HFE"]] = 7.0
    vel[204, IDX["LF_HFE"]] = -7.5  # the peak, negative: |v| counts
    vel[600:602, IDX["LF_HFE"]] = 6.2  # a second event on the same joint
    vel[300:311, IDX["RF_KFE"]] = -6.0  # exactly at the limit: not a violation
    eff[400:403, IDX["RH_KFE"]] = -80.0
    vel[780:, IDX["LH_HAA"]] = 6.5  # still over at the end of the stream
    return vel, eff


def run_monitor(vel, eff):
    monitor = ViolationMonitor(ROBOT)
    events = []
    for i in range(SAMPLES):
        events += monitor.update(i / RATE, vel[i], eff[i])
    events += monitor.finish()
    return monitor, events


def test_events_exact_start_end_duration_peak():
    _, events = run_monitor(*synthetic_trace())
    got = sorted((e.quantity, e.joint, e.start) for e in events)
    assert got == [
        ("effort", "RH_KFE", 1.0),
        ("velocity", "LF_HFE", 0.5),
        ("velocity", "LF_HFE", 1.5),
        ("velocity", "LH_HAA", 1.95),
    ]
    by_start = {(e.joint, e.start): e for e in events}
    e = by_start[("LF_HFE", 0.5)]
    assert (e.end, e.samples, e.peak, e.limit, e.ongoing) == (210 / RATE, 10, 7.5, 6.0, False)
    assert e.duration == pytest.approx(10 / RATE, abs=1e-12)
    assert e.overrun == pytest.approx(1.5)
    e = by_start[("LF_HFE", 1.5)]
    assert (e.samples, e.peak) == (2, 6.2) and e.duration == pytest.approx(2 / RATE, abs=1e-12)
    e = by_start[("RH_KFE", 1.0)]
    assert (e.quantity, e.samples, e.peak, e.limit) == ("effort", 3, 80.0, 75.0)
    assert e.duration == pytest.approx(3 / RATE, abs=1e-12)
    e = by_start[("LH_HAA", 1.95)]
    assert e.ongoing and e.end == 799 / RATE and e.samples == 20  # closed at the last sample


def test_counters_at_sample_rate_and_per_joint():
    vel, eff = synthetic_trace()
    monitor, _ = run_monitor(vel, eff)
    s = monitor.summary()
    assert s["samples"] == SAMPLES
    assert s["events"] == {"velocity": 3, "effort": 1}
    assert s["violating_samples"] == {"velocity": 32, "effort": 3}
    # the same definition as the training costs, evaluated in bulk
    assert s["violating_samples"]["velocity"] == violations.any_over(vel, ROBOT.constraint_velocity_limits).sum()
    assert s["violating_samples"]["effort"] == violations.any_over(eff, ROBOT.constraint_torque_limits).sum()
    joints = s["joints"]
    assert set(joints["velocity"]) == set(ROBOT.leg_joint_names)  # wheels are not constrained
    assert joints["velocity"]["LF_HFE"]["events"] == 2
    assert joints["velocity"]["LF_HFE"]["samples_over"] == 12
    assert joints["velocity"]["LF_HFE"]["time_over_s"] == pytest.approx(12 / RATE)
    assert joints["velocity"]["RF_KFE"] == {
        "events": 0,
        "samples_over": 0,
        "time_over_s": 0.0,
        "max_abs": 6.0,
        "limit": 6.0,
    }
    assert joints["effort"]["RH_KFE"]["events"] == 1
    assert joints["effort"]["RH_KFE"]["max_abs"] == 80.0


def test_per_policy_step_indicators_and_violations_per_episode():
    monitor, _ = run_monitor(*synthetic_trace())
    s = monitor.summary()
    assert s["policy_steps"] == 100
    # any sample in the window: velocity windows 25, 26, 75, 97, 98, 99; effort window 50
    assert s["violating_policy_steps"] == {"velocity": 6, "effort": 1, "any": 7}
    # last sample of the window (8w + 7): 207, 783, 791, 799 are over; no effort one is
    assert s["violating_policy_steps_sampled"] == {"velocity": 4, "effort": 0, "any": 4}
    # 100 steps = 2 s; an episode is 20 s = 1000 steps
    assert s["violations_per_episode"]["any"] == pytest.approx(70.0)
    assert s["violations_per_episode_sampled"]["any"] == pytest.approx(40.0)


def test_joint_state_messages_by_name_and_missing_effort():
    vel, eff = synthetic_trace()
    order = np.random.default_rng(0).permutation(N)
    names = [NAMES[i] for i in order]
    monitor = ViolationMonitor(ROBOT)
    events = []
    for i in range(SAMPLES):
        effort = [*eff[i, order], 0.0] if i < 600 else []  # effort stops being published at 1.5 s
        msg = joint_state_msg(F, [*names, "extra"], np.zeros(N + 1), [*vel[i, order], 99.0], effort, stamp=i / RATE)
        events += monitor.update_joint_state(msg)
    events += monitor.finish()
    s = monitor.summary()
    assert s["events"] == {"velocity": 3, "effort": 1}
    assert s["samples_without_effort"] == 200
    assert {(e.joint, round(e.start, 9)) for e in events if e.quantity == "velocity"} == {  # stamps: ns
        ("LF_HFE", 0.5),
        ("LF_HFE", 1.5),
        ("LH_HAA", 1.95),
    }
    bad = joint_state_msg(F, NAMES[:-1], np.zeros(N - 1), np.zeros(N - 1), [], stamp=3.0)
    with pytest.raises(MessageError, match="RH_WHEEL"):
        monitor.update_joint_state(bad)
    assert monitor.summary()["refused_messages"] == 1


def test_out_of_order_samples_are_skipped():
    monitor = ViolationMonitor(ROBOT)
    v = np.zeros(N)
    monitor.update(1.0, v)
    assert monitor.update(0.5, v + 10.0) == []
    assert monitor.summary()["out_of_order_samples"] == 1
    assert monitor.summary()["events"]["velocity"] == 0


def test_log_file_per_run_with_events_intervals_and_summary(tmp_path):
    vel, eff = synthetic_trace()
    monitor = ViolationMonitor(ROBOT)
    log = ViolationLog(tmp_path, monitor)
    other = ViolationLog(tmp_path, ViolationMonitor(ROBOT))  # a second run never overwrites the first
    assert other.path != log.path
    other.close()
    for i in range(SAMPLES):
        log.events(monitor.update(i / RATE, vel[i], eff[i]))
        if (i + 1) % 400 == 0:
            log.interval(i / RATE)
        if i == 450:  # flushed: readable while the run goes on
            lines = log.path.read_text().splitlines()
            assert [json.loads(x)["type"] for x in lines] == ["start", "event", "interval", "event"]
    summary = log.close()
    assert log.closed
    records = read_log(log.path)
    types = [r["type"] for r in records]
    assert types[0] == "start" and types[-1] == "summary"
    assert types.count("event") == 4 and types.count("interval") == 2
    assert records[-1]["events"] == summary["events"] == {"velocity": 3, "effort": 1}
    intervals = [r for r in records if r["type"] == "interval"]
    assert intervals[0]["events_ended"] == {"velocity": 1, "effort": 0}
    assert intervals[1]["events_ended"] == {"velocity": 1, "effort": 1}
    assert intervals[1]["open_events"]["velocity"] == ["LH_HAA"]
    ongoing = [r for r in records if r["type"] == "event" and r["ongoing"]]
    assert [r["joint"] for r in ongoing] == ["LH_HAA"]
    assert records[0]["limits"] == {"joint_speed": 6.0, "joint_torque": 75.0}
