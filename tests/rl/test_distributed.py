"""Data parallelism, DDP and FSDP: 2 CPU processes (gloo) accumulate the same gradient as one process on the
batch, train to the same weights, and an FSDP run resumes from its sharded checkpoint exactly."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rankrl import distributed as ddp
from rankrl.rl.batch import PolicyBatch
from rankrl.rl.config import TrainerConfig
from rankrl.rl.steps import backward_batch
from rankrl.rollout.base import SamplingParams


def _batch(vocab: int) -> tuple[PolicyBatch, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    n, p, t = 8, 5, 6
    ids = torch.randint(0, vocab, (n, p + t), generator=g)
    ids[1::2, :p] = ids[::2, :p]  # groups of 2 rows share a prompt: the shared-prefix forward under DDP/FSDP
    attention = torch.ones(n, p + t, dtype=torch.long)
    attention[:4, :2] = 0  # left padding on some prompts
    response = torch.ones(n, t)
    response[::3, 4:] = 0  # and completions of different lengths
    attention[:, p:] = response.long()
    adv = torch.randn(n, generator=g)
    return PolicyBatch(ids, attention, response, p, torch.zeros(n, t)), adv


def _grads(
    model_dir: str, rows: slice | None, loss_agg: str, strategy: str = "ddp"
) -> dict[str, torch.Tensor]:
    from rankrl.models import load_policy

    model, _ = load_policy(model_dir, dtype="float32", device="cpu")
    batch, adv = _batch(model.config.vocab_size)
    if rows is not None:
        batch, adv = batch.rows(rows.start, rows.stop), adv[rows]
    cfg = TrainerConfig(
        micro_batch_size=2, loss_agg=loss_agg, sampling=SamplingParams(max_new_tokens=6), strategy=strategy
    )
    backward_batch(ddp.wrap(model, strategy), batch, adv, cfg)
    # under FSDP each rank holds a shard of every gradient: gather the whole one (a collective, on all ranks)
    return {
        n: ddp.full_tensor(p.grad.detach()).clone() for n, p in model.named_parameters() if p.grad is not None
    }


def _join(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)


def _worker(rank: int, world: int, port: int, model_dir: str, loss_agg: str, strategy: str, out: str) -> None:
    _join(rank, world, port)
    try:
        per = 8 // world
        grads = _grads(model_dir, slice(rank * per, (rank + 1) * per), loss_agg, strategy)
        if rank == 0:
            torch.save(grads, out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.ranks
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.parametrize("loss_agg", ["grpo", "dapo"])
def test_two_gloo_ranks_match_one_process(tmp_path: Path, model_dir: Path, loss_agg: str, strategy: str):
    tiny = str(model_dir / "tiny")
    single = _grads(tiny, None, loss_agg)
    out = tmp_path / "rank0.pt"
    mp.spawn(_worker, args=(2, _free_port(), tiny, loss_agg, strategy, str(out)), nprocs=2, join=True)
    parallel = torch.load(out)
    assert single.keys() == parallel.keys() and single
    for name in single:
        torch.testing.assert_close(parallel[name], single[name], rtol=1e-5, atol=1e-7, msg=name)


def _train(model_dir: str, run_dir: Path, strategy: str, max_steps: int, resume: bool = False) -> None:
    from tests.rl.test_trainer import vowels_loop

    trainer = vowels_loop(
        Path(model_dir), run_dir, max_steps=max_steps, prompts_per_step=4, strategy=strategy, resume=resume
    )
    torch.manual_seed(100 + dist.get_rank())  # each rank samples its own completions, as rankrl.train does
    trainer.train()


def _train_worker(rank: int, world: int, port: int, model_dir: str, root: str) -> None:
    _join(rank, world, port)
    try:
        root_path = Path(root)
        _train(model_dir, root_path / "ddp", "ddp", 2)
        _train(model_dir, root_path / "fsdp", "fsdp", 2)
        _train(model_dir, root_path / "fsdp_resumed", "fsdp", 1)  # "killed" after its step-1 checkpoint
        _train(model_dir, root_path / "fsdp_resumed", "fsdp", 2, resume=True)
    finally:
        dist.destroy_process_group()


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / "step_000002" / "policy" / "model.safetensors"))


@pytest.mark.ranks
def test_fsdp_trains_like_ddp_and_resumes_exactly(tmp_path: Path, model_dir: Path):
    """Two gloo ranks, 2 GRPO steps on the vowels task: FSDP (sharded parameters, gradients, optimizer state,
    generation with synced ranks) ends where DDP ends, and a run stopped after step 1 and resumed from its
    sharded checkpoint ends exactly where the unbroken FSDP run does."""
    import json

    from rankrl.models import load_policy

    tiny = str(model_dir / "tiny")
    mp.spawn(_train_worker, args=(2, _free_port(), str(model_dir), str(tmp_path)), nprocs=2, join=True)
    ddp_w, fsdp_w, resumed_w = (_final_weights(tmp_path / d) for d in ("ddp", "fsdp", "fsdp_resumed"))
    assert (tmp_path / "fsdp_resumed" / "checkpoints" / "step_000002" / "sharded").is_dir()
    assert ddp_w.keys() == fsdp_w.keys() == resumed_w.keys() and ddp_w
    initial, _ = load_policy(tiny, dtype="float32", device="cpu")
    moved = [n for n, w in initial.state_dict().items() if n in fsdp_w and not torch.equal(w, fsdp_w[n])]
    assert moved, "training changed no weight"
    for name in ddp_w:
        # FSDP sums gradients in another order than DDP; Adam turns the rounding of a near-zero gradient entry
        # into a visible share of its step (measured: 2.4e-6, 0.1% of one lr=3e-3 step, in 1 of 32768 entries)
        torch.testing.assert_close(
            fsdp_w[name], ddp_w[name], rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}"
        )
        torch.testing.assert_close(resumed_w[name], fsdp_w[name], rtol=0, atol=0, msg=name)

    def rewards(d: str) -> list[float]:
        lines = (tmp_path / d / "train_log.jsonl").read_text().splitlines()
        return [json.loads(line)["reward/mean"] for line in lines]

    assert rewards("fsdp") == rewards("fsdp_resumed") and len(rewards("fsdp")) == 2


def _bf16_fsdp_worker(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    """One SFT-like update of a bfloat16 policy sharded by FSDP2 at lr 1e-6; rank 0 saves the full weights."""
    from rankrl.models import load_policy

    _join(rank, world, port)
    try:
        policy, _ = load_policy(model_dir, dtype="bfloat16", trainable=True)
        model = ddp.wrap(policy, "fsdp")
        batch, adv = _batch(policy.config.vocab_size)
        per = 8 // world
        cfg = TrainerConfig(micro_batch_size=2, sampling=SamplingParams(max_new_tokens=6), strategy="fsdp")
        backward_batch(
            model, batch.rows(rank * per, (rank + 1) * per), adv[rank * per : (rank + 1) * per], cfg
        )
        torch.optim.AdamW(policy.parameters(), lr=1e-6).step()
        full = {n: ddp.full_tensor(p.detach()).clone() for n, p in policy.named_parameters()}
        if rank == 0:
            torch.save(full, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.ranks
def test_fsdp_keeps_float32_masters_of_a_bfloat16_policy(tmp_path: Path, model_dir: Path):
    """Two gloo ranks shard a bfloat16 policy with FSDP2's mixed precision (bfloat16 compute, float32 masters
    and gradient reduction): an update at lr 1e-6 moves every decoder matrix, which bfloat16 weights would
    mostly round away."""
    from rankrl.models import load_policy

    tiny = str(model_dir / "tiny")
    out = tmp_path / "weights.pt"
    mp.spawn(_bf16_fsdp_worker, args=(2, _free_port(), tiny, str(out)), nprocs=2, join=True)
    after = torch.load(out)
    start, _ = load_policy(tiny, dtype="float32")
    matrices = [(n, w) for n, w in start.named_parameters() if w.dim() == 2 and "embed" not in n]
    assert len(matrices) >= 4  # a tied head is the embedding, named once; the decoder's matrices remain
    for name, w in matrices:
        assert after[name].dtype == torch.float32
        assert (after[name] != w).float().mean() > 0.9, name


def _resume_worker(rank: int, world: int, port: int, root: str, out: str) -> None:
    import json

    import rankrl.rl.checkpoint as ck

    _join(rank, world, port)
    try:
        if rank == 1:  # this rank's read of the shared file system fails
            ck.verify_checkpoint = lambda path: "unreadable (emulated)"
        chosen = ddp.from_main(lambda: ck.resolve_resume_checkpoint(Path(root)))
        try:
            ddp.from_main(lambda: 1 / 0)
            raised = False
        except ZeroDivisionError:
            raised = True
        Path(f"{out}{rank}").write_text(json.dumps([str(chosen), raised]))
    finally:
        dist.destroy_process_group()


@pytest.mark.ranks
def test_every_rank_resumes_from_the_checkpoint_the_main_rank_chose(tmp_path: Path):
    """A resume picks its checkpoint on the main rank and every rank reads that one (each rank choosing for
    itself, one whose read failed would start elsewhere, or stop); an error there stops every rank."""
    import json

    from rankrl.rl.checkpoint import STATE_FILE, write_manifest

    ckpt = tmp_path / "checkpoints" / "step_000002"
    ckpt.mkdir(parents=True)
    torch.save({"step": 2}, ckpt / STATE_FILE)
    write_manifest(ckpt)
    out = str(tmp_path / "rank")
    mp.spawn(_resume_worker, args=(2, _free_port(), str(tmp_path / "checkpoints"), out), nprocs=2)
    answers = [json.loads(Path(f"{out}{r}").read_text()) for r in range(2)]
    assert answers == [[str(ckpt), True]] * 2


def _metrics_worker(rank: int, world: int, port: int, out: str) -> None:
    import json

    from rankrl.rl.steps import combined_over_ranks

    _join(rank, world, port)
    try:
        mine = {  # rank r's share of a step: 2 completions with rewards r and r + 1
            "loss": 0.25 + rank,
            "pg_loss/slate": 0.5 * rank,
            "reward/mean": rank + 0.5,
            "completion_length/max": 10.0 + rank,
            "ratio/max/rank": 1.0 + rank,
            "time/step_s": 3.0 - rank,
            "sample/completion": f"text of rank {rank}",
            "sample/reward": float(rank),
        }
        Path(f"{out}{rank}").write_text(json.dumps(ddp.combine_metrics(mine, combined_over_ranks)))
    finally:
        dist.destroy_process_group()


@pytest.mark.ranks
def test_a_steps_metrics_cover_every_ranks_share(tmp_path: Path):
    """Each rank scores its share of a step's prompts; the logged metrics are the whole step's: losses (each
    rank's share of one batch total) add up, maxima and times take the largest, means average equal shares,
    and the shown sample stays the main rank's."""
    import json

    out = str(tmp_path / "rank")
    mp.spawn(_metrics_worker, args=(2, _free_port(), out), nprocs=2)
    main = json.loads(Path(f"{out}0").read_text())
    assert main == {
        "loss": 1.5,
        "pg_loss/slate": 0.5,
        "reward/mean": 1.0,
        "completion_length/max": 11.0,
        "ratio/max/rank": 2.0,
        "time/step_s": 3.0,
        "sample/completion": "text of rank 0",
        "sample/reward": 0.0,
    }
    assert json.loads(Path(f"{out}1").read_text())["loss"] == 1.5  # every rank holds the same numbers


def test_unknown_strategy_names_the_valid_ones():
    with pytest.raises(ValueError, match="trainer.strategy='zero3'; valid: ddp, fsdp"):
        TrainerConfig(strategy="zero3")


def test_fsdp_with_vllm_and_lora_stops_at_start_up(monkeypatch, model_dir):
    from omegaconf import OmegaConf

    from rankrl import app
    from tests.conftest import compose

    cfg = compose(
        "train",
        [
            "model=tiny",
            "rollout=vllm",
            "trainer.strategy=fsdp",
            "model.lora={r: 4, alpha: 8}",
            f"paths.model_dir={model_dir}",
        ],
    )
    OmegaConf.set_struct(cfg, False)
    monkeypatch.setattr(ddp, "world_size", lambda: 2)  # as under torchrun
    with pytest.raises(ValueError, match="trainer.strategy=ddp"):
        app.build_engine(cfg, torch.nn.Linear(1, 1), tokenizer=None)


def test_kl_with_full_fine_tuning_gets_a_frozen_reference(model_dir):
    from rankrl import app
    from tests.conftest import compose

    base = ["model=tiny", "profile=cpu", f"paths.model_dir={model_dir}"]
    reference = lambda cfg: app.build_reference(cfg, cfg.model, None)  # noqa: E731
    assert reference(compose("train", base)) is None  # beta = 0: no reference is loaded
    ref = reference(compose("train", [*base, "trainer.beta=0.04"]))
    assert ref is not None and not ref.training and not any(p.requires_grad for p in ref.parameters())
    lora = compose("train", [*base, "trainer.beta=0.04", "model.lora={r: 4, alpha: 8}"])
    assert reference(lora) is None  # LoRA: the policy with its adapter off is the reference


def test_under_fsdp_a_frozen_role_loads_on_its_gpu_only_where_it_generates_itself(monkeypatch, model_dir):
    """FSDP shards the trained role and the KL reference, each rank moving its shard to its GPU, so those two
    load in host memory; a frozen role whose vLLM engine serves its generation stays there too (its weights
    only fill the engine), one that generates itself (rollout=hf) loads on its GPU. Emulated: CUDA reported
    available, two ranks, the loader recording where it was asked to load."""
    from omegaconf import OmegaConf

    import rankrl.models
    from rankrl import app
    from tests.conftest import compose

    cfg = compose(
        "train",
        [
            "model=tiny",
            "rollout=vllm",
            "trainer.strategy=fsdp",
            "trainer.beta=0.04",
            f"paths.model_dir={model_dir}",
        ],
    )
    OmegaConf.set_struct(cfg, False)
    cfg.roles = {"query": {}, "item": {}}
    devices = []

    def load_policy(path, device, **kwargs):
        devices.append(device)
        return torch.nn.Linear(1, 1), None

    monkeypatch.setattr(rankrl.models, "load_policy", load_policy)
    monkeypatch.setattr(app, "build_engine", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(ddp, "world_size", lambda: 2)  # as under torchrun
    app.build_roles(cfg, train_role="query")
    assert devices == ["cpu", "cpu"]  # the trained query role, then the frozen item role its engine serves
    monkeypatch.setattr(ddp, "shard", lambda model: model)
    app.build_reference(cfg, cfg.model, None)
    assert devices[-1] == "cpu"
    cfg.rollout.name = "hf"  # the frozen role generates itself: on its GPU
    app.build_roles(cfg, train_role="query")
    assert devices[-2:] == ["cpu", "cuda"]
    cfg.trainer.strategy = "ddp"  # nothing is sharded: everything on its GPU
    app.build_roles(cfg, train_role="query")
    assert devices[-2:] == ["cuda", "cuda"]


SLURM_RANK_SCRIPT = """
import json, sys, torch, torch.distributed as dist
from rankrl import distributed as ddp
ddp.init_from_env()
total = torch.tensor([float(ddp.rank() + 1)])
dist.all_reduce(total)
print(json.dumps({"rank": ddp.rank(), "world": ddp.world_size(), "sum": total.item()}))
# leave the group together: a gloo rank that exits while its peer still holds the connection aborts in
# teardown ("terminate called without an active exception": 4 of 30 task processes without this line)
dist.destroy_process_group()
"""


def _slurm_task_env(procid: int, tasks: int, port: int) -> dict[str, str]:
    """The environment SLURM gives task ``procid`` of a one-node job that submitit started."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {
        **env,
        "SUBMITIT_EXECUTOR": "slurm",
        "SLURM_JOB_ID": "4242",
        "SLURM_NTASKS": str(tasks),
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(procid),
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
    }


@pytest.mark.ranks
def test_the_tasks_of_a_slurm_job_join_as_ranks():
    """A multirun on hydra/launcher=slurm with NPROC tasks per job: each task (a process that submitit starts,
    with SLURM's environment, not torchrun's) joins one process group as its rank. SLURM itself cannot run
    here: the two processes get the variables SLURM sets, and submitit's own parser reads them."""
    import json
    import subprocess
    import sys

    port = _free_port()
    tasks = [
        subprocess.Popen(
            [sys.executable, "-c", SLURM_RANK_SCRIPT],
            env=_slurm_task_env(i, 2, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = []
    for task in tasks:
        out, err = task.communicate(timeout=120)
        assert task.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 3.0 for r in results)


def test_one_python_in_a_slurm_allocation_is_not_a_rank(monkeypatch):
    """Without submitit (a plain `python` inside `sbatch -n 8`) the process is alone: no group to join."""
    for key, value in _slurm_task_env(0, 8, 0).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SUBMITIT_EXECUTOR")
    assert ddp.slurm_tasks() == 0
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    assert ddp.slurm_tasks() == 8


# NCCL as a GPU machine's ranks meet it: a backend for CUDA tensors only, so every collective on CPU tensors
# is refused (torch: "No backend type associated with device type cpu"; NCCL itself: "Tensors must be CUDA").
# Stood in for by torch's own no-op process group registered for the cuda device alone.
def _register_emulated_nccl() -> None:
    from torch._C._distributed_c10d import FakeProcessGroup

    if "emulated_nccl" not in dist.Backend.backend_list:
        dist.Backend.register_backend(
            "emulated_nccl",
            lambda common, options: FakeProcessGroup._create_internal(
                common.group_rank, common.group_size, options
            ),
            extended_api=True,
            devices=["cuda"],
        )


def _gpu_machine_worker(rank: int, world: int, port: int, out: str) -> None:
    """A rank of a multi-GPU run as ``init_from_env`` starts it, with NCCL emulated; then the trainer's
    collectives on the CPU tensors it gives them."""
    _register_emulated_nccl()
    real_init = dist.init_process_group
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0"
    )
    torch.cuda.is_available = lambda: True
    torch.cuda.set_device = lambda device: None
    dist.init_process_group = lambda backend, **kw: real_init(backend.replace("nccl", "emulated_nccl"), **kw)
    torch.set_num_threads(1)
    try:
        ddp.init_from_env()
        rows = ddp.gather_rows(torch.tensor([[float(rank)], [rank + 0.5]]))
        total = ddp.global_sum(rank + 1.0)
        ddp.barrier()
        if rank == 0:
            torch.save({"rows": rows, "total": total}, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.ranks
def test_collectives_of_cpu_tensors_work_on_a_gpu_machines_process_group(tmp_path: Path):
    """Two ranks whose process group is built as on GPUs, NCCL emulated by a backend that refuses CPU
    tensors: the rewards gather and the token count still run (over gloo, beside NCCL), with the right
    values. With NCCL as the only backend, as before, the first collective failed."""
    out = tmp_path / "collectives.pt"
    mp.spawn(_gpu_machine_worker, args=(2, _free_port(), str(out)), nprocs=2)
    got = torch.load(out)
    assert got["rows"].flatten().tolist() == [0.0, 0.5, 1.0, 1.5] and got["total"] == 3.0
