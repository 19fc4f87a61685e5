"""Every algorithm's loss against hand-computed values, the kappa schedule, normalization
invariance, Softplus critics, non-negative lambda, the J_C estimator and the fused critics."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from aow_policy.layout import ObservationLayout
from training.algorithms import ALGORITHMS, NonFiniteLossError, make_algorithm
from training.algorithms import losses as L
from training.algorithms.base import MinibatchContext, RolloutStats, rollout_statistics
from training.config import ALGO_PARAMS, ConfigError, NP3OParams, P3OParams, PPOConfig
from training.networks import ActorCritic, NetworkConfig
from training.storage import RolloutStorage

GAMMA = 0.99
SMALL = NetworkConfig(scan_encoder=(8, 4), actor_hidden=(16, 8), critic_hidden=(16, 8), cost_critic_hidden=(8,))
FLAT = ObservationLayout.build([{"name": "base_lin_vel", "size": 3}])

# The tiny fixed batch: B = 3 samples, G = 2 cost groups.
RATIO = torch.tensor([0.5, 1.0, 1.5])
ADV = torch.tensor([1.0, -1.0, 2.0])
COST_ADV = torch.tensor([[1.0, -1.0], [-1.0, -1.0], [2.0, -1.0]])
# By hand (clip 0.2):
#   L_R^CLIP   = mean(min(rA, clip(r)A))   = mean(0.5, -1, 2.4)   = 1.9 / 3
#   L_C1^CLIP  = mean(max(rA, clip(r)A))   = mean(0.8, -1, 3.0)   = 2.8 / 3
#   L_C2^CLIP  = mean(max(-0.5, -0.8), -1, max(-1.5, -1.2)) = -2.7 / 3 = -0.9
L_R = 1.9 / 3
L_C1, L_C2 = 2.8 / 3, -0.9
# Rollout statistics used below: mu = (0.5, -0.2), sigma = (2, 1), J_C = (3, 1), eps = 0.
STATS = RolloutStats(
    adv_mean=torch.tensor(0.0),
    adv_std=torch.tensor(1.0),
    cost_adv_mean=torch.tensor([0.5, -0.2]),
    cost_adv_std=torch.tensor([2.0, 1.0]),
    cost_return=torch.tensor([3.0, 1.0]),
    num_samples=3,
)
# L^VIOL,N = L^CLIP,N + ((1 - gamma)(J - eps) + mu) / sigma
VIOL_N1 = L_C1 + (0.01 * 3 + 0.5) / 2  # 1.19833 > 0
VIOL_N2 = L_C2 + (0.01 * 1 - 0.2) / 1  # -1.09 < 0


def _ctx(cost_limits=(0.0, 0.0), mean_shift=(0.0, 0.0, 0.0), raw_cost_adv=COST_ADV) -> MinibatchContext:
    old_mean = torch.zeros(3, 1)
    return MinibatchContext(
        ratio=RATIO.clone(),
        advantages=ADV.clone(),
        cost_advantages=COST_ADV.clone(),
        raw_cost_advantages=raw_cost_adv.clone(),
        action_mean=old_mean + torch.tensor(mean_shift).unsqueeze(-1),
        action_std=torch.ones(1),
        old_action_mean=old_mean,
        old_action_std=torch.ones(1),
        stats=STATS,
        cost_limits=torch.tensor(cost_limits),
        clip_param=0.2,
        gamma=GAMMA,
        iteration=0,
    )


def _algo(name: str, groups: int = 2, **params):
    model = ActorCritic(FLAT, FLAT, 1, groups if ALGORITHMS[name].uses_cost_critics else 0, SMALL)
    p = ALGO_PARAMS[name](**params)
    return make_algorithm(name, model, PPOConfig(gamma=GAMMA), p, cost_limits=torch.zeros(model.cost_critics.__len__()))


# ---- the loss building blocks -------------------------------------------------------------


def test_clipped_surrogates_by_hand():
    assert L.clipped_surrogate(RATIO, ADV, 0.2).item() == pytest.approx(L_R)
    assert L.clipped_cost_surrogate(RATIO, COST_ADV, 0.2).tolist() == pytest.approx([L_C1, L_C2])


def test_value_loss_by_hand():
    values, old, returns = torch.tensor([1.0, 2.0]), torch.tensor([1.5, 1.5]), torch.tensor([2.0, 0.0])
    # unclipped errors 1, 4; clipped predictions 1.3, 1.7 -> 0.49, 2.89; max -> 1, 4
    assert L.value_loss(values, old, returns, 0.2, True).item() == pytest.approx(2.5)
    # clipping binds: prediction 1.0 from old 0.0 is clipped to 0.2 -> (0.2 - 1)^2
    assert L.value_loss(
        torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([1.0]), 0.2, True
    ).item() == pytest.approx(0.64)
    assert L.value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([1.0]), 0.2, False).item() == 0.0
    # per-group losses are summed: [B=1, G=2]
    v = L.value_loss(torch.tensor([[1.0, 3.0]]), torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 1.0]]), 0.2, False)
    assert v.item() == pytest.approx(1.0 + 4.0)


def test_gaussian_helpers_by_hand():
    lp = L.gaussian_log_prob(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([0.0, math.log(2.0)]))
    expected = (-0.5 - 0.5 * math.log(2 * math.pi)) + (-math.log(2.0) - 0.5 * math.log(2 * math.pi))
    assert lp.item() == pytest.approx(expected)
    assert L.gaussian_entropy(torch.tensor([0.0])).item() == pytest.approx(0.5 + 0.5 * math.log(2 * math.pi))
    kl = L.gaussian_kl(torch.tensor([[1.0]]), torch.tensor([1.0]), torch.tensor([[0.0]]), torch.tensor([2.0]))
    assert kl.item() == pytest.approx(math.log(2.0) + (1 + 1) / 8 - 0.5)


def test_adaptive_learning_rate_follows_rsl_rl():
    assert L.adapt_learning_rate(1e-3, 0.05, 0.01, 1e-5, 1e-2) == pytest.approx(1e-3 / 1.5)
    assert L.adapt_learning_rate(1e-3, 0.001, 0.01, 1e-5, 1e-2) == pytest.approx(1.5e-3)
    assert L.adapt_learning_rate(1e-3, 0.01, 0.01, 1e-5, 1e-2) == 1e-3
    assert L.adapt_learning_rate(1e-5, 1.0, 0.01, 1e-5, 1e-2) == 1e-5


def test_entropy_coefficient_decays_to_its_final_value():
    assert L.decayed_entropy_coef(0, 0.01, 0.001, 0.998) == pytest.approx(0.01)
    assert L.decayed_entropy_coef(1000, 0.01, 0.001, 0.998) == pytest.approx(0.001 + 0.009 * 0.998**1000)
    assert L.decayed_entropy_coef(100_000, 0.01, 0.001, 0.998) == pytest.approx(0.001)


# ---- each algorithm's policy loss on the fixed batch ----------------------------------------


def test_ppo_loss_by_hand():
    assert _algo("ppo").policy_loss(_ctx()).item() == pytest.approx(-L_R)


def test_np3o_loss_by_hand():
    algo = _algo("np3o")
    algo.kappa = 1.0
    ctx = _ctx()
    # -L_R + kappa * (relu(VIOL_1) + relu(VIOL_2)); VIOL_2 < 0 contributes nothing
    assert algo.policy_loss(ctx).item() == pytest.approx(-L_R + VIOL_N1)
    assert ctx.info["violation"][1].item() == pytest.approx(VIOL_N2)
    algo.kappa = 3.0
    assert algo.policy_loss(_ctx()).item() == pytest.approx(-L_R + 3.0 * VIOL_N1)
    # eps enters as (1 - gamma) * eps / sigma
    assert algo.policy_loss(_ctx(cost_limits=(2.0, 0.0))).item() == pytest.approx(-L_R + 3.0 * (VIOL_N1 - 0.01))


def test_p3o_loss_uses_the_unnormalized_violation():
    algo = _algo("p3o")
    algo.kappa = 1.0
    # VIOL = L_C^CLIP + (1 - gamma)(J - eps): 2.8/3 + 0.03 > 0; -0.9 + 0.01 < 0 (no mu, no sigma)
    assert algo.policy_loss(_ctx()).item() == pytest.approx(-L_R + L_C1 + 0.03)


def test_ppo_lagrangian_loss_by_hand():
    algo = _algo("ppo_lag")
    lam = math.log1p(math.exp(-1.3))  # softplus(-1.3) = 0.2410
    assert algo.multipliers.tolist() == pytest.approx([lam, lam])
    assert algo.policy_loss(_ctx()).item() == pytest.approx(-L_R + lam * (L_C1 + L_C2))


def test_nipo_loss_by_hand():
    algo = _algo("nipo")
    # group 1 violated (VIOL > 0): recovery lambda_rec * L_C1; group 2 satisfied: barrier -log(-VIOL)/k
    expected = -L_R + 1.0 * L_C1 - math.log(-VIOL_N2) / 20.0
    assert algo.policy_loss(_ctx()).item() == pytest.approx(expected)
    algo_k = _algo("nipo", barrier_k=40.0, recovery_coef=2.0)
    assert algo_k.policy_loss(_ctx()).item() == pytest.approx(-L_R + 2.0 * L_C1 - math.log(-VIOL_N2) / 40.0)


def test_nipo_barrier_gradient_is_finite_next_to_the_boundary():
    algo = _algo("nipo")
    ratio = RATIO.clone().requires_grad_(True)
    ctx = _ctx()
    ctx.ratio = ratio
    algo.policy_loss(ctx).backward()
    assert torch.isfinite(ratio.grad).all()


def test_crpo_switches_on_the_eq5_estimate():
    algo = _algo("crpo")
    # J_1(pi') = 3 + mean(r A_1) / 0.01 = 3 + (2.5 / 3) / 0.01 > 0.01 -> minimize L_C1 only
    # J_2(pi') = 1 + mean(r A_2) / 0.01 = 1 - 100 < 0.01 -> satisfied
    ctx = _ctx(cost_limits=(0.01, 0.01))
    assert algo.policy_loss(ctx).item() == pytest.approx(L_C1)
    assert ctx.info["reward_step"].item() == 0.0
    assert algo.constraint_estimates(_ctx()).tolist() == pytest.approx([3 + (2.5 / 3) / 0.01, 1 - 1.0 / 0.01])
    # every estimate within its limit -> the reward step
    satisfied = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]])
    ctx = _ctx(cost_limits=(0.01, 0.01), raw_cost_adv=satisfied)
    assert algo.policy_loss(ctx).item() == pytest.approx(-L_R)
    assert ctx.info["reward_step"].item() == 1.0


def test_focops_loss_by_hand():
    algo = _algo("focops")
    # new - old means (0, 0.1, 0.3), stds 1: KL(new||old) = (0, 0.005, 0.045); delta = 0.02 drops sample 3.
    # combined = A - 0.1 * (A_C1 + A_C2) = (1, -0.8, 1.9); temperature 0.5 -> (KL - 2 r combined) * inside
    per_sample = [0.0 - 2 * 0.5 * 1.0, 0.005 - 2 * 1.0 * (-0.8), 0.0]
    assert algo.policy_loss(_ctx(mean_shift=(0.0, 0.1, 0.3))).item() == pytest.approx(sum(per_sample) / 3)


# ---- penalty weights --------------------------------------------------------------------------


def test_kappa_schedule_closed_form_paper_values():
    # The appendix: kappa_i = min(0.2, 0.1 * 1.0004**i)
    assert L.kappa_schedule(0, 0.1, 0.2, 1.0004) == pytest.approx(0.1)
    assert L.kappa_schedule(1000, 0.1, 0.2, 1.0004) == pytest.approx(0.1 * 1.0004**1000)  # 0.14917
    assert L.kappa_schedule(1000, 0.1, 0.2, 1.0004) == pytest.approx(0.1491705, abs=1e-7)
    assert L.kappa_schedule(10000, 0.1, 0.2, 1.0004) == pytest.approx(0.2)


def test_kappa_schedule_of_the_algorithms_depends_on_the_iteration_only():
    stats = STATS
    np3o = _algo("np3o")  # Table III cap kappa = 1, starting at half of it
    p3o = _algo("p3o")  # cap 120
    for it, expected in ((0, 0.5), (1000, 0.5 * 1.0004**1000), (10000, 1.0)):
        np3o.begin_update(stats, it)
        p3o.begin_update(stats, it)
        assert np3o.kappa == pytest.approx(expected)
        assert p3o.kappa == pytest.approx(120 * expected)
    # Going back to iteration 1000 after 10000 gives the same value: nothing compounds.
    np3o.begin_update(stats, 1000)
    assert np3o.kappa == pytest.approx(0.5 * 1.0004**1000)
    assert NP3OParams().kappa_max == 1.0 and P3OParams().kappa_max == 120.0
    paper = _algo("np3o", kappa_init=0.1, kappa_max=0.2)
    paper.begin_update(stats, 1000)
    assert paper.kappa == pytest.approx(0.1491705, abs=1e-7)


def test_lagrange_multiplier_stays_non_negative_and_follows_the_violation():
    algo = _algo("ppo_lag", lambda_lr=0.1)
    satisfied = RolloutStats(
        STATS.adv_mean, STATS.adv_std, STATS.cost_adv_mean, STATS.cost_adv_std, torch.tensor([-5.0, -5.0]), 3
    )
    previous = algo.multipliers.clone()
    for it in range(300):
        algo.begin_update(satisfied, it)
        lam = algo.multipliers
        assert (lam >= 0).all()
        assert (lam <= previous + 1e-7).all()
        previous = lam.clone()
    assert (previous < 1e-3).all()
    violated = RolloutStats(
        STATS.adv_mean, STATS.adv_std, STATS.cost_adv_mean, STATS.cost_adv_std, torch.tensor([5.0, 0.0]), 3
    )
    before = algo.multipliers.clone()
    for it in range(300, 400):  # Adam's momentum first has to turn around
        algo.begin_update(violated, it)
    after = algo.multipliers
    assert after[0] > 100 * before[0] > 0
    assert after[1] <= before[1] * 1.0001  # J = eps: no push upwards


def test_focops_nu_update_is_clipped_to_its_range():
    algo = _algo("focops", nu_lr=1.0, nu_max=0.5)
    algo.begin_update(STATS, 0)  # nu + 1.0 * (J - 0) = (3.1, 1.1) -> clipped to 0.5
    assert algo.nu.tolist() == pytest.approx([0.5, 0.5])
    fixed = _algo("focops")  # alpha_nu = 0: nu stays 0.1
    fixed.begin_update(STATS, 0)
    assert fixed.nu.tolist() == pytest.approx([0.1, 0.1])


# ---- estimators and invariance --------------------------------------------------------------


def _rollout(model: ActorCritic, cost_scale: float, seed: int = 0) -> RolloutStorage:
    g = torch.Generator().manual_seed(seed)
    T, N, G = 6, 5, len(model.cost_critics)
    s = RolloutStorage(N, T, 3, 3, 1, G)
    with torch.no_grad():
        for _ in range(T):
            obs = torch.randn(N, 3, generator=g)
            mean = model.actor(obs)
            actions = mean + torch.randn(N, 1, generator=g) * 0.5
            logp = L.gaussian_log_prob(actions, mean, model.actor.log_std) + 0.2 * torch.randn(N, generator=g)
            costs = torch.rand(N, G, generator=g) * (torch.rand(N, G, generator=g) > 0.5)
            cost_values = 0.05 * torch.rand(N, G, generator=g)
            done = torch.rand(N, generator=g) < 0.2
            s.add(
                obs, obs, actions, logp, mean, model.actor.log_std.exp(), torch.randn(N, generator=g),
                cost_scale * costs, done, done & (torch.rand(N, generator=g) < 0.5), torch.randn(N, generator=g),
                cost_scale * cost_values, GAMMA,
            )  # fmt: skip
        s.compute_returns(torch.zeros(N), cost_scale * 0.05 * torch.ones(N, G), GAMMA, 0.95)
    return s


def _actor_grad(name: str, cost_scale: float) -> tuple[torch.Tensor, float]:
    torch.manual_seed(0)
    model = ActorCritic(FLAT, FLAT, 1, 2, SMALL)
    algo = make_algorithm(name, model, PPOConfig(gamma=GAMMA), ALGO_PARAMS[name](), cost_limits=torch.zeros(2))
    prep = algo.prepare(_rollout(model, cost_scale), iteration=5000)
    loss, terms = algo.minibatch_loss(prep, torch.arange(prep.batch.size))
    model.zero_grad()
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.actor.parameters()])
    return grad, float(terms["penalty"].detach())


def test_scaling_costs_by_100_leaves_np3o_gradient_unchanged_and_changes_p3o():
    g1, penalty = _actor_grad("np3o", 1.0)
    g100, _ = _actor_grad("np3o", 100.0)
    assert penalty > 0  # the constraint term is active, so the invariance is not vacuous
    torch.testing.assert_close(g1, g100, rtol=1e-4, atol=1e-6)
    p1, p3o_penalty = _actor_grad("p3o", 1.0)
    p100, _ = _actor_grad("p3o", 100.0)
    assert p3o_penalty > 0
    assert (p1 - p100).norm() > 0.1 * p1.norm()


def test_j_c_estimator_is_the_mean_gae_cost_return():
    """J_C = mean over the rollout of R_C,t = A_C,t + V_C(s_t); hand values from test_storage."""
    from tests.test_storage import _filled

    stats = rollout_statistics(
        _filled(bootstrap=True).batch(), __import__("training.distributed").distributed.DistContext()
    )
    assert stats.cost_return.tolist() == pytest.approx([(4.235 + 6.3 + 4.6) / 3])
    adv = torch.tensor([3.235, 4.3, 1.6])
    assert stats.cost_adv_mean.tolist() == pytest.approx([adv.mean().item()])
    assert stats.cost_adv_std.tolist() == pytest.approx([adv.std().item()])  # unbiased, over the whole rollout
    assert stats.adv_mean.item() == pytest.approx((3.915 + 6.3 + 3.06) / 3)


# ---- networks ------------------------------------------------------------------------------


def test_softplus_cost_critics_are_never_negative():
    torch.manual_seed(0)
    model = ActorCritic(FLAT, FLAT, 1, 3, SMALL)
    with torch.no_grad():
        w, b = model.cost_critics.layers()[-1]
        b.fill_(-50.0)
        w.mul_(20.0)
    _, cost_values = model.critic_values(100 * torch.randn(2000, 3))
    assert cost_values.shape == (2000, 3)
    assert (cost_values >= 0).all()


def _reference_cost_critic(model: ActorCritic, g: int, normalized: torch.Tensor) -> torch.Tensor:
    """Cost critic g evaluated on its own, layer by layer with F.linear (no batched products)."""
    cc = model.cost_critics
    layers = [(w[g].t(), b[g, 0]) for w, b in cc.layers()]
    if cc.scan_idx is None:
        h = normalized
    else:
        h = normalized[:, cc.scan_idx]
        for w, b in layers[: cc.num_encoder_layers]:
            h = torch.nn.functional.elu(torch.nn.functional.linear(h, w, b))
        h = torch.cat([normalized[:, cc.proprio_idx], h], dim=-1)
    for w, b in layers[cc.num_encoder_layers : -1]:
        h = torch.nn.functional.elu(torch.nn.functional.linear(h, w, b))
    return torch.nn.functional.softplus(torch.nn.functional.linear(h, *layers[-1])).squeeze(-1)


@pytest.mark.parametrize("scan", [True, False])
def test_stacked_cost_critics_equal_one_network_per_group(scan: bool):
    """Each group's slice of the stacked parameters is an independent network: its values and
    gradients are those of that network evaluated alone, and no other group's gradient moves."""
    terms = [{"name": "base_lin_vel", "size": 3}, {"name": "joint_vel", "size": 4}]
    if scan:
        terms.append({"name": "height_scan", "size": 11})
    layout = ObservationLayout.build(terms)
    torch.manual_seed(1)
    model = ActorCritic(layout, layout, 2, 3, SMALL)
    assert model.cost_critics.params.shape[0] == 3
    x = torch.randn(64, layout.dim)
    normalized = model.critic.normalizer(x)
    _, cost = model.critic_values(x)
    for g in range(3):
        torch.testing.assert_close(cost[:, g], _reference_cost_critic(model, g, normalized))
    cost[:, 1].square().sum().backward()
    grad = model.cost_critics.params.grad.clone()
    assert grad[0].abs().max() == 0 and grad[2].abs().max() == 0 and grad[1].abs().min() > 0
    model.zero_grad()
    _reference_cost_critic(model, 1, normalized).square().sum().backward()
    torch.testing.assert_close(grad, model.cost_critics.params.grad, rtol=1e-5, atol=1e-6)


def _legacy_np3o():
    """(checkpoint, its config, an unloaded model of its shape) of the first shipped N-P3O policy,
    kept in tests/data as it was written (one module per cost critic, no kappa_adapt field)."""
    from pathlib import Path

    from training.checkpoint import load_checkpoint
    from training.config import TrainConfig

    ckpt = load_checkpoint(Path(__file__).resolve().parent / "data" / "legacy_np3o_model_212.pt")
    cfg = TrainConfig.from_dict(ckpt["config"])
    model = ActorCritic(
        ObservationLayout.from_list(ckpt["obs_layout"]["policy"]),
        ObservationLayout.from_list(ckpt["obs_layout"]["critic"], known_only=False),
        ckpt["num_actions"],
        len(ckpt["cost_groups"]),
        cfg.network,
    )
    return ckpt, cfg, model


def test_checkpoints_with_one_module_per_cost_critic_still_load():
    """The stacked layout replaced per-critic modules (keys cost_critics.<g>.trunk...); their
    state dicts load into it, and so does the first shipped reference checkpoint."""
    layout = ObservationLayout.build(
        [{"name": "base_lin_vel", "size": 3}, {"name": "joint_vel", "size": 4}, {"name": "height_scan", "size": 11}]
    )
    torch.manual_seed(2)
    model = ActorCritic(layout, layout, 2, 2, SMALL)
    legacy = {k: v for k, v in model.state_dict().items() if not k.startswith("cost_critics.")}
    cc = model.cost_critics
    names = ["trunk.encoder.0", "trunk.encoder.2", "trunk.body.0", "head"]
    for g in range(2):
        for name, (w, b) in zip(names, cc.layers(), strict=True):
            legacy[f"cost_critics.{g}.{name}.weight"] = w[g].t().clone()
            legacy[f"cost_critics.{g}.{name}.bias"] = b[g, 0].clone()
    fresh = ActorCritic(layout, layout, 2, 2, SMALL)
    fresh.load_state_dict(legacy, strict=True)
    x = torch.randn(16, layout.dim)
    torch.testing.assert_close(fresh.cost_values(x), model.cost_values(x))

    ckpt, _, shipped = _legacy_np3o()
    assert any(k.startswith("cost_critics.0.") for k in ckpt["model"])  # written before the change
    shipped.load_state_dict(ckpt["model"], strict=True)
    assert len(shipped.cost_critics) == len(ckpt["cost_groups"]) == 2


def test_constrained_algorithms_need_cost_groups():
    model = ActorCritic(FLAT, FLAT, 1, 0, SMALL)
    with pytest.raises(ValueError, match="needs at least one cost group"):
        make_algorithm("np3o", model, PPOConfig(), NP3OParams())


def test_algorithm_state_round_trip():
    a = _algo("ppo_lag", lambda_lr=0.1)
    a.begin_update(STATS, 0)
    a.set_learning_rate(3e-4)
    state = a.state_dict()
    b = _algo("ppo_lag", lambda_lr=0.1)
    b.load_state_dict(state)
    assert b.learning_rate == pytest.approx(3e-4)
    torch.testing.assert_close(b.multipliers, a.multipliers)
    with pytest.raises(ValueError, match="is for 'ppo_lag'"):
        _algo("np3o").load_state_dict(state)


# ---- the update loop: no host waits, fused steps, per-network clipping ------------------------


def test_batched_objectives_are_the_reward_objective_and_the_negated_cost_surrogates():
    signed = torch.cat([ADV.unsqueeze(-1), -COST_ADV], dim=-1)
    objectives = L.clipped_objectives(RATIO, signed, 0.2)
    assert objectives[0].item() == pytest.approx(L_R)
    assert (-objectives[1:]).tolist() == pytest.approx([L_C1, L_C2])
    ctx = _ctx()  # without the ready-made signed advantages the context builds them
    assert ctx.reward_surrogate.item() == pytest.approx(L_R)
    assert ctx.cost_surrogates.tolist() == pytest.approx([L_C1, L_C2])


def test_value_losses_per_critic_sum_to_the_joint_value_loss():
    g = torch.Generator().manual_seed(3)
    v, old, ret = (torch.randn(50, 3, generator=g) for _ in range(3))
    per_critic = L.value_losses(v, old, ret, 0.2, True)
    for k in range(3):
        assert per_critic[k].item() == pytest.approx(L.value_loss(v[:, k], old[:, k], ret[:, k], 0.2, True).item())
    assert per_critic.sum().item() == pytest.approx(L.value_loss(v, old, ret, 0.2, True).item())


@pytest.mark.parametrize("kl", [0.0, 1e-4, 0.004, 0.005, 0.01, 0.02, 0.021, 1.0, float("nan")])
@pytest.mark.parametrize("lr", [1e-5, 1e-3, 9e-3, 1e-2])
def test_learning_rate_rule_on_the_device_equals_the_host_rule(kl: float, lr: float):
    on_device = torch.tensor(lr, dtype=torch.float32)
    L.adapt_learning_rate_(on_device, torch.tensor(kl), 0.01, 1e-5, 1e-2)
    assert on_device.item() == pytest.approx(L.adapt_learning_rate(lr, kl, 0.01, 1e-5, 1e-2), rel=1e-6)


def _np3o_with_rollout(cost_scale: float = 1.0):
    torch.manual_seed(0)
    model = ActorCritic(FLAT, FLAT, 1, 2, SMALL)
    cfg = PPOConfig(gamma=GAMMA, num_minibatches=2, num_epochs=2)
    algo = make_algorithm("np3o", model, cfg, NP3OParams(), cost_limits=torch.zeros(2), group_names=["a", "b"])
    return algo, _rollout(model, cost_scale)


def test_update_reports_every_term_with_its_name():
    algo, storage = _np3o_with_rollout()
    out = algo.update(storage, iteration=0, generator=torch.Generator().manual_seed(0))
    for key in ("loss/total", "loss/policy", "loss/value", "loss/cost_value/a", "loss/entropy", "penalty", "kl"):
        assert math.isfinite(out[key]), key
    for key in ("violation/a", "violation/b", "grad_norm/actor", "grad_norm/critic"):
        assert math.isfinite(out[key]), key
    assert out["grad_norm/cost_critic/a"] > 0 and out["grad_norm/cost_critic/b"] > 0
    assert out["learning_rate"] == pytest.approx(algo.learning_rate)


def test_a_non_finite_loss_cancels_that_step_and_every_later_one():
    algo, storage = _np3o_with_rollout()
    storage.signals[4, 2, 0] = float("nan")  # one reward -> non-finite advantages -> non-finite loss
    storage.compute_returns(torch.zeros(5), torch.zeros(5, 2), GAMMA, 0.95)
    before = [p.detach().clone() for p in algo.model.parameters()]
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss at iteration 3, minibatch 0 of epoch 0"):
        algo.update(storage, iteration=3, generator=torch.Generator().manual_seed(0))
    for a, p in zip(before, algo.model.parameters(), strict=True):
        assert torch.equal(a, p)
    assert all(float(s["step"]) == 0 for s in algo.optimizer.state.values())  # Adam's state untouched too


def test_gradients_are_clipped_per_network_and_per_cost_group():
    algo, _ = _np3o_with_rollout()
    max_norm = algo.cfg.max_grad_norm
    for p in algo.model.parameters():
        p.grad = torch.full_like(p, 1e-4)
    cc = algo.model.cost_critics
    cc.params.grad[1] = 1e3  # only cost group "b" gets a huge gradient
    actor_before = [p.grad.clone() for p in algo.model.actor.parameters()]
    group_a_before = cc.params.grad[0].clone()
    norms = algo.clip_gradients()
    assert norms[3] > 1e3 * max_norm  # the norm before clipping is reported
    for a, p in zip(actor_before, algo.model.actor.parameters(), strict=True):
        assert torch.equal(a, p.grad)  # a cost critic's large gradient does not shrink the policy's step
    assert torch.equal(group_a_before, cc.params.grad[0])  # nor the other cost critic's
    assert cc.params.grad[1].norm().item() == pytest.approx(max_norm, rel=1e-4)


def test_an_optimizer_state_saved_by_a_plain_adam_loads_into_the_fused_one():
    algo, storage = _np3o_with_rollout()
    plain = torch.optim.Adam(algo.parameters, lr=3e-4)  # what checkpoints before the fused Adam hold
    for p in algo.parameters:
        p.grad = torch.ones_like(p)
    plain.step()
    algo.load_optimizer_state(plain.state_dict())
    algo.set_learning_rate(3e-4)
    group = algo.optimizer.param_groups[0]
    assert group["fused"] and group["lr"] is algo._lr
    algo.update(storage, iteration=1, generator=torch.Generator().manual_seed(0))
    assert all(float(s["step"]) == 1 + 4 for s in algo.optimizer.state.values())


def _cuda_storage(storage: RolloutStorage) -> RolloutStorage:
    gpu_storage = copy.deepcopy(storage)
    for name, value in vars(gpu_storage).items():
        if isinstance(value, torch.Tensor):
            setattr(gpu_storage, name, value.cuda())
    gpu_storage.device = torch.device("cuda")
    return gpu_storage


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [False, True])
def test_an_update_on_cuda_matches_the_cpu(graphs: bool):
    """Fused Adam with the learning rate and the skip flag on the GPU, with and without CUDA
    graphs of the networks: the same steps as on the CPU."""
    algo, storage = _np3o_with_rollout()
    gpu_model = copy.deepcopy(algo.model).cuda()
    cfg = dataclasses.replace(algo.cfg, cuda_graphs=graphs)
    gpu = make_algorithm("np3o", gpu_model, cfg, NP3OParams(), cost_limits=torch.zeros(2), group_names=["a", "b"])
    gpu_storage = _cuda_storage(storage)
    for iteration in range(2):
        cpu_out = algo.update(storage, iteration=iteration, generator=torch.Generator().manual_seed(iteration))
        gpu_out = gpu.update(gpu_storage, iteration=iteration, generator=torch.Generator().manual_seed(iteration))
    for a, b in zip(algo.model.parameters(), gpu_model.parameters(), strict=True):
        torch.testing.assert_close(a, b.cpu(), rtol=1e-4, atol=1e-5)
    assert gpu_out["learning_rate"] == pytest.approx(cpu_out["learning_rate"])
    assert gpu_out["loss/total"] == pytest.approx(cpu_out["loss/total"], rel=1e-4, abs=1e-5)
    assert gpu.networks.captured == (2 if graphs else 0)  # actor and critics, one minibatch size


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["ppo", "crpo"])
def test_cuda_graphs_give_the_eager_update_for_every_algorithm(name: str):
    torch.manual_seed(0)
    groups = 2 if ALGORITHMS[name].uses_cost_critics else 0
    model = ActorCritic(FLAT, FLAT, 1, groups, SMALL).cuda()
    storage = _cuda_storage(_rollout(ActorCritic(FLAT, FLAT, 1, 2, SMALL), 1.0))
    results = []
    for graphs in (False, True):
        m = copy.deepcopy(model)
        cfg = PPOConfig(gamma=GAMMA, num_minibatches=2, num_epochs=2, cuda_graphs=graphs)
        algo = make_algorithm(name, m, cfg, ALGO_PARAMS[name](), cost_limits=torch.zeros(groups))
        algo.update(storage, iteration=0, generator=torch.Generator().manual_seed(0))
        results.append(m)
    for a, b in zip(results[0].parameters(), results[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize("shared_input", [True, False])
def test_grouped_linear_gradients_equal_autograd_of_the_batched_product(monkeypatch, chunks: int, shared_input: bool):
    """The hand-written backward (weight gradients summed over sample pieces on a GPU) gives
    autograd's gradients of baddbmm, also for an input shared by all groups (expanded)."""
    import training.networks as networks

    monkeypatch.setattr(networks, "_weight_grad_chunks", lambda batch, device: chunks)
    g = torch.Generator().manual_seed(4)
    x0 = torch.randn(3, 64, 5, generator=g, dtype=torch.float64)
    x0 = x0[:1].expand(3, 64, 5) if shared_input else x0
    w = torch.randn(3, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 1, 4, generator=g, dtype=torch.float64, requires_grad=True)
    x = x0.clone().requires_grad_(not shared_input) if not shared_input else x0
    out = networks.grouped_linear(x, w, b)
    ref = torch.baddbmm(b, x, w)
    torch.testing.assert_close(out, ref)
    upstream = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad(out, [w, b] + ([x] if x.requires_grad else []), upstream)
    ref_grads = torch.autograd.grad(ref, [w, b] + ([x] if x.requires_grad else []), upstream)
    for a, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, r)


def test_weight_gradient_pieces_divide_the_batch():
    from training.networks import _weight_grad_chunks

    cuda = torch.device("cuda")
    assert _weight_grad_chunks(24576, torch.device("cpu")) == 1
    assert _weight_grad_chunks(24576, cuda) == 64  # 384 samples per piece
    assert _weight_grad_chunks(1000, cuda) == 2  # 500: the only power of two that divides it and leaves >= 256
    assert _weight_grad_chunks(300, cuda) == 1
    for batch in (6144, 24576, 1000, 4097):
        c = _weight_grad_chunks(batch, cuda)
        assert batch % c == 0 and (c == 1 or batch // c >= 256)


def test_the_legacy_checkpoint_resumes_with_its_optimizer_state():
    """model_212.pt was written with one module per cost critic: its Adam moments become those
    of the stacked parameters, element for element."""
    ckpt, cfg, model = _legacy_np3o()
    model.load_state_dict(ckpt["model"])
    algo = make_algorithm("np3o", model, cfg.ppo, cfg.algo_params, cost_limits=torch.zeros(2))
    algo.load_optimizer_state(ckpt["optimizer"])
    state = algo.optimizer.state[model.cost_critics.params]
    saved = ckpt["optimizer"]["state"]
    plain = len(algo._plain_params)
    w_first = saved[plain]["exp_avg"]  # cost critic 0's first layer weight, [out, in]
    torch.testing.assert_close(state["exp_avg"][0, : w_first.numel()], w_first.t().reshape(-1))
    last_bias = saved[plain + 2 * 2 * len(model.cost_critics.layer_sizes) - 1]["exp_avg_sq"]  # critic 1's head bias
    assert state["exp_avg_sq"][1, -1] == last_bias[0]
    assert float(state["step"]) == float(saved[0]["step"]) == 212 * 5 * 4
    for p, s in zip(algo._plain_params, (algo.optimizer.state[p] for p in algo._plain_params), strict=True):
        assert s["exp_avg"].shape == p.shape


# ---- kappa adaptation: on by default with a positive limit (N-P3O and P3O) -----------------

KAPPA_ALGOS = ("np3o", "p3o")


def _kappa_algo(name: str, limits: tuple[float, ...], **params):
    model = ActorCritic(FLAT, FLAT, 1, len(limits), SMALL)
    return make_algorithm(name, model, PPOConfig(gamma=GAMMA), ALGO_PARAMS[name](**params), torch.tensor(limits))


def _rollout_with_cost_rates(cost_rates: list[float]) -> RolloutStats:
    """Rollout statistics whose sampled J_C estimate is cost_rate / (1 - gamma) per group."""
    G = len(cost_rates)
    return RolloutStats(
        adv_mean=torch.tensor(0.0),
        adv_std=torch.tensor(1.0),
        cost_adv_mean=torch.zeros(G),
        cost_adv_std=torch.ones(G),
        cost_return=torch.zeros(G),  # the critic's estimate does not decide "violated"
        num_samples=10,
        cost_rate=torch.tensor(cost_rates),
    )


@pytest.mark.parametrize("name", KAPPA_ALGOS)
def test_a_positive_limit_turns_the_kappa_adaptation_on_per_group(name):
    algo = _kappa_algo(name, (2.5, 0.0))  # kappa_adapt not set
    assert ALGO_PARAMS[name]().kappa_adapt is None
    assert algo.kappa_adapt_rates.tolist() == pytest.approx([0.05, 0.0])
    both = _kappa_algo(name, (2.5, 0.1))
    assert both.kappa_adapt_rates.tolist() == pytest.approx([0.05, 0.05])
    assert "kappa_eff/1" in algo.penalty_scalars()


@pytest.mark.parametrize("name", KAPPA_ALGOS)
def test_a_zero_limit_keeps_the_papers_schedule(name):
    algo = _kappa_algo(name, (0.0, 0.0))
    assert algo.kappa_adapt_rates.tolist() == [0.0, 0.0]
    assert not algo.adapts_kappa
    violated = _rollout_with_cost_rates([0.5, 0.5])  # any cost violates eps = 0
    for it in range(5):
        algo.begin_update(violated, it)
        assert algo.kappas().tolist() == pytest.approx([algo.kappa_at(it)] * 2, rel=1e-6)
    assert algo.kappa_scale.tolist() == [1.0, 1.0]
    assert set(algo.penalty_scalars()) == {"kappa"}


@pytest.mark.parametrize("name", KAPPA_ALGOS)
def test_an_explicit_kappa_adapt_wins_over_the_default(name):
    off = _kappa_algo(name, (2.5, 2.5), kappa_adapt=0.0)
    assert off.kappa_adapt_rates.tolist() == [0.0, 0.0]
    off.begin_update(_rollout_with_cost_rates([1.0, 1.0]), 0)  # J_C ~ 100 > 2.5, and kappa stays the schedule's
    assert off.kappa_scale.tolist() == [1.0, 1.0]
    on = _kappa_algo(name, (0.0, 2.5), kappa_adapt=0.1)
    assert on.kappa_adapt_rates.tolist() == pytest.approx([0.1, 0.1])
    on.begin_update(_rollout_with_cost_rates([1.0, 1.0]), 0)
    assert on.kappa_scale.tolist() == pytest.approx([1.1, 1.1])


@pytest.mark.parametrize("name", KAPPA_ALGOS)
def test_kappa_sequence_for_violated_and_satisfied_rollouts(name):
    """Group 0 (eps = 2.5, the default rate 0.05) over V V S V S S V; group 1 (eps = 0) keeps the
    schedule although every rollout has cost. kappa of update i = schedule_i * 1.05**(violating
    rollouts up to and including i): raised at once, never lowered."""
    algo = _kappa_algo(name, (2.5, 0.0))
    eps_rate = 2.5 * (1 - GAMMA)  # the cost rate at which the sampled J_C equals eps
    pattern = "VVSVSSV"
    raises = 0
    for it, outcome in enumerate(pattern):
        violated = outcome == "V"
        algo.begin_update(_rollout_with_cost_rates([eps_rate * (1.5 if violated else 0.5), 0.3]), it)
        raises += violated
        scheduled = algo.kappa_at(it)
        assert algo.kappa == pytest.approx(scheduled)
        assert algo.kappas().tolist() == pytest.approx([scheduled * 1.05**raises, scheduled], rel=1e-5)
    # exactly at the limit is not a violation
    algo.begin_update(_rollout_with_cost_rates([eps_rate, 0.3]), len(pattern))
    assert algo.kappa_scale[0].item() == pytest.approx(1.05**4, rel=1e-5)


@pytest.mark.parametrize("name", KAPPA_ALGOS)
def test_kappa_relax_margin_lowers_kappa_inside_the_limit_with_margin(name):
    """kappa_relax_margin 0.2 (opt-in), group 0 eps = 2.5, rate 0.05, J_C / eps per rollout:
    1.5 1.5 0.9 0.5 0.5 0.5 0.85: raised twice (scale 1.05**2), unchanged at 0.9 and 0.85 (inside
    the limit but within the margin), lowered at each 0.5 (1.05, then 1, then held at 1: never below
    the schedule). Group 1 (eps = 0) is never inside its limit and keeps the schedule."""
    algo = _kappa_algo(name, (2.5, 0.0), kappa_relax_margin=0.2)
    eps_rate = 2.5 * (1 - GAMMA)
    expected = [1.05, 1.05**2, 1.05**2, 1.05, 1.0, 1.0, 1.0]
    for it, (ratio, scale) in enumerate(zip([1.5, 1.5, 0.9, 0.5, 0.5, 0.5, 0.85], expected, strict=True)):
        algo.begin_update(_rollout_with_cost_rates([eps_rate * ratio, 0.0]), it)
        assert algo.kappa_scale.tolist() == pytest.approx([scale, 1.0], rel=1e-5), f"rollout {it}"
    default = _kappa_algo(name, (2.5,))
    assert ALGO_PARAMS[name]().kappa_relax_margin is None  # by default kappa is never lowered
    default.begin_update(_rollout_with_cost_rates([eps_rate * 1.5]), 0)
    default.begin_update(_rollout_with_cost_rates([eps_rate * 0.1]), 1)
    assert default.kappa_scale.tolist() == pytest.approx([1.05])
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ConfigError, match="kappa_relax_margin"):
            ALGO_PARAMS[name](kappa_relax_margin=bad).validate("algo_params")


@pytest.mark.parametrize("name", KAPPA_ALGOS)
def test_adaptive_kappa_stops_at_kappa_adapt_max(name):
    algo = _kappa_algo(name, (2.5,))
    cap = ALGO_PARAMS[name]().kappa_adapt_max
    assert cap == pytest.approx(20 * ALGO_PARAMS[name]().kappa_max)  # above the schedule's kappa
    for it in range(200):  # 1.05**200 ~ 17,000: far past the cap
        algo.begin_update(_rollout_with_cost_rates([1.0]), it)
    assert algo.kappas().item() == pytest.approx(cap, rel=1e-5)


@pytest.mark.parametrize("name", KAPPA_ALGOS)
def test_kappa_adapt_resumes_as_trained(name):
    algo = _kappa_algo(name, (2.5,))
    algo.begin_update(_rollout_with_cost_rates([1.0]), 0)
    state = algo.state_dict()
    fresh = _kappa_algo(name, (2.5,))
    fresh.load_state_dict(state)
    assert fresh.kappa_scale.tolist() == pytest.approx([1.05])
    assert fresh.kappa_adapt_rates.tolist() == pytest.approx([0.05])
    # A state written before kappa_adapt existed (no kappa_scale) was trained on the paper's
    # schedule; its config holds no kappa_adapt, which would now resolve to the default.
    legacy = _kappa_algo(name, (2.5,))
    legacy.load_state_dict({"name": name, "learning_rate": 1e-3})
    assert legacy.kappa_adapt_rates.tolist() == [0.0]
    legacy.begin_update(_rollout_with_cost_rates([1.0]), 0)
    assert legacy.kappa_scale.tolist() == [1.0]
    # ... and it stays so through its next checkpoint
    again = _kappa_algo(name, (2.5,))
    again.load_state_dict(legacy.state_dict())
    assert again.kappa_adapt_rates.tolist() == [0.0]


def test_the_legacy_pre_kappa_adapt_checkpoint_resumes_on_the_papers_schedule():
    ckpt, cfg, model = _legacy_np3o()
    assert cfg.algo_params.kappa_adapt is None  # its config predates the field
    algo = make_algorithm("np3o", model, cfg.ppo, cfg.algo_params, cost_limits=torch.tensor([2.5, 2.5]))
    assert algo.adapts_kappa
    algo.load_state_dict(ckpt["algo_state"])
    assert not algo.adapts_kappa


def test_kappa_adapt_config_tells_unset_from_zero():
    from training.config import ConfigError, TrainConfig

    for value in (None, 0.0, 0.05):
        cfg = TrainConfig(algo="np3o", algo_params=NP3OParams(kappa_adapt=value))
        cfg.validate()
        again = TrainConfig.from_dict(cfg.to_dict())
        assert again.algo_params.kappa_adapt == value
        assert (again.algo_params.kappa_adapt is None) == (value is None)
    assert TrainConfig.from_dict({"algo": "p3o", "algo_params": {"kappa_adapt": 0}}).algo_params.kappa_adapt == 0.0
    with pytest.raises(ConfigError, match="kappa_adapt"):
        TrainConfig(algo="np3o", algo_params=NP3OParams(kappa_adapt=1.5)).validate()
    assert NP3OParams().kappa_adapt_rates([0.0, 2.5]) == [0.0, 0.05]
    assert NP3OParams(kappa_adapt=0.0).kappa_adapt_rates([0.0, 2.5]) == [0.0, 0.0]


@pytest.mark.parametrize("name", KAPPA_ALGOS)
@pytest.mark.parametrize(
    ("argv", "rates"),
    [
        (["--cost-limit", "16"], [0.05]),
        (["--set", "algo_params.cost_limit=2.0"], [0.05]),
        (["--set", "cost_limits.limits=2.0"], [0.05]),
        ([], [0.0]),  # the algorithm's own limit: 0
        (["--cost-limit", "16", "--set", "algo_params.kappa_adapt=0"], [0.0]),
        (["--cost-limit", "0"], [0.0]),
    ],
)
def test_aow_train_limits_switch_the_kappa_adaptation(name, argv, rates):
    from training.runner import Runner
    from training.train import build_parser, config_from_args

    args = build_parser().parse_args(["--task", "toy_speed_limit", "--algo", name, "--num-envs", "4", *argv])
    cfg = config_from_args(args)
    cfg.network = SMALL
    algo = Runner(cfg, progress=False, tensorboard=False).algo
    assert algo.kappa_adapt_rates.tolist() == pytest.approx(rates)


def test_the_help_texts_name_the_kappa_adapt_default():
    from training.compare import build_parser as compare_parser
    from training.train import build_parser as train_parser

    for parser in (train_parser(), compare_parser()):
        text = " ".join(parser.format_help().split())
        assert "kappa_adapt 0.05" in text, parser.prog
        assert "kappa_adapt=0" in text, parser.prog
