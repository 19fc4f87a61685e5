"""The Isaac Gym adapter: only where isaacgym is installed (marker ``isaacgym``), and never
imported otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_envs_do_not_import_isaacgym_unless_asked():
    code = (
        "import sys; from training.envs import make_env; env = make_env('aow_flat', 1); env.close(); "
        "print('training.sim.backends.isaacgym' in sys.modules, 'isaacgym' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.isaacgym
@pytest.mark.parametrize("task", ["aow_flat", "aow_rough"])
def test_isaacgym_backend_runs_the_same_task(task):
    import isaacgym  # noqa: F401  (Isaac Gym must load before torch)
    import torch

    from training.envs import make_env

    small = {"kind": "rough", "num_rows": 2, "num_cols": 2, "tile_size": 4.0, "border": 1.0}
    overrides = {"terrain": small} if task == "aow_rough" else {}
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    env = make_env(task, 4, backend="isaacgym", device=device, **overrides)
    try:
        obs = env.reset()
        assert obs["policy"].shape == (4, env.obs_spec["policy"].dim)
        for _ in range(20):
            obs, rewards, costs, _, _ = env.step(torch.zeros(4, env.num_actions, device=device))
            assert all(bool(torch.isfinite(v).all()) for v in obs.values())
            assert bool(torch.isfinite(rewards).all()) and bool(torch.isfinite(costs).all())
        state = env.sim.state()
        # Standing on default targets: upright, at about the keyframe's height above the ground.
        assert float(state.base_pos[:, 2].min()) > 0.3
        assert env.sim.joint_names == tuple(env.action_layout["joint_names"])
    finally:
        env.close()
