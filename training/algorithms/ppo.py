"""PPO, the unconstrained baseline: maximizes L_R^CLIP and ignores the costs.

The paper's PPO baseline with "constraint rewards" (Table I: the costs' physical limits as
negative reward terms) is the same algorithm on a task whose reward includes them; that switch
belongs to the task (``aow-train --algo ppo --env-override rewards.constraint_rewards=true``;
``constraint_rewards=true`` on the toy task), not here. PPO trains no cost critics.
"""

from __future__ import annotations

from typing import ClassVar

from training.algorithms.base import ConstrainedPPO


class PPO(ConstrainedPPO):
    name: ClassVar[str] = "ppo"
    uses_cost_critics: ClassVar[bool] = False
