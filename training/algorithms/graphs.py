"""The networks' forward and backward passes of a minibatch step as CUDA graphs.

On a GPU, a minibatch step of these small networks is paced by the host issuing kernels (an
H100 update measured 37 ms of kernels in 133 ms), so every operation the host issues costs
time whether the GPU is busy or not. Captured with ``torch.cuda.make_graphed_callables``, the
actor's forward and backward and those of all critics together are one graph launch each,
for PPO and every constrained algorithm alike; the losses stay eager (they differ by algorithm,
and CRPO's switch reads a value on the host).

One capture per network and minibatch size, made on first use (a few warm-up passes). The
graphs read the parameters and the normalizer statistics where they are, so in-place updates
(the optimizer, ``load_state_dict``, the normalizer update) need no new capture. Without
gradients (rollouts), on a CPU or with ``enabled=False`` the modules run as they are.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from training.networks import ActorCritic, critic_values


class _ActorMean(nn.Module):
    def __init__(self, model: ActorCritic):
        super().__init__()
        self.actor = model.actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)


class _CriticValues(nn.Module):
    def __init__(self, model: ActorCritic):
        super().__init__()
        self.critic = model.critic
        self.cost_critics = model.cost_critics

    def forward(self, critic_obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values, cost_values = critic_values(self.critic, self.cost_critics, critic_obs)
        # Graph outputs must all take part in the backward pass: no empty cost tensor for PPO.
        return (values, cost_values) if len(self.cost_critics) else (values,)


class NetworkGraphs:
    """``actor(obs)`` and ``critics(critic_obs)`` for the training step, graphed where possible."""

    def __init__(self, model: ActorCritic, enabled: bool = True):
        self.model = model
        self.enabled = enabled and next(model.parameters()).is_cuda
        self._graphed: dict[tuple[str, tuple[int, ...]], Callable] = {}

    def actor(self, obs: torch.Tensor) -> torch.Tensor:
        if not self._use_graph(obs):
            return self.model.actor(obs)
        return self._graph("actor", _ActorMean, obs)(obs)

    def critics(self, critic_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self._use_graph(critic_obs):
            return self.model.critic_values(critic_obs)
        out = self._graph("critics", _CriticValues, critic_obs)(critic_obs)
        if len(out) == 2:
            return out[0], out[1]
        return out[0], critic_obs.new_zeros(critic_obs.shape[0], 0)

    @property
    def captured(self) -> int:
        return len(self._graphed)

    def _use_graph(self, x: torch.Tensor) -> bool:
        return self.enabled and torch.is_grad_enabled() and self.model.training and x.is_cuda

    def _graph(self, name: str, wrapper: type[nn.Module], x: torch.Tensor) -> Callable:
        key = (name, tuple(x.shape))
        graphed = self._graphed.get(key)
        if graphed is None:
            sample = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
            # The policy's log std is a parameter of the actor that its forward does not use.
            graphed = torch.cuda.make_graphed_callables(wrapper(self.model), (sample,), allow_unused_input=True)
            self._graphed[key] = graphed
        return graphed
