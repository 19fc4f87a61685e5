"""Multi-process training with torch.distributed, launched by ``torchrun``.

``torchrun --nproc-per-node P -m training.train ...`` starts P processes; each reads RANK,
WORLD_SIZE and LOCAL_RANK from its environment. Every rank simulates its share of the
environments, computes gradients on its own rollout, and the ranks average gradients with one
all-reduce per minibatch. Everything that steers the update (observation-normalizer moments,
advantage statistics, J_C, KL, CRPO's constraint estimates) is reduced the same way, so every
rank takes exactly the same optimizer step and the penalty weights stay identical without
being sent around. Only rank 0 writes logs and checkpoints. Backend: gloo on CPU, NCCL on GPU.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks, in place (returns ``t``); a no-op in a single process."""
        if self.enabled:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def all_reduce_mean(self, t: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            t /= self.world_size
        return t

    def all_reduce_grads(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Average gradients over ranks with a single flat all-reduce."""
        if not self.enabled:
            return
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.world_size
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers to every rank."""
        if not self.enabled:
            return
        for t in module.state_dict().values():
            if isinstance(t, torch.Tensor):
                dist.broadcast(t, src=0)

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order (plain data and tensors)."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def init_distributed(device: str = "cpu") -> DistContext:
    """Join the process group torchrun set up (or return a single-process context)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if device.startswith("cuda"):
        torch.cuda.set_device(local_rank)  # NCCL collectives run on the current device
    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend=backend)
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank)


def shutdown_distributed(ctx: DistContext, barrier_timeout_s: float = 30.0) -> None:
    """Leave the process group once every rank has got here.

    Without the barrier a rank that finishes first (rank 1: it writes no checkpoint) closes its
    gloo connections while rank 0 still owns worker threads on them, and rank 0 can die in its
    own teardown with SIGABRT ("terminate called without an active exception"). The barrier is
    monitored so that a rank that crashed makes the others wait ``barrier_timeout_s`` and then
    leave, instead of hanging at exit.
    """
    if not (ctx.enabled and dist.is_initialized()):
        return
    if dist.get_backend() == "gloo":
        # A RuntimeError here means a rank is gone (it failed first): leaving is all that is left.
        with contextlib.suppress(RuntimeError):
            dist.monitored_barrier(timeout=timedelta(seconds=barrier_timeout_s), wait_all_ranks=True)
    dist.destroy_process_group()


def local_device(device: str, ctx: DistContext) -> str:
    """One GPU per rank: ``cuda`` becomes ``cuda:<local_rank>``."""
    if device == "cuda" and ctx.enabled:
        return f"cuda:{ctx.local_rank}"
    return device


def split_envs(total: int, ctx: DistContext) -> int:
    """This rank's share of ``total`` environments (the first ranks take the remainder)."""
    if total < ctx.world_size:
        raise ValueError(f"num_envs={total} cannot be split over {ctx.world_size} processes")
    base, extra = divmod(total, ctx.world_size)
    return base + (1 if ctx.rank < extra else 0)
