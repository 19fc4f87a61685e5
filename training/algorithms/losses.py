"""The loss terms, as small pure functions over batched tensors.

Conventions: ``ratio`` is ``pi'(a|s) / pi(a|s)`` per sample ``[B]``; cost tensors carry one
column per cost group ``[B, G]``; objectives (``L``) are to be maximized, losses minimized.
"""

from __future__ import annotations

import math

import torch

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log N(actions; mean, exp(log_std)) summed over action dimensions: [B]."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian (state-independent std): a scalar."""
    return (0.5 + LOG_SQRT_2PI + log_std).sum(-1)


def gaussian_kl(p_mean: torch.Tensor, p_std: torch.Tensor, q_mean: torch.Tensor, q_std: torch.Tensor) -> torch.Tensor:
    """KL(p || q) per sample for diagonal Gaussians, summed over action dimensions: [B]."""
    return (
        torch.log(q_std / p_std) + (p_std.square() + (p_mean - q_mean).square()) / (2.0 * q_std.square()) - 0.5
    ).sum(-1)


def clipped_objectives(ratio: torch.Tensor, signed_advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """mean(min(r A, clip(r) A)) per column of ``signed_advantages`` [B, K] -> [K].

    With columns (A_R, -A_C1, ..., -A_CG) this is (L_R^CLIP, -L_C1^CLIP, ..., -L_CG^CLIP): the
    reward objective and all cost surrogates in the same few operations as the reward alone."""
    r = ratio.unsqueeze(-1)
    clipped = r.clamp(1.0 - clip, 1.0 + clip)
    return torch.minimum(r * signed_advantages, clipped * signed_advantages).mean(0)


def mirror_loss(mean_of_mirrored_obs: torch.Tensor, mirrored_mean: torch.Tensor) -> torch.Tensor:
    """rsl_rl's mirror loss: mean squared difference between the actor's mean on the mirrored
    observations and the mirror of its mean on the observations (the target held fixed, so the
    loss moves the mirrored side toward the policy's own behaviour); the mean over samples and
    action dimensions, as ``torch.nn.functional.mse_loss``; scalar."""
    return (mean_of_mirrored_obs - mirrored_mean.detach()).square().mean()


def value_losses(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float, use_clipped: bool
) -> torch.Tensor:
    """Clipped squared error per column (critic) of [B, K] tensors -> [K]."""
    errors = (values - returns).square()
    if use_clipped:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        errors = torch.maximum(errors, (clipped - returns).square())
    return errors.mean(0)


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """L^CLIP = mean(min(r A, clip(r) A)) (PPO's pessimistic reward objective); scalar."""
    return clipped_objectives(ratio, advantages.unsqueeze(-1), clip)[0]


def clipped_cost_surrogate(ratio: torch.Tensor, cost_advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """L_C^CLIP = mean(max(r A_C, clip(r) A_C)) per cost group (pessimistic: an upper bound on
    the cost change); ``cost_advantages`` [B, G] -> [G]."""
    return -clipped_objectives(ratio, -cost_advantages, clip)


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float, use_clipped: bool
) -> torch.Tensor:
    """Mean squared error to the GAE returns, clipped around the rollout's values as in PPO.

    Works on ``[B]`` and ``[B, G]``; for ``[B, G]`` the groups' losses are summed (each critic
    gets its own mean squared error)."""
    if values.dim() == 1:
        return value_losses(values[:, None], old_values[:, None], returns[:, None], clip, use_clipped)[0]
    return value_losses(values, old_values, returns, clip, use_clipped).sum()


def normalized_violation_offset(
    cost_return: torch.Tensor, cost_limit: torch.Tensor, adv_mean: torch.Tensor, adv_std: torch.Tensor, gamma: float
) -> torch.Tensor:
    """The constant part of L_C^VIOL,N: ((1 - gamma)(J_C - eps) + mu) / sigma, [G]."""
    return ((1.0 - gamma) * (cost_return - cost_limit) + adv_mean) / adv_std


def normalized_violation(
    cost_surrogate_n: torch.Tensor,
    cost_return: torch.Tensor,
    cost_limit: torch.Tensor,
    adv_mean: torch.Tensor,
    adv_std: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """L_C^VIOL,N = L_C^CLIP,N + ((1 - gamma)(J_C - eps) + mu) / sigma  (the paper's eq. 8), [G]."""
    return cost_surrogate_n + normalized_violation_offset(cost_return, cost_limit, adv_mean, adv_std, gamma)


def violation(cost_surrogate: torch.Tensor, cost_return: torch.Tensor, cost_limit: torch.Tensor, gamma: float):
    """L_C^VIOL = L_C^CLIP + (1 - gamma)(J_C - eps) (P3O, unnormalized advantages), [G]."""
    return cost_surrogate + (1.0 - gamma) * (cost_return - cost_limit)


def kappa_schedule(iteration: int, kappa_init: float, kappa_max: float, growth: float) -> float:
    """kappa_i = min(kappa_max, kappa_init * growth**i): a closed form in the iteration number, so
    resuming, restarting or running on several ranks always gives the same value."""
    return min(kappa_max, kappa_init * growth ** float(iteration))


def decayed_entropy_coef(iteration: int, initial: float, final: float, decay: float) -> float:
    """coef_i = final + (initial - final) * decay**i (the appendix's decaying entropy bonus)."""
    return final + (initial - final) * decay ** float(iteration)


def adapt_learning_rate(lr: float, kl: float, desired_kl: float, min_lr: float, max_lr: float) -> float:
    """rsl_rl's rule: shrink by 1.5 when KL > 2 * target, grow by 1.5 when KL < target / 2."""
    if kl > 2.0 * desired_kl:
        return max(min_lr, lr / 1.5)
    if 0.0 < kl < 0.5 * desired_kl:
        return min(max_lr, lr * 1.5)
    return lr


def adapt_learning_rate_(
    lr: torch.Tensor, kl: torch.Tensor, desired_kl: float, min_lr: float, max_lr: float
) -> torch.Tensor:
    """:func:`adapt_learning_rate` on device tensors, in place on ``lr`` (no wait for the device)."""
    shrink = kl > 2.0 * desired_kl
    grow = (kl > 0.0) & (kl < 0.5 * desired_kl)
    smaller = (lr / 1.5).clamp(min=min_lr)
    larger = (lr * 1.5).clamp(max=max_lr)
    return lr.copy_(torch.where(shrink, smaller, torch.where(grow, larger, lr)))
