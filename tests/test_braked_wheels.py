"""Issue 23, lever 1b: robots with braked wheels (``domain_rand.braked_wheels_share``) cannot roll,
whatever the policy asks of the wheels; the share is drawn at each reset; the legs are untouched;
a robot without wheels refuses the lever; the draw is part of the exact resume state."""

from __future__ import annotations

import pytest
import torch

from training.envs import make_env
from training.envs.config import DomainRandConfig

QUIET = {"push_robots": False, "observation_noise": False}


def _capture_targets(env) -> list[torch.Tensor]:
    """Record the joint targets the environment hands to the simulator at every step."""
    sent: list[torch.Tensor] = []
    step = env.sim.step

    def recording_step(targets):
        sent.append(targets.clone())
        return step(targets)

    env.sim.step = recording_step
    return sent


def _full_throttle(env) -> torch.Tensor:
    actions = torch.zeros(env.num_envs, env.num_actions)
    actions[:, env.wheel_ids] = 1.0  # every wheel asked to spin forward
    actions[:, env.leg_ids] = 0.3  # and the legs asked to move off the default pose
    return actions


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_braked_wheels_get_zero_speed_targets_and_do_not_turn(share):
    env = make_env("aow_flat_style", 2, seed=0, domain_rand={**QUIET, "braked_wheels_share": share})
    try:
        env.reset()
        assert env.wheel_ids.numel() == 4
        assert env.wheels_braked.tolist() == [share == 1.0] * 2
        sent = _capture_targets(env)
        actions = _full_throttle(env)
        for _ in range(25):  # half a second
            env.step(actions)
        expected = torch.clamp(env.action_offset + env.action_scale * actions, env.action_low, env.action_high)
        last = sent[-1]
        # The legs get exactly what the policy asked for, braked or not.
        assert torch.equal(last[:, env.leg_ids], expected[:, env.leg_ids])
        wheel_speed = env.sim.state().joint_vel[:, env.wheel_ids].abs()
        if share == 1.0:
            assert torch.equal(last[:, env.wheel_ids], torch.zeros(2, 4))
            assert float(wheel_speed.max()) < 1.0  # rad/s: held by the drives
        else:
            assert torch.equal(last[:, env.wheel_ids], expected[:, env.wheel_ids])
            assert float(expected[0, env.wheel_ids].min()) >= 5.0  # rad/s: a real speed request ...
            assert float(wheel_speed.min()) > 3.0  # ... that the free wheels follow
    finally:
        env.close()


def test_the_share_is_drawn_at_each_reset():
    env = make_env("aow_flat_style", 2, seed=1, domain_rand={**QUIET, "braked_wheels_share": 0.3})
    try:
        env.reset()
        draws = []
        for _ in range(2000):
            env._reset_envs(torch.arange(2))
            draws.append(env.wheels_braked.clone())
        braked = torch.stack(draws).float()
        assert float(braked.mean()) == pytest.approx(0.3, abs=0.03)
        # Each robot's draw changes from reset to reset (not fixed per robot).
        assert 0.2 < float(braked[:, 0].mean()) < 0.4 and 0.2 < float(braked[:, 1].mean()) < 0.4
        assert bool((braked[1:] != braked[:-1]).any())
    finally:
        env.close()


def test_a_robot_without_wheels_and_a_bad_share_are_refused():
    with pytest.raises(ValueError, match=r"braked_wheels_share.*no wheels"):
        make_env("anymal_flat_legged_gym", 2, domain_rand={"braked_wheels_share": 0.5})
    with pytest.raises(ValueError, match=r"domain_rand\.braked_wheels_share"):
        DomainRandConfig(braked_wheels_share=1.5).validate()


def test_the_draw_is_saved_and_restored_with_the_whole_state():
    env = make_env("aow_flat_style", 8, seed=2, domain_rand={**QUIET, "braked_wheels_share": 0.5})
    try:
        env.reset()
        state = env.state_dict()
        saved = env.wheels_braked.clone()
        assert torch.equal(state["exact"]["wheels_braked"], saved)
        env.wheels_braked = ~saved
        env.load_state_dict(state)
        assert torch.equal(env.wheels_braked, saved)
        # A checkpoint written before the lever existed has no such buffer: nothing is braked.
        del state["exact"]["wheels_braked"]
        env.wheels_braked = torch.zeros_like(saved)
        env.load_state_dict(state)
        assert not bool(env.wheels_braked.any())
    finally:
        env.close()
