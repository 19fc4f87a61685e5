"""AoW deployment runtime: robot contract, policy runner, message conversions, controller and
violation monitor cores. Depends on numpy, pyyaml and onnxruntime only (never torch, never
rclpy outside the thin node modules), so it runs on the robot and in tests alike."""

__version__ = "0.1.0"
