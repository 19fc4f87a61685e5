"""Bad bags: each gives a clear message and the statistics that could still be computed, marked
partial, and the input files are byte for byte unchanged afterwards."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hardware_logs.cli import run
from tests.bagutil import T0_NS, JointSample, Scenario, checksums, uniform_samples, write_bag
from tests.test_replay import NAMES, known_scenario, summarize


def _only_storage_file(bag: Path) -> Path:
    (f,) = [p for p in bag.iterdir() if p.suffix in (".db3", ".mcap")]
    return f


def test_truncated_mcap_keeps_what_was_read(tmp_path: Path) -> None:
    # Several 1 MiB chunks, then the file is cut inside the third one (the recorder was killed).
    sc = Scenario(samples=uniform_samples(NAMES, 5000, velocity={"LF_KFE": [(100, 9.0)]}))
    full = _only_storage_file(write_bag(tmp_path / "bag", sc, storage="mcap"))
    cut = tmp_path / "cut.mcap"
    data = full.read_bytes()
    cut.write_bytes(data[: int(len(data) * 0.6)])
    before = checksums(cut)
    s = summarize([cut])
    assert s["partial"]
    assert any("truncated or corrupted" in w for w in s["warnings"])
    assert 1000 < s["messages"] < 5000
    assert s["velocity"]["events"] == 1 and s["velocity"]["per_joint"]["LF_KFE"]["peak"] == pytest.approx(3.0)
    assert checksums(cut) == before


def test_corrupted_sqlite_page_keeps_the_rows_before_it(tmp_path: Path) -> None:
    sc = Scenario(samples=uniform_samples(NAMES, 5000, velocity={"LF_KFE": [(100, 9.0)]}))
    bag = write_bag(tmp_path / "bag", sc, storage="sqlite3")
    db = _only_storage_file(bag)
    data = bytearray(db.read_bytes())
    mid = len(data) // 2
    data[mid - mid % 4096 : mid - mid % 4096 + 4096] = b"\xff" * 4096  # one whole page of garbage
    db.write_bytes(bytes(data))
    before = checksums(bag)
    s = summarize([bag])
    assert s["partial"]
    assert any("corrupt" in w for w in s["warnings"])
    assert 100 < s["messages"] < 5000
    assert s["velocity"]["events"] == 1
    assert checksums(bag) == before


def test_corrupted_message_is_reported_and_skipped(tmp_path: Path) -> None:
    bag = write_bag(tmp_path / "bag", known_scenario(), storage="mcap")
    f = _only_storage_file(bag)
    data = f.read_bytes()
    # Break one message's CDR in the middle of the recording: a joint-name length of 2 GB.
    needle = b"\x07\x00\x00\x00LF_HFE\x00"
    positions = [i for i in range(len(data)) if data.startswith(needle, i)]
    target = positions[len(positions) // 2]
    f.write_bytes(data[:target] + b"\xff\xff\xff\x7f" + data[target + 4 :])
    before = checksums(bag)
    s = summarize([bag])
    assert s["partial"] and s["messages"] == 299
    assert any("could not be decoded" in w for w in s["warnings"])
    assert s["velocity"]["events"] == 3  # the damaged message is not one of the overruns
    assert checksums(bag) == before


def test_missing_topic_lists_the_topics_present(tmp_path: Path) -> None:
    sc = known_scenario()
    sc.extra_topics = ["/tf"]
    bag = write_bag(tmp_path / "bag", sc, storage="sqlite3", topic="/robot/joint_states")
    before = checksums(bag)
    out = tmp_path / "report"
    assert run([str(bag), "--out", str(out), "--no-plots", "--quiet", "--no-progress"]) == 1
    s = json.loads((out / "summary.json").read_text())
    assert s["partial"] and not s["bags"][0]["ok"]
    (message,) = s["warnings"]
    assert "'/joint_states' is not in the bag" in message
    assert "/robot/joint_states (sensor_msgs/msg/JointState)" in message and "/tf" in message
    assert s["velocity"]["samples"] == 0
    # With the right topic the same bag is fine.
    assert run([str(bag), "--topic", "/robot/joint_states", "--out", str(out), "--no-plots", "--quiet"]) == 0
    assert checksums(bag) == before


def test_nan_values_are_counted_not_compared(tmp_path: Path) -> None:
    sc = known_scenario()
    k = NAMES.index("LF_HFE")
    for i in (11, 40, 41):  # one inside the first LF_HFE event: it splits it in two
        sc.samples[i].velocity[k] = math.nan
    bag = write_bag(tmp_path / "bag", sc, storage="mcap")
    before = checksums(bag)
    s = summarize([bag])
    v = s["velocity"]
    assert s["partial"]
    assert any("3 NaN velocity values" in w and "LF_HFE" in w for w in s["warnings"])
    assert v["nan_samples"] == 3 and v["per_joint"]["LF_HFE"]["nan_samples"] == 3
    assert v["per_joint"]["LF_HFE"]["samples"] == 297
    assert v["samples_over"] == 9 and v["events"] == 4
    assert checksums(bag) == before


def test_timestamps_going_backwards(tmp_path: Path) -> None:
    sc = known_scenario()
    for i, sample in enumerate(sc.samples):
        if i >= 150:  # the stamp clock jumps back 0.5 s (bag times stay ordered)
            sample.bag_time_ns = sample.stamp_ns
            sample.stamp_ns -= 500_000_000
    bag = write_bag(tmp_path / "bag", sc, storage="sqlite3")
    before = checksums(bag)
    s = summarize([bag])
    assert s["partial"]
    (w,) = [w for w in s["warnings"] if "backwards" in w]
    assert "1 times" in w and "message #150" in w
    # The jump is a break: the held interval stays 10 ms, so the recorded time is still 3.0 s.
    assert s["duration_s"] == pytest.approx(3.0)
    assert s["velocity"]["events"] == 3 and s["velocity"]["over_steps"] == 6
    assert checksums(bag) == before


def test_empty_effort_makes_torque_unavailable(tmp_path: Path) -> None:
    sc = known_scenario()
    for sample in sc.samples:
        sample.effort = []
    bag = write_bag(tmp_path / "bag", sc, storage="mcap")
    before = checksums(bag)
    s = summarize([bag])
    assert s["partial"]
    assert any("torque statistics unavailable" in w for w in s["warnings"])
    t = s["torque"]
    assert t["available"] is False and t["samples"] == 0 and t["violations_per_window"] is None
    assert s["velocity"]["available"] and s["velocity"]["events"] == 3 and s["velocity"]["over_steps"] == 6
    assert checksums(bag) == before


def test_not_a_bag_and_missing_path(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a bag")
    out = tmp_path / "r"
    assert run([str(text), str(tmp_path / "missing"), "--out", str(out), "--no-plots", "--quiet"]) == 1
    s = json.loads((out / "summary.json").read_text())
    assert "not a rosbag2 recording" in s["warnings"][0] and "no such bag" in s["warnings"][1]


def test_header_stamps_zero_fall_back_to_bag_time(tmp_path: Path) -> None:
    sc = known_scenario()
    for sample in sc.samples:
        sample.bag_time_ns = sample.stamp_ns
        sample.stamp_ns = 0
    bag = write_bag(tmp_path / "bag", sc, storage="sqlite3")
    s = summarize([bag])
    assert s["bags"][0]["time_source"] == "bag" and not s["partial"]
    assert s["velocity"]["over_steps"] == 6 and s["duration_s"] == pytest.approx(3.0)


def test_mixed_message_lengths_in_one_batch(tmp_path: Path) -> None:
    """Two publishers on one topic (legs, wheels) alternate: both layouts stay on the fast path."""
    legs = [n for n in NAMES if "WHEEL" not in n]
    wheels = [n for n in NAMES if "WHEEL" in n]
    samples = []
    for i in range(200):
        names = legs if i % 2 == 0 else wheels
        vel = [7.0 if (n == "LF_HFE" and i == 40) else 0.1 for n in names]
        samples.append(JointSample(T0_NS + i * 5_000_000, names, vel, [1.0] * len(names)))
    bag = write_bag(tmp_path / "bag", Scenario(samples=samples), storage="mcap")
    fast, full = summarize([bag]), summarize([bag], fast=False)
    assert fast["velocity"]["per_joint"]["LF_HFE"]["samples"] == 100
    assert fast["velocity"]["per_joint"]["LF_WHEEL"]["samples"] == 100
    assert fast["velocity"]["events"] == 1
    assert fast["bags"][0]["fast_path_messages"] == 200
    for key in ("velocity", "torque"):
        assert fast[key]["per_joint"] == full[key]["per_joint"]
