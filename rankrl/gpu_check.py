"""The GPU check: what a new GPU machine must pass before a paper-scale run, one PASS/FAIL line per check with
its number and threshold; the exit status is non-zero on any FAIL.

    python -m rankrl.gpu_check trainer      # make gpu-check-trainer: the trainer on CUDA, without vLLM
    python -m rankrl.gpu_check vllm         # CUDA vLLM against the trainer (make gpu-check runs both)

Part ``trainer`` needs only python3 with a CUDA torch, transformers and peft: it builds tiny random models
of the paper architectures (Qwen2 with q/k/v biases, Qwen3 with q/k norms; ``rankrl.models.PAPER_CONFIGS``)
and a byte-level tokenizer in code, so nothing comes from a hub; its one run of the training entry point
needs hydra-core and omegaconf, which ``make gpu-wheels`` brings as wheels. Its checks:

- ``logprobs``: the trainer's log-probs of sampled completions against the transformers engine's sampling
  log-probs, float32 (<= 1e-4) and bfloat16 compute over float32 masters (<= 2e-2), per architecture;
- ``bf16-update``: one update at lr 1e-6 of a bfloat16 model moves its (float32 master) weights;
- ``fsdp2``: the process group of a multi-GPU run (``rankrl.distributed``) at world size 1, its collectives
  given CPU and CUDA tensors, and an FSDP2 update in mixed precision;
- ``lora``: an update moves the adapter alone, and a weight push folds it into the pushed weights and
  leaves the model's own exactly as they were;
- ``grpo-resume``: 2 GRPO steps of ``python -m rankrl.train`` with a checkpoint, then a resume that continues
  at step 2 (the run folder's log has steps 1, 2, 3);
- ``hybrid``: a tiny Qwen3.5 (linear-attention layers among attention): its log-probs against the transformers
  engine in bfloat16, and the shared-prefix forward falling back to whole rows with equal log-probs;
- ``grpo-kl``: 2 GRPO steps with the KL term (beta 0.04) for a LoRA policy and a fully fine-tuned one,
  sampled at temperature 0.9 and top-k 50: both finish, the KL finite and positive once the policy has moved.

Part ``vllm`` (a GPU machine's own venv with CUDA vLLM, ``make install-gpu``): the engine asleep once
started (it holds less than half its KV cache's size of GPU memory); vLLM's sampling log-probs against the
trainer's; a weight push moves them onto the new weights; two roles' engines in one process,
each sleeping and waking, each role's log-probs unchanged by the other's cycle; 2 GRPO steps on the vLLM
engine.

On a machine without a GPU each part says so in one line and checks nothing (exit 0); ``--device cpu`` runs
the trainer checks on the CPU instead (the test suite does, so the check itself is tested).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rankrl.run_folders import CHECKPOINTS_DIR, TRAIN_LOG_FILE

REPO = Path(__file__).resolve().parent.parent
ARCHITECTURES = {"qwen2": "qwen2.5-7b", "qwen3": "qwen3-4b"}  # paper models whose recorded fields are used
PROMPTS = [
    [{"role": "user", "content": "Name three colours."}],
    [{"role": "user", "content": "Write one sentence about the sea."}],
]
FP32_LOGPROB_GAP = 1e-4
BF16_LOGPROB_GAP = 2e-2
VLLM_FP32_LOGPROB_GAP = 1e-3
MOVED_SHARE = 0.9  # share of a matrix's entries one update must change
DETAIL_LINES = 12  # lines of a failure's traceback or stderr under its FAIL line


@dataclass
class Check:
    """One line of the report."""

    name: str
    passed: bool
    measured: str
    detail: str = ""  # what a failure printed (a traceback's or a subprocess's last lines), under its line

    def line(self) -> str:
        head = f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.measured}"
        return "\n".join([head, *(f"      {line}" for line in self.detail.splitlines())])


def at_most(name: str, value: float, bound: float, what: str) -> Check:
    return Check(name, value <= bound, f"{what} {value:.3g} <= {bound:g}")


def at_least(name: str, value: float, bound: float, what: str) -> Check:
    return Check(name, value >= bound, f"{what} {value:.3g} >= {bound:g}")


# ---------------------------------------------------------------------------------------------- tiny models
def byte_tokenizer(chat_template: str) -> Any:
    """A byte-level BPE tokenizer with no merges (256 byte tokens) and ChatML's special tokens, built in code:
    every text round-trips, and nothing is read from a hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    core.add_special_tokens(specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=chat_template,
    )


def tiny_model_folder(arch: str, root: Path) -> Path:
    """``root/<arch>``: a tiny random model of the paper architecture ``arch`` with the byte tokenizer."""
    from rankrl.models import PAPER_CONFIGS, QWEN2_TEMPLATE, QWEN3_TEMPLATE, build_tiny_paper

    folder = root / arch
    if not (folder / "config.json").exists():
        name = ARCHITECTURES[arch]
        template = QWEN3_TEMPLATE if PAPER_CONFIGS[name]["model_type"] == "qwen3" else QWEN2_TEMPLATE
        tokenizer = byte_tokenizer(template)
        model = build_tiny_paper(name, tokenizer)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def hybrid_model_folder(root: Path) -> Path:
    """``root/qwen3.5``: a tiny random Qwen3.5 text model (gated-delta-net layers, then attention, as Qwen3.5
    interleaves them; its paper model's shape is not recorded here) with the byte tokenizer."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from rankrl.models import QWEN3_TEMPLATE

    folder = root / "qwen3.5"
    if not (folder / "config.json").exists():
        tokenizer = byte_tokenizer(QWEN3_TEMPLATE)
        config = Qwen3_5TextConfig(
            vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=4,
            num_attention_heads=2, num_key_value_heads=1, head_dim=64, linear_num_key_heads=2,
            linear_num_value_heads=2, linear_key_head_dim=32, linear_value_head_dim=32,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )  # fmt: skip
        model = Qwen3_5ForCausalLM(config)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


# ---------------------------------------------------------------------------------------------- the checks
def _moved_share(before: dict[str, Any], model: Any) -> float:
    """The smallest share of changed entries over ``model``'s decoder matrices."""
    from rankrl.distributed import full_tensor

    shares = []
    for name, param in model.named_parameters():
        if name in before and param.dim() == 2 and "embed" not in name:
            now = full_tensor(param.detach()).float().cpu()
            shares.append((now != before[name]).float().mean().item())
    return min(shares) if shares else 0.0


def _snapshot(model: Any) -> dict[str, Any]:
    from rankrl.distributed import full_tensor

    return {n: full_tensor(p.detach()).float().cpu().clone() for n, p in model.named_parameters()}


def _sampled_gap(policy: Any, tokenizer: Any, engine: Any, temperature: float = 1.0) -> float:
    """Largest |trainer - engine| log-prob over a sampled batch's completion tokens."""
    import torch

    from rankrl.rl.batch import sampled_distribution_logprobs, to_policy_batch
    from rankrl.rollout.base import SamplingParams

    sampling = SamplingParams(max_new_tokens=24, temperature=temperature)
    torch.manual_seed(0)
    out = engine.generate(PROMPTS, n=4, sampling=sampling)
    batch = to_policy_batch(out, tokenizer.pad_token_id)
    with torch.no_grad():
        from rankrl.rl.batch import completion_logits, model_device

        logits = completion_logits(policy, batch)
        trainer = sampled_distribution_logprobs(logits, batch.to(model_device(policy)), sampling)
    mask = batch.response_mask.to(trainer.device)
    return float(((trainer - batch.sampler_logprobs.to(trainer.device)).abs() * mask).max())


def check_logprobs(folder: Path, arch: str, device: str) -> list[Check]:
    from rankrl.models import load_policy
    from rankrl.rollout.hf import HFEngine

    out = []
    for dtype, bound in (("float32", FP32_LOGPROB_GAP), ("bfloat16", BF16_LOGPROB_GAP)):
        policy, tok = load_policy(str(folder), dtype=dtype, device=device, trainable=True)
        gap = _sampled_gap(policy, tok, HFEngine(policy, tok))
        out.append(at_most(f"logprobs {arch} {dtype}", gap, bound, "max |trainer - transformers engine|"))
    return out


def check_hybrid(folder: Path, device: str) -> list[Check]:
    """A hybrid model (Qwen3.5, a paper model): its sampled log-probs against the transformers engine in
    bfloat16, and the shared-prefix forward, which it cannot share, giving the whole rows' log-probs."""
    import torch

    from rankrl.models import load_policy
    from rankrl.rl.batch import to_policy_batch, token_logprobs
    from rankrl.rollout.base import SamplingParams
    from rankrl.rollout.hf import HFEngine

    policy, tok = load_policy(str(folder), dtype="bfloat16", device=device, trainable=True)
    engine = HFEngine(policy, tok)
    gap = _sampled_gap(policy, tok, engine)
    out = engine.generate(PROMPTS, n=4, sampling=SamplingParams(max_new_tokens=16, temperature=1.0))
    batch = to_policy_batch(out, tok.pad_token_id)
    with torch.no_grad():
        shared, whole = (token_logprobs(policy, batch, shared_prefix=s) for s in (True, False))
    return [
        at_most("hybrid logprobs bfloat16", gap, BF16_LOGPROB_GAP, "max |trainer - transformers engine|"),
        at_most("hybrid shared prefix", float((shared - whole).abs().max()), 0.0, "max |shared - whole|"),
    ]


def _sft_update(policy: Any, tokenizer: Any, model: Any = None, lr: float = 1e-6) -> float:
    """One AdamW update on the masked NLL of a fixed pair; returns the loss."""
    import torch

    from rankrl.rl.batch import to_policy_batch, token_logprobs
    from rankrl.rl.steps import sft_token_ids
    from rankrl.rl.task import SFTExample
    from rankrl.rollout.base import Rollouts

    model = model if model is not None else policy
    prompt, completion = sft_token_ids(tokenizer, SFTExample("x", PROMPTS[0], "Red, green and blue."))
    rollouts = Rollouts([prompt] * 2, [completion] * 2, [[0.0] * len(completion)] * 2, ["", ""], 1)
    batch = to_policy_batch(rollouts, tokenizer.pad_token_id)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=lr)
    loss = -(token_logprobs(model, batch) * batch.response_mask.to(_device(policy))).sum()
    loss = loss / batch.response_mask.sum()
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def _device(model: Any) -> Any:
    from rankrl.rl.batch import model_device

    return model_device(model)


def check_bf16_update(folder: Path, device: str) -> list[Check]:
    import torch

    from rankrl.models import load_policy

    policy, tok = load_policy(str(folder), dtype="bfloat16", device=device, trainable=True)
    before = _snapshot(policy)
    _sft_update(policy, tok)
    masters = {p.dtype for p in policy.parameters()} == {torch.float32}
    share = _moved_share(before, policy)
    return [
        Check("bf16-update masters", masters, "float32 master weights of a bfloat16 model: " + str(masters)),
        at_least("bf16-update lr 1e-6", share, MOVED_SHARE, "smallest share of a matrix's entries moved"),
    ]


@contextmanager
def _world_of_one() -> Iterator[None]:
    """The process group a multi-GPU run starts (``rankrl.distributed.init_from_env``), with one rank."""
    import socket

    import torch.distributed as dist

    from rankrl import distributed as ddp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    os.environ.update(env, MASTER_PORT=str(port))
    dist.init_process_group(backend=ddp.process_group_backend())
    try:
        yield
    finally:
        dist.destroy_process_group()
        for key in [*env, "MASTER_PORT"]:
            os.environ.pop(key, None)


def check_fsdp2(folder: Path, device: str) -> list[Check]:
    import torch
    import torch.distributed as dist

    from rankrl import distributed as ddp
    from rankrl.models import load_policy

    out = []
    with _world_of_one():
        backend = ddp.process_group_backend()
        devices = ["cpu"] + (["cuda"] if device == "cuda" else [])
        for where in devices:
            t = torch.ones(3, device=where)
            parts = [torch.zeros(3, device=where)]
            try:
                dist.all_reduce(t)
                dist.all_gather(parts, t)
                ok, said = bool(parts[0].sum().item() == 3.0), "sum and gather right"
            except Exception as err:  # what NCCL says to a CPU tensor, if the group cannot route it
                ok, said = False, f"{type(err).__name__}: {err}"
            out.append(Check(f"fsdp2 group {backend} with {where} tensors", ok, said))
        policy, tok = load_policy(str(folder), dtype="bfloat16", device=device, trainable=True)
        before = _snapshot(policy)
        sharded = ddp.shard(policy)
        loss = _sft_update(policy, tok, sharded)
        share = _moved_share(before, policy)
        out.append(
            at_least("fsdp2 update bf16 mixed precision", share, MOVED_SHARE, f"loss {loss:.3f}, moved")
        )
    return out


def check_lora(folder: Path, device: str) -> list[Check]:
    import torch

    from rankrl.models import load_policy
    from rankrl.rollout.vllm import vllm_named_weights

    lora = {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}
    policy, tok = load_policy(str(folder), dtype="bfloat16", device=device, trainable=True, lora=lora)
    before = _snapshot(policy)
    _sft_update(policy, tok, lr=1e-3)  # lora_B starts at zero: a larger step shows in the pushed weights
    after = _snapshot(policy)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    only_adapter = bool(changed) and all("lora_" in n for n in changed)
    pushed = {name: t.float().cpu().clone() for name, t in vllm_named_weights(policy)}
    base = {n.removeprefix("base_model.model.").replace(".base_layer", ""): w for n, w in after.items()}
    merge_moved = any(not torch.equal(pushed[n], base[n]) for n in pushed if "q_proj.weight" in n)
    untouched = max((after[n] - p).abs().max().item() for n, p in _snapshot(policy).items())
    return [
        Check("lora update", only_adapter, f"{len(changed)} tensors changed, all adapter: {only_adapter}"),
        Check("lora folded into a push", merge_moved and len(pushed) > 0, f"{len(pushed)} pushed tensors"),
        at_most("lora push leaves the base", untouched, 0.0, "max |weights after the push - before| (bf16)"),
    ]


def _train_cmd(folder: Path, run: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rankrl.train",
        "model=tiny",
        f"model.path={folder}",
        "model.dtype=bfloat16",
        "rollout=hf",
        "logger=none",
        "task=vowels",
        "task.num_eval_prompts=4",
        "trainer.prompts_per_step=2",
        "trainer.group_size=4",
        "trainer.save_every=1",
        "trainer.keep_checkpoints_when_done=true",
        "trainer.sampling.max_new_tokens=16",
        # no top-k: in bfloat16 a token at the top-k boundary may fall inside the sampler's k and outside the
        # trainer's, which makes the logged engine/trainer gap infinite (seen with vowels' top_k 20, lr 3e-3)
        "trainer.sampling.top_k=0",
        "trainer.lr=1e-5",
        "evaluation.sampling.max_new_tokens=16",
        f"hydra.run.dir={run}",
        *overrides,
    ]


def _train(folder: Path, run: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``python -m rankrl.train`` (``_train_cmd``) in its own process, this checkout first on its path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(_train_cmd(folder, run, *overrides), capture_output=True, text=True, env=env)


def _failed_run(name: str, done: subprocess.CompletedProcess[str]) -> Check:
    """The FAIL line of a training run that exited non-zero: its last stderr line, and the lines before it."""
    said = done.stderr.strip().splitlines() or ["no output"]
    return Check(name, False, said[-1], "\n".join(said[-DETAIL_LINES:]))


def check_grpo_resume(folder: Path, root: Path) -> list[Check]:
    run = root / "grpo"
    first = _train(folder, run, "trainer.max_steps=2")
    if first.returncode != 0:
        return [_failed_run("grpo-resume 2 steps", first)]
    second = _train(folder, run, "trainer.max_steps=3", "trainer.resume=true")
    said = second.stdout + second.stderr
    resumed = next((line for line in said.splitlines() if "resumed from" in line), "")
    rows = [json.loads(line) for line in (run / TRAIN_LOG_FILE).read_text().splitlines()]
    steps = [row["step"] for row in rows]
    gaps = [row.get("sampler_logprob_gap_max", 0.0) for row in rows]
    return [
        Check(
            "grpo-resume 2 steps and a checkpoint", (run / CHECKPOINTS_DIR / "step_000002").is_dir(), "saved"
        ),
        Check(
            "grpo-resume continues at step 2",
            second.returncode == 0 and "step_000002" in resumed and steps == [1, 2, 3],
            f"exit {second.returncode}, logged steps {steps}",
        ),
        at_most("grpo sampler/trainer gap", max(gaps), BF16_LOGPROB_GAP, "max over steps"),
    ]


# The paper profiles' GRPO settings that the resume run leaves at their defaults: the KL term against a
# reference model, which is the LoRA policy with its adapters off or a frozen bfloat16 copy of a fully
# fine-tuned one (each must sit on the policy's device), and sampling at temperature 0.9 under top-k 50.
KL_VARIANTS = {
    "lora": ["model.lora={r: 8, alpha: 16, target_modules: [q_proj, v_proj]}"],
    "full fine-tuning": [],
}


def check_grpo_kl(folder: Path, root: Path) -> list[Check]:
    """4 GRPO steps with beta 0.04 for each reference kind: both finish, the KL is finite at every step,
    and it is positive at the last step once an earlier step has updated the policy (lr 1e-3, so a LoRA
    update shows through bfloat16; a step whose groups all tie has no gradient and moves nothing)."""
    knobs = ["trainer.beta=0.04", "trainer.lr=1e-3", "trainer.max_steps=4", "trainer.save_every=0"]
    knobs += ["trainer.sampling.temperature=0.9", "trainer.sampling.top_k=50"]
    out = []
    for kind, overrides in KL_VARIANTS.items():
        run = root / f"grpo-kl-{kind.replace(' ', '-')}"
        done = _train(folder, run, *knobs, *overrides)
        name = f"grpo-kl {kind}"
        if done.returncode != 0:
            out.append(_failed_run(name, done))
            continue
        rows = [json.loads(line) for line in (run / TRAIN_LOG_FILE).read_text().splitlines()]
        kls = [row.get("kl", float("nan")) for row in rows]
        finite = len(kls) == 4 and all(abs(kl) < float("inf") for kl in kls)  # nan fails the comparison
        moved = any(row.get("grad_norm", 0.0) > 0 for row in rows[:-1])
        out.append(
            Check(
                name,
                finite and moved and kls[-1] > 0,
                f"kl per step {[f'{kl:.3g}' for kl in kls]}, updated before the last: {moved}",
            )
        )
    return out


def guarded(name: str, checks: Callable[[], list[Check]]) -> list[Check]:
    """A check group's lines, or one FAIL line with the error if it raises: on a lent GPU one call must report
    every group, so a crash in one (an exception CUDA alone raises) must not hide the groups after it."""
    try:
        return checks()
    except Exception as err:
        tail = traceback.format_exc().strip().splitlines()[-DETAIL_LINES:]
        return [Check(name, False, f"raised {type(err).__name__}: {err}".splitlines()[0], "\n".join(tail))]


def trainer_checks(device: str, root: Path) -> Iterator[Check]:
    def logprobs(arch: str) -> list[Check]:
        return check_logprobs(tiny_model_folder(arch, root), arch, device)

    for arch in ARCHITECTURES:
        yield from guarded(f"logprobs {arch}", partial(logprobs, arch))
    yield from guarded("bf16-update", lambda: check_bf16_update(tiny_model_folder("qwen3", root), device))
    yield from guarded("fsdp2", lambda: check_fsdp2(tiny_model_folder("qwen3", root), device))
    yield from guarded("lora", lambda: check_lora(tiny_model_folder("qwen2", root), device))
    yield from guarded("grpo-resume", lambda: check_grpo_resume(tiny_model_folder("qwen3", root), root))
    yield from guarded("grpo-kl", lambda: check_grpo_kl(tiny_model_folder("qwen2", root), root))
    yield from guarded("hybrid", lambda: check_hybrid(hybrid_model_folder(root), device))


# ---------------------------------------------------------------------------------------------- vLLM
def check_vllm(folder: Path, root: Path) -> Iterator[Check]:
    import torch

    from rankrl.models import load_policy
    from rankrl.rl.batch import to_policy_batch, token_logprobs
    from rankrl.rollout.base import SamplingParams
    from rankrl.rollout.vllm import VLLMEngine

    policy, tok = load_policy(str(folder), dtype="float32", device="cuda", trainable=True)
    torch.cuda.empty_cache()
    free_before = torch.cuda.mem_get_info()[0]
    engine = VLLMEngine(policy, tok, kv_cache_gib=2.0, enable_sleep_mode=True)
    torch.cuda.empty_cache()
    held = (free_before - torch.cuda.mem_get_info()[0]) / 2**30
    yield Check(  # an update may follow the start (SFT never generates): the engine must not hold the GPU
        "vllm asleep after start", held < 1.0, f"{held:.2f} GiB held after the start (its KV cache: 2 GiB)"
    )
    yield at_most(
        "vllm logprobs float32", _sampled_gap(policy, tok, engine), VLLM_FP32_LOGPROB_GAP, "max gap"
    )

    stale = engine.generate(PROMPTS, n=2, sampling=SamplingParams(max_new_tokens=16, temperature=1.0))
    batch = to_policy_batch(stale, tok.pad_token_id)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    for _ in range(2):  # raise the sampled completions' likelihood, moving the policy off the engine's
        mask = batch.response_mask.cuda()
        loss = -(token_logprobs(policy, batch) * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    before_push = _sampled_gap(policy, tok, engine)
    engine.sync_weights(policy)
    after_push = _sampled_gap(policy, tok, engine)
    yield Check(
        "vllm push",
        before_push > 10 * VLLM_FP32_LOGPROB_GAP and after_push <= VLLM_FP32_LOGPROB_GAP,
        f"gap to the updated policy {before_push:.3g} before the push, {after_push:.3g} after (<= "
        f"{VLLM_FP32_LOGPROB_GAP:g})",
    )

    roles = {}
    for role in ("query", "item"):
        role_policy, _ = load_policy(str(folder), dtype="bfloat16", device="cuda")
        roles[role] = VLLMEngine(role_policy, tok, kv_cache_gib=0.25, enable_sleep_mode=True)
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    for role, other in (("query", "item"), ("item", "query")):
        mine = roles[role].generate(PROMPTS, n=1, sampling=greedy)
        roles[other].generate(PROMPTS, n=1, sampling=greedy)  # the other's wake, generate and sleep
        again = roles[role].generate(PROMPTS, n=1, sampling=greedy)
        diff = max(abs(a - b) for x, y in zip(mine.logprobs, again.logprobs) for a, b in zip(x, y))
        same = mine.completion_ids == again.completion_ids
        yield Check(
            f"vllm two roles: {role} after {other}'s cycle",
            same and diff <= 1e-6,
            f"max |Δ logprob| {diff:.3g}",
        )

    run = root / "grpo-vllm"
    done = _train(folder, run, "trainer.max_steps=2", "rollout=vllm", "rollout.kv_cache_gib=0.5")
    log = run / TRAIN_LOG_FILE
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    gap = max((r.get("sampler_logprob_gap_max", 0.0) for r in rows), default=float("inf"))
    yield Check(
        "vllm 2 GRPO steps",
        done.returncode == 0 and len(rows) == 2 and gap <= BF16_LOGPROB_GAP,
        f"exit {done.returncode}, {len(rows)} steps, max sampler/trainer gap {gap:.3g}"
        f" <= {BF16_LOGPROB_GAP:g}",
    )


# ---------------------------------------------------------------------------------------------- main
def environment_line(device: str) -> str:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "none (CPU run)"
    return (
        f"# device {device}: {gpu}; python {sys.version.split()[0]}; torch {torch.__version__} "
        f"(CUDA {torch.version.cuda}); transformers {transformers.__version__}"
    )


def run(part: str, device: str) -> int:
    checks: Callable[[Path], Iterator[Check]]
    if part == "trainer":
        checks = lambda root: trainer_checks(device, root)  # noqa: E731
    else:
        checks = lambda root: check_vllm(tiny_model_folder("qwen3", root), root)  # noqa: E731
    print(environment_line(device), flush=True)
    start, failed = time.perf_counter(), 0
    with tempfile.TemporaryDirectory(prefix="rankrl-gpu-check-") as tmp:
        for check in checks(Path(tmp)):
            failed += not check.passed
            print(check.line(), flush=True)
    verdict = "all passed" if not failed else f"{failed} failed"
    print(f"# {part}: {verdict} in {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rankrl.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["trainer", "vllm"])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
    except ModuleNotFoundError:
        print(f"gpu-check {args.part}: {sys.executable} has no torch; GPU_PYTHON= names one with CUDA torch")
        return 2

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu-check {args.part}: no CUDA GPU on this machine (torch {torch.__version__}); nothing checked"
        )
        return 0
    if args.part == "vllm" and args.device != "cuda":
        parser.error("the vllm part runs on a GPU only")
    return run(args.part, args.device)


if __name__ == "__main__":
    sys.exit(main())
