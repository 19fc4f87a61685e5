"""PPO machinery shared by all seven algorithms.

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

Rollout statistics (reduced over all ranks, so identical everywhere):

- reward advantages are normalized over the whole rollout, ``(A - mean) / (std + 1e-8)``;
- cost advantages per group: ``mu_i``, ``sigma_i`` over the whole rollout (``sigma`` is the
  unbiased standard deviation plus 1e-8);
- ``J_C`` per group, the estimate of the discounted cost return of the rollout policy: the
  mean over every sample of the rollout of the GAE(lambda) cost return
  ``R_C,t = A_C,t + V_C(s_t)``, i.e. the discounted cost-to-go from the states the policy
  visits (time-outs bootstrapped with the cost critic). (1 - gamma) * J_C is then the
  per-step cost rate the constraint terms use.
- the correlation of the reward and cost advantages per group (``adv_corr``);
- the sampled cost rate per group: ``cost_rate / (1 - gamma)`` estimates the same J_C without the
  cost critic (logged as ``cost_return_sampled``; a lagging critic makes the GAE estimate low).

Every constrained algorithm logs the same diagnostics per cost group (``constraint_diagnostics``:
J_C, eps, J_C / eps, J_C - eps, mu, sigma, the normalized and raw constant part of L^VIOL, the
correlation) and ``penalty_share``: w / (1 + w), with w the weight of the (normalized) cost
advantages against the reward advantages' 1 in the policy gradient of the step (kappa where the
ReLU is active, lambda, nu, ...); 0 means the cost does not act on the policy at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import torch

from training.algorithms import losses
from training.algorithms.graphs import NetworkGraphs
from training.config import PPOConfig
from training.distributed import DistContext
from training.networks import ActorCritic, legacy_rows
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
    # [G] correlation of the reward and cost advantages over the rollout (None: not computed)
    adv_corr: torch.Tensor | None = None
    # [G] mean sampled cost per step of the rollout (None: not recorded); cost_rate / (1 - gamma)
    # is a critic-free estimate of J_C (the discounted cost-to-go of a stationary rollout)
    cost_rate: torch.Tensor | None = None


def rollout_statistics(batch: Batch, dist: DistContext) -> RolloutStats:
    """Moments of the advantages and the J_C estimate, reduced over ranks in one all-reduce."""
    adv = batch.advantages.double().unsqueeze(-1)
    cadv = batch.cost_advantages.double()
    both = torch.cat([adv, cadv], dim=-1)  # [B, 1 + G]
    G = cadv.shape[-1]
    rate = getattr(batch, "cost_rate", None)
    rate_sums = (rate.double() * both.shape[0]) if rate is not None else torch.zeros(G, dtype=torch.float64)
    rate_sums = rate_sums.to(both.device)
    sums = torch.cat(
        [
            torch.tensor([float(both.shape[0])], dtype=torch.float64, device=both.device),
            both.sum(0),
            both.square().sum(0),
            batch.cost_returns.double().sum(0),
            (adv * cadv).sum(0),
            rate_sums,
        ]
    )
    dist.all_reduce_sum(sums)
    n = sums[0]
    total, sq = sums[1 : 2 + G], sums[2 + G : 3 + 2 * G]
    mean = total / n
    var = ((sq - n * mean.square()) / (n - 1).clamp(min=1)).clamp(min=0)
    std = var.sqrt() + ADV_EPS
    dtype = batch.advantages.dtype
    cross = sums[3 + 3 * G : 3 + 4 * G]
    cov = (cross - n * mean[0] * mean[1:]) / (n - 1).clamp(min=1)
    return RolloutStats(
        adv_mean=mean[0].to(dtype),
        adv_std=std[0].to(dtype),
        cost_adv_mean=mean[1:].to(dtype),
        cost_adv_std=std[1:].to(dtype),
        cost_return=(sums[3 + 2 * G : 3 + 3 * G] / n).to(dtype),
        num_samples=int(n.item()),
        adv_corr=(cov / (std[0] * std[1:])).clamp(-1.0, 1.0).to(dtype),
        cost_rate=(sums[3 + 4 * G :] / n).to(dtype) if rate is not None else None,
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


@dataclass
class PreparedRollout:
    """A rollout ready for the minibatch loop.

    ``packed`` holds every per-sample field side by side ([B, columns], ``columns`` names the
    slices) so that a minibatch is ONE gather whatever the number of cost groups."""

    batch: Batch
    stats: RolloutStats
    packed: torch.Tensor
    columns: dict[str, slice]
    normalized_violation_offsets: torch.Tensor  # [G] ((1 - gamma)(J_C - eps) + mu) / sigma
    iteration: int
    entropy_coef: float

    def take(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = self.packed.index_select(0, idx)
        return {name: rows[:, cols] for name, cols in self.columns.items()}


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
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        # Gradient norms are clipped per network: a cost critic whose targets are large (costs can
        # be orders of magnitude above the rewards) must not shrink the policy's step. The cost
        # critics' parameters are stacked over the groups ([G, ...]): group g's share is row g.
        self.clip_groups = ["actor", "critic", *(f"cost_critic/{name}" for name in self.group_names)]
        self._plain_params = [*model.actor.parameters(), *model.critic.parameters()]
        self._stacked_params = list(model.cost_critics.parameters())
        if {id(p) for p in self._plain_params + self._stacked_params} != {id(p) for p in self.parameters}:
            raise ValueError("the clip groups (actor, critic, cost critics) must hold every trained parameter once")
        piece_group = [0] * sum(1 for _ in model.actor.parameters()) + [1] * sum(1 for _ in model.critic.parameters())
        piece_group += [2 + g for _ in self._stacked_params for g in range(G)]
        self._group_pieces = [[i for i, k in enumerate(piece_group) if k == g] for g in range(len(self.clip_groups))]
        membership = torch.zeros(len(piece_group), len(self.clip_groups))
        membership[torch.arange(len(piece_group)), torch.tensor(piece_group, dtype=torch.long)] = 1.0
        self._clip_membership = membership.to(self.device)
        # The learning rate and the "skip this step" flag live on the device and the fused Adam
        # reads them there, so a minibatch step never waits for the device (no host sync): the
        # KL rule adapts the rate on the device and a non-finite loss or gradient cancels the
        # step there; the host looks at both once per update.
        self._lr = torch.tensor(float(cfg.learning_rate), dtype=torch.float32, device=self.device)
        self._skip_step = torch.zeros((), dtype=torch.float32, device=self.device)
        self.optimizer = torch.optim.Adam(self.parameters, lr=self._lr, fused=True)
        self.optimizer.found_inf = self._skip_step  # what fused Adam reads to skip (GradScaler's protocol)
        self.networks = NetworkGraphs(model, enabled=cfg.cuda_graphs)
        self._value_loss_coefs = torch.tensor(
            [cfg.value_loss_coef] + [cfg.cost_value_loss_coef] * G, dtype=torch.float32, device=self.device
        )

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
        if self.num_cost_groups:
            terms["cost_value"] = value_losses[1:]  # one per cost critic
        terms.update(ctx.info)
        terms["kl"] = kl
        return loss, terms

    def clip_gradients(self) -> torch.Tensor:
        """Clip each network's gradient norm to ``max_grad_norm``; returns the norms before it [groups].

        One fused norm over all gradients, the per-network norms from those, then one scaling
        per network: the number of operations hardly grows with the number of cost critics."""
        for p in self.parameters:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        with torch.no_grad():
            pieces = [p.grad for p in self._plain_params]
            pieces += [piece for p in self._stacked_params for piece in p.grad.unbind(0)]
            # torch._foreach_norm: every piece's norm in one fused kernel (what clip_grad_norm_ uses).
            squares = torch.stack(torch._foreach_norm(pieces)).square()
            group_norms = (squares @ self._clip_membership).sqrt()
            coefs = (self.cfg.max_grad_norm / (group_norms + 1e-6)).clamp(max=1.0).unbind()
            for members, coef in zip(self._group_pieces, coefs, strict=True):
                torch._foreach_mul_([pieces[i] for i in members], coef)
        return group_norms

    def _term_names(self, key: str, value: torch.Tensor) -> list[str]:
        name = f"loss/{key}" if key in ("total", "policy", "value", "entropy", "cost_value") else key
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
        """Per cost group: J_C against eps (``cost_return``, ``cost_limit``, their ratio when eps > 0
        and the gap J_C - eps), the cost advantages' mu and sigma, the normalized constant part of
        L_C^VIOL,N (``violation_offset``: what the paper's ReLU sees) next to its unnormalized
        counterpart (1 - gamma)(J_C - eps), and the correlation of reward and cost advantages."""
        G = self.num_cost_groups
        if not G:
            return {}
        corr = stats.adv_corr[:G] if stats.adv_corr is not None else torch.full((G,), float("nan"))
        gap = stats.cost_return[:G] - self.cost_limits
        offset = losses.normalized_violation_offset(
            stats.cost_return[:G], self.cost_limits, stats.cost_adv_mean[:G], stats.cost_adv_std[:G], self.cfg.gamma
        )
        rows = torch.stack(
            [
                stats.cost_return[:G],
                self.cost_limits,
                gap,
                stats.cost_adv_mean[:G],
                stats.cost_adv_std[:G],
                offset,
                (1.0 - self.cfg.gamma) * gap,
                corr.to(gap),
            ]
        ).tolist()
        out: dict[str, float] = {}
        for g, group in enumerate(self.group_names):
            out[f"cost_return/{group}"] = rows[0][g]
            out[f"cost_limit/{group}"] = rows[1][g]
            if rows[1][g] > 0:
                out[f"cost_return_over_limit/{group}"] = rows[0][g] / rows[1][g]
            out[f"constraint_gap/{group}"] = rows[2][g]
            out[f"cost_adv_mean/{group}"] = rows[3][g]
            out[f"cost_adv_std/{group}"] = rows[4][g]
            out[f"violation_offset/{group}"] = rows[5][g]
            out[f"violation_offset_raw/{group}"] = rows[6][g]
            if math.isfinite(rows[7][g]):
                out[f"adv_corr/{group}"] = rows[7][g]
        if stats.cost_rate is not None:
            sampled = (stats.cost_rate[:G] / (1.0 - self.cfg.gamma)).tolist()
            for g, group in enumerate(self.group_names):
                out[f"cost_return_sampled/{group}"] = sampled[g]
        return out

    def _raise_non_finite(self, iteration: int, index: int, names: list[str], record: list[float]) -> None:
        epoch, m = divmod(index, self.cfg.num_minibatches)
        where = f"iteration {iteration}, minibatch {m} of epoch {epoch}"
        values = dict(zip(names, record, strict=True))
        if not math.isfinite(values.pop("loss/total")):
            raise NonFiniteLossError(f"non-finite loss at {where} ({values}); the step was not applied")
        group = next(
            (n[len("grad_norm/") :] for n, v in values.items() if n.startswith("grad_norm/") and not math.isfinite(v)),
            "?",
        )
        raise NonFiniteLossError(f"non-finite gradient norm of the {group} at {where}; the step was not applied")

    def _upgrade_optimizer_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """Optimizer states written with one module per cost critic hold per-layer moments for
        each critic after the actor's and the critic's; they become the moments of the stacked
        parameter tensor (same layout as :func:`training.networks.convert_legacy_cost_critics`)."""
        ids = state["param_groups"][0]["params"]
        plain, G = len(self._plain_params), self.num_cost_groups
        if len(state["param_groups"]) != 1 or len(ids) == len(self.parameters) or not G:
            return state
        per_group, extra = divmod(len(ids) - plain, G)
        if extra or per_group != 2 * len(self.model.cost_critics.layer_sizes):
            raise ValueError(
                f"optimizer state holds {len(ids)} parameters; this model has {len(self.parameters)} "
                f"(and is not the per-critic layout of {plain} + {G} x {2 * len(self.model.cost_critics.layer_sizes)})"
            )
        old_state = state["state"]
        legacy = [ids[plain + g * per_group : plain + (g + 1) * per_group] for g in range(G)]
        new_state = {i: old_state[pid] for i, pid in enumerate(ids[:plain]) if pid in old_state}
        if all(pid in old_state for group in legacy for pid in group):
            first = old_state[legacy[0][0]]
            moments = {
                key: legacy_rows([[old_state[pid][key] for pid in group] for group in legacy])
                for key in ("exp_avg", "exp_avg_sq")
            }
            new_state[plain] = {"step": first["step"], **moments}
        groups = [{**state["param_groups"][0], "params": list(range(plain + 1))}]
        return {"state": new_state, "param_groups": groups}

    @property
    def learning_rate(self) -> float:
        return float(self._lr)

    def set_learning_rate(self, lr: float) -> None:
        self._lr.fill_(float(lr))

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Load an Adam state_dict (also one saved by a plain, unfused Adam, or before the cost
        critics were one stacked network) and keep this algorithm's fused, device-side
        learning rate."""
        state = self._upgrade_optimizer_state(state)
        self.optimizer.load_state_dict(state)
        for group in self.optimizer.param_groups:
            group.update(lr=self._lr, fused=True, foreach=None, capturable=False, differentiable=False)
        for p, s in self.optimizer.state.items():
            if "step" in s:
                s["step"] = torch.as_tensor(s["step"], dtype=torch.float32).to(p.device)

    # ---- state for checkpoints ----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Algorithm state (no optimizer of the networks: the checkpoint holds it separately)."""
        return {"name": self.name, "learning_rate": float(self.learning_rate), **self.extra_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"algorithm state is for {state.get('name')!r}, this run uses {self.name!r}")
        self.set_learning_rate(float(state["learning_rate"]))
        self.load_extra_state(state)
