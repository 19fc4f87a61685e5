"""The terrain course of issue 16: its heights and the blanked map.

Heights are read from the compiled model (the surface the robot touches and the map is cut from),
so "0.15 m" holds to the height field's float32 precision, not to the generator's float64 array.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore
from test_sim2sim import ROBOT

from aow_policy.heightmap import height_scan
from aow_policy.messages import MessageFactory, grid_map_layer
from sim2sim.course import COURSE_SEED, CourseConfig, generate_course
from sim2sim.hardware import RobotCentredMap
from sim2sim.world import build_world

F = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))


@pytest.fixture(scope="module")
def course_world():
    world = build_world(ROBOT, "course", physics_dt=1.0 / 400.0)
    assert world.course is not None and world.course.seed == COURSE_SEED  # the course's own default seed
    return world


def float_tolerance(world) -> float:
    """One float32 step of the height field's normalised samples, in metres."""
    span = float(world.model.hfield_size[0][2])
    return span * 2.0**-23


# ---- the course's heights ----------------------------------------------------------------------


def test_slopes_rise_and_fall_at_a_quarter_and_the_plateau_is_their_rise(course_world):
    course, h, tol = course_world.course, course_world.heights, float_tolerance(course_world)
    for name, sign in (("slope_up", 1.0), ("slope_down", -1.0)):
        s = course.section(name)
        for y in (-1.0, 0.0, 0.7):
            x1, x2 = s.x_start + 0.25 * s.length, s.x_start + 0.75 * s.length
            rise = float(h(x2, y) - h(x1, y))
            assert rise / (x2 - x1) == pytest.approx(sign * 0.25, abs=tol), (name, y)
    plateau = course.section("plateau")
    assert float(h(0.5 * (plateau.x_start + plateau.x_end), 0.0)) == pytest.approx(0.5, abs=tol)
    assert float(h(course.section("flat_1").x_start + 0.5, 0.0)) == pytest.approx(0.0, abs=tol)


def test_stairs_have_15_cm_risers_with_edges_one_sample_wide(course_world):
    course, h, tol = course_world.course, course_world.heights, float_tolerance(course_world)
    res, tread = course.resolution, course.config.step_width
    for name, sign, base in (("stairs_up", 1.0, 0.0), ("stairs_down", -1.0, 0.6)):
        s = course.section(name)
        centres = s.x_start + tread * (np.arange(4) + 0.5)
        treads = np.array([float(h(x, 0.3)) for x in centres])
        np.testing.assert_allclose(treads, base + sign * 0.15 * np.arange(1, 5), atol=tol)
        for k in range(4):  # each riser: the low level one sample before it, the high one on it
            riser = s.x_start + k * tread
            before, on = float(h(riser - res, 0.0)), float(h(riser, 0.0))
            assert on - before == pytest.approx(sign * 0.15, abs=2 * tol), (name, k)
    landing = course.section("landing")
    assert float(h(landing.x_start + 0.7, -0.5)) == pytest.approx(0.6, abs=tol)


def test_blocks_are_ten_cm_up_or_down_from_the_ground_around_them(course_world):
    course, h, tol = course_world.course, course_world.heights, float_tolerance(course_world)
    s = course.section("blocks")
    res = course.resolution
    xs = np.arange(s.x_start, s.x_end + res / 2, res)
    ys = np.arange(-2.0, 2.0 + res / 2, res)
    field = h(xs[:, None], ys[None, :])  # at the samples: exactly the stored heights
    nearest = np.array([-0.1, 0.0, 0.1])[np.argmin(abs(field[..., None] - np.array([-0.1, 0.0, 0.1])), axis=-1)]
    assert np.max(abs(field - nearest)) <= tol
    assert {-0.1, 0.1} <= set(np.unique(nearest).tolist())
    around = [course.section("flat_2").x_end - 0.5, course.section("run_out").x_start + 0.5]
    assert np.max(abs(h(np.array(around), 0.0))) <= tol  # the surrounding ground is at 0
    on_line = np.round(field[:, np.argmin(abs(ys))] / 0.1)
    assert np.count_nonzero(np.diff(on_line)) >= 3  # the line crosses block edges


def test_course_is_reproducible_per_seed_and_differs_between_seeds():
    a, b, other = generate_course(seed=COURSE_SEED), generate_course(seed=COURSE_SEED), generate_course(seed=7)
    np.testing.assert_array_equal(a.heights, b.heights)
    blocks = a.section("blocks")
    i0 = round((blocks.x_start - a.x0) / a.resolution)
    i1 = round((blocks.x_end - a.x0) / a.resolution)
    assert not np.array_equal(a.heights[i0 : i1 + 1], other.heights[i0 : i1 + 1])
    np.testing.assert_array_equal(a.heights[:i0], other.heights[:i0])  # the seed moves the blocks only
    np.testing.assert_array_equal(a.heights[i1 + 1 :], other.heights[i1 + 1 :])


def test_sections_tile_the_strip_and_name_every_point():
    course = generate_course()
    s = course.sections
    assert [x.name for x in s][:3] == ["lead_in", "slope_up", "plateau"] and s[-1].name == "run_out"
    assert all(a.x_end == b.x_start for a, b in itertools.pairwise(s))
    assert s[0].x_start == pytest.approx(course.x0) and s[-1].x_end == pytest.approx(-course.x0)
    assert course.section_at(s[5].x_start) == s[5].name and course.section_at(s[5].x_start - 1e-6) == s[4].name
    assert course.start == (s[0].x_start + 1.0, 0.0) and course.finish_x == s[-1].x_start + 1.0
    assert course.length == pytest.approx(23.4) and course.first_obstacle_x == s[1].x_start
    assert json.loads(json.dumps(course.describe()))["sections"][5] == {
        "name": "stairs_up",
        "kind": "stairs_up",
        "x_start": s[5].x_start,
        "x_end": s[5].x_end,
    }
    with pytest.raises(ValueError, match="flat section"):
        generate_course(CourseConfig(spawn=6.0))  # on the slope
    with pytest.raises(ValueError, match="multiple of the resolution"):
        generate_course(CourseConfig(step_width=0.31))


# ---- the blanked map -------------------------------------------------------------------------


def test_blank_map_is_flat_and_valid_while_the_terrain_map_shows_the_stairs(course_world):
    course, h = course_world.course, course_world.heights
    x, y = course.section("stairs_up").x_start + 0.45, 0.1  # on the second tread, 0.30 m up
    messages = {
        blank: RobotCentredMap(h, 3.0, 0.05, blank=blank).message(F, x, y, stamp=1.0, frame_id="odom")
        for blank in (False, True)
    }
    terrain, flat = (grid_map_layer(messages[b]).to_unwrapped() for b in (False, True))
    assert terrain.shape == flat.shape == (60, 60)
    assert np.all(np.isfinite(flat)) and np.all(flat == flat[0, 0])
    assert flat[0, 0] == pytest.approx(0.30, abs=1e-6)  # the ground under the base
    assert terrain.max() - terrain.min() == pytest.approx(0.6, abs=1e-6)  # the flat below to the landing
    scan_flat = height_scan(messages[True], (x, y, 0.9), 0.2, ROBOT, min_valid_fraction=1.0)
    scan_terrain = height_scan(messages[False], (x, y, 0.9), 0.2, ROBOT, min_valid_fraction=1.0)
    assert np.all(scan_flat == np.float32(0.30)) and np.ptp(scan_terrain) > 0.4
