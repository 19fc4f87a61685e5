"""Policy-update time of N-P3O (two cost critics) relative to PPO, on the same rollout.

The paper (appendix, Table "Learning Time") measured 0.118 s for a PPO update and 0.185 s for
N-P3O with its cost critic: 1.57x. This times ONE full update (all epochs and minibatches:
actor, reward critic and, for N-P3O, two Softplus cost critics; losses, one backward, gradient
clipping, Adam) of each algorithm on the same rollout.

Networks: paper-sized and perceptive (appendix Table IV): 56 proprioceptive values from the
robot contract (base velocities, gravity, commands, 12 leg positions, 16 joint velocities, 16
last actions) + the 187-point height scan; scan encoder 128-64, actor and reward critic 256-64,
cost critics 128 (each with its own encoder). 16 actions.

Batch: the paper's, 4096 environments x 24 steps in 4 minibatches, 5 epochs (98,304 samples,
20 minibatch steps), is the default on a GPU (``--device`` defaults to CUDA where there is one).
On a CPU that is minutes per update, so there the default scales the environments down to 512
(12,288 samples; 3,072 per minibatch; same 24 steps, 4 minibatches, 5 epochs, so the same 20
optimizer steps); ``--quick`` uses 128 environments and fewer repeats. Rollout contents are
random (timing does not depend on them). Runs alternate PPO / N-P3O so that load from other
processes hits both alike; each is reported as the median over repeats, each repeat from the
same initial networks and optimizer state (restored in place, so CUDA graphs captured in the
warm-up stay valid, as over a training run).

``mac_ratio`` is the floor a compute-bound device cannot beat: the multiply-accumulates of
actor + critic + cost critics per sample over those of actor + critic. The cost critics are
evaluated together (one batched product per layer, weight gradients split over the samples on
a GPU), a minibatch step never waits for the device (learning-rate rule, non-finite check and
step skipping run there; fused Adam), and on a GPU the networks' forward and backward passes
are CUDA graphs (PPO's too). On a CPU, where these products are compute-bound, the measured
ratio stays near ``mac_ratio``; on a GPU the step is paced by the host issuing operations, so
the ratio approaches that of the operations issued per update (``op_ratio``, counted with a
dispatch mode; a graph replay counts as one). H100 (torch 2.11, fp32, paper size): ratio
1.06-1.10 over three runs (1.73-1.78 before these changes). ``--tf32`` lets float32 products
use TF32 tensor cores on CUDA (both algorithms alike); ``--no-cuda-graphs`` runs the networks
eagerly; ``--profile`` adds kernel counts and kernel time.

    python -m bench.update_overhead [--quick] [--json] [--num-envs N] [--repeats R] [--device cuda] [--tf32]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from aow_policy.layout import ObservationLayout
from aow_policy.robot import load_robot
from training.algorithms import make_algorithm
from training.algorithms.losses import gaussian_log_prob
from training.config import NP3OParams, PPOConfig, PPOParams
from training.networks import ActorCritic, NetworkConfig
from training.storage import RolloutStorage

NUM_STEPS, NUM_MINIBATCHES, NUM_EPOCHS, NUM_GROUPS = 24, 4, 5, 2


def perceptive_layout() -> tuple[ObservationLayout, int]:
    robot = load_robot()
    n_joints = len(robot.joint_names)
    layout = ObservationLayout.build(
        [
            {"name": "base_lin_vel", "size": 3},
            {"name": "base_ang_vel", "size": 3},
            {"name": "projected_gravity", "size": 3},
            {"name": "velocity_commands", "size": 3},
            {"name": "joint_pos", "size": len(robot.leg_joint_names), "joints": list(robot.leg_joint_names)},
            {"name": "joint_vel", "size": n_joints, "joints": list(robot.joint_names)},
            {"name": "last_action", "size": n_joints},
            {"name": "height_scan", "size": robot.height_scan.num_points},
        ]
    )
    return layout, n_joints


def make_rollout(model: ActorCritic, num_envs: int, device: torch.device, seed: int) -> RolloutStorage:
    g = torch.Generator(device=device).manual_seed(seed)
    dim = model.actor.trunk.obs_dim
    num_actions = model.actor.mean_head.out_features
    storage = RolloutStorage(num_envs, NUM_STEPS, dim, dim, num_actions, NUM_GROUPS, device)
    with torch.no_grad():
        for _ in range(NUM_STEPS):
            obs = torch.randn(num_envs, dim, generator=g, device=device)
            mean = model.actor(obs)
            actions = mean + torch.randn(mean.shape, generator=g, device=device)
            costs = torch.rand(num_envs, NUM_GROUPS, generator=g, device=device)
            done = torch.rand(num_envs, generator=g, device=device) < 0.01
            storage.add(
                obs, obs, actions, gaussian_log_prob(actions, mean, model.actor.log_std), mean,
                model.actor.log_std.exp(), torch.randn(num_envs, generator=g, device=device), costs, done, done,
                torch.randn(num_envs, generator=g, device=device), costs * 10, 0.99,
            )  # fmt: skip
        storage.compute_returns(
            torch.zeros(num_envs, device=device), torch.ones(num_envs, NUM_GROUPS, device=device), 0.99, 0.95
        )
    return storage


def macs_per_sample(module: nn.Module) -> int:
    return sum(m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))


def fresh_algorithm(algo_name: str, model: ActorCritic, cuda_graphs: bool = True):
    """The algorithm on a fresh copy of ``model`` and a fresh optimizer."""
    fresh = copy.deepcopy(model)
    cfg = PPOConfig(num_epochs=NUM_EPOCHS, num_minibatches=NUM_MINIBATCHES, cuda_graphs=cuda_graphs)
    params = NP3OParams() if algo_name == "np3o" else PPOParams()
    return make_algorithm(algo_name, fresh, cfg, params, cost_limits=torch.zeros(len(fresh.cost_critics)))


class Timed:
    """One algorithm, timed repeatedly from the same start: before every timed update the
    networks, the optimizer and the learning rate are restored in place (so CUDA graphs captured
    in the warm-up stay valid, as they do over a training run)."""

    def __init__(self, algo_name: str, model: ActorCritic, cuda_graphs: bool):
        self.algo = fresh_algorithm(algo_name, model, cuda_graphs)
        self.model_state = copy.deepcopy(self.algo.model.state_dict())
        self.optimizer_state = copy.deepcopy(self.algo.optimizer.state_dict())
        self.learning_rate = self.algo.learning_rate

    def restore(self) -> None:
        self.algo.model.load_state_dict(self.model_state)
        self.algo.load_optimizer_state(copy.deepcopy(self.optimizer_state))
        self.algo.set_learning_rate(self.learning_rate)

    def __call__(self, storage: RolloutStorage, device: torch.device) -> float:
        """Seconds for one full update (same rollout, same permutation)."""
        self.restore()
        generator = torch.Generator(device=device).manual_seed(0)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        self.algo.update(storage, iteration=0, generator=generator)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0


class _CountOps(TorchDispatchMode):
    """Counts the ATen operations dispatched (forward, backward and optimizer alike)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_ops(timed: Timed, storage: RolloutStorage, device: torch.device) -> int:
    """ATen operations of one full update: what the host issues, each a kernel launch or a view
    (a replayed CUDA graph counts as none of its kernels)."""
    timed.restore()
    with _CountOps() as counter:
        timed.algo.update(storage, iteration=0, generator=torch.Generator(device=device).manual_seed(0))
    return counter.count


def profile_update(timed: Timed, storage: RolloutStorage, device: torch.device, table: bool) -> dict:
    """One update under torch.profiler: GPU kernels launched and their summed run time, to tell a
    host-paced update (kernel time well below the wall time) from a GPU-bound one."""
    from torch.profiler import ProfilerActivity, profile

    timed.restore()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        timed.algo.update(storage, iteration=0, generator=torch.Generator(device=device).manual_seed(0))
        torch.cuda.synchronize(device)
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0) for e in kernels)
    if table:
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=60))
    return {"kernels": len(kernels), "kernel_time_s": round(busy_us / 1e6, 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.update_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="128 environments, 3 repeats (well under a minute)")
    p.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    p.add_argument(
        "--num-envs",
        type=int,
        help="environments in the rollout (default: the paper's 4096 on a GPU, 512 on a CPU; quick 128)",
    )
    p.add_argument("--repeats", type=int, help="timed updates per algorithm (default 5, quick 3)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: stable on a shared machine)")
    p.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="cpu or cuda (default: cuda where there is one)",
    )
    p.add_argument("--tf32", action="store_true", help="CUDA: float32 matrix products on TF32 tensor cores")
    p.add_argument(
        "--profile", action="store_true", help="CUDA: also count the kernels of one update and sum their run time"
    )
    p.add_argument("--profile-table", action="store_true", help="with --profile: print the top kernels")
    p.add_argument(
        "--no-cuda-graphs", action="store_true", help="CUDA: run the networks eagerly (no CUDA graphs), as on a CPU"
    )
    args = p.parse_args(argv)
    num_envs = args.num_envs or (128 if args.quick else 4096 if args.device.startswith("cuda") else 512)
    repeats = args.repeats or (3 if args.quick else 5)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True

    layout, num_actions = perceptive_layout()
    net = NetworkConfig()
    torch.manual_seed(0)
    np3o_model = ActorCritic(layout, layout, num_actions, NUM_GROUPS, net).to(device)
    ppo_model = ActorCritic(layout, layout, num_actions, 0, net).to(device)
    ppo_model.actor.load_state_dict(np3o_model.actor.state_dict())
    ppo_model.critic.load_state_dict(np3o_model.critic.state_dict())
    storage = make_rollout(np3o_model, num_envs, device, seed=1)  # PPO ignores its cost tracks
    graphs = not args.no_cuda_graphs
    runs = {"ppo": Timed("ppo", ppo_model, graphs), "np3o": Timed("np3o", np3o_model, graphs)}
    for timed in runs.values():  # warm-up (and the CUDA graphs' capture)
        timed(storage, device)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, timed in runs.items():
            times[name].append(timed(storage, device))
    ops = {name: count_ops(timed, storage, device) for name, timed in runs.items()}

    ppo_s = statistics.median(times["ppo"])
    np3o_s = statistics.median(times["np3o"])
    base_macs = macs_per_sample(np3o_model.actor) + macs_per_sample(np3o_model.critic)
    cost_macs = sum(i * o for i, o in np3o_model.cost_critics.layer_sizes)  # per group
    cost_macs *= len(np3o_model.cost_critics)
    result = {
        "ppo_update_s": round(ppo_s, 4),
        "np3o_update_s": round(np3o_s, 4),
        "ratio": round(np3o_s / ppo_s, 3),
        "paper_ratio": round(0.185 / 0.118, 3),
        "mac_ratio": round((base_macs + cost_macs) / base_macs, 3),
        "ppo_ops": ops["ppo"],
        "np3o_ops": ops["np3o"],
        "op_ratio": round(ops["np3o"] / ops["ppo"], 3),
        "num_envs": num_envs,
        "samples": num_envs * NUM_STEPS,
        "minibatch": num_envs * NUM_STEPS // NUM_MINIBATCHES,
        "epochs": NUM_EPOCHS,
        "minibatches": NUM_MINIBATCHES,
        "cost_critics": NUM_GROUPS,
        "obs_dim": layout.dim,
        "tf32": bool(args.tf32),
        "repeats": repeats,
        "threads": args.threads,
        "device": str(device),
        "cpu": platform.processor() or platform.machine(),
    }
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
        result["torch"] = torch.__version__
        result["cuda_graphs"] = graphs
        if args.profile:
            for name, timed in runs.items():
                prof = profile_update(timed, storage, device, table=args.profile_table)
                result[f"{name}_kernels"] = prof["kernels"]
                result[f"{name}_kernel_time_s"] = prof["kernel_time_s"]
    print(
        f"one update, {result['samples']} samples ({NUM_EPOCHS} epochs x {NUM_MINIBATCHES} minibatches of "
        f"{result['minibatch']}), {device}, {args.threads} thread(s):"
    )
    print(f"  PPO                      {ppo_s:.3f} s   (runs: {', '.join(f'{t:.3f}' for t in times['ppo'])})")
    print(f"  N-P3O, 2 cost critics    {np3o_s:.3f} s   (runs: {', '.join(f'{t:.3f}' for t in times['np3o'])})")
    print(f"  operations issued per update: PPO {ops['ppo']}, N-P3O {ops['np3o']} (op_ratio {result['op_ratio']:.3f})")
    print(f"  ratio {result['ratio']:.3f} (paper 1.57; arithmetic floor mac_ratio {result['mac_ratio']:.3f})")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
