"""Tables, curves and slim per-run metrics for docs/benchmarks.md from the runs of run_hopper.sh
and run_walker2d_ant.sh.

    .venv/bin/python docs/benchmarks/report.py runs/bench_hopper docs/benchmarks/hopper
    .venv/bin/python docs/benchmarks/report.py runs/bench_walker2d docs/benchmarks/walker2d

Reads OUT/all (seven algorithms), OUT/np3o_adapt (N-P3O with kappa_adapt), OUT/np3o_kappa1,
OUT/ppo_lag_fast, and run_defaults.sh's OUT/defaults_noise03 and OUT/p3o_default as aow-compare left
them (whichever are there); unfinished runs are left out (and named).
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np

ALGOS = ["ppo", "p3o", "np3o", "ppo_lag", "nipo", "crpo", "focops"]
NAMES = {
    "ppo": "PPO (unconstrained)",
    "p3o": "P3O",
    "np3o": "N-P3O, paper's kappa schedule (kappa_adapt = 0)",
    "ppo_lag": "PPO-Lagrangian",
    "nipo": "N-IPO",
    "crpo": "CRPO",
    "focops": "FOCOPS",
    "np3o_adapt": "N-P3O, kappa_adapt = 0.05",
    "np3o_kappa1": "N-P3O, kappa held at 1",
    "ppo_lag_fast": "PPO-Lagrangian, lambda_lr = 0.035",
    "np3o_default_noise03": "N-P3O, defaults (kappa adapted), init_noise_std = 0.3",
    "p3o_default_noise03": "P3O, defaults (kappa adapted), init_noise_std = 0.3",
    "p3o_default": "P3O, defaults (kappa adapted)",
    "ppo_noise03": "PPO (unconstrained), init_noise_std = 0.3",
}
STEPS_PER_ITERATION = 32 * 64
# The runs' length (run_hopper.sh --iterations); a run trained further (N-P3O seed 0 was trained
# to 250 first) is cut here: its first 150 iterations are exactly a 150-iteration run.
ITERATIONS = 150
KEEP = (
    "iteration",
    "mean_reward",
    "mean_episode_length",
    "episode/cost/cost",
    "cost_rate/cost",
    "cost_return/cost",
    "cost_return_sampled/cost",
    "cost_limit/cost",
    "cost_return_per_episode/cost",
    "cost_adv_mean/cost",
    "cost_adv_std/cost",
    "violation_offset/cost",
    "violation_offset_raw/cost",
    "violation/cost",
    "violation_active/cost",
    "adv_corr/cost",
    "penalty",
    "penalty_share",
    "kappa",
    "kappa_eff/cost",
    "lambda/cost",
    "nu/cost",
    "reward_step",
    "satisfied_fraction",
    "action_std",
    "time/collection_s",
    "time/update_s",
)


def run_dirs(root: Path) -> dict[str, list[Path]]:
    out = {a: sorted((root / "all" / "runs").glob(f"{a}_s[0-9]")) for a in ALGOS}
    out["np3o_adapt"] = sorted((root / "np3o_adapt" / "runs").glob("np3o_s[0-9]"))
    out["np3o_kappa1"] = sorted((root / "np3o_kappa1" / "runs").glob("np3o_s[0-9]"))
    out["ppo_lag_fast"] = sorted((root / "ppo_lag_fast" / "runs").glob("ppo_lag_s[0-9]"))
    # run_defaults.sh (issue 21 item 2): the algorithms' own defaults, kappa adapted
    out["np3o_default_noise03"] = sorted((root / "defaults_noise03" / "runs").glob("np3o_s[0-9]"))
    out["p3o_default_noise03"] = sorted((root / "defaults_noise03" / "runs").glob("p3o_s[0-9]"))
    out["p3o_default"] = sorted((root / "p3o_default" / "runs").glob("p3o_s[0-9]"))
    out["ppo_noise03"] = sorted((root / "ppo_noise03" / "runs").glob("ppo_s[0-9]"))
    return out


def records(path: Path) -> list[dict]:
    f = path / "metrics.jsonl"
    recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.is_file() else []
    return recs[:ITERATIONS]


def final(recs: list[dict], key: str, window: int = 15, scale: float = 1.0) -> float:
    vals = [r[key] * scale for r in recs[-window:] if key in r and math.isfinite(r[key])]
    return float(np.mean(vals)) if vals else float("nan")


def smooth(values: list[float], window: int = 5) -> np.ndarray:
    """Trailing moving average over ``window`` iterations (NaNs, iterations without a finished
    episode, are skipped)."""
    v = np.asarray(values, dtype=float)
    out = np.full_like(v, np.nan)
    for i in range(len(v)):
        seg = v[max(0, i - window + 1) : i + 1]
        seg = seg[np.isfinite(seg)]
        if seg.size:
            out[i] = seg.mean()
    return out


def cell(vals: list[float], digits: int = 1) -> str:
    arr = np.asarray([v for v in vals if math.isfinite(v)])
    if arr.size == 0:
        return "n/a"
    std = arr.std(ddof=1) if arr.size > 1 else 0.0
    return f"{arr.mean():.{digits}f} ± {std:.{digits}f}"


def task_of(runs: dict[str, list[Path]]) -> str:
    """The Gymnasium id the runs trained on (from a run's saved config)."""
    import yaml

    for dirs in runs.values():
        for d in dirs:
            if (d / "config.yaml").is_file():
                return str(yaml.safe_load((d / "config.yaml").read_text())["task"]).removeprefix("gym:")
    raise SystemExit(f"no run with a config.yaml under {dirs}")


def main(root: Path, dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dest.mkdir(parents=True, exist_ok=True)
    dirs = run_dirs(root)
    task = task_of(dirs)
    runs = {k: [(d.name, records(d)) for d in v] for k, v in dirs.items()}
    unfinished = {k: [n for n, r in v if len(r) < ITERATIONS] for k, v in runs.items()}
    print("unfinished (left out):", {k: v for k, v in unfinished.items() if v})
    runs = {k: [(n, r) for n, r in v if len(r) >= ITERATIONS] for k, v in runs.items()}
    rows, summary = [], {}
    header = (
        "| algorithm | seeds (iterations) | return | cost per episode | episode length | "
        "cost per 1000 steps | J_C estimate / eps | sampled J_C / eps |"
    )
    rows += [header, "|---" * 8 + "|"]
    for key, items in runs.items():
        items = [(n, r) for n, r in items if r]
        if not items:
            continue
        cols = {
            "return": [final(r, "mean_reward") for _, r in items],
            "cost": [final(r, "episode/cost/cost") for _, r in items],
            "length": [final(r, "mean_episode_length") for _, r in items],
            "rate": [final(r, "cost_rate/cost", scale=1000.0) for _, r in items],
            "jc_eps": [final(r, "cost_return/cost") / final(r, "cost_limit/cost") for _, r in items],
            "sampled_eps": [final(r, "cost_return_sampled/cost") / final(r, "cost_limit/cost") for _, r in items],
        }
        summary[key] = {"runs": {n: len(r) for n, r in items}, **cols}
        its = ", ".join(str(len(r)) for _, r in items)
        rows.append(
            f"| {NAMES[key]} | {len(items)} ({its}) | {cell(cols['return'])} | {cell(cols['cost'])} | "
            f"{cell(cols['length'], 0)} | {cell(cols['rate'])} | {cell(cols['jc_eps'], 2)} | "
            f"{cell(cols['sampled_eps'], 2)} |"
        )
        for name, r in items:
            slim = [{k: v for k, v in rec.items() if k in KEEP} for rec in r]
            (dest / "metrics").mkdir(exist_ok=True)
            tag = key
            text = "".join(json.dumps(x) + "\n" for x in slim)
            (dest / "metrics" / f"{tag}_{name.rsplit('_', 1)[1]}.jsonl").write_text(text)
    (dest / "table.md").write_text("\n".join(rows) + "\n")
    (dest / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("\n".join(rows))

    curves = [
        ("mean_reward", "episode return", 1.0),
        ("episode/cost/cost", "cost per episode", 1.0),
        ("cost_rate/cost", "cost per 1000 steps (25 = the limit's rate)", 1000.0),
        ("mean_episode_length", "episode length (steps)", 1.0),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    for ax, (key, label, scale) in zip(axes.flat, curves, strict=True):
        for algo, items in runs.items():
            items = [r for _, r in items if r]
            if not items:
                continue
            n = min(len(r) for r in items)
            data = np.asarray([smooth([rec.get(key, np.nan) * scale for rec in r[:n]]) for r in items])
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, std = np.nanmean(data, 0), np.nanstd(data, 0)
            x = np.arange(n) * STEPS_PER_ITERATION / 1e6
            style = {"np3o_adapt": "--", "np3o_kappa1": ":", "ppo_lag_fast": "-."}.get(algo, "-")
            ax.plot(x, mean, style, label=NAMES[algo], lw=1.4)
            ax.fill_between(x, mean - std, mean + std, alpha=0.12)
        if key in ("episode/cost/cost", "cost_rate/cost"):
            ax.axhline(25.0, color="k", lw=0.8, ls=":")
            ax.set_yscale("symlog", linthresh=10)
            ax.set_ylim(bottom=0)
        ax.set_xlabel("environment steps (millions)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"{task}, cost limit 25 per 1000-step episode (mean ± std over seeds, 5-iteration moving average)")
    fig.tight_layout()
    fig.savefig(dest / "curves.png", dpi=90)
    plt.close(fig)

    if not any(r for algo in ("np3o", "np3o_adapt", "ppo_lag") for _, r in runs.get(algo, [])):
        return  # the diagnostics figure compares these three; none of them ran here
    diag = [
        ("cost_return_per_episode/cost", "J_C estimate, per episode (limit 25)", 1.0),
        ("cost_return_sampled/cost", "sampled J_C / eps", "ratio"),
        ("kappa_eff/cost", "kappa (effective)", 1.0),
        ("violation_offset/cost", "normalized violation offset", 1.0),
        ("cost_adv_std/cost", "sigma of the cost advantages", 1.0),
        ("adv_corr/cost", "corr(A_R, A_C)", 1.0),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (key, label, scale) in zip(axes.flat, diag, strict=True):
        for algo in ("np3o", "np3o_adapt", "ppo_lag"):
            for _, r in runs.get(algo, []):
                if not r:
                    continue
                if scale == "ratio":
                    y = [rec.get(key, np.nan) / rec.get("cost_limit/cost", np.nan) for rec in r]
                else:
                    k = key if (key != "kappa_eff/cost" or algo == "np3o_adapt") else "kappa"
                    if algo == "ppo_lag" and key == "kappa_eff/cost":
                        k = "lambda/cost"
                    y = [rec.get(k, np.nan) for rec in r]
                color = {"np3o": "C2", "np3o_adapt": "C7", "ppo_lag": "C3"}[algo]
                ax.plot(np.arange(len(y)) * STEPS_PER_ITERATION / 1e6, y, color=color, lw=0.8, alpha=0.8)
        ax.plot([], [], color="C2", label="N-P3O, paper's kappa schedule")
        ax.plot([], [], color="C7", label="N-P3O, kappa_adapt = 0.05")
        ax.plot([], [], color="C3", label="PPO-Lagrangian (lambda in the kappa panel)")
        if key == "cost_return_sampled/cost":
            ax.axhline(1.0, color="k", lw=0.8, ls=":")
            ax.set_yscale("log")
        if key == "cost_return_per_episode/cost":
            ax.axhline(25.0, color="k", lw=0.8, ls=":")
            ax.set_yscale("log")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("environment steps (millions)")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dest / "np3o_diagnostics.png", dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
