"""Start a height-scan (perceptive) policy from a blind one: ``aow-train --init-from`` across tasks.

A rough-terrain task observes what a flat task does plus the 187-point height scan. Its networks
(:mod:`training.networks`) are the flat ones with a scan encoder whose features are concatenated
after the proprioception. :func:`add_height_scan` makes a blind checkpoint's weights fit them so
that the grown networks compute **exactly** what the blind ones did, whatever the scan reads:

* every weight of the same shape is copied (hidden layers, heads, the action log-std);
* the first body layer's columns for the proprioception are the blind layer's, the columns for
  the scan features are zero: the scan starts with no say, and the gradient gives it one;
* the scan encoders keep the model's own fresh initialization (their output is multiplied by
  those zero columns, so it changes nothing at the start, and their gradient is not zero once
  the columns move);
* the observation normalizers keep the blind statistics for the proprioception and start the scan
  at mean 0, variance 1 (heights in metres: normalized values near the raw ones); the running
  count is the blind one, so the scan's statistics move in as slowly as the others';
* the cost critics are mapped the same way, layer by layer, when the cost groups are the same.

Why: a policy that already walks in every direction on flat ground only has to learn where to put
its feet on terrain, instead of learning to walk and to read terrain at once (measured in
docs/locomotion.md). The proprioceptive terms must be the same, in the same order and sizes;
otherwise the transfer is refused with the difference named.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from aow_policy.layout import ObservationLayout
from training.networks import ActorCritic, CostCritics

SCAN = "height_scan"


class ScanTransferError(ValueError):
    """The blind checkpoint cannot be grown into these networks (the message says why)."""


def needs_height_scan(source: Mapping[str, ObservationLayout], target: Mapping[str, ObservationLayout]) -> bool:
    """Whether the target observes a height scan that the source does not (policy or critic)."""
    return any(target[k].has(SCAN) and not source[k].has(SCAN) for k in ("policy", "critic"))


def _proprio_terms(layout: ObservationLayout) -> list[tuple[str, int]]:
    return [(t.name, t.size) for t in layout.terms if t.name != SCAN]


def _check_same_proprioception(source: ObservationLayout, target: ObservationLayout, which: str) -> None:
    theirs, ours = _proprio_terms(source), _proprio_terms(target)
    if theirs != ours:
        raise ScanTransferError(
            f"the {which} observation without its height scan differs from the checkpoint's: "
            f"checkpoint {theirs}, this task {ours}"
        )
    if source.has(SCAN):
        raise ScanTransferError(f"the checkpoint's {which} observation has a height scan already")


def _grow_trunk(state: dict, own: dict, prefix: str, proprio_dim: int) -> None:
    """``prefix``.normalizer and ``prefix``.trunk.body.0 of one network (actor or critic), in place."""
    weight = f"{prefix}.trunk.body.0.weight"
    expected = (own[weight].shape[0], proprio_dim)
    if weight not in state or tuple(state[weight].shape) != expected:
        found = tuple(state[weight].shape) if weight in state else "none"
        raise ScanTransferError(f"its networks do not fit this task: {weight} is {found}, a blind {expected} fits")
    grown = torch.zeros_like(own[weight])
    grown[:, :proprio_dim] = state[weight]  # the body reads [proprioception, scan features]
    state[weight] = grown
    for name in ("mean", "var"):
        key = f"{prefix}.normalizer.{name}"
        if key in own:
            stats = own[key].clone()  # fresh: mean 0, var 1
            stats[: state[key].numel()] = state[key]  # the scan is the last term (checked by the caller)
            state[key] = stats
    for key in own:
        if key.startswith(f"{prefix}.trunk.encoder."):
            state[key] = own[key]


def _grow_cost_critics(params: torch.Tensor, critics: CostCritics, proprio_dim: int) -> torch.Tensor:
    """The blind cost critics' [G, P] parameters laid into the perceptive critics' [G, P']."""
    grown = critics.params.detach().clone()
    sizes = critics.layer_sizes[critics.num_encoder_layers :]
    blind_sizes = [(proprio_dim, sizes[0][1]), *sizes[1:]]
    if params.shape[1] != sum(i * o + o for i, o in blind_sizes):
        raise ScanTransferError(
            f"the checkpoint's cost critics have {params.shape[1]} parameters per group, "
            f"blind critics of this shape would have {sum(i * o + o for i, o in blind_sizes)}"
        )
    start = 0
    targets = critics.layers(grown)[critics.num_encoder_layers :]
    for k, ((i, o), (w, b)) in enumerate(zip(blind_sizes, targets, strict=True)):
        blind_w = params[:, start : start + i * o].view(-1, i, o)
        blind_b = params[:, start + i * o : start + i * o + o].view(-1, 1, o)
        start += i * o + o
        if k == 0:
            w.zero_()
            w[:, :proprio_dim, :] = blind_w
        else:
            w.copy_(blind_w)
        b.copy_(blind_b)
    return grown


def add_height_scan(
    state: Mapping[str, torch.Tensor],
    source: Mapping[str, ObservationLayout],
    target: Mapping[str, ObservationLayout],
    model: ActorCritic,
) -> dict[str, torch.Tensor]:
    """A blind model's state dict grown to fit ``model``, which adds a height scan (module docstring).

    ``source`` / ``target``: the checkpoint's and this task's observation layouts (keys "policy"
    and "critic"). The cost critics are grown where the checkpoint has them with as many groups;
    the caller decides whether the groups are the same ones."""
    own = model.state_dict()
    grown = dict(state)
    for which, prefix in (("policy", "actor"), ("critic", "critic")):
        src, dst = source[which], target[which]
        if not dst.has(SCAN):
            continue
        _check_same_proprioception(src, dst, which)
        if dst.terms[-1].name != SCAN:
            raise ScanTransferError(f"the {which} observation's height scan must be its last term")
        _grow_trunk(grown, own, prefix, src.dim)
    # A symmetric actor's mirror maps the grown observation: the model's own (the runner sets it).
    grown.update({k: own[k] for k in own if k.startswith("actor.mirror_")})
    # Cost critics of another group count are left as they are: the caller starts those fresh.
    key = "cost_critics.params"
    if key in grown and key in own and grown[key].shape[0] == own[key].shape[0] and target["critic"].has(SCAN):
        grown[key] = _grow_cost_critics(grown[key], model.cost_critics, source["critic"].dim)
    return grown
