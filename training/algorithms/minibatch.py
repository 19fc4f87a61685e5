"""What a policy loss may use for one minibatch: :class:`MinibatchContext`.

The algorithms' losses (``policy_loss``) read the clipped surrogates and the constant part of
L^VIOL from it; both are computed once per minibatch (reward and every cost group in one pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch

from training.algorithms import losses
from training.algorithms.rollout import RolloutStats


@dataclass
class MinibatchContext:
    """What a policy loss may use for one minibatch."""

    ratio: torch.Tensor  # [B] pi'(a|s) / pi(a|s), differentiable
    advantages: torch.Tensor  # [B] normalized reward advantages
    cost_advantages: torch.Tensor  # [B, G] normalized (or raw, for P3O) cost advantages
    raw_cost_advantages: torch.Tensor  # [B, G]
    action_mean: torch.Tensor  # [B, A] current policy, differentiable
    action_std: torch.Tensor  # [A]
    old_action_mean: torch.Tensor  # [B, A]
    old_action_std: torch.Tensor  # [A]
    stats: RolloutStats
    cost_limits: torch.Tensor  # [G] epsilon
    clip_param: float
    gamma: float
    iteration: int
    info: dict[str, torch.Tensor] = field(default_factory=dict)  # scalars to log
    # [B, 1 + G]: (A_R, -A_C1, ..., -A_CG); the update passes it ready-made (see ``objectives``).
    signed_advantages: torch.Tensor | None = None
    normalized_violation_offsets: torch.Tensor | None = None  # [G], see ``violation_offsets``

    @cached_property
    def objectives(self) -> torch.Tensor:
        """[1 + G]: L_R^CLIP, then -L_Ci^CLIP for every cost group, in one pass.

        mean(max(r A, clip(r) A)) = -mean(min(r (-A), clip(r) (-A))), so PPO's pessimistic
        reward objective taken over the reward advantages and the NEGATED cost advantages gives
        the reward objective and the negated cost surrogates together: the cost groups add no
        operations (see :func:`losses.clipped_objectives`)."""
        signed = self.signed_advantages
        if signed is None:
            signed = torch.cat([self.advantages.unsqueeze(-1), -self.cost_advantages], dim=-1)
        return losses.clipped_objectives(self.ratio, signed, self.clip_param)

    @property
    def reward_surrogate(self) -> torch.Tensor:
        """L_R^CLIP (scalar)."""
        return self.objectives[0]

    @property
    def cost_surrogates(self) -> torch.Tensor:
        """L_Ci^CLIP per cost group [G] (pessimistic: an upper bound on the cost change)."""
        return -self.objectives[1:]

    def cost_surrogates_plus(self, offsets: torch.Tensor) -> torch.Tensor:
        """``cost_surrogates + offsets`` [G] in one operation (a subtraction, no negation)."""
        return offsets - self.objectives[1:]

    @cached_property
    def violation_offsets(self) -> torch.Tensor:
        """The constant part of L_Ci^VIOL,N [G]: ((1 - gamma)(J_C - eps) + mu) / sigma (the paper's
        eq. 8); the update passes it computed once per rollout."""
        if self.normalized_violation_offsets is not None:
            return self.normalized_violation_offsets
        s = self.stats
        return losses.normalized_violation_offset(
            s.cost_return, self.cost_limits, s.cost_adv_mean, s.cost_adv_std, self.gamma
        )
