"""Synthetic rosbag2 recordings for the replay tests, written with rosbags' own serializer.

The messages are serialized by rosbags (not by hardware_logs), so the decoder under test meets
real CDR bytes; scenarios are small (hundreds of messages) with overruns placed by hand.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

TS = get_typestore(Stores.ROS2_HUMBLE)
JOINT_STATE = "sensor_msgs/msg/JointState"
DIAGNOSTIC_ARRAY = "diagnostic_msgs/msg/DiagnosticArray"
T0_NS = 1_700_000_000_000_000_000


@dataclass
class JointSample:
    stamp_ns: int
    names: Sequence[str]
    velocity: Sequence[float]
    effort: Sequence[float]
    position: Sequence[float] | None = None
    bag_time_ns: int | None = None


@dataclass
class Scenario:
    samples: list[JointSample] = field(default_factory=list)
    states: list[tuple[int, str]] = field(default_factory=list)  # (stamp ns, controller state)
    extra_topics: list[str] = field(default_factory=list)


def _time(ns: int) -> object:
    return TS.types["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def joint_state_cdr(s: JointSample, frame_id: str = "base") -> bytes:
    msg = TS.types[JOINT_STATE](
        header=TS.types["std_msgs/msg/Header"](stamp=_time(s.stamp_ns), frame_id=frame_id),
        name=list(s.names),
        position=np.asarray(s.position if s.position is not None else np.zeros(len(s.names)), dtype=np.float64),
        velocity=np.asarray(s.velocity, dtype=np.float64),
        effort=np.asarray(s.effort, dtype=np.float64),
    )
    return bytes(TS.serialize_cdr(msg, JOINT_STATE))


def diagnostics_cdr(stamp_ns: int, state: str) -> bytes:
    kv = TS.types["diagnostic_msgs/msg/KeyValue"]
    status = TS.types["diagnostic_msgs/msg/DiagnosticStatus"](
        level=0,
        name="aow_policy: controller",
        message=state,
        hardware_id="aow",
        values=[kv(key="policy_hz", value="50"), kv(key="state", value=state)],
    )
    msg = TS.types[DIAGNOSTIC_ARRAY](
        header=TS.types["std_msgs/msg/Header"](stamp=_time(stamp_ns), frame_id=""), status=[status]
    )
    return bytes(TS.serialize_cdr(msg, DIAGNOSTIC_ARRAY))


def write_bag(
    path: Path,
    scenario: Scenario,
    storage: str = "sqlite3",
    topic: str = "/joint_states",
    version: int = 8,
    embed_definitions: bool = True,
    ros_distro: str | None = None,
) -> Path:
    """Write a rosbag2 directory; returns its path."""
    plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
    records: list[tuple[int, str, bytes]] = []
    for s in scenario.samples:
        records.append((s.bag_time_ns if s.bag_time_ns is not None else s.stamp_ns, "js", joint_state_cdr(s)))
    for stamp, state in scenario.states:
        records.append((stamp, "diag", diagnostics_cdr(stamp, state)))
    records.sort(key=lambda r: r[0])
    with Writer(path, version=version, storage_plugin=plugin) as writer:
        conns = {"js": writer.add_connection(topic, JOINT_STATE, typestore=TS)}
        if scenario.states:
            conns["diag"] = writer.add_connection("/diagnostics", DIAGNOSTIC_ARRAY, typestore=TS)
        for extra in scenario.extra_topics:
            writer.add_connection(extra, "std_msgs/msg/String", typestore=TS)
        for t, kind, raw in records:
            writer.write(conns[kind], t, raw)
    if not embed_definitions:
        _strip_definitions(path, storage)
    if ros_distro:
        meta = path / "metadata.yaml"
        meta.write_text(meta.read_text().replace("ros_distro: rosbags", f"ros_distro: {ros_distro}"))
    return path


def _strip_definitions(path: Path, storage: str) -> None:
    """Make the bag look like a Humble sqlite3 recording: no message definitions inside."""
    if storage != "sqlite3":
        raise ValueError("only sqlite3 bags are written without definitions here")
    import sqlite3

    (db,) = path.glob("*.db3")
    con = sqlite3.connect(db)
    con.execute("DELETE FROM message_definitions")
    con.commit()
    con.close()


def checksums(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


# ---- scenarios ------------------------------------------------------------------------------------


def uniform_samples(
    names: Sequence[str],
    count: int,
    period_ns: int = 10_000_000,
    velocity: dict[str, Iterable[tuple[int, float]]] | None = None,
    effort: dict[str, Iterable[tuple[int, float]]] | None = None,
    start_ns: int = T0_NS,
    base_velocity: float = 0.5,
    base_effort: float = 10.0,
) -> list[JointSample]:
    """``count`` messages at a fixed period; ``velocity``/``effort``: joint -> [(message index, value)]."""
    vel = np.full((count, len(names)), base_velocity)
    eff = np.full((count, len(names)), base_effort)
    for table, spec in ((vel, velocity or {}), (eff, effort or {})):
        for joint, items in spec.items():
            k = list(names).index(joint)
            for i, value in items:
                table[i, k] = value
    return [JointSample(start_ns + i * period_ns, list(names), vel[i].tolist(), eff[i].tolist()) for i in range(count)]
