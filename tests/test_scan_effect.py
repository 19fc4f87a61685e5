"""sim2sim.scan_effect: the map's effect counted over course drives, with a one-sided exact test.

The p-values are hand-computed from the hypergeometric tail: with n drives per mode, K passes in
all and b of them blanked, p = sum over k <= b of C(K, k) C(2n - K, n - k) / C(2n, n).
"""

from __future__ import annotations

import json
from math import comb

import pytest

from sim2sim import scan_effect as se


@pytest.mark.parametrize(
    ("map_passes", "blank_passes", "n", "expected"),
    [
        (6, 0, 6, 1 / comb(12, 6)),  # 1/924: no blanked pass can be rarer
        (6, 3, 6, comb(9, 3) / comb(12, 6)),  # 84/924 = 0.091: only k = 3 is possible with 9 passes
        (5, 5, 6, (comb(10, 4) * comb(2, 2) + comb(10, 5) * comb(2, 1)) / comb(12, 6)),  # 714/924
        (7, 7, 7, 1.0),  # every drive passes both ways: nothing to tell
        (0, 0, 7, 1.0),  # none passes either way
        (3, 5, 6, 1 - sum(comb(8, k) * comb(4, 6 - k) for k in (6,)) / comb(12, 6)),  # blanked better
    ],
)
def test_one_sided_exact_p_is_the_hypergeometric_tail(map_passes, blank_passes, n, expected):
    assert se.one_sided_exact_p(map_passes, n, blank_passes, n) == pytest.approx(expected, rel=1e-12)


def test_one_sided_exact_p_with_unequal_drive_counts():
    # 3 of 3 with the map, 0 of 5 blanked: K = 3 passes among 8 drives, P(all 3 in the map's 3) = 1/C(8,3).
    assert se.one_sided_exact_p(3, 3, 0, 5) == pytest.approx(1 / comb(8, 3))


@pytest.mark.parametrize(("args", "words"), [((7, 6, 0, 6), "map: 7 passes of 6"), ((1, 2, 0, 0), "blank: 0 passes")])
def test_one_sided_exact_p_refuses_what_is_not_a_count(args, words):
    with pytest.raises(ValueError, match=words):
        se.one_sided_exact_p(*args)


def _run(*, crossed: bool = True, mean_speed: float | None = 1.0, falls: int = 0, speed: float = 1.0) -> dict:
    """A course run as evaluation.json holds it (the fields map_run_checks reads)."""
    falls_list = [{"time": 3.0, "reason": "base contact", "x": 5.0, "section": "stairs_up"}] * falls
    return {"crossed": crossed, "mean_speed": mean_speed, "falls": falls_list, "speed": speed}


def _strip(speed: float, **runs: tuple[dict, dict]) -> dict:
    return {"speed": speed, "policies": {name: {"map": m, "blank": b} for name, (m, b) in runs.items()}}


def test_scan_effect_applies_the_map_run_checks_to_both_runs_and_pools_the_speeds():
    """'reads' passes every map run; blanked it is slow at 0.5 m/s (0.35 < 0.8 x 0.5), falls once and
    stalls at 1.0 m/s, and passes once at 1.0: 4 of 4 against 1 of 4. 'ignores' drives alike both ways."""
    ok, slow = _run(speed=0.5, mean_speed=0.48), _run(speed=0.5, mean_speed=0.35)
    strips = [
        _strip(0.5, reads=(ok, slow), ignores=(slow, slow)),
        _strip(0.5, reads=(ok, slow), ignores=(ok, ok)),
        _strip(1.0, reads=(_run(), _run(falls=1)), ignores=(_run(), _run())),
        _strip(1.0, reads=(_run(), _run(crossed=False, mean_speed=None)), ignores=(_run(), _run())),
    ]
    effect = se.scan_effect(strips)
    reads, ignores = effect["reads"], effect["ignores"]
    assert reads["per_speed"]["0.5"] == {"drives": 2, "map": 2, "blank": 0, "p": pytest.approx(1 / comb(4, 2))}
    assert reads["per_speed"]["1"] == {"drives": 2, "map": 2, "blank": 0, "p": pytest.approx(1 / 6)}
    assert list(reads["per_speed"]) == ["0.5", "1"]
    # Pooled: 4 of 4 against 0 of 4, p = 1 / C(8, 4) = 1/70 < 0.05.
    assert reads["all"] == {"drives": 4, "map": 4, "blank": 0, "p": pytest.approx(1 / 70)}
    assert reads["measurably_worse"] and reads["alpha"] == se.ALPHA
    assert ignores["all"] == {"drives": 4, "map": 3, "blank": 3, "p": pytest.approx(1 - comb(6, 4) * 1 / 70)}
    assert not ignores["measurably_worse"]


def test_scan_effect_needs_drives():
    with pytest.raises(ValueError, match="no course drives"):
        se.scan_effect([])


def test_markdown_names_the_verdict_per_policy():
    strips = [_strip(0.5, a=(_run(speed=0.5, mean_speed=0.5), _run(speed=0.5, crossed=False, mean_speed=None)))] * 5
    md = se.markdown(se.scan_effect(strips))
    # 5 of 5 against 0 of 5: p = 1 / C(10, 5) = 1/252 = 0.0040.
    assert "| a | 0.5 m/s | 5 | 5 | 0 | 0.004 |" in md
    assert "| a | **all speeds** | 5 | 5 | 0 | **0.004: measurably worse** |" in md


def test_course_drives_are_the_course_keys_only():
    strip = _strip(0.5, a=(_run(), _run()))
    evaluation = {
        "course_0.5_seed7_start1.2": strip,
        "course": strip,
        "block": strip,  # the block is its own experiment
        "course_bar_by_speed_start1": {"a": {}},
        "course_over_fields": {"a": {}},
        "policies": [],
    }
    assert se.course_drives(evaluation) == [strip, strip]


def test_cli_reads_evaluations_and_prints_one_json_line(tmp_path, capsys):
    good = tmp_path / "evaluation.json"
    good.write_text(
        json.dumps({f"course_{s:g}": _strip(s, a=(_run(speed=s), _run(speed=s, falls=1))) for s in (0.5, 1.0)})
    )
    out = tmp_path / "effect.md"
    assert se.main([str(good), "--json", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert json.loads(printed[-1])["a"]["all"]["map"] == 2
    assert "| a | **all speeds** | 2 | 2 | 0 |" in out.read_text()


@pytest.mark.parametrize(("text", "words"), [("{}", "no course drives"), ("not json", "cannot read an evaluation")])
def test_cli_names_a_file_it_cannot_use(tmp_path, capsys, text, words):
    bad = tmp_path / "evaluation.json"
    bad.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        se.main([str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert str(bad) in err and words in err


def test_cli_pools_evaluations_and_keeps_the_policies_asked_for(tmp_path, capsys):
    """Two evaluations of the same policy 'a' pool their drives; --policy leaves 'b' out."""
    paths = []
    for i in range(2):
        path = tmp_path / f"evaluation{i}.json"
        path.write_text(json.dumps({"course_1": _strip(1.0, a=(_run(), _run(falls=1)), b=(_run(), _run()))}))
        paths.append(str(path))
    assert se.main([*paths, "--policy", "a", "--json"]) == 0
    effect = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(effect) == ["a"] and effect["a"]["all"]["drives"] == 2 and effect["a"]["all"]["blank"] == 0
    with pytest.raises(SystemExit):
        se.main([*paths, "--policy", "c"])
    assert "--policy: no drives of c (the evaluations hold a, b)" in capsys.readouterr().err
