"""training.scan_transfer: a blind policy's weights grown into a height-scan policy's networks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aow_policy.layout import ObservationLayout
from training.checkpoint import CheckpointError, load_checkpoint
from training.config import TrainConfig
from training.networks import ActorCritic, NetworkConfig
from training.runner import Runner
from training.scan_transfer import ScanTransferError, add_height_scan, needs_height_scan

PROPRIO = [{"name": "base_lin_vel", "size": 3}, {"name": "joint_pos", "size": 4}, {"name": "last_action", "size": 2}]
BLIND = ObservationLayout.build(PROPRIO)
SCANNED = ObservationLayout.build([*PROPRIO, {"name": "height_scan", "size": 11}])
SMALL = NetworkConfig(scan_encoder=(8, 5), actor_hidden=(16, 6), critic_hidden=(12, 6), cost_critic_hidden=(7,))
SHIPPED_FLAT = Path(__file__).resolve().parents[1] / "policies" / "aow_flat_np3o" / "model_250.pt"


def trained_blind_model(seed: int = 0) -> ActorCritic:
    """A blind model with every parameter and normalizer statistic away from its initial value."""
    torch.manual_seed(seed)
    model = ActorCritic(BLIND, BLIND, 2, 2, SMALL)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
        for net in (model.actor, model.critic):
            net.normalizer.mean.copy_(torch.randn(BLIND.dim))
            net.normalizer.var.copy_(torch.rand(BLIND.dim) + 0.5)
            net.normalizer.count.fill_(1e6)
    return model


def grown_model(blind: ActorCritic) -> ActorCritic:
    torch.manual_seed(1)
    scanned = ActorCritic(SCANNED, SCANNED, 2, 2, SMALL)
    layouts = {"policy": BLIND, "critic": BLIND}, {"policy": SCANNED, "critic": SCANNED}
    scanned.load_state_dict(add_height_scan(blind.state_dict(), *layouts, scanned), strict=True)
    return scanned


def test_the_grown_networks_compute_what_the_blind_ones_did_whatever_the_scan_reads():
    blind = trained_blind_model()
    scanned = grown_model(blind)
    proprio = 2.0 * torch.randn(64, BLIND.dim)
    for scan_scale in (0.0, 1.0, 10.0):  # a flat map, terrain, nonsense: no say at the start
        obs = torch.cat([proprio, scan_scale * torch.randn(64, 11)], dim=-1)
        torch.testing.assert_close(scanned.actor(obs), blind.actor(proprio), rtol=0, atol=1e-6)
        torch.testing.assert_close(scanned.critic(obs), blind.critic(proprio), rtol=0, atol=1e-6)
        torch.testing.assert_close(scanned.cost_values(obs), blind.cost_values(proprio), rtol=0, atol=1e-6)
    torch.testing.assert_close(scanned.actor.log_std, blind.actor.log_std)
    # The scan's normalizer starts fresh (mean 0, var 1) behind the blind statistics.
    assert torch.equal(scanned.actor.normalizer.mean[: BLIND.dim], blind.actor.normalizer.mean)
    assert torch.equal(scanned.actor.normalizer.mean[BLIND.dim :], torch.zeros(11))
    assert torch.equal(scanned.critic.normalizer.var[BLIND.dim :], torch.ones(11))
    assert scanned.actor.normalizer.count == 1e6


def test_the_scan_gets_a_gradient_so_it_can_gain_a_say():
    scanned = grown_model(trained_blind_model())
    obs = torch.randn(32, SCANNED.dim)
    scanned.actor(obs).square().sum().backward()
    first = scanned.actor.trunk.body[0].weight
    assert first[:, BLIND.dim :].abs().max() == 0  # zero at the start...
    assert first.grad[:, BLIND.dim :].abs().max() > 0  # ...and moved by the first update
    # The cost critics too: their first body layer's scan rows.
    scanned.cost_values(obs).sum().backward()
    critics = scanned.cost_critics
    w_grad = critics.layers(critics.params.grad)[critics.num_encoder_layers][0]
    assert w_grad[:, BLIND.dim :, :].abs().max() > 0


def test_other_proprioception_is_refused_with_the_difference_named():
    blind = trained_blind_model()
    other = ObservationLayout.build(
        [*PROPRIO[:2], {"name": "last_action", "size": 3}, {"name": "height_scan", "size": 11}]
    )
    scanned = ActorCritic(other, other, 2, 2, SMALL)
    layouts = {"policy": BLIND, "critic": BLIND}, {"policy": other, "critic": other}
    with pytest.raises(ScanTransferError, match=r"policy observation without its height scan differs.*last_action', 3"):
        add_height_scan(blind.state_dict(), *layouts, scanned)
    assert needs_height_scan({"policy": BLIND, "critic": BLIND}, {"policy": SCANNED, "critic": SCANNED})
    assert not needs_height_scan({"policy": SCANNED, "critic": SCANNED}, {"policy": SCANNED, "critic": SCANNED})


def rough_config(**fields) -> TrainConfig:
    """The shipped flat policy's network settings on the rough task, at a size a test can run."""
    flat = TrainConfig.from_dict(load_checkpoint(SHIPPED_FLAT)["config"])
    data = flat.to_dict()
    data.update(task="aow_rough_style", num_envs=4, num_steps_per_env=4, iterations=1, save_interval=100)
    data["env_overrides"] = {"sim": {"num_threads": 1}}
    data.update(fields)
    return TrainConfig.from_dict(data)


def test_aow_train_init_from_the_shipped_flat_policy_on_the_rough_task(tmp_path):
    """The flat reference policy starts a rough-terrain run: its actions on the rough task's first
    observations are the flat policy's on the same observations without the scan."""
    cfg = rough_config(init_from=str(SHIPPED_FLAT))
    runner = Runner(cfg, tmp_path / "rough", progress=False, tensorboard=False)
    flat_ckpt = load_checkpoint(SHIPPED_FLAT)
    flat_cfg = TrainConfig.from_dict(flat_ckpt["config"])
    flat_layout = ObservationLayout.from_list(flat_ckpt["obs_layout"]["policy"])
    flat = ActorCritic(
        flat_layout,
        ObservationLayout.from_list(flat_ckpt["obs_layout"]["critic"], known_only=False),
        flat_ckpt["num_actions"],
        len(flat_ckpt["cost_groups"]),
        flat_cfg.network,
    )
    flat.load_state_dict(flat_ckpt["model"], strict=True)
    obs = runner.env.reset()["policy"]
    assert obs.shape[-1] == flat_layout.dim + 187
    with torch.no_grad():
        torch.testing.assert_close(runner.model.actor(obs), flat.actor(obs[:, : flat_layout.dim]), rtol=0, atol=1e-5)
    runner.learn()  # and it trains
    assert load_checkpoint(tmp_path / "rough" / "model_1.pt")["iteration"] == 1


def test_init_from_a_flat_checkpoint_with_other_networks_is_refused(tmp_path):
    cfg = rough_config(init_from=str(SHIPPED_FLAT))
    cfg.network.actor_hidden = (128, 64)
    with pytest.raises(CheckpointError, match=r"init_from .*model_250\.pt: its networks do not fit this task"):
        Runner(cfg, None, progress=False, tensorboard=False)
