"""ament_python package; also installs with plain pip where ROS 2 is absent."""

from glob import glob

from setuptools import Extension, find_packages, setup

package_name = "aow_policy"

# The height scan's C fast path (aow_policy/_scan.c). optional=True: without a C compiler the
# build goes on and the runtime uses the NumPy path (same results, ~30 us more per control step).
# -ffp-contract=off: no fused multiply-adds, so the rounding matches the NumPy path.
scan_extension = Extension(
    "aow_policy._scan",
    sources=["aow_policy/_scan.c"],
    depends=["aow_policy/_buffers.h"],
    extra_compile_args=["-O2", "-ffp-contract=off"],
    optional=True,
)

# The controller core's per-period array work (aow_policy/_control.c), optional likewise: without
# it ControllerCore runs the NumPy path (same results, ~30 us more per control step).
control_extension = Extension(
    "aow_policy._control",
    sources=["aow_policy/_control.c"],
    depends=["aow_policy/_buffers.h"],
    extra_compile_args=["-O2", "-ffp-contract=off"],
    optional=True,
)

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test", "tests"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", glob("launch/*.py")),
        ("share/" + package_name + "/config", glob("config/*.yaml") + glob("config/*.urdf")),
    ],
    install_requires=["setuptools", "numpy", "pyyaml", "onnxruntime"],
    ext_modules=[scan_extension, control_extension],
    zip_safe=False,
    maintainer="AoW toolkit developers",
    maintainer_email="dev@aow.local",
    description="ONNX locomotion policy runtime and violation monitor for the AoW robot.",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            # `ros2 run aow_policy controller_node` (setup.cfg installs scripts into lib/aow_policy)
            "controller_node = aow_policy.controller_node:main",
            "violation_monitor_node = aow_policy.violation_monitor_node:main",
        ],
    },
)
