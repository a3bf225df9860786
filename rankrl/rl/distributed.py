"""Data parallelism through torch.distributed (launched by ``torchrun``; gloo on CPU, nccl on GPU).

Each rank samples its own share of the prompts and generates their completions; gradients are averaged
by DistributedDataParallel. Rewards are gathered so batch-level advantage estimators see every rank.
Outside ``torchrun`` every function here is the identity, so single-process code pays nothing.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def is_main() -> bool:
    return rank() == 0


def init_from_env() -> None:
    """Join the process group that ``torchrun`` describes in the environment, if any."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not is_distributed():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))


def wrap(model: torch.nn.Module) -> torch.nn.Module:
    """DDP-wrap the policy when distributed (FSDP for very large models: see the README)."""
    if not is_distributed():
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [torch.cuda.current_device()] if torch.cuda.is_available() else None
    return DistributedDataParallel(model, device_ids=device_ids)


def shard(items: list) -> list:
    """This rank's contiguous share of a global list (its length must divide by the world size)."""
    n = world_size()
    if len(items) % n:
        raise ValueError(f"{len(items)} prompts per step cannot be split over {n} ranks; make it a multiple")
    per = len(items) // n
    return items[rank() * per : (rank() + 1) * per]


def gather_rows(x: torch.Tensor) -> torch.Tensor:
    """Concatenate a per-rank (n, ...) tensor over ranks in rank order."""
    if not is_distributed():
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def local_rows(x: torch.Tensor, n_local: int) -> torch.Tensor:
    """This rank's rows of a gathered tensor."""
    return x[rank() * n_local : (rank() + 1) * n_local] if is_distributed() else x


def global_sum(value: float) -> float:
    """Sum a number over ranks."""
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item()
