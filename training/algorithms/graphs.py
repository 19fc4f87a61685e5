"""The networks' forward and backward passes of a minibatch step as CUDA graphs.

On a GPU, a minibatch step of these small networks is paced by the host issuing kernels (an
H100 update measured 37 ms of kernels in 133 ms), so every operation the host issues costs
time whether the GPU is busy or not. Captured with ``torch.cuda.make_graphed_callables``, the
actor's forward and backward and those of all critics together are one graph launch each,
for PPO and every constrained algorithm alike; the losses stay eager (they differ by algorithm,
and CRPO's switch reads a value on the host).

PyTorch warns once per process that an AccumulateGrad node's stream differs from the backward
pass's: the parameters' gradient accumulators are created during the capture, on its side
stream. Creating them beforehand on the default stream, as the warning suggests, makes the
capture itself fail on CUDA 13 (the captured backward pass would depend on the legacy stream;
seen on an H100), so the warning stays; the update matches the eager one (tested on a GPU).

One capture per network and minibatch size, made on first use (a few warm-up passes). The
graphs read the parameters and the normalizer statistics where they are, so in-place updates
(the optimizer, ``load_state_dict``, the normalizer update) need no new capture. Without
gradients (rollouts), on a CPU or with ``enabled=False`` the modules run as they are.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from training.networks import ActorCritic, CostCritics, ValueCritic, critic_values


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

    def forward(self, critic_obs: torch.Tensor) -> torch.Tensor:
        return all_critic_values(self.critic, self.cost_critics, critic_obs)


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

    def critics(self, critic_obs: torch.Tensor) -> torch.Tensor:
        """[B, 1 + G]: the reward critic's value, then every cost critic's."""
        if not self._use_graph(critic_obs):
            return all_critic_values(self.model.critic, self.model.cost_critics, critic_obs)
        return self._graph("critics", _CriticValues, critic_obs)(critic_obs)

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


def all_critic_values(critic: ValueCritic, cost_critics: CostCritics, critic_obs: torch.Tensor) -> torch.Tensor:
    """[B, 1 + G]: reward value and cost values side by side, as the value losses take them
    (joined inside the graph, so the join costs the host nothing)."""
    values, cost_values = critic_values(critic, cost_critics, critic_obs)
    if not len(cost_critics):
        return values.unsqueeze(-1)
    return torch.cat([values.unsqueeze(-1), cost_values], dim=-1)
