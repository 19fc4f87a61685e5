"""Throughput of aow-replay's statistics pass against reading with rosbags and deserializing.

    python -m bench.replay_throughput [--json] [--quick] [--messages N]

Writes one bag per storage (sqlite3, mcap) with N JointState messages (16 joints of the robot
contract, position, velocity and effort, 400 Hz, a few overruns), then times in separate
processes (so each peak RSS is its own):

* aow-replay's statistics pass (``hardware_logs.analyse_bag``: reading, decoding, statistics,
  plot envelopes; no plotting or report writing);
* the baseline: rosbags' ``AnyReader`` over the same topic, ``deserialize`` on every message.

The last stdout line with --json is one object: {"sqlite3": {...}, "mcap": {...}} with
msgs_per_s, baseline_msgs_per_s, speedup and peak_rss_mb (of the statistics pass) each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TOPIC = "/joint_states"
PERIOD_NS = 2_500_000  # 400 Hz
T0_NS = 1_700_000_000_000_000_000


def write_bag(path: Path, storage: str, messages: int, seed: int = 0) -> None:
    """A recording-like bag, fast to write: one serialized template, values patched in bulk."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    from aow_policy.robot import load_robot
    from hardware_logs.fastcdr import parse_layout

    ts = get_typestore(Stores.ROS2_HUMBLE)
    robot = load_robot()
    names = list(robot.joint_names)
    j = len(names)
    js = ts.types["sensor_msgs/msg/JointState"]
    template = js(
        header=ts.types["std_msgs/msg/Header"](
            stamp=ts.types["builtin_interfaces/msg/Time"](sec=0, nanosec=0), frame_id="base"
        ),
        name=names,
        position=np.zeros(j),
        velocity=np.zeros(j),
        effort=np.zeros(j),
    )
    raw = bytes(ts.serialize_cdr(template, js.__msgtype__))
    layout = parse_layout(raw)
    plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
    rng = np.random.default_rng(seed)
    chunk = 50_000
    with Writer(path, version=8, storage_plugin=plugin) as writer:
        conn = writer.add_connection(TOPIC, js.__msgtype__, typestore=ts)
        for start in range(0, messages, chunk):
            n = min(chunk, messages - start)
            t = T0_NS + (start + np.arange(n, dtype=np.int64)) * PERIOD_NS
            phase = t[:, None] * 1e-9 * np.linspace(1.0, 3.0, j)[None, :]
            vel = 4.5 * np.sin(phase) + 0.3 * rng.standard_normal((n, j))
            eff = 60.0 * np.cos(phase) + 5.0 * rng.standard_normal((n, j))
            rows = np.tile(np.frombuffer(raw, np.uint8), (n, 1))
            rows[:, 4:8] = (t // 1_000_000_000).astype("<i4").view(np.uint8).reshape(n, 4)
            rows[:, 8:12] = (t % 1_000_000_000).astype("<u4").view(np.uint8).reshape(n, 4)
            for off, values in ((layout.offsets[0], np.cos(phase)), (layout.offsets[1], vel), (layout.offsets[2], eff)):
                rows[:, off : off + 8 * j] = values.astype("<f8").view(np.uint8).reshape(n, 8 * j)
            for i in range(n):
                writer.write(conn, int(t[i]), rows[i].tobytes())


def _peak_rss_mb() -> float:
    """This process's own peak RSS: VmHWM (reset at exec), not ru_maxrss (which keeps the parent's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _child_stats(bag: str) -> dict:
    from aow_policy.robot import load_robot
    from hardware_logs.analyse import analyse_bag
    from hardware_logs.stats import Settings

    robot = load_robot()
    start = time.perf_counter()
    result = analyse_bag(bag, robot, Settings(policy_dt=robot.rates.policy_dt), topic=TOPIC, progress=False)
    elapsed = time.perf_counter() - start
    if not result.ok or result.partial:
        raise SystemExit(f"statistics pass failed on {bag}: {result.warnings}")
    return {
        "messages": result.messages,
        "seconds": elapsed,
        "fast_path_messages": result.fast_messages,
        "velocity_events": len(result.velocity.events),
        "peak_rss_mb": _peak_rss_mb(),
    }


def _child_baseline(bag: str) -> dict:
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    start = time.perf_counter()
    count = 0
    with AnyReader([Path(bag)], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
        conns = [c for c in reader.connections if c.topic == TOPIC]
        for conn, _, raw in reader.messages(connections=conns):
            reader.deserialize(raw, conn.msgtype)
            count += 1
    return {
        "messages": count,
        "seconds": time.perf_counter() - start,
        "peak_rss_mb": _peak_rss_mb(),
    }


def _in_child(kind: str, bag: Path) -> dict:
    cmd = [sys.executable, "-m", "bench.replay_throughput", "--child", kind, str(bag)]
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=root)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.replay_throughput", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    p.add_argument("--quick", action="store_true", help="60,000 messages per bag (under a minute)")
    p.add_argument("--messages", type=int, default=None, help="messages per bag (default 500,000)")
    p.add_argument("--child", nargs=2, metavar=("KIND", "BAG"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        kind, bag = args.child
        print(json.dumps(_child_stats(bag) if kind == "stats" else _child_baseline(bag)))
        return 0

    messages = args.messages or (60_000 if args.quick else 500_000)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="replay_bench_") as tmp:
        for storage in ("sqlite3", "mcap"):
            bag = Path(tmp) / f"bag_{storage}"
            t0 = time.perf_counter()
            write_bag(bag, storage, messages)
            size_mb = sum(f.stat().st_size for f in bag.iterdir()) / 2**20
            print(f"{storage}: wrote {messages} messages ({size_mb:.0f} MB) in {time.perf_counter() - t0:.1f} s")
            for f in bag.iterdir():  # same page-cache state for both timed passes, whichever runs first
                with f.open("rb") as fh:
                    while fh.read(1 << 24):
                        pass
            ours = _in_child("stats", bag)
            base = _in_child("baseline", bag)
            if ours["messages"] != messages or base["messages"] != messages:
                raise SystemExit(f"message counts differ: {ours['messages']}, {base['messages']}, expected {messages}")
            rate, base_rate = messages / ours["seconds"], messages / base["seconds"]
            out[storage] = {
                "msgs_per_s": round(rate),
                "baseline_msgs_per_s": round(base_rate),
                "speedup": round(rate / base_rate, 2),
                "peak_rss_mb": round(ours["peak_rss_mb"], 1),
                "baseline_peak_rss_mb": round(base["peak_rss_mb"], 1),
                "messages": messages,
                "fast_path_messages": ours["fast_path_messages"],
            }
            print(
                f"{storage}: aow-replay {rate:,.0f} msg/s ({ours['seconds']:.2f} s,"
                f" peak RSS {ours['peak_rss_mb']:.0f} MB); AnyReader+deserialize {base_rate:,.0f} msg/s"
                f" ({base['seconds']:.2f} s); speedup {rate / base_rate:.1f}x"
            )
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
