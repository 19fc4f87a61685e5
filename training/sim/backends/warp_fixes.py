"""A fix to MuJoCo Warp 4.0.0's height-field collision, applied by the MuJoCo Warp backend.

Measured here (``aow_rough`` on warp's CPU device, 64 worlds x 800 physics steps, robots driving
the shipped flat-ground policy on every sub-terrain type): 46 wheel and shank contacts with the
terrain 1-17 cm deep whose normal pointed straight down (0.09 % of world physics steps; no
overflow bit reports them). C MuJoCo, from one such state, reports a 4.4 mm contact up and a
0.9 mm side contact with the same prisms. Each pushes the wheel into the ground with a spring as
deep as the error for a physics step: the leg is kicked (0.5 rad of hip flexion in the case
traced, the base 4.8 cm lower than C MuJoCo's a second later) and the wheel sinks, which a
policy can learn to use. With this fix no wheel contact deeper than 5 mm pointed down in the same
run (shallower ones, rounding noise at ~zero depth, remain); the shank tubes (capsules) still get
deep ones from another path, which the backend drops and counts
(``mujoco_warp._contact_filter_kernel``).

The cause is ``collision_gjk._epa_witness``: when the EPA face closest to the origin spans
several prism vertices, it replaces EPA's witness points, and for geoms other than spheres and
capsules it takes the support point of the geom in the direction of its *position*
(``normalize(x2)``: a point in the height field's frame, not a direction) and projects it onto
the prism's top plane, so the depth is the height of an arbitrary point of the geom above that
plane and the normal points down. The replacement keeps EPA's own witness points (barycentric on
the closest face, as for every other convex pair): the minimal translation out of that prism, up
through its top or sideways through a wall, which is what C MuJoCo's contact matches.

This module has no ``from __future__ import annotations``: warp reads the function's annotations
as objects.
"""

import hashlib
import inspect
import warnings
from functools import cache

import mujoco_warp
import warp as wp
from mujoco_warp._src import collision_gjk
from mujoco_warp._src.collision_core import Geom
from mujoco_warp._src.collision_gjk import Polytope, _get_face_verts, _tri_affine_coord

# The MuJoCo Warp version whose _epa_witness this replaces, and the hash of that function's
# source: a newer version may have fixed it differently, and then nothing is replaced.
WITNESS_FIX_VERSION = "4.0.0"
WITNESS_SOURCE_SHA256 = "26442ae131b72543"


@wp.func
def _epa_witness(
    pt: Polytope, geom1: Geom, geom2: Geom, geomtype1: int, geomtype2: int, face_idx: int
) -> tuple[wp.vec3, wp.vec3, float]:
    """MuJoCo Warp's _epa_witness without the height-field branch: the general branch, where
    polytope vertex 2k is on geom 1 and 2k + 1 on geom 2."""
    face = _get_face_verts(pt.face[face_idx])
    v1 = pt.vert[2 * face[0]] - pt.vert[2 * face[0] + 1]
    v2 = pt.vert[2 * face[1]] - pt.vert[2 * face[1] + 1]
    v3 = pt.vert[2 * face[2]] - pt.vert[2 * face[2] + 1]
    w = _tri_affine_coord(v1, v2, v3, pt.face_pr[face_idx])
    x1 = w[0] * pt.vert[2 * face[0]] + w[1] * pt.vert[2 * face[1]] + w[2] * pt.vert[2 * face[2]]
    x2 = w[0] * pt.vert[2 * face[0] + 1] + w[1] * pt.vert[2 * face[1] + 1] + w[2] * pt.vert[2 * face[2] + 1]
    return x1, x2, -wp.sqrt(pt.face_norm2[face_idx])


@cache
def fix_height_field_witness() -> bool:
    """Replace MuJoCo Warp's ``_epa_witness`` if it is the code checked here; whether it was.

    Call before any MuJoCo Warp kernel is built in the process: warp resolves the functions a
    kernel calls when it generates the kernel's code (the backend calls it in its constructor).
    """
    source = inspect.getsource(collision_gjk._epa_witness.func)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    if mujoco_warp.__version__ != WITNESS_FIX_VERSION or digest != WITNESS_SOURCE_SHA256:
        warnings.warn(
            f"mujoco_warp {mujoco_warp.__version__}: its EPA witness code is not the one this fix was "
            f"checked against (mujoco_warp {WITNESS_FIX_VERSION}), so it is left alone; "
            "sim_stats['contacts_into_terrain'] shows whether height-field contacts point into the terrain",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    collision_gjk._epa_witness = _epa_witness
    return True
