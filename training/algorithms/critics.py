"""Evaluate the reward critic and all cost critics together in one autograd graph.

The reward critic and the cost critics all read the same normalized critic observation, so
their first layers (the height-scan encoders' first layers, or the first body layers without a
scan) run as one wide matrix product with their weights concatenated; the normalization and
the scan/proprioception split are done once. Two modes for the rest:

- ``"wide"`` (default on CPU): each critic continues on its slice; on CPU the matmuls are
  compute-bound and this measured fastest.
- ``"batched"`` (default on CUDA): the G cost critics' later layers run as batched matmuls over
  stacked weights, so the number of kernels does not grow with G (launch-bound on GPUs).

Both give the numbers of ``model.critic(obs)`` and ``model.cost_values(obs)`` (same parameters,
same operations up to float rounding). Concatenated/stacked weights are built per call, so the
module layout, the optimizer and the checkpoints are untouched.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from training.networks import ActorCritic, ScanTrunk


def _linears(seq: nn.Module) -> list[nn.Linear]:
    return [m for m in seq.modules() if isinstance(m, nn.Linear)]


def _elu_only(seq: nn.Sequential) -> bool:
    return all(isinstance(m, (nn.Linear, nn.ELU)) for m in seq)


class CriticEvaluator:
    """``evaluator(critic_obs) -> (values [B], cost_values [B, G])``."""

    def __init__(self, model: ActorCritic, mode: str | None = None):
        self.model = model
        self.num_groups = len(model.cost_critics)
        if mode is None:
            mode = "batched" if next(model.parameters()).is_cuda else "wide"
        if mode not in ("wide", "batched", "separate"):
            raise ValueError(f"critic evaluation mode must be 'wide', 'batched' or 'separate', got {mode!r}")
        self.fused = mode != "separate" and self.num_groups > 0 and self._fusable()
        self.mode = mode if self.fused else "separate"

    def _fusable(self) -> bool:
        rt: ScanTrunk = self.model.critic.trunk
        trunks: list[ScanTrunk] = [c.trunk for c in self.model.cost_critics]
        if not all(_elu_only(t.body) for t in [rt, *trunks]):
            return False
        first_in = {_linears(t.body)[0].in_features for t in [rt, *trunks]}
        if len(first_in) != 1:
            return False
        if rt.encoder is None:
            return all(t.encoder is None for t in trunks)
        if any(t.encoder is None or not _elu_only(t.encoder) for t in trunks) or not _elu_only(rt.encoder):
            return False
        shapes = {tuple(tuple(lin.weight.shape) for lin in _linears(t.encoder)) for t in [rt, *trunks]}
        return len(shapes) == 1 and all(torch.equal(t.scan_idx, rt.scan_idx) for t in trunks)

    def __call__(self, critic_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.mode == "separate":
            return self.model.critic(critic_obs), self.model.cost_values(critic_obs)
        if self.mode == "wide":
            return self._wide(critic_obs)
        return self._batched(critic_obs)

    def _wide(self, critic_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        model = self.model
        x = model.critic.normalizer(critic_obs)
        rt: ScanTrunk = model.critic.trunk
        trunks = [rt, *(c.trunk for c in model.cost_critics)]
        if rt.encoder is not None:
            proprio = x.index_select(-1, rt.proprio_idx)
            enc_layers = [_linears(t.encoder) for t in trunks]
            w = torch.cat([layers[0].weight for layers in enc_layers])
            b = torch.cat([layers[0].bias for layers in enc_layers])
            first = F.elu(F.linear(x.index_select(-1, rt.scan_idx), w, b))
            outs = []
            for layers, h, t in zip(enc_layers, first.split(enc_layers[0][0].out_features, dim=1), trunks, strict=True):
                for lin in layers[1:]:
                    h = F.elu(lin(h))
                outs.append(t.body(torch.cat([proprio, h], dim=-1)))
        else:
            firsts = [_linears(t.body)[0] for t in trunks]
            w = torch.cat([lin.weight for lin in firsts])
            b = torch.cat([lin.bias for lin in firsts])
            pre = F.elu(F.linear(x, w, b)).split([lin.out_features for lin in firsts], dim=1)
            outs = [t.body[2:](h) for h, t in zip(pre, trunks, strict=True)]
        values = model.critic.head(outs[0]).squeeze(-1)
        cost_values = torch.cat([c.head(h) for c, h in zip(model.cost_critics, outs[1:], strict=True)], dim=-1)
        return values, F.softplus(cost_values)

    def _batched(self, critic_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        model = self.model
        G, B = self.num_groups, critic_obs.shape[0]
        x = model.critic.normalizer(critic_obs)
        rt: ScanTrunk = model.critic.trunk
        trunks = [rt, *(c.trunk for c in model.cost_critics)]
        firsts = [_linears(t.body)[0] for t in trunks]
        h_r = firsts[0].out_features
        h_c = firsts[1].out_features

        if rt.encoder is not None:
            proprio = x.index_select(-1, rt.proprio_idx)
            scan = x.index_select(-1, rt.scan_idx)
            enc_layers = [_linears(t.encoder) for t in trunks]
            width = enc_layers[0][0].out_features
            w = torch.cat([layers[0].weight for layers in enc_layers])
            b = torch.cat([layers[0].bias for layers in enc_layers])
            enc = F.elu(F.linear(scan, w, b)).view(B, G + 1, width).transpose(0, 1)  # [G+1, B, width]
            for k in range(1, len(enc_layers[0])):
                w = torch.stack([layers[k].weight for layers in enc_layers]).transpose(1, 2)
                b = torch.stack([layers[k].bias for layers in enc_layers]).unsqueeze(1)
                enc = F.elu(torch.baddbmm(b, enc, w))
            p = proprio.shape[-1]
            w = torch.cat([lin.weight[:, :p] for lin in firsts])
            b = torch.cat([lin.bias for lin in firsts])
            pre = F.linear(proprio, w, b)  # [B, h_r + G * h_c]
            hidden_r = pre[:, :h_r] + enc[0] @ firsts[0].weight[:, p:].t()
            w = torch.stack([lin.weight[:, p:] for lin in firsts[1:]]).transpose(1, 2)  # [G, enc, h_c]
            pre_c = pre[:, h_r:].reshape(B, G, h_c).transpose(0, 1)
            hidden_c = torch.baddbmm(pre_c, enc[1:], w)
        else:
            w = torch.cat([lin.weight for lin in firsts])
            b = torch.cat([lin.bias for lin in firsts])
            pre = F.linear(x, w, b)
            hidden_r = pre[:, :h_r]
            hidden_c = pre[:, h_r:].reshape(B, G, h_c).transpose(0, 1)

        hidden_r = F.elu(hidden_r)
        for lin in _linears(rt.body)[1:]:
            hidden_r = F.elu(lin(hidden_r))
        values = model.critic.head(hidden_r).squeeze(-1)

        hidden_c = F.elu(hidden_c)
        cost_layers = [_linears(t.body)[1:] for t in trunks[1:]]
        for k in range(len(cost_layers[0])):
            w = torch.stack([layers[k].weight for layers in cost_layers]).transpose(1, 2)
            b = torch.stack([layers[k].bias for layers in cost_layers]).unsqueeze(1)
            hidden_c = F.elu(torch.baddbmm(b, hidden_c, w))
        heads = [c.head for c in model.cost_critics]
        w = torch.stack([h.weight for h in heads]).transpose(1, 2)  # [G, h, 1]
        b = torch.stack([h.bias for h in heads]).unsqueeze(1)  # [G, 1, 1]
        cost_values = F.softplus(torch.baddbmm(b, hidden_c, w)).squeeze(-1).t()  # [B, G]
        return values, cost_values
