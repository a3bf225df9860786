"""Rank-R1's paper profile as the official code runs it (ielab/llm-rankers at 3b988fa): the LoRA modules
PEFT picks when LoraConfig names none, and BRIGHT's candidates cut at 100 before the excluded documents go.
The settings themselves are rows of experiments/rankr1/paper_settings.yaml, which
tests/config/test_paper_settings.py holds to the composed configs."""

from __future__ import annotations

from pathlib import Path

from rankrl.data.records import Benchmark, Document, Query
from rankrl.models import apply_lora, load_policy, tiny_paper_path
from rankrl.rollout.base import Generation
from rankrl.tasks.rankr1 import RankR1Task
from tests.conftest import compose


def _adapted_modules(model) -> set[str]:
    return {name.rsplit(".lora_A", 1)[0] for name, _ in model.named_modules() if name.endswith(".lora_A")}


def test_paper_lora_adapts_what_the_official_lora_config_adapts(model_dir: Path):
    """train_grpo.py's LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, bias="none") names no
    target_modules; PEFT then picks its default for Qwen2. The paper profile's explicit list adapts the
    same modules of a Qwen2.5-shaped model (q_proj and v_proj of every layer)."""
    from peft import LoraConfig, get_peft_model

    official = get_peft_model(
        load_policy(tiny_paper_path("qwen2.5-7b", model_dir))[0],
        LoraConfig(task_type="CAUSAL_LM", r=16, lora_alpha=32, lora_dropout=0.05, bias="none"),
    )
    lora = compose("train", ["experiment=rankr1/rankr1_grpo", "profile=paper"]).model.lora
    ours = apply_lora(load_policy(tiny_paper_path("qwen2.5-7b", model_dir))[0], dict(lora))
    assert _adapted_modules(ours) == _adapted_modules(official)
    assert {name.rsplit(".", 1)[1] for name in _adapted_modules(ours)} == {"q_proj", "v_proj"}


def _bright_like(n_docs: int) -> Benchmark:
    """A query whose best BM25 match is an excluded document, over more documents than the rerank depth."""
    corpus = {"excluded": Document("excluded", "apple apple apple apple")}
    corpus |= {f"d{i:03d}": Document(f"d{i:03d}", "apple " + "pear " * (i + 1)) for i in range(n_docs)}
    queries = {"q": Query("q", "apple", {"excluded_ids": ["excluded"]})}
    return Benchmark("bright-x", queries, corpus, {"q": {"d000": 1}}, {"test": ["q"]})


def test_bright_reranks_the_top_100_less_the_excluded_as_the_official_run(tmp_path: Path):
    """rankr1/*_bright (refill_excluded: false): BM25's top 100 with the excluded document dropped leaves 99
    candidates (Rank-R1/bright/search.sh --hits 100, then filter_run.py); the refilled run keeps 100."""
    train = Benchmark("train-x", {}, {}, {}, {})
    judge = {"policy": lambda prompts: [Generation("no answer") for _ in prompts]}  # every node stays
    ranked = {}
    for refill in (True, False):
        task = RankR1Task(
            train, _bright_like(120), construction="judged_pool", cache_dir=tmp_path, refill_excluded=refill
        )
        out = task.evaluate(judge, "test")
        assert "excluded" not in out["run"]["q"]
        ranked[refill] = out["run"]["q"]
    assert len(ranked[True]) == 100 and len(ranked[False]) == 99
    assert set(ranked[False]) < set(ranked[True])  # the same documents, the 100th of the refill left out
    for name in ("setwise_bright", "rankr1_zeroshot_bright", "setwise_sft_bright", "rankr1_grpo_bright"):
        assert (
            compose("evaluate", [f"experiment=rankr1/{name}", "profile=paper"]).task.refill_excluded is False
        )
