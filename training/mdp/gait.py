"""Foot air time: the bookkeeping behind legged_gym's ``feet_air_time`` reward, as pure functions.

A foot (a wheel, on the wheeled robot) is in contact when its contact count is positive. As in
legged_gym, a contact is taken as the OR of this step's and the previous step's reading (the
simulator's contact flickers for a step on touch-down), air time counts policy periods without
contact, and a foot *lands* on the first contact after some air time. The reward pays
``air_time - target`` for each landing foot: steps longer than ``target`` earn, shorter ones
cost, a foot that never lifts gives nothing. Whether it is paid at all depends on the command
(:func:`air_time_gate`): rolling forward does not need steps, walking sideways does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AirTimeUpdate:
    air_time: torch.Tensor  # [N, L] s in the air after this step (0 for feet in contact)
    landed_air_time: torch.Tensor  # [N, L] air time of the feet that landed this step, else 0
    last_contact: torch.Tensor  # [N, L] bool: this step's raw contact (the next step's "previous")


def update_air_time(
    air_time: torch.Tensor, last_contact: torch.Tensor, contact_counts: torch.Tensor, dt: float
) -> AirTimeUpdate:
    """One policy step of air-time bookkeeping (legged_gym's order of operations).

    ``air_time`` [N, L] before the step, ``last_contact`` [N, L] bool (the previous step's raw
    contact), ``contact_counts`` [N, L] this step's contact counts, ``dt`` the policy period.
    """
    contact = contact_counts > 0
    filtered = contact | last_contact
    grown = air_time + dt
    landed = (air_time > 0) & filtered
    return AirTimeUpdate(
        air_time=torch.where(filtered, torch.zeros_like(grown), grown),
        landed_air_time=torch.where(landed, grown, torch.zeros_like(grown)),
        last_contact=contact,
    )


def feet_air_time(landed_air_time: torch.Tensor, target: float, gate: torch.Tensor) -> torch.Tensor:
    """sum over landing feet of (air time - target), where ``gate`` [N] (bool) is set; [N]."""
    landed = landed_air_time > 0
    per_foot = torch.where(landed, landed_air_time - target, torch.zeros_like(landed_air_time))
    return per_foot.sum(-1) * gate.to(per_foot.dtype)


AIR_TIME_GATES = ("command", "stepping", "moving")


def air_time_gate(commands: torch.Tensor, mode: str, threshold: float = 0.1) -> torch.Tensor:
    """Which robots are paid for steps, from their commands [N, >=3] (vx, vy, yaw rate).

    ``command``: any horizontal command above ``threshold`` (legged_gym: |v_xy| > 0.1), for a
    robot that must walk to move. ``stepping``: a command that wheels cannot follow by rolling
    straight: sideways (|vy| > threshold) or turning (|yaw rate| > threshold); rolling forward or
    backward is left to the wheels. ``moving``: either, any command but standing still
    (legged_gym's gate leaves turning on the spot unpaid, and the wheeled robot, which can only
    turn on grippy ground by stepping, then never learned to turn: issue 23).
    """
    if mode == "command":
        return commands[:, :2].norm(dim=-1) > threshold
    if mode == "moving":
        return (commands[:, :2].norm(dim=-1) > threshold) | (commands[:, 2].abs() > threshold)
    if mode == "stepping":
        return (commands[:, 1].abs() > threshold) | (commands[:, 2].abs() > threshold)
    raise ValueError(f"air-time gate: expected one of {AIR_TIME_GATES}, got {mode!r}")
