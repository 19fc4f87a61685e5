"""The deployment runtime is the bottom layer: it never imports torch or the upper packages."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "ros2_ws" / "src" / "aow_policy" / "aow_policy"
FORBIDDEN = ("torch", "training", "export", "hardware_logs", "sim2sim", "bench")


def test_importing_aow_policy_does_not_load_torch():
    code = (
        "import sys, importlib, pkgutil, aow_policy\n"
        "for m in pkgutil.iter_modules(aow_policy.__path__):\n"
        "    if not m.name.endswith('_node'):\n"  # nodes need rclpy, absent here
        "        importlib.import_module('aow_policy.' + m.name)\n"
        f"bad = sorted(k for k in sys.modules if k.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"aow_policy pulled in: {out.stdout.strip()}"


def test_no_runtime_module_imports_upper_layers():
    offenders = []
    for path in RUNTIME.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert not offenders, offenders
