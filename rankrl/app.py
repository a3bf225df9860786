"""Building a run's parts from its composed config; shared by the train and evaluate entry points."""

from __future__ import annotations

import inspect
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from rankrl import distributed as ddp
from rankrl.rollout.base import Generator, RolloutEngine, SamplingParams, engine_generator

log = logging.getLogger(__name__)


def task_uses_model(cfg: DictConfig) -> bool:
    """Whether the task needs an LLM (first-stage baselines do not)."""
    return bool(getattr(get_class(cfg.task._target_), "uses_model", True))


def build_policy(cfg: DictConfig, ckpt_path: str | None = None) -> tuple[torch.nn.Module, Any]:
    """The policy and its tokenizer; weights from ``ckpt_path`` (a trainer checkpoint) when given."""
    from rankrl.models import load_policy

    lora = OmegaConf.to_container(cfg.model.lora, resolve=True) if cfg.model.get("lora") else None
    policy, tokenizer = load_policy(
        str(cfg.model.path), dtype=cfg.model.dtype, lora=lora, device=_load_device(cfg)
    )
    if ckpt_path:
        from rankrl.rl.checkpoint import load_policy_weights

        load_policy_weights(policy, _policy_dir(Path(ckpt_path)))
        log.info("loaded policy weights from %s", ckpt_path)
    return policy, tokenizer


def build_reference(cfg: DictConfig) -> torch.nn.Module | None:
    """The frozen reference policy for the KL term: needed only when ``trainer.beta > 0`` and the whole
    model is trained (with LoRA the reference is the policy with its adapter switched off)."""
    from rankrl.models import load_policy

    if not cfg.trainer.get("beta", 0) or cfg.model.get("lora"):
        return None
    ref, _ = load_policy(str(cfg.model.path), dtype=cfg.model.dtype, device=_load_device(cfg))
    ref.eval().requires_grad_(False)
    return ddp.shard(ref) if _sharded(cfg) else ref


def _sharded(cfg: DictConfig) -> bool:
    return cfg.get("trainer") is not None and cfg.trainer.get("strategy") == "fsdp" and ddp.world_size() > 1


def _load_device(cfg: DictConfig) -> str:
    # FSDP moves each rank's shard to its GPU, so the whole model is only ever held in host memory
    return "cuda" if torch.cuda.is_available() and not _sharded(cfg) else "cpu"


def _policy_dir(ckpt: Path) -> Path:
    """Accept a checkpoint folder, its ``policy`` subfolder, or a ``checkpoints`` folder (its latest)."""
    from rankrl.rl.checkpoint import latest_checkpoint

    if (ckpt / "policy").is_dir():
        return ckpt / "policy"
    if (ckpt / "latest").exists():
        found = latest_checkpoint(ckpt)
        if found is not None:
            return found / "policy"
    if ckpt.is_dir():
        return ckpt
    raise FileNotFoundError(f"ckpt_path={ckpt} is not a checkpoint folder written by rankrl.train")


def instantiate_component(node: DictConfig, **kwargs: Any) -> Any:
    """Instantiate a group's node; its ``name`` key labels the choice and is not a constructor argument."""
    resolved = OmegaConf.to_container(node, resolve=True)  # interpolations need the whole config
    resolved.pop("name", None)
    return instantiate(resolved, _convert_="all", **kwargs)


def build_engine(cfg: DictConfig, policy: torch.nn.Module, tokenizer: Any) -> RolloutEngine:
    if _sharded(cfg) and cfg.rollout.get("name") == "vllm" and cfg.model.get("lora"):
        raise ValueError("trainer.strategy=fsdp with rollout=vllm and LoRA is not supported (the adapter "
                         "would have to be merged into sharded weights); LoRA policies fit per GPU: use "
                         "trainer.strategy=ddp")
    return instantiate_component(cfg.rollout)(policy, tokenizer)


def build_task(cfg: DictConfig, tokenizer: Any = None) -> Any:
    """Instantiate ``cfg.task``, passing the tokenizer to tasks whose constructor takes one."""
    params = inspect.signature(get_class(cfg.task._target_)).parameters
    return instantiate_component(cfg.task, **({"tokenizer": tokenizer} if "tokenizer" in params else {}))


def eval_generator(cfg: DictConfig, engine: RolloutEngine, sampling: SamplingParams) -> Generator:
    """Evaluation decodes greedily unless ``eval_temperature`` says otherwise."""
    return engine_generator(engine, replace(sampling, temperature=float(cfg.get("eval_temperature", 0.0))))


def run_evaluation(cfg: DictConfig, task: Any, generate: Generator | None) -> dict[str, Any]:
    """Run the task's inference on ``cfg.eval_split`` (first ``eval_limit`` queries when set)."""
    kwargs: dict[str, Any] = {}
    if cfg.get("eval_limit") and "limit" in inspect.signature(task.evaluate).parameters:
        kwargs["limit"] = int(cfg.eval_limit)
    return task.evaluate(generate, cfg.eval_split, **kwargs)
