"""Building a run's parts from its composed config; shared by the train and evaluate entry points.

Roles. A run has one trained policy (the role ``train_role``) and, for methods that train several
policies, frozen roles that serve generation. ``cfg.roles`` maps each role to ``{model, init_from}``; when
it is empty the run has the single role ``policy`` built from ``cfg.model`` and ``cfg.init_from``. Every
role gets its own model object and its own engine, so no update ever reaches another role's weights.

``init_from`` names the run whose final weights start a role: a run folder, or an experiment name
(``outputs/<experiment>/<scale>-<model>/seed<seed>``, the folder that experiment writes:
``rankrl.run_folders``). A run that has not finished stops with the command that makes it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from rankrl import distributed as ddp
from rankrl import run_folders
from rankrl.config import check_train_role_declared
from rankrl.errors import ConfigError, EnvironmentProblem
from rankrl.rl.config import eval_sampling
from rankrl.rl.task import DEFAULT_ROLE, EvalTask
from rankrl.rollout.base import Generator, RolloutEngine, engine_generator, with_progress

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------- tasks


def task_uses_model(cfg: DictConfig) -> bool:
    """Whether the task needs an LLM (first-stage baselines do not); declared by the task class."""
    return bool(get_class(cfg.task._target_).uses_model)


def check_machine(cfg: DictConfig) -> None:
    """A paper-scale run of a model needs a GPU: stop before anything loads, naming the CPU alternative."""
    if cfg.get("scale") == "paper" and task_uses_model(cfg) and not torch.cuda.is_available():
        raise EnvironmentProblem(
            "profile=paper trains and serves the paper's models on CUDA GPUs, and this machine has none; "
            "`make smoke-<paper>` (profile=smoke) runs the same path on the CPU with tiny random models"
        )


def build_task(cfg: DictConfig) -> EvalTask:
    """Instantiate ``cfg.task`` (a task that needs a tokenizer names its path in its config node)."""
    task = instantiate_component(cfg.task)
    if not isinstance(task, EvalTask):
        raise ConfigError(f"task {cfg.task._target_} does not implement rankrl.rl.task.EvalTask")
    return task


def instantiate_component(node: DictConfig | dict, **kwargs: Any) -> Any:
    """Instantiate a group's node; its ``name`` key labels the choice and is not a constructor argument."""
    resolved = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    resolved.pop("name", None)
    return instantiate(resolved, _convert_="all", **kwargs)


# ---------------------------------------------------------------------------------------------------- roles


@dataclass
class Role:
    """One policy of a run: its model node, the run its weights start from, and what was built."""

    name: str
    model_cfg: DictConfig
    init_from: Path | None
    policy: torch.nn.Module | None = None
    tokenizer: Any = None
    engine: RolloutEngine | None = None


def role_specs(cfg: DictConfig) -> dict[str, tuple[DictConfig, Any]]:
    """role name -> (model node, init_from value) from ``cfg.roles``, or the single ``policy`` role."""
    roles = cfg.get("roles") or {}
    if not roles:
        return {DEFAULT_ROLE: (cfg.model, cfg.get("init_from"))}
    return {name: (node.get("model") or cfg.model, node.get("init_from")) for name, node in roles.items()}


def build_roles(
    cfg: DictConfig, ckpt_path: str | None = None, train_role: str | None = None
) -> dict[str, Role]:
    """Every role of the run with its own policy, tokenizer and engine.

    ``ckpt_path`` (a checkpoint folder of a single-role run) takes the place of ``init_from``. The role
    ``train_role`` is built to be trained (float32 master weights of a half-precision model,
    ``rankrl.precision``); the others, frozen, in their compute dtype.
    """
    specs = role_specs(cfg)
    if ckpt_path and len(specs) > 1:
        raise ConfigError(
            f"ckpt_path names one checkpoint but the run has roles {sorted(specs)}: set "
            "roles.<role>.init_from instead"
        )
    out = {}
    for name, (model_cfg, init_from) in specs.items():
        start = Path(ckpt_path) if ckpt_path else resolve_init_from(init_from, cfg) if init_from else None
        role = Role(name, model_cfg, start)
        trained = name == train_role
        role.policy, role.tokenizer = build_policy(cfg, model_cfg, role.init_from, trained, shard=trained)
        role.engine = build_engine(cfg, role.policy, role.tokenizer)
        out[name] = role
    return out


def check_train_role(cfg: DictConfig, task: EvalTask) -> str:
    """The role ``cfg.train_role`` (conf/train.yaml: ``policy``), after checking that the run declares it."""
    role = check_train_role_declared(cfg)
    declared = set(role_specs(cfg))
    if set(task.roles) != declared:
        raise ConfigError(
            f"task {task.name!r} has roles {list(task.roles)} but the config declares "
            f"{sorted(declared)} (set `roles:` in the experiment)"
        )
    return role


def resolve_init_from(value: str | Path, cfg: DictConfig) -> Path:
    """The finished run folder that ``value`` names: a folder, or an experiment name (its seed's folder);
    the same answer experiments/lib.sh gets before it launches a row (``rankrl.run_folders``)."""
    try:
        return run_folders.finished_training_run(
            value, scale=cfg.scale, model=cfg.model.name, seed=cfg.seed, logs=cfg.paths.log_dir
        )
    except run_folders.InputMissing as err:
        raise ConfigError(str(err)) from None


def build_policy(
    cfg: DictConfig,
    model_cfg: DictConfig | None = None,
    init_from: Path | None = None,
    trainable: bool = False,
    shard: bool = False,
) -> tuple[torch.nn.Module, Any]:
    """A policy and its tokenizer; weights from ``init_from`` (a run folder or checkpoint folder) when
    given; ``trainable``: the policy an optimizer steps (``rankrl.models.load_policy``); ``shard``: the
    run's strategy will shard it (the trained role, the KL reference), so under FSDP it loads in host
    memory."""
    from rankrl.models import load_policy

    model_cfg = model_cfg if model_cfg is not None else cfg.model
    lora = OmegaConf.to_container(model_cfg.lora, resolve=True) if model_cfg.get("lora") else None
    template = model_cfg.get("chat_template_kwargs")
    policy, tokenizer = load_policy(
        str(model_cfg.path),
        dtype=model_cfg.dtype,
        lora=lora,
        device=load_device(cfg, shard),
        chat_template_kwargs=OmegaConf.to_container(template) if template else None,
        trainable=trainable,
    )
    if init_from is not None:
        from rankrl.rl.checkpoint import load_policy_weights

        load_policy_weights(policy, policy_dir(Path(init_from)))
        log.info("loaded policy weights from %s", init_from)
    return policy, tokenizer


def build_reference(cfg: DictConfig, model_cfg: DictConfig, init_from: Path | None) -> torch.nn.Module | None:
    """The frozen reference for the KL term: needed only when ``trainer.beta > 0`` and the whole model is
    trained (with LoRA the reference is the policy with its adapter switched off). It starts from the same
    weights as the policy, so a stage after SFT is held near the SFT model."""
    if not cfg.trainer.get("beta", 0) or model_cfg.get("lora"):
        return None
    ref, _ = build_policy(cfg, model_cfg, init_from, shard=True)
    ref.eval().requires_grad_(False)
    return ddp.shard(ref) if _sharded(cfg) else ref


def _sharded(cfg: DictConfig) -> bool:
    return cfg.get("trainer") is not None and cfg.trainer.get("strategy") == "fsdp" and ddp.world_size() > 1


def load_device(cfg: DictConfig, shard: bool) -> str:
    """Where a model loads: its GPU, except under FSDP on several GPUs, where a model it will shard loads in
    host memory (each rank moves only its shard to its GPU) and so does a frozen role whose generation its
    own vLLM engine serves (its weights there are needed only to fill that engine: the GPU plan counts it
    so). A frozen role that generates itself (rollout=hf) loads on its GPU."""
    if not torch.cuda.is_available():
        return "cpu"
    if not _sharded(cfg):
        return "cuda"
    return "cpu" if shard or cfg.rollout.get("name") == "vllm" else "cuda"


def policy_dir(ckpt: Path) -> Path:
    """Accept a run folder, a ``checkpoints`` folder (its latest), a checkpoint folder or its ``policy``."""
    from rankrl.rl.checkpoint import latest_checkpoint

    for root in (ckpt / run_folders.CHECKPOINTS_DIR, ckpt):
        if (root / "latest").exists():
            found = latest_checkpoint(root)
            if found is not None:
                return found / "policy"
    if (ckpt / "policy").is_dir():
        return ckpt / "policy"
    if ckpt.is_dir() and any(ckpt.glob("*.safetensors")):
        return ckpt
    raise ConfigError(f"{ckpt} holds no policy weights written by rankrl.train")


FINGERPRINT_CHUNK = 1 << 24  # elements a float64 copy is made of at once: 128 MiB


def _float64_sums(p: torch.Tensor) -> tuple[float, float]:
    """(sum, sum of |x|) of a tensor in float64, a chunk at a time: a whole float64 copy of a 14B model's
    embedding is 5.8 GiB, more than a GPU has free with the engine started."""
    total = absolute = 0.0
    for chunk in p.reshape(-1).split(FINGERPRINT_CHUNK):
        wide = chunk.double()
        total += wide.sum().item()
        absolute += wide.abs().sum().item()
    return total, absolute


def weights_fingerprint(model: torch.nn.Module) -> str:
    """A short fingerprint of every parameter's values: equal weights, equal fingerprints (one pass, cheap).
    A sharded policy's parameters are gathered first (a collective: every rank calls this)."""
    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in sorted(model.state_dict().items()):
            p = ddp.full_tensor(p)
            if p.is_floating_point():
                total, absolute = _float64_sums(p)
                h.update(f"{name}:{total:.10e}:{absolute:.10e}".encode())
    return h.hexdigest()[:16]


def evaluation_needs_every_rank(policy: torch.nn.Module, engines: Iterable[Any]) -> bool:
    """Whether the final evaluation (greedy, the same on every rank) must run on all ranks rather than the
    main one alone: a sharded policy's forward needs every rank's shard, and an engine whose tensor-parallel
    group spans ranks generates only with all of them (the main rank alone would wait on them forever)."""
    return ddp.is_sharded(policy) or any(getattr(engine, "tp", 1) > 1 for engine in engines)


def build_engine(cfg: DictConfig, policy: torch.nn.Module, tokenizer: Any) -> RolloutEngine:
    if _sharded(cfg) and cfg.rollout.get("name") == "vllm" and cfg.model.get("lora"):
        raise ConfigError(
            "trainer.strategy=fsdp with rollout=vllm and LoRA is not supported (the adapter "
            "would have to be merged into sharded weights); LoRA policies fit per GPU: use "
            "trainer.strategy=ddp"
        )
    return instantiate_component(cfg.rollout)(policy, tokenizer)


# ----------------------------------------------------------------------------------------------- evaluation


def generators(cfg: DictConfig, roles: Mapping[str, Role]) -> dict[str, Generator]:
    """One evaluation generator per role, each over the role's own engine."""
    return {
        name: with_progress(engine_generator(role.engine, eval_sampling(cfg, name)), f"{name} generations")
        for name, role in roles.items()
    }


def run_evaluation(cfg: DictConfig, task: EvalTask, gens: Mapping[str, Generator]) -> dict[str, Any]:
    """Run the task's inference on ``cfg.eval_split`` (first ``eval_limit`` queries when set)."""
    limit = int(cfg.eval_limit) if cfg.get("eval_limit") else None
    return task.evaluate(gens, cfg.eval_split, limit)
