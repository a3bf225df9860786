"""Data parallelism through torch.distributed (launched by ``torchrun``, or as the tasks of a SLURM job).

The process group has one backend per device type (``process_group_backend``): gloo for CPU tensors
everywhere, NCCL for CUDA tensors where there is a GPU, as veRL's workers start theirs. The trainer's own
collectives (rewards, token counts, barriers around checkpoints) pass small CPU tensors, which NCCL alone
rejects; FSDP's go over NCCL.

Each rank samples its own share of the prompts and generates their completions. Two strategies average the
gradients over ranks:

- ``ddp``: DistributedDataParallel; every rank holds the whole policy and optimizer state.
- ``fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``), one unit per decoder layer, as accelerate
  wraps Hugging Face models; parameters, gradients and optimizer state are sharded over ranks, for
  policies that do not fit on one GPU. The module is sharded in place, so every forward (generation
  included) is a collective that all ranks join. Float32 master weights of a bfloat16 policy are gathered
  as bfloat16 and their gradients reduced in float32 (``rankrl.precision``).

Rewards are gathered so batch-level advantage estimators see every rank. Outside ``torchrun`` every
function here is the identity, so single-process code pays nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def is_distributed() -> bool:
    """Several ranks share the work. A process group of one (which vLLM's in-process engine initializes in
    a single process) is not distributed: every function here is then the identity."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def is_main() -> bool:
    return rank() == 0


def init_from_env() -> None:
    """Join the process group that ``torchrun`` describes in the environment, if any, or that of a SLURM job
    with several tasks (a multirun on ``hydra/launcher=slurm``: submitit starts one process per task)."""
    if "WORLD_SIZE" not in os.environ and slurm_tasks() > 1:
        from submitit.helpers import TorchDistributedEnvironment

        # RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from the job's tasks and nodes (a MASTER_PORT set by
        # the user is the one submitit reads); every GPU of the node stays visible, LOCAL_RANK picks its own
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if torch.cuda.is_available():  # before the group starts: NCCL binds each rank to its current device
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend=process_group_backend())


def process_group_backend() -> str:
    """gloo alone on a CPU machine; with a GPU, gloo for CPU tensors and NCCL for CUDA tensors in one group
    (torch dispatches each collective by its tensors' device)."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def slurm_tasks() -> int:
    """Tasks of the submitit SLURM job this process is one of (0 elsewhere). Only submitit's jobs: a plain
    `python` in an allocation of several tasks is one process, not one rank of many."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm" or "SLURM_PROCID" not in os.environ:
        return 0
    return int(os.environ.get("SLURM_NTASKS", "0"))


STRATEGIES = ("ddp", "fsdp")


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"trainer.strategy={strategy!r}; valid: {', '.join(STRATEGIES)}")


def wrap(model: torch.nn.Module, strategy: str = "ddp") -> torch.nn.Module:
    """The module that runs forward/backward: DDP around the policy, or the policy sharded in place."""
    check_strategy(strategy)
    if not is_distributed():
        return model
    if strategy == "fsdp":
        return shard(model)
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [torch.cuda.current_device()] if torch.cuda.is_available() else None
    return DistributedDataParallel(model, device_ids=device_ids)


def shard(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2 over ``model`` in place: each transformer block (the classes a Hugging Face model lists in
    ``_no_split_modules``) is one unit, the rest (embeddings, tied head, norm) the root unit."""
    from torch.distributed.fsdp import fully_shard

    from rankrl.precision import fsdp_mixed_precision

    blocks = set(_block_classes(model))
    if not blocks:
        raise ValueError(f"{type(model).__name__} names no transformer blocks (_no_split_modules) to shard")
    # float32 master shards of a bfloat16 model: gathered as bfloat16, gradients reduced in float32
    policy = fsdp_mixed_precision(model)
    options = {"mp_policy": policy} if policy is not None else {}
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, **options)
    fully_shard(model, **options)
    return model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a DistributedDataParallel wrapper (the module itself otherwise)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _block_classes(model: torch.nn.Module) -> list[str]:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft wraps the HF model
    return list(getattr(base, "_no_split_modules", None) or [])


def is_sharded(model: torch.nn.Module) -> bool:
    """True when ``model`` is sharded by FSDP2 (its forward is then a collective over ranks)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def full_tensor(x: torch.Tensor) -> torch.Tensor:
    """The whole tensor behind a sharded one (a collective); any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return x.full_tensor() if isinstance(x, DTensor) else x


@contextmanager
def gradient_sync(model: torch.nn.Module, sync: bool) -> Iterator[None]:
    """Backward passes inside the block reduce gradients over ranks only when ``sync``: accumulating
    micro-batches communicate once, on the last one (DDP's ``no_sync``, FSDP's requires_gradient_sync)."""
    if sync or not is_distributed():
        yield
    elif is_sharded(model):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    elif hasattr(model, "no_sync"):
        with model.no_sync():
            yield
    else:
        yield


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def from_main(compute: Callable[[], T]) -> T:
    """``compute()`` run on the main rank alone, its answer (or its exception) on every rank: one decision
    the ranks share, where each rank deciding for itself could differ (which checkpoint a resume reads,
    when one rank's read of a shared file system fails), and a cost paid once (hashing the checkpoints)."""
    if not is_distributed():
        return compute()
    box: list[Any] = [None]
    if is_main():
        try:
            box[0] = (True, compute())
        except Exception as err:  # raised on every rank below, so none waits for a rank that stopped
            box[0] = (False, err)
    dist.broadcast_object_list(box, src=0)  # over gloo: the object is in host memory
    ok, value = box[0]
    if not ok:
        raise value
    return value


COMBINE = {"sum": sum, "max": max, "mean": lambda values: sum(values) / len(values)}


def combine_metrics(metrics: dict[str, Any], rule: Callable[[str], str]) -> dict[str, Any]:
    """One step's metrics over every rank's share, each key by its ``rule``: ``sum`` where a rank's value is
    its share of a batch total, ``max``, ``mean`` (ranks hold equal shares, ``split``), or ``main``: the
    main rank's own (a sample it shows). Values that are not numbers stay the main rank's."""
    if not is_distributed():
        return metrics
    every: list[Any] = [None] * world_size()
    dist.all_gather_object(every, metrics)  # over gloo: the dicts are in host memory
    out = dict(metrics)
    for key in metrics:
        how, values = rule(key), [m.get(key) for m in every]
        if how != "main" and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = COMBINE[how](values)
    return out


def split(items: list) -> list:
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
