"""The optimizer step shared by all seven algorithms, on the device from end to end.

Gradient-norm clipping per network (actor, reward critic, each cost critic: large cost targets
must not shrink the policy's step) and one fused Adam step. The learning rate and the "skip this
step" flag are device tensors the fused Adam reads, so the KL rule (rsl_rl's adaptive learning
rate) adapts the rate on the device and a non-finite loss or gradient cancels its step there:
the minibatch loop never waits for the device, and the host looks at both once per update
(:meth:`DeviceSideAdam._raise_non_finite`). Also: loading Adam states of older checkpoints.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from training.config import PPOConfig
from training.networks import ActorCritic, legacy_rows


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient became NaN/inf; training stops before the step is applied."""


class DeviceSideAdam:
    """Mixin of :class:`training.algorithms.base.ConstrainedPPO`: its optimizer and learning rate.

    Expects ``self.cfg`` (:class:`PPOConfig`) and ``self.device``; :meth:`_init_optimizer` sets
    ``parameters``, ``clip_groups``, ``optimizer`` and the device tensors ``_lr`` and
    ``_skip_step``."""

    cfg: PPOConfig
    device: torch.device

    def _init_optimizer(self, model: ActorCritic, cfg: PPOConfig, group_names: list[str]) -> None:
        G = len(group_names)
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        # Gradient norms are clipped per network: a cost critic whose targets are large (costs can
        # be orders of magnitude above the rewards) must not shrink the policy's step. The cost
        # critics' parameters are stacked over the groups ([G, ...]): group g's share is row g.
        self.clip_groups = ["actor", "critic", *(f"cost_critic/{name}" for name in group_names)]
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
