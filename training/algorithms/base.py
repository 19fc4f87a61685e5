"""The PPO update shared by all seven algorithms: :class:`ConstrainedPPO`.

One update = ``num_epochs`` passes over the rollout in ``num_minibatches`` minibatches. Per
minibatch: one gather of every per-sample field, one actor pass, one pass of the reward critic
and all cost critics together (returning [B, 1 + G] values; on a GPU both passes are CUDA
graphs, :mod:`training.algorithms.graphs`), the algorithm's policy loss, one clipped value loss
over the reward and every cost critic, the decaying entropy bonus, ONE backward pass, a
gradient all-reduce across ranks, gradient-norm clipping per network (actor, reward critic,
each cost critic: large cost targets must not shrink the policy's step) and one fused Adam
step. The learning rate follows the KL between the rollout policy and the current one (rsl_rl's
adaptive rule), computed on the device: the minibatch loop never waits for the device, and a
non-finite loss or gradient cancels its step there (the update raises at its end).

Subclasses change only :meth:`ConstrainedPPO.policy_loss` and, where the paper says so, the
per-iteration bookkeeping in :meth:`ConstrainedPPO.begin_update` (penalty weights, multipliers).

The parts, one module each: the rollout's statistics and packed fields
(:mod:`training.algorithms.rollout`), what a policy loss sees (:mod:`training.algorithms.minibatch`),
the optimizer step with its device-side learning rate and skip flag
(:mod:`training.algorithms.optimization`), the logged constraint diagnostics
(:mod:`training.algorithms.diagnostics`), the loss terms (:mod:`training.algorithms.losses`).
Their names stay importable from here.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from training.algorithms import diagnostics, losses
from training.algorithms.graphs import NetworkGraphs
from training.algorithms.minibatch import MinibatchContext
from training.algorithms.optimization import DeviceSideAdam, NonFiniteLossError
from training.algorithms.rollout import ADV_EPS, PreparedRollout, RolloutStats, rollout_statistics
from training.config import PPOConfig
from training.distributed import DistContext
from training.networks import ActorCritic
from training.storage import RolloutStorage, minibatch_indices

__all__ = [
    "ADV_EPS",
    "ConstrainedPPO",
    "MinibatchContext",
    "NonFiniteLossError",
    "PreparedRollout",
    "RolloutStats",
    "rollout_statistics",
]


class ConstrainedPPO(DeviceSideAdam):
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
        self._init_optimizer(model, cfg, self.group_names)
        self.networks = NetworkGraphs(model, enabled=cfg.cuda_graphs)
        self._value_loss_coefs = torch.tensor(
            [cfg.value_loss_coef] + [cfg.cost_value_loss_coef] * G, dtype=torch.float32, device=self.device
        )
        # The robot's left-right mirrors (training.mdp.symmetry.RobotMirror), set by the runner
        # when cfg.mirror_loss_coef > 0; the mirror loss needs them.
        self.mirror: Any = None

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
        values, cost_values = self.model.critic_values(critic_obs)
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
        return self.model.critic_values(critic_obs)

    # ---- algorithm hooks -------------------------------------------------------------------

    def begin_update(self, stats: RolloutStats, iteration: int) -> None:
        """Per-iteration bookkeeping before the minibatch loop (penalty weights, multipliers)."""

    def policy_loss(self, ctx: MinibatchContext) -> torch.Tensor:
        """PPO: -L_R^CLIP."""
        return -ctx.reward_surrogate

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
        advantages = (batch.advantages - stats.adv_mean) / stats.adv_std
        G = self.num_cost_groups
        fields = {
            "obs": batch.obs,
            "critic_obs": batch.critic_obs,
            "actions": batch.actions,
            "old_log_probs": batch.old_log_probs.unsqueeze(-1),
            "old_action_mean": batch.old_action_mean,
            # reward track first, then the cost groups: the value losses run on all at once
            "old_values": torch.cat([batch.old_values.unsqueeze(-1), batch.old_cost_values[:, :G]], dim=-1),
            "returns": torch.cat([batch.returns.unsqueeze(-1), batch.cost_returns[:, :G]], dim=-1),
            "signed_advantages": torch.cat([advantages.unsqueeze(-1), -cost_adv[:, :G]], dim=-1),
            "cost_advantages": cost_adv[:, :G],
            "raw_cost_advantages": raw_cost_adv[:, :G],
        }
        columns, start = {}, 0
        for name, value in fields.items():
            columns[name] = slice(start, start + value.shape[-1])
            start += value.shape[-1]
        return PreparedRollout(
            batch=batch,
            stats=stats,
            packed=torch.cat(list(fields.values()), dim=-1),
            columns=columns,
            normalized_violation_offsets=losses.normalized_violation_offset(
                stats.cost_return[:G], self.cost_limits, stats.cost_adv_mean[:G], stats.cost_adv_std[:G], self.cfg.gamma
            ),
            iteration=iteration,
            entropy_coef=self.entropy_coef(iteration),
        )

    def minibatch_loss(
        self, prep: PreparedRollout, idx: torch.Tensor, adapt_lr: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The total loss of one minibatch and its terms (one graph: actor and all critics)."""
        cfg = self.cfg
        mb = prep.take(idx)
        use_mirror = cfg.mirror_loss_coef > 0
        if use_mirror and self.mirror is None:
            raise ValueError("ppo.mirror_loss_coef > 0 needs the robot's mirrors (algorithm.mirror is not set)")
        if use_mirror:
            # One actor pass over the batch and its mirror image (one CUDA graph, not two).
            obs = mb["obs"]
            mean, mirrored_obs_mean = self.networks.actor(torch.cat([obs, self.mirror.observations(obs)])).split(
                obs.shape[0]
            )
        else:
            mean = self.networks.actor(mb["obs"])
        log_std = self.model.actor.log_std
        std = log_std.exp()
        log_probs = losses.gaussian_log_prob(mb["actions"], mean, log_std)
        ratio = torch.exp(log_probs - mb["old_log_probs"].squeeze(-1))
        all_values = self.networks.critics(mb["critic_obs"])  # [B, 1 + G]: reward, then costs
        old_mean, old_std = mb["old_action_mean"], prep.batch.old_action_std

        with torch.no_grad():
            kl = losses.gaussian_kl(old_mean, old_std, mean, std).mean()
            if adapt_lr and cfg.schedule == "adaptive":
                kl_all = self.dist.all_reduce_mean(kl.clone())
                losses.adapt_learning_rate_(
                    self._lr, kl_all, cfg.desired_kl, cfg.min_learning_rate, cfg.max_learning_rate
                )

        signed = mb["signed_advantages"]
        ctx = MinibatchContext(
            ratio=ratio,
            advantages=signed[:, 0],
            cost_advantages=mb["cost_advantages"],
            raw_cost_advantages=mb["raw_cost_advantages"],
            action_mean=mean,
            action_std=std,
            old_action_mean=old_mean,
            old_action_std=old_std,
            stats=prep.stats,
            cost_limits=self.cost_limits,
            clip_param=cfg.clip_param,
            gamma=cfg.gamma,
            iteration=prep.iteration,
            signed_advantages=signed,
            normalized_violation_offsets=prep.normalized_violation_offsets,
        )
        policy_loss = self.policy_loss(ctx)
        # The reward critic and every cost critic: one clipped value loss over [B, 1 + G].
        value_losses = losses.value_losses(
            all_values, mb["old_values"], mb["returns"], cfg.clip_param, cfg.use_clipped_value_loss
        )
        entropy = losses.gaussian_entropy(log_std)
        loss = policy_loss + (value_losses * self._value_loss_coefs).sum() - prep.entropy_coef * entropy
        terms = {"total": loss, "policy": policy_loss, "value": value_losses[0], "entropy": entropy}
        if use_mirror:
            mirror_loss = losses.mirror_loss(mirrored_obs_mean, self.mirror.actions(mean))
            loss = loss + cfg.mirror_loss_coef * mirror_loss
            terms["total"], terms["mirror"] = loss, mirror_loss
        if self.num_cost_groups:
            terms["cost_value"] = value_losses[1:]  # one per cost critic
        terms.update(ctx.info)
        terms["kl"] = kl
        return loss, terms

    def _term_names(self, key: str, value: torch.Tensor) -> list[str]:
        name = f"loss/{key}" if key in ("total", "policy", "value", "entropy", "cost_value", "mirror") else key
        if value.dim() == 0:
            return [name]
        parts = list(self.clip_groups) if key == "grad_norm" else self.group_names
        if len(parts) != value.numel():
            raise ValueError(f"term {key!r}: expected {len(parts)} values, got {value.numel()}")
        return [f"{name}/{part}" for part in parts]

    def update(
        self, storage: RolloutStorage, iteration: int, generator: torch.Generator | None = None
    ) -> dict[str, float]:
        """All epochs and minibatches on one rollout; returns mean losses and diagnostics.

        The minibatch loop never waits for the device: the learning-rate rule, the non-finite
        check and the step skipping all run there, and the host reads the results once at the
        end. A non-finite loss or gradient cancels that step and every later one of the update
        (the parameters stay as they were before it) and raises :class:`NonFiniteLossError`.
        """
        cfg = self.cfg
        prep = self.prepare(storage, iteration)
        self._skip_step.zero_()
        names: list[str] = []
        sums = first_bad = bad_record = None
        count = 0
        for _epoch, _m, idx in minibatch_indices(prep.batch.size, cfg.num_minibatches, cfg.num_epochs, generator):
            loss, terms = self.minibatch_loss(prep, idx.to(self.device), adapt_lr=True)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            # A rank's non-finite gradient reaches every rank here, so all of them skip alike.
            self.dist.all_reduce_grads(self.parameters)
            terms["grad_norm"] = self.clip_gradients()
            with torch.no_grad():
                if not names:
                    names = [n for k, v in terms.items() for n in self._term_names(k, v)]
                vec = torch.cat([v.view(1) if v.dim() == 0 else v for v in terms.values()])  # "total" first
                bad = ~torch.isfinite(vec).all()
                if sums is None:
                    sums, bad_record = torch.zeros_like(vec), torch.zeros_like(vec)
                    first_bad = torch.full((), -1, dtype=torch.long, device=self.device)
                sums += vec
                newly_bad = bad & (self._skip_step == 0)
                bad_record = torch.where(newly_bad, vec, bad_record)
                first_bad = torch.where(newly_bad, count, first_bad)
                self._skip_step.copy_(torch.maximum(self._skip_step, bad.float()))
            self.optimizer.step()  # fused Adam: a no-op on the device when _skip_step is set
            count += 1

        if bool(self._skip_step):  # the update's one wait for the device
            self._raise_non_finite(iteration, int(first_bad), names, bad_record.tolist())
        means = (sums / count).tolist()
        out = dict(zip(names, means, strict=True))
        out.update(
            {
                "learning_rate": self.learning_rate,
                "entropy_coef": prep.entropy_coef,
                "action_std": float(self.model.actor.log_std.detach().exp().mean()),
            }
        )
        out.update(self.constraint_diagnostics(prep.stats))
        out.update(self.penalty_scalars())
        return out

    def constraint_diagnostics(self, stats: RolloutStats) -> dict[str, float]:
        """Per cost group, J_C against eps and the terms of L^VIOL: see
        :func:`training.algorithms.diagnostics.constraint_diagnostics`."""
        return diagnostics.constraint_diagnostics(stats, self.cost_limits, self.group_names, self.cfg.gamma)

    # ---- state for checkpoints ----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Algorithm state (no optimizer of the networks: the checkpoint holds it separately)."""
        return {"name": self.name, "learning_rate": float(self.learning_rate), **self.extra_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"algorithm state is for {state.get('name')!r}, this run uses {self.name!r}")
        self.set_learning_rate(float(state["learning_rate"]))
        self.load_extra_state(state)
