"""Rollout storage: GAE for the reward and every cost group against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from training.storage import RolloutStorage, minibatch_indices

GAMMA, LAM = 0.9, 0.5


def _filled(bootstrap: bool) -> RolloutStorage:
    """T=3, N=1, one cost group; step 1 ends in a time-out."""
    s = RolloutStorage(num_envs=1, num_steps=3, obs_dim=2, critic_obs_dim=2, num_actions=1, num_cost_groups=1)
    rewards, costs = [1.0, 2.0, 3.0], [0.5, 0.0, 1.0]
    v_r, v_c = [0.1, 0.2, 0.3], [1.0, 2.0, 3.0]
    time_outs = [False, True, False]
    for t in range(3):
        s.add(
            obs=torch.zeros(1, 2),
            critic_obs=torch.zeros(1, 2),
            actions=torch.zeros(1, 1),
            log_probs=torch.zeros(1),
            action_mean=torch.zeros(1, 1),
            action_std=torch.ones(1),
            rewards=torch.tensor([rewards[t]]),
            costs_by_group=torch.tensor([[costs[t]]]),
            dones=torch.tensor([time_outs[t]]),
            time_outs=torch.tensor([time_outs[t]]),
            values=torch.tensor([v_r[t]]),
            cost_values=torch.tensor([[v_c[t]]]),
            gamma=GAMMA,
            bootstrap_values=torch.tensor([5.0]) if bootstrap else None,
            bootstrap_cost_values=torch.tensor([[7.0]]) if bootstrap else None,
        )
    s.compute_returns(torch.tensor([0.4]), torch.tensor([[4.0]]), GAMMA, LAM)
    return s


def test_gae_reward_and_cost_tracks_by_hand():
    s = _filled(bootstrap=True)
    b = s.batch()
    # Reward: the time-out at t=1 adds gamma * V_R(terminal) = 0.9 * 5 to its reward and cuts the trace.
    # t=2: delta = 3 + 0.9*0.4 - 0.3 = 3.06; t=1: 2 + 4.5 - 0.2 = 6.3; t=0: 1 + 0.9*0.2 - 0.1 + 0.45*6.3
    assert b.advantages.tolist() == pytest.approx([3.915, 6.3, 3.06])
    assert b.returns.tolist() == pytest.approx([4.015, 6.5, 3.36])
    # Cost: bootstrapped with the COST critic's value 7 (never with the cost itself, 0 here).
    # t=2: 1 + 0.9*4 - 3 = 1.6; t=1: 0 + 6.3 - 2 = 4.3; t=0: 0.5 + 1.8 - 1 + 0.45*4.3 = 3.235
    assert b.cost_advantages[:, 0].tolist() == pytest.approx([3.235, 4.3, 1.6])
    assert b.cost_returns[:, 0].tolist() == pytest.approx([4.235, 6.3, 4.6])


def test_time_out_default_bootstrap_is_the_steps_own_critic_values():
    s = _filled(bootstrap=False)
    # No terminal observation: V(s_1) (0.2 reward, 2.0 cost), as rsl_rl; not the cost 0.0.
    assert s.signals[1, 0, 0].item() == pytest.approx(2.0 + GAMMA * 0.2)
    assert s.signals[1, 0, 1].item() == pytest.approx(0.0 + GAMMA * 2.0)


def test_termination_without_time_out_is_not_bootstrapped():
    s = RolloutStorage(1, 1, 1, 1, 1, 1)
    s.add(
        torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.zeros(1, 1), torch.ones(1),
        torch.tensor([1.0]), torch.tensor([[2.0]]), torch.tensor([True]), torch.tensor([False]),
        torch.tensor([0.5]), torch.tensor([[0.5]]), GAMMA,
    )  # fmt: skip
    s.compute_returns(torch.tensor([100.0]), torch.tensor([[100.0]]), GAMMA, LAM)
    assert s.returns[0, 0].tolist() == pytest.approx([1.0, 2.0])


def test_storage_refuses_overfill_and_partial_rollouts():
    s = RolloutStorage(1, 1, 1, 1, 1, 0)
    with pytest.raises(RuntimeError, match="holds 0 of 1"):
        s.compute_returns(torch.zeros(1), torch.zeros(1, 0), GAMMA, LAM)


def test_minibatches_cover_every_sample_once_per_epoch():
    g = torch.Generator().manual_seed(0)
    seen: dict[int, list[int]] = {}
    for epoch, _m, idx in minibatch_indices(10, 3, 2, g):
        seen.setdefault(epoch, []).extend(idx.tolist())
    assert sorted(seen) == [0, 1]
    for epoch in seen:
        assert sorted(seen[epoch]) == list(range(10))
    assert seen[0] != seen[1]  # a fresh permutation per epoch
