"""PPO machinery shared by all seven algorithms.

One update = ``num_epochs`` passes over the rollout in ``num_minibatches`` minibatches. Per
minibatch: one actor pass, one pass of the reward critic and all cost critics together
(:class:`~training.algorithms.critics.CriticEvaluator`), the algorithm's policy loss, clipped
value losses for the reward and every cost critic, the decaying entropy bonus, ONE backward
pass, a gradient all-reduce across ranks, gradient-norm clipping per network (actor, reward
critic, each cost critic: large cost targets must not shrink the policy's step) and one Adam
step. The learning
rate follows the KL between the rollout policy and the current one (rsl_rl's adaptive rule).

Subclasses change only :meth:`ConstrainedPPO.policy_loss` and, where the paper says so, the
per-iteration bookkeeping in :meth:`ConstrainedPPO.begin_update` (penalty weights, multipliers).

Rollout statistics (reduced over all ranks, so identical everywhere):

- reward advantages are normalized over the whole rollout, ``(A - mean) / (std + 1e-8)``;
- cost advantages per group: ``mu_i``, ``sigma_i`` over the whole rollout (``sigma`` is the
  unbiased standard deviation plus 1e-8);
- ``J_C`` per group, the estimate of the discounted cost return of the rollout policy: the
  mean over every sample of the rollout of the GAE(lambda) cost return
  ``R_C,t = A_C,t + V_C(s_t)``, i.e. the discounted cost-to-go from the states the policy
  visits (time-outs bootstrapped with the cost critic). (1 - gamma) * J_C is then the
  per-step cost rate the constraint terms use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from training.algorithms import losses
from training.algorithms.critics import CriticEvaluator
from training.config import PPOConfig
from training.distributed import DistContext
from training.networks import ActorCritic
from training.storage import Batch, RolloutStorage, minibatch_indices

ADV_EPS = 1e-8


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient became NaN/inf; training stops before the step is applied."""


@dataclass
class RolloutStats:
    """Statistics of one rollout, identical on every rank."""

    adv_mean: torch.Tensor  # scalar
    adv_std: torch.Tensor  # scalar
    cost_adv_mean: torch.Tensor  # [G]  mu_C
    cost_adv_std: torch.Tensor  # [G]  sigma_C
    cost_return: torch.Tensor  # [G]  J_C
    num_samples: int


def rollout_statistics(batch: Batch, dist: DistContext) -> RolloutStats:
    """Moments of the advantages and the J_C estimate, reduced over ranks in one all-reduce."""
    adv = batch.advantages.double().unsqueeze(-1)
    cadv = batch.cost_advantages.double()
    both = torch.cat([adv, cadv], dim=-1)  # [B, 1 + G]
    G = cadv.shape[-1]
    sums = torch.cat(
        [
            torch.tensor([float(both.shape[0])], dtype=torch.float64, device=both.device),
            both.sum(0),
            both.square().sum(0),
            batch.cost_returns.double().sum(0),
        ]
    )
    dist.all_reduce_sum(sums)
    n = sums[0]
    total, sq = sums[1 : 2 + G], sums[2 + G : 3 + 2 * G]
    mean = total / n
    var = ((sq - n * mean.square()) / (n - 1).clamp(min=1)).clamp(min=0)
    std = var.sqrt() + ADV_EPS
    dtype = batch.advantages.dtype
    return RolloutStats(
        adv_mean=mean[0].to(dtype),
        adv_std=std[0].to(dtype),
        cost_adv_mean=mean[1:].to(dtype),
        cost_adv_std=std[1:].to(dtype),
        cost_return=(sums[3 + 2 * G :] / n).to(dtype),
        num_samples=int(n.item()),
    )


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


@dataclass
class PreparedRollout:
    """A rollout ready for the minibatch loop."""

    batch: Batch
    stats: RolloutStats
    advantages: torch.Tensor  # [B] normalized reward advantages
    cost_advantages: torch.Tensor  # [B, G] normalized (raw for P3O)
    iteration: int
    entropy_coef: float


class ConstrainedPPO:
    """The shared machinery; as is, it is plain PPO on the reward (costs are ignored)."""

    name: ClassVar[str] = "ppo"
    uses_cost_critics: ClassVar[bool] = False
    normalize_cost_advantages: ClassVar[bool] = True

    def __init__(
        self,
        model: ActorCritic,
        cfg: PPOConfig,
        params: Any,
        cost_limits: torch.Tensor | None = None,
        dist: DistContext | None = None,
        critic_mode: str | None = None,
        group_names: list[str] | None = None,
    ):
        self.model = model
        self.cfg = cfg
        self.params = params
        self.dist = dist or DistContext()
        self.device = next(model.parameters()).device
        G = len(model.cost_critics)
        if self.uses_cost_critics and G == 0:
            raise ValueError(f"{self.name} needs at least one cost group (the task has none)")
        limits = torch.zeros(G) if cost_limits is None else torch.as_tensor(cost_limits, dtype=torch.float32)
        if limits.shape != (G,):
            raise ValueError(f"cost_limits: expected {G} values (one per cost group), got shape {tuple(limits.shape)}")
        self.cost_limits = limits.to(self.device)
        self.group_names = self.group_names_or_default(G, group_names)
        if len(self.group_names) != G:
            raise ValueError(f"group_names: expected {G} names, got {self.group_names}")
        self.learning_rate = cfg.learning_rate
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        # Gradient norms are clipped per network: a cost critic whose targets are large (costs can
        # be orders of magnitude above the rewards) must not shrink the policy's step.
        self.clip_groups = {"actor": list(model.actor.parameters()), "critic": list(model.critic.parameters())}
        for name, critic in zip(self.group_names, model.cost_critics, strict=True):
            self.clip_groups[f"cost_critic/{name}"] = list(critic.parameters())
        self.optimizer = torch.optim.Adam(self.parameters, lr=self.learning_rate)
        self.critics = CriticEvaluator(model, critic_mode)

    @staticmethod
    def group_names_or_default(num_groups: int, names: list[str] | None) -> list[str]:
        return list(names) if names is not None else [str(g) for g in range(num_groups)]

    @property
    def num_cost_groups(self) -> int:
        return len(self.model.cost_critics)

    # ---- acting --------------------------------------------------------------------------

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, critic_obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        mean = self.model.actor(obs)
        log_std = self.model.actor.log_std
        std = log_std.exp()
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        actions = mean + std * noise
        values, cost_values = self.critics(critic_obs)
        return {
            "actions": actions,
            "log_probs": losses.gaussian_log_prob(actions, mean, log_std),
            "action_mean": mean,
            "action_std": std.expand(mean.shape[-1]),
            "values": values,
            "cost_values": cost_values,
        }

    @torch.no_grad()
    def values(self, critic_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.critics(critic_obs)

    # ---- algorithm hooks -------------------------------------------------------------------

    def begin_update(self, stats: RolloutStats, iteration: int) -> None:
        """Per-iteration bookkeeping before the minibatch loop (penalty weights, multipliers)."""

    def policy_loss(self, ctx: MinibatchContext) -> torch.Tensor:
        """PPO: -L_R^CLIP."""
        return -losses.clipped_surrogate(ctx.ratio, ctx.advantages, ctx.clip_param)

    def penalty_scalars(self) -> dict[str, float]:
        """Penalty weights / multipliers to log (kappa, lambda, nu)."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    # ---- the update ------------------------------------------------------------------------

    def entropy_coef(self, iteration: int) -> float:
        c = self.cfg
        return losses.decayed_entropy_coef(iteration, c.entropy_coef, c.entropy_coef_final, c.entropy_decay)

    def prepare(self, storage: RolloutStorage, iteration: int) -> PreparedRollout:
        """Rollout statistics, normalized advantages and per-iteration bookkeeping."""
        batch = storage.batch()
        stats = rollout_statistics(batch, self.dist)
        self.begin_update(stats, iteration)
        raw_cost_adv = batch.cost_advantages
        if self.normalize_cost_advantages:
            cost_adv = (raw_cost_adv - stats.cost_adv_mean) / stats.cost_adv_std
        else:
            cost_adv = raw_cost_adv
        return PreparedRollout(
            batch=batch,
            stats=stats,
            advantages=(batch.advantages - stats.adv_mean) / stats.adv_std,
            cost_advantages=cost_adv,
            iteration=iteration,
            entropy_coef=self.entropy_coef(iteration),
        )

    def minibatch_loss(
        self, prep: PreparedRollout, idx: torch.Tensor, adapt_lr: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The total loss of one minibatch and its terms (one graph: actor and all critics)."""
        cfg, batch = self.cfg, prep.batch
        mean = self.model.actor(batch.obs[idx])
        log_std = self.model.actor.log_std
        std = log_std.exp()
        log_probs = losses.gaussian_log_prob(batch.actions[idx], mean, log_std)
        ratio = torch.exp(log_probs - batch.old_log_probs[idx])
        values, cost_values = self.critics(batch.critic_obs[idx])
        old_mean, old_std = batch.old_action_mean[idx], batch.old_action_std

        with torch.no_grad():
            kl = losses.gaussian_kl(old_mean, old_std, mean, std).mean()
            if adapt_lr and cfg.schedule == "adaptive":
                kl_all = self.dist.all_reduce_mean(kl.clone())
                self.set_learning_rate(
                    losses.adapt_learning_rate(
                        self.learning_rate, float(kl_all), cfg.desired_kl, cfg.min_learning_rate, cfg.max_learning_rate
                    )
                )

        ctx = MinibatchContext(
            ratio=ratio,
            advantages=prep.advantages[idx],
            cost_advantages=prep.cost_advantages[idx],
            raw_cost_advantages=batch.cost_advantages[idx],
            action_mean=mean,
            action_std=std,
            old_action_mean=old_mean,
            old_action_std=old_std,
            stats=prep.stats,
            cost_limits=self.cost_limits,
            clip_param=cfg.clip_param,
            gamma=cfg.gamma,
            iteration=prep.iteration,
        )
        policy_loss = self.policy_loss(ctx)
        value_loss = losses.value_loss(
            values, batch.old_values[idx], batch.returns[idx], cfg.clip_param, cfg.use_clipped_value_loss
        )
        entropy = losses.gaussian_entropy(log_std)
        loss = policy_loss + cfg.value_loss_coef * value_loss - prep.entropy_coef * entropy
        terms = {"policy": policy_loss, "value": value_loss, "entropy": entropy}
        if self.num_cost_groups:
            cost_value_loss = losses.value_loss(
                cost_values,
                batch.old_cost_values[idx],
                batch.cost_returns[idx],
                cfg.clip_param,
                cfg.use_clipped_value_loss,
            )
            loss = loss + cfg.cost_value_loss_coef * cost_value_loss
            terms["cost_value"] = cost_value_loss
        terms.update(ctx.info)
        terms["kl"] = kl
        return loss, terms

    def update(
        self, storage: RolloutStorage, iteration: int, generator: torch.Generator | None = None
    ) -> dict[str, float]:
        """All epochs and minibatches on one rollout; returns mean losses and diagnostics."""
        cfg = self.cfg
        prep = self.prepare(storage, iteration)
        sums: dict[str, torch.Tensor] = {}
        count = 0
        for epoch, m, idx in minibatch_indices(prep.batch.size, cfg.num_minibatches, cfg.num_epochs, generator):
            loss, terms = self.minibatch_loss(prep, idx.to(self.device), adapt_lr=True)
            where = f"iteration {iteration}, minibatch {m} of epoch {epoch}"
            bad_loss = None
            if not torch.isfinite(loss):
                values = {k: float(v.detach()) for k, v in terms.items()}
                bad_loss = NonFiniteLossError(f"non-finite loss at {where} ({values}); the step was not applied")
                if not self.dist.enabled:
                    raise bad_loss
                # Other ranks wait in the gradient all-reduce: go through it; the NaN reaches every
                # rank's gradients, so all of them stop below instead of deadlocking.
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.dist.all_reduce_grads(self.parameters)
            for name, params in self.clip_groups.items():
                norm = nn.utils.clip_grad_norm_(params, cfg.max_grad_norm, foreach=True)
                if bad_loss is not None:
                    raise bad_loss
                if not torch.isfinite(norm):
                    raise NonFiniteLossError(
                        f"non-finite gradient norm of the {name} at {where}; the step was not applied"
                    )
                terms[f"grad_norm/{name}"] = norm
            self.optimizer.step()
            for k, v in terms.items():
                sums[k] = sums.get(k, 0.0) + v.detach().float()
            count += 1

        loss_keys = ("policy", "value", "entropy", "cost_value")
        out = {f"loss/{k}" if k in loss_keys else k: float(v) / count for k, v in sums.items()}
        out.update(
            {
                "learning_rate": self.learning_rate,
                "entropy_coef": prep.entropy_coef,
                "action_std": float(self.model.actor.log_std.detach().exp().mean()),
            }
        )
        stats = prep.stats
        for g, group in enumerate(self.group_names):
            out[f"cost_return/{group}"] = float(stats.cost_return[g])
            out[f"cost_adv_mean/{group}"] = float(stats.cost_adv_mean[g])
            out[f"cost_adv_std/{group}"] = float(stats.cost_adv_std[g])
        out.update(self.penalty_scalars())
        return out

    def set_learning_rate(self, lr: float) -> None:
        self.learning_rate = lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # ---- state for checkpoints ----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Algorithm state (no optimizer of the networks: the checkpoint holds it separately)."""
        return {"name": self.name, "learning_rate": float(self.learning_rate), **self.extra_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"algorithm state is for {state.get('name')!r}, this run uses {self.name!r}")
        self.set_learning_rate(float(state["learning_rate"]))
        self.load_extra_state(state)
