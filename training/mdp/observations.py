"""Observation terms and their assembly into the vector described by an ObservationLayout.

Each term's raw value is computed here from batched state; the layout (written into the task
config and the policy's metadata) says the order, and each term's clip and scale:
``value = clip(raw + noise, -clip, clip) * scale``. Noise is uniform in [-n, n], in the raw
term's units, as legged_gym adds it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from aow_policy.layout import ObservationLayout
from training.mdp.math import quat_rotate_inverse, yaw_rotate_xy

GRAVITY_DIRECTION = (0.0, 0.0, -1.0)


def projected_gravity(base_quat: torch.Tensor) -> torch.Tensor:
    """Unit gravity vector in the base frame, [N, 3]."""
    g = base_quat.new_tensor(GRAVITY_DIRECTION).expand(base_quat.shape[0], 3)
    return quat_rotate_inverse(base_quat, g)


def scan_points_world(base_pos: torch.Tensor, base_yaw: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """World (x, y) of the height-scan grid [P, 2] rotated by base yaw only: [N, P, 2]."""
    return yaw_rotate_xy(base_yaw, points) + base_pos[:, None, :2]


def scan_points_world_xy(
    base_pos: torch.Tensor, base_yaw: torch.Tensor, points: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same points as separate world x and y [N, P] (no stacking: cheaper for lookups)."""
    c, s = torch.cos(base_yaw)[:, None], torch.sin(base_yaw)[:, None]
    px, py = points[:, 0], points[:, 1]
    x = c * px - s * py + base_pos[:, 0:1]
    y = s * px + c * py + base_pos[:, 1:2]
    return x, y


def height_scan(base_z: torch.Tensor, terrain_heights: torch.Tensor, height_offset: float) -> torch.Tensor:
    """Raw scan: base_z - height_offset - h at each grid point, [N, P] (clip and scale follow)."""
    return base_z[:, None] - height_offset - terrain_heights


class ObservationAssembler:
    """Concatenates raw terms in layout order, adds noise, clips and scales in one pass."""

    def __init__(
        self,
        layout: ObservationLayout,
        noise: Mapping[str, float] | None = None,
        device: torch.device | str = "cpu",
    ):
        self.layout = layout
        dim = layout.dim
        scale = torch.ones(dim)
        noise_vec = torch.zeros(dim)
        noise = dict(noise or {})
        unknown = set(noise) - set(layout.names)
        if unknown:
            raise ValueError(f"observation noise given for terms not in the layout: {sorted(unknown)}")
        for term in layout.terms:
            scale[term.slice] = term.scale
            noise_vec[term.slice] = noise.get(term.name, 0.0)
        self.scale = scale.to(device)
        # Clipping per clipped term with scalar bounds: much cheaper than a full-width clamp.
        self.clips = [(term.slice, term.clip) for term in layout.terms if term.clip is not None]
        self.noise = noise_vec.to(device)
        self.has_noise = bool((noise_vec > 0).any())

    def __call__(
        self,
        raw_terms: Mapping[str, torch.Tensor],
        add_noise: bool = False,
        generator: torch.Generator | np.random.Generator | None = None,
    ) -> torch.Tensor:
        """The observation [N, dim]; ``generator`` draws the noise (a numpy one is several times
        faster than torch's on CPU for these sizes)."""
        parts = []
        for term in self.layout.terms:
            value = raw_terms[term.name]
            if value.shape[-1] != term.size:
                raise ValueError(f"observation term {term.name!r}: expected size {term.size}, got {value.shape[-1]}")
            parts.append(value)
        obs = torch.cat(parts, dim=-1)
        if add_noise and self.has_noise:
            if isinstance(generator, np.random.Generator):
                uniform = torch.from_numpy(generator.random(tuple(obs.shape), dtype=np.float32)).to(obs.device)
            else:
                uniform = torch.rand(obs.shape, generator=generator, device=obs.device, dtype=obs.dtype)
            obs = obs + (2.0 * uniform - 1.0) * self.noise
        for cols, clip in self.clips:
            obs[:, cols] = obs[:, cols].clamp(-clip, clip)
        return obs * self.scale
