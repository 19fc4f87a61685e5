"""bench.train_memory measures allocations: its figures follow the contact and constraint budgets."""

from __future__ import annotations

import json

import mujoco_warp  # noqa: F401  (pinned in pyproject: a broken install must fail, not skip)
import pytest

from bench import train_memory


def test_memory_per_environment_is_measured_and_follows_the_constraint_budget():
    base = train_memory.measure("aow_flat", 8, 24, 24)
    per = base["per_1000_envs_mb"]
    parts = ("warp_sim", "warp_step_scratch", "env_buffers", "rollout_storage")
    assert all(per[k] > 0 for k in parts)
    assert per["total"] == pytest.approx(sum(per[k] for k in parts), abs=0.05)
    # twice the constraint rows per world: the simulator's share grows, the others do not
    njmax = train_memory.warp_sim_bytes("aow_flat", 8)[1]
    bigger = train_memory.measure("aow_flat", 8, 24, 24, overrides={"sim": {"warp_njmax": 4096}})
    assert train_memory.warp_sim_bytes("aow_flat", 8, {"sim": {"warp_njmax": 4096}})[1] > njmax
    assert bigger["per_1000_envs_mb"]["warp_sim"] > per["warp_sim"]
    assert bigger["per_1000_envs_mb"]["rollout_storage"] == per["rollout_storage"]
    # rollout storage is linear in the rollout length
    longer = train_memory.measure("aow_flat", 8, 24, 48)
    assert longer["per_1000_envs_mb"]["rollout_storage"] == pytest.approx(2 * per["rollout_storage"], rel=0.02)


def test_cli_prints_one_json_line(capsys):
    assert train_memory.main(["--task", "aow_flat", "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["task"] == "aow_flat" and isinstance(result["meets_goal"], bool)
