"""Data parallelism: 2 CPU processes (gloo) accumulate the same gradient as one process on the batch."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rankrl.rl import distributed as ddp
from rankrl.rl.batch import PolicyBatch
from rankrl.rl.config import TrainerConfig
from rankrl.rl.trainer import backward_batch
from rankrl.rollout.base import SamplingParams



def _batch(vocab: int) -> tuple[PolicyBatch, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    n, p, t = 8, 5, 6
    ids = torch.randint(0, vocab, (n, p + t), generator=g)
    attention = torch.ones(n, p + t, dtype=torch.long)
    attention[:3, :2] = 0  # left padding on some prompts
    response = torch.ones(n, t)
    response[::3, 4:] = 0  # and completions of different lengths
    attention[:, p:] = response.long()
    adv = torch.randn(n, generator=g)
    return PolicyBatch(ids, attention, response, p, torch.zeros(n, t)), adv


def _grads(model_dir: str, rows: slice | None, loss_agg: str) -> dict[str, torch.Tensor]:
    from rankrl.models import load_policy

    model, _ = load_policy(model_dir, dtype="float32", device="cpu")
    batch, adv = _batch(model.config.vocab_size)
    if rows is not None:
        batch, adv = batch.rows(rows.start, rows.stop), adv[rows]
    cfg = TrainerConfig(micro_batch_size=2, loss_agg=loss_agg, sampling=SamplingParams(max_new_tokens=6))
    backward_batch(ddp.wrap(model), batch, adv, cfg)
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _worker(rank: int, world: int, port: int, model_dir: str, loss_agg: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        per = 8 // world
        grads = _grads(model_dir, slice(rank * per, (rank + 1) * per), loss_agg)
        if rank == 0:
            torch.save(grads, out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("loss_agg", ["grpo", "dapo"])
def test_two_gloo_ranks_match_one_process(tmp_path: Path, model_dir: Path, loss_agg: str):
    tiny = str(model_dir / "tiny")
    single = _grads(tiny, None, loss_agg)
    out = tmp_path / "rank0.pt"
    mp.spawn(_worker, args=(2, _free_port(), tiny, loss_agg, str(out)), nprocs=2, join=True)
    parallel = torch.load(out)
    assert single.keys() == parallel.keys() and single
    for name in single:
        torch.testing.assert_close(parallel[name], single[name], rtol=1e-5, atol=1e-7, msg=name)
