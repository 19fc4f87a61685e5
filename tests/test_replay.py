"""aow-replay on synthetic bags with hand-placed overruns: exact statistics, both storages, both paths."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from aow_policy.robot import load_robot
from hardware_logs.analyse import analyse_bag, merge_bag_results
from hardware_logs.cli import run
from hardware_logs.report import build_summary, validate_summary
from hardware_logs.stats import Settings
from tests.bagutil import T0_NS, JointSample, Scenario, checksums, uniform_samples, write_bag

ROBOT = load_robot()
SETTINGS = Settings(policy_dt=ROBOT.rates.policy_dt)
# Bag order differs from the contract order on purpose: joints are matched by name.
NAMES = list(reversed(ROBOT.joint_names))
VEL_LIMIT = 6.0  # the contract's joint_speed constraint, restated only to place test overruns
TORQUE_LIMIT = 75.0


def known_scenario(states: bool = False) -> Scenario:
    """300 messages at 100 Hz (3.0 s) with three velocity events and one torque event.

    velocity  LF_HFE  rows 10-14 (6.5 7.0 6.2 6.1 6.3): 0.10 s, 5 samples, peak 1.0
              LF_HFE  rows 16-17 (6.4 6.4):            0.16 s, 2 samples, peak 0.4
              RH_KFE  rows 100-102 (-8 -7 -6.5):        1.00 s, 3 samples, peak 2.0
              LH_KFE  row 200 at exactly 6.0 (not over); LF_WHEEL 20 rad/s (unconstrained)
    torque    LH_HAA  rows 50-59 at 80:                 0.50 s, 10 samples, peak 5.0
              LF_WHEEL 50 N·m at row 70 (unconstrained)
    Policy bins of 20 ms (2 rows each): velocity bins {5,6,7}, {8}, {50,51} -> 6; torque 25..29 -> 5.
    """
    samples = uniform_samples(
        NAMES,
        300,
        velocity={
            "LF_HFE": [(10, 6.5), (11, 7.0), (12, 6.2), (13, 6.1), (14, 6.3), (16, 6.4), (17, 6.4)],
            "RH_KFE": [(100, -8.0), (101, -7.0), (102, -6.5)],
            "LH_KFE": [(200, VEL_LIMIT)],
            "LF_WHEEL": [(i, 20.0) for i in range(50, 61)],
        },
        effort={"LH_HAA": [(i, 80.0) for i in range(50, 60)], "LF_WHEEL": [(70, 50.0)]},
    )
    sc = Scenario(samples=samples)
    if states:
        sc.states = [(T0_NS, "STAND_UP"), (T0_NS + 1_000_000_000, "POLICY")]
    return sc


def summarize(paths: list[Path], fast: bool = True, **kw: object) -> dict:
    results = [analyse_bag(p, ROBOT, SETTINGS, fast=fast, progress=False, **kw) for p in paths]
    velocity, torque = merge_bag_results(results)
    summary = build_summary(results, velocity, torque, SETTINGS, ROBOT, "/joint_states", "/diagnostics", fast)
    validate_summary(summary)
    return summary


def comparable(summary: dict) -> dict:
    """The summary without what legitimately differs between the fast and the full path."""
    s = json.loads(json.dumps(summary))
    s.pop("created_utc")
    s["settings"].pop("fast_path")
    for b in s["bags"]:
        b.pop("fast_path_messages")
        b.pop("full_path_messages")
    return s


def assert_known(s: dict) -> None:
    v, t = s["velocity"], s["torque"]
    assert s["messages"] == 300
    assert s["duration_s"] == pytest.approx(3.0)
    assert v["samples"] == 300 * 16 and t["samples"] == 300 * 16
    assert v["samples_over"] == 10 and t["samples_over"] == 10
    assert v["events"] == 3 and t["events"] == 1
    assert v["over_steps"] == 6 and t["over_steps"] == 5
    assert v["windows"] == pytest.approx(3.0 / 20.0)
    assert v["violations_per_window"] == pytest.approx(6 / 0.15)
    assert t["violations_per_window"] == pytest.approx(5 / 0.15)
    assert v["violations_per_minute"] == pytest.approx(3 / (3.0 / 60))
    assert v["time_over_s"] == pytest.approx(0.10)
    assert t["time_over_s"] == pytest.approx(0.10)
    pj = v["per_joint"]
    assert pj["LF_HFE"]["events"] == 2 and pj["LF_HFE"]["samples_over"] == 7
    assert pj["LF_HFE"]["peak"] == pytest.approx(1.0)
    assert pj["RH_KFE"]["events"] == 1 and pj["RH_KFE"]["peak"] == pytest.approx(2.0)
    assert pj["LH_KFE"]["samples_over"] == 0 and pj["LH_KFE"]["peak_abs"] == pytest.approx(VEL_LIMIT)
    assert pj["LF_WHEEL"]["limit"] is None and pj["LF_WHEEL"]["samples_over"] == 0
    assert pj["LF_WHEEL"]["peak_abs"] == pytest.approx(20.0)
    assert t["per_joint"]["LH_HAA"]["events"] == 1 and t["per_joint"]["LH_HAA"]["peak"] == pytest.approx(5.0)
    assert t["per_joint"]["LF_WHEEL"]["samples_over"] == 0
    worst = v["worst_events"]
    assert [(e["joint"], e["samples"]) for e in worst] == [("RH_KFE", 3), ("LF_HFE", 5), ("LF_HFE", 2)]
    assert worst[0]["start_s"] == pytest.approx(1.0) and worst[0]["duration_s"] == pytest.approx(0.03)
    assert worst[0]["start_stamp_ns"] == T0_NS + 100 * 10_000_000
    assert worst[1]["start_s"] == pytest.approx(0.10) and worst[1]["duration_s"] == pytest.approx(0.05)
    assert worst[2]["peak"] == pytest.approx(0.4)
    (te,) = t["worst_events"]
    assert te["joint"] == "LH_HAA" and te["samples"] == 10 and te["duration_s"] == pytest.approx(0.1)
    assert te["start_s"] == pytest.approx(0.5)


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_known_overruns_exact(tmp_path: Path, storage: str) -> None:
    bag = write_bag(tmp_path / "bag", known_scenario(), storage=storage)
    before = checksums(bag)
    s = summarize([bag])
    assert_known(s)
    assert not s["partial"] and s["warnings"] == []
    assert s["bags"][0]["storage"] == storage
    assert s["bags"][0]["fast_path_messages"] == 300
    assert checksums(bag) == before


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_small_batches_give_the_same_statistics(tmp_path: Path, storage: str) -> None:
    """Events and bins that straddle batch boundaries are carried over exactly."""
    bag = write_bag(tmp_path / "bag", known_scenario(), storage=storage)
    assert comparable(summarize([bag], batch_size=7)) == comparable(summarize([bag]))


def test_single_mcap_file_and_bag_without_definitions(tmp_path: Path) -> None:
    mc = write_bag(tmp_path / "mc", known_scenario(), storage="mcap")
    (single,) = mc.glob("*.mcap")
    assert_known(summarize([single]))
    # Humble sqlite3 bags carry no message definitions; Jazzy bags name their distro.
    humble = write_bag(tmp_path / "humble", known_scenario(), embed_definitions=False)
    assert_known(summarize([humble]))
    jazzy = write_bag(tmp_path / "jazzy", known_scenario(), version=9, embed_definitions=False, ros_distro="jazzy")
    s = summarize([jazzy])
    assert_known(s)
    assert s["bags"][0]["ros_distro"] == "jazzy"


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_fast_and_full_paths_agree(tmp_path: Path, storage: str) -> None:
    bag = write_bag(tmp_path / "bag", known_scenario(states=True), storage=storage)
    fast, full = summarize([bag], fast=True), summarize([bag], fast=False)
    assert fast["bags"][0]["fast_path_messages"] == 300 and full["bags"][0]["full_path_messages"] == 300
    assert comparable(fast) == comparable(full)


def names_changing_scenario() -> Scenario:
    """Names permuted at row 100 (same byte length) and reduced to the legs at row 200."""
    base = known_scenario().samples
    permuted = NAMES[1:] + NAMES[:1]
    legs = [n for n in NAMES if "WHEEL" not in n]
    out = []
    for i, s in enumerate(base):
        by_name = dict(zip(s.names, zip(s.velocity, s.effort, strict=True), strict=True))
        names = NAMES if i < 100 else permuted if i < 200 else legs
        vel, eff = zip(*(by_name[n] for n in names), strict=True)
        out.append(JointSample(s.stamp_ns, names, list(vel), list(eff)))
    return Scenario(samples=out)


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_names_changing_mid_bag(tmp_path: Path, storage: str) -> None:
    bag = write_bag(tmp_path / "bag", names_changing_scenario(), storage=storage)
    before = checksums(bag)
    fast, full = summarize([bag], fast=True), summarize([bag], fast=False)
    assert comparable(fast) == comparable(full)
    # Matched by name, the events are those of the unchanged scenario.
    v = fast["velocity"]
    assert v["events"] == 3 and v["samples_over"] == 10 and v["over_steps"] == 6
    assert v["per_joint"]["RH_KFE"]["peak"] == pytest.approx(2.0)  # row 100: right after the permutation
    assert v["per_joint"]["LF_WHEEL"]["samples"] == 200  # wheels gone from row 200 on
    assert v["per_joint"]["LF_HFE"]["samples"] == 300
    assert fast["partial"]
    changes = [w for w in fast["warnings"] if "joint names changed" in w]
    assert len(changes) == 2 and "message #100" in changes[0] and "order changed" in changes[0]
    assert "message #200" in changes[1] and "removed" in changes[1] and "LF_WHEEL" in changes[1]
    assert fast["bags"][0]["fast_path_messages"] == 300  # each new layout is learned, not decoded slowly
    assert checksums(bag) == before


def test_phases_from_controller_diagnostics(tmp_path: Path) -> None:
    bag = write_bag(tmp_path / "bag", known_scenario(states=True), storage="mcap")
    s = summarize([bag])
    assert_known(s)
    phases = s["phases"]
    assert set(phases) == {"stand_up", "policy"}
    assert phases["stand_up"]["duration_s"] == pytest.approx(1.0)
    assert phases["policy"]["duration_s"] == pytest.approx(2.0)
    assert phases["stand_up"]["velocity"]["events"] == 2 and phases["policy"]["velocity"]["events"] == 1
    assert phases["stand_up"]["velocity"]["over_steps"] == 4 and phases["policy"]["velocity"]["over_steps"] == 2
    assert phases["stand_up"]["torque"]["events"] == 1 and phases["policy"]["torque"]["events"] == 0
    assert phases["policy"]["velocity"]["violations_per_window"] == pytest.approx(2 / (2.0 / 20))
    assert {e["phase"] for e in s["velocity"]["worst_events"]} == {"stand_up", "policy"}


def test_combined_statistics_are_exact_across_bags_and_jobs(tmp_path: Path) -> None:
    a = write_bag(tmp_path / "a", known_scenario(), storage="sqlite3")
    sc = known_scenario()
    sc.samples = sc.samples[:100]  # 1.0 s: the two LF_HFE velocity events and the torque event
    b = write_bag(tmp_path / "b", sc, storage="mcap")
    one = tmp_path / "one"
    two = tmp_path / "two"
    assert run([str(a), str(b), "--out", str(one), "--no-plots", "--quiet", "--no-progress"]) == 0
    assert run([str(a), str(b), "--out", str(two), "--no-plots", "--quiet", "--jobs", "2"]) == 0
    s1 = json.loads((one / "summary.json").read_text())
    s2 = json.loads((two / "summary.json").read_text())
    assert comparable(s1) == comparable(s2)
    v = s1["velocity"]
    assert s1["duration_s"] == pytest.approx(4.0)
    assert v["events"] == 3 + 2 and v["over_steps"] == 6 + 4 and v["samples"] == 16 * 400
    # Not an average of the two bags' rates: total violating steps over total windows.
    assert v["violations_per_window"] == pytest.approx(10 / (4.0 / 20))
    per_bag = [bag["velocity"]["violations_per_window"] for bag in s1["bags"]]
    assert not math.isclose(v["violations_per_window"], float(np.mean(per_bag)))
    assert s1["torque"]["per_joint"]["LH_HAA"]["events"] == 2


def test_report_files(tmp_path: Path) -> None:
    import matplotlib.image

    bag = write_bag(tmp_path / "bag", known_scenario(states=True), storage="mcap")
    out = tmp_path / "report"
    assert run([str(bag), "--out", str(out), "--quiet", "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    validate_summary(summary)
    assert_known(summary)
    lines = (out / "events.csv").read_text().splitlines()
    assert lines[0].startswith("bag,quantity,joint,phase,start_s")
    assert len(lines) == 1 + 4
    assert lines[1].split(",")[1:5] == ["velocity", "LF_HFE", "stand_up", "0.100000"]
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["bag0_bag_torque.png", "bag0_bag_velocity.png", "hist_torque.png", "hist_velocity.png"]
    for p in out.glob("*.png"):
        image = matplotlib.image.imread(p)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        assert image[..., :3].std() > 0.01  # not a blank canvas
    assert not list(out.glob(".*tmp*"))


def test_cli_table_and_help(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_bag(tmp_path / "bag", known_scenario(), storage="sqlite3")
    assert run([str(bag), "--out", str(tmp_path / "r"), "--no-plots", "--no-progress"]) == 0
    out = capsys.readouterr().out
    lf_hfe = next(line for line in out.splitlines() if line.startswith("LF_HFE"))
    assert lf_hfe.split()[3] == "7" and "violations per 20 s window" in out
    with pytest.raises(SystemExit) as e:
        run(["--help"])
    assert e.value.code == 0


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_batches_follow_rosbags_order(tmp_path: Path, storage: str) -> None:
    """Raw batches hold rosbags' messages in rosbags' order, whatever the batch size.

    Bag times are written out of order, with many ties that straddle batch boundaries, and the
    message length changes now and then (mixed-length batches take the per-message route).
    """
    from rosbags.rosbag2 import Reader, StoragePlugin, Writer

    from hardware_logs.fastcdr import stacked_stride
    from hardware_logs.reader import BagSource
    from tests.bagutil import JOINT_STATE, TS, joint_state_cdr

    rng = np.random.default_rng(3)
    legs = [n for n in NAMES if "WHEEL" not in n]
    bag = tmp_path / "bag"
    plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
    with Writer(bag, version=8, storage_plugin=plugin) as writer:
        conn = writer.add_connection("/joint_states", JOINT_STATE, typestore=TS)
        for i in range(120):
            names = legs if 40 <= i < 47 else NAMES
            sample = JointSample(T0_NS + i, names, [float(i)] * len(names), [0.0] * len(names))
            bag_time = T0_NS + int(rng.integers(0, 12)) * 1000 if storage == "sqlite3" else T0_NS + i // 5
            writer.write(conn, bag_time, joint_state_cdr(sample))
    with Reader(bag) as reader:
        expected = [(t, bytes(raw)) for _, t, raw in reader.messages()]

    def flattened(batch_size: int) -> list[tuple[int, bytes]]:
        out = []
        with BagSource(bag, "/joint_states", batch_size=batch_size) as source:
            for batch in source.batches():
                if batch.stacked is not None:
                    stride = stacked_stride(batch.length)
                    raws = [bytes(batch.stacked[k * stride : k * stride + batch.length]) for k in range(len(batch))]
                else:
                    raws = list(batch.data or [])
                out += list(zip(batch.bag_time_ns.tolist(), raws, strict=True))
            assert not source.warnings
        return out

    for batch_size in (1, 2, 3, 7, 64, 1000):
        assert flattened(batch_size) == expected, batch_size


def test_uncounted_sqlite3_open_matches_rosbags(tmp_path: Path) -> None:
    """The sqlite3 open that skips rosbags' message count sees the same topics, definitions and counts."""
    from rosbags.rosbag2 import Reader

    from hardware_logs.reader import BagSource, _UncountedReader

    bag = tmp_path / "bag"
    write_bag(bag, known_scenario(states=True), "sqlite3")
    with Reader(bag) as counted, _UncountedReader(bag) as uncounted:
        assert [c[:7] for c in uncounted.connections] == [c[:7] for c in counted.connections]  # all but owner
        assert uncounted.duration == counted.duration and uncounted.message_count == counted.message_count
        storage = uncounted.storage.storages[0]
        assert [(c.id, c.topic, c.msgtype, c.msgdef, c.digest, c.ext) for c in storage.connections] == [
            (c.id, c.topic, c.msgtype, c.msgdef, c.digest, c.ext) for c in counted.storage.storages[0].connections
        ]
    with BagSource(bag, "/joint_states") as source:
        assert source.info.topic_messages == len(known_scenario().samples)
