"""ROS 2 node watching joint speed and torque against the constraint limits: a thin shell.

Subscribes ``joint_states`` (sensor_msgs/JointState, sensor-data QoS) and feeds
:class:`aow_policy.monitor.ViolationMonitor`; writes every ended event and a summary per
``summary_period`` to a JSON Lines file in ``log_dir`` (one file per run, each line flushed) and
the run's summary at shutdown; publishes diagnostic_msgs/DiagnosticArray on ``/diagnostics``.
Parameters: :data:`aow_policy.node_support.MONITOR_PARAMS`.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState

from aow_policy.cdr import JointStateDecoder
from aow_policy.messages import MessageError
from aow_policy.monitor import ViolationMonitor
from aow_policy.monitor_log import ViolationLog
from aow_policy.node_support import (
    MONITOR_PARAMS,
    PolledSubscription,
    declare_parameters,
    monitor_diagnostics,
    run_node,
)
from aow_policy.robot import load_robot

# Best effort, as drivers publish joint states (a reliable reader would not match them), but a
# queue of a second at 400 Hz instead of sensor-data QoS's 5: every sample counts for the
# statistics, and with 5 the monitor lost 6 % of them to bursts while the sim bridge loaded the
# 2-core test machine (undercounted violations, a missed event; tests/test_ros_graph.py).
MONITOR_QOS = QoSProfile(depth=400, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT)


POLL_PERIOD = 0.02  # s: the monitor's queue holds 1 s at 400 Hz


class ViolationMonitorNode(Node):
    def __init__(self, **kwargs: Any):
        super().__init__("violation_monitor_node", **kwargs)
        p = declare_parameters(self, MONITOR_PARAMS)
        self.params = p
        robot = load_robot(p["robot_config"] or None)
        self.monitor = ViolationMonitor(robot, policy_dt=p["policy_dt"] or None, episode_s=p["episode_s"])
        self.log = ViolationLog(p["log_dir"], self.monitor)
        self._refusals_logged = 0
        # Every joint state counts, but none needs handling at once: the queue is emptied every
        # poll_period from a hidden node no executor spins, each message decoded from its bytes
        # (aow_policy.cdr). An executor wake-up and Humble's message construction per message cost
        # the monitor a third of a core at 400 Hz on the 2-core test machine.
        self._inputs_node = None
        self._polled: PolledSubscription | None = None
        if PolledSubscription.supported():
            self._inputs_node = rclpy.create_node(
                f"_{self.get_name()}_inputs", namespace=self.get_namespace(), context=self.context
            )
            self._polled = PolledSubscription(
                self._inputs_node, JointState, p["joint_states_topic"], MONITOR_QOS, JointStateDecoder()
            )
            self.create_timer(POLL_PERIOD, self._poll)
        else:  # an rclpy without the take: one callback per message
            self.create_subscription(JointState, p["joint_states_topic"], self._on_joint_state, MONITOR_QOS)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", QoSProfile(depth=10))
        self.create_timer(p["summary_period"], self._on_summary_timer)
        self.get_logger().info(
            f"watching {p['joint_states_topic']} against joint speed {robot.constraints['joint_speed'].limit} rad/s "
            f"and torque {robot.constraints['joint_torque'].limit} N·m; log {self.log.path}"
        )

    def now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _poll(self) -> None:
        if self._polled is None:
            return
        now = self.now()
        for msg, age in self._polled.take_all():
            self._on_joint_state(msg, now - age)

    def _on_joint_state(self, msg: JointState, arrival: float | None = None) -> None:
        if self.params["use_header_stamp"]:
            t = None
        else:
            t = self.now() if arrival is None else arrival
        try:
            events = self.monitor.update_joint_state(msg, t)
        except MessageError as e:
            if self._refusals_logged < 10:  # do not flood the log at 400 Hz
                self.get_logger().warning(f"joint state refused: {e}")
                self._refusals_logged += 1
            return
        if events:
            self.log.events(events)
            for e in events:
                self.get_logger().warning(
                    f"{e.quantity} limit violated on {e.joint}: peak {e.peak:.2f} > {e.limit:.2f} "
                    f"for {e.duration:.3f} s"
                )

    def _on_summary_timer(self) -> None:
        interval = self.monitor.interval_summary(self.now())
        self.log.write({"type": "interval", **interval})
        level, message, values = monitor_diagnostics(self.monitor.summary(), interval)
        status = DiagnosticStatus(
            level=getattr(DiagnosticStatus, level),
            name=f"{self.get_fully_qualified_name()}: joint limits",
            message=message,
            hardware_id=self.monitor.robot.name,
            values=[KeyValue(key=k, value=v) for k, v in values.items()],
        )
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(array)

    def destroy_node(self) -> None:
        if self._inputs_node is not None:
            self._inputs_node.destroy_node()
            self._inputs_node = None
        super().destroy_node()

    def close(self) -> None:
        if self.context.ok():
            self._poll()  # what arrived since the last poll counts too
        summary = self.log.close()
        if summary:
            self.get_logger().info(
                f"{summary['samples']} samples, events {summary['events']}, violations per episode "
                f"{summary['violations_per_episode']['any']:.2f}; log {self.log.path}"
            )


def _freeze_and_build() -> ViolationMonitorNode:
    node = ViolationMonitorNode()
    gc.freeze()  # start-up objects leave the collected generations: shorter GC pauses in the loop
    return node


def main(args: list[str] | None = None) -> None:
    """Spin until SIGINT/SIGTERM, then write the run's summary (node_support.run_node)."""
    sys.exit(run_node("violation_monitor_node", _freeze_and_build, on_stop=lambda node: node.close(), args=args))


if __name__ == "__main__":
    main()
