"""F-GRPO's paper profile as the reproduce script composes it: which learning rate reaches which pipeline
stage, and which data each benchmark reads at each scale."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rankrl.pipeline import expand
from tests.conftest import compose


def stage_configs(overrides: list[str]) -> dict[str, object]:
    """Each pipeline stage's config, composed as rankrl.pipeline runs it (the stage's overrides first, the
    command line's after them)."""
    cfg = compose("train", overrides)
    stages = expand(OmegaConf.to_container(cfg.pipeline, resolve=True))
    return {s.name: compose(s.entry, [*s.overrides, *overrides]) for s in stages}


@pytest.mark.parametrize("benchmark", ["musique", "hotpotqa"])
def test_the_2b_models_qa_learning_rate_reaches_only_the_grpo_stage(benchmark: str):
    """Appendix E.2: GRPO at 5e-6, 2e-6 for Qwen3.5-2B on QA. experiments/fgrpo/reproduce.sh passes
    schedule.grpo_lr=2e-6 to the F-GRPO and GRPO pipelines; their SFT stage keeps the SFT rate."""
    base = ["experiment=fgrpo/fgrpo", "profile=paper", "model=qwen3.5-2b", f"benchmark={benchmark}"]
    default = stage_configs(base)
    assert default["fgrpo"].trainer.lr == 5e-6
    qa = stage_configs([*base, "schedule.grpo_lr=2e-6"])
    assert qa["fgrpo"].trainer.lr == 2e-6
    assert qa["sft"].trainer.lr == default["sft"].trainer.lr == qa["sft"].schedule.sft_lr != 2e-6
    grpo = stage_configs(["experiment=fgrpo/grpo", *base[1:], "schedule.grpo_lr=2e-6"])
    assert grpo["grpo"].trainer.lr == 2e-6


def test_the_cpu_profile_keeps_its_rates():
    stages = stage_configs(["experiment=fgrpo/fgrpo", "profile=cpu"])
    assert (stages["sft"].trainer.lr, stages["fgrpo"].trainer.lr) == (1e-4, 1e-5)


# the official files the paper profile reads (conf/benchmark/<name>.yaml paper_options): train, validation
RELEASE_FILES = {
    "musique": ("musique_ans_v1.0_train.jsonl", "musique_ans_v1.0_dev.jsonl"),
    "hotpotqa": ("hotpot_train_v1.1.json", "hotpot_dev_distractor_v1.json"),
}


@pytest.mark.parametrize("name", sorted(RELEASE_FILES))
def test_paper_profile_reads_the_full_qa_releases_and_the_cpu_and_smoke_rows_the_subsets(name: str):
    options = {
        profile: compose(
            "train", ["experiment=fgrpo/fgrpo", f"profile={profile}", f"benchmark={name}"]
        ).task.benchmark_options
        for profile in ("paper", "cpu", "smoke")
    }
    assert (options["paper"].file, options["paper"].eval_file) == RELEASE_FILES[name]
    assert options["paper"].max_questions == 10_000  # Appendix B.2
    for small in (options["cpu"], options["smoke"]):
        assert small.file == f"{name}_train.json" and "eval_file" not in small


@pytest.mark.parametrize("name", sorted(RELEASE_FILES))
def test_the_paper_options_load_real_records_in_the_official_format(tmp_path, data_dir, name: str):
    """The composed paper options (file names, keys) reach the real loader and the task's pool rules hold;
    only the sizes shrink to what 100 real questions allow."""
    from rankrl.data import load_benchmark
    from rankrl.tasks.fgrpo import FGRPOTask
    from tests.data.test_load_qa import _write_release

    _write_release(tmp_path, data_dir, name)
    cfg = compose("train", ["experiment=fgrpo/fgrpo", "profile=paper", f"benchmark={name}"])
    options = {**OmegaConf.to_container(cfg.task.benchmark_options), "max_questions": 40}
    options |= {"dev_questions": 10, "test_questions": 20}
    bench = load_benchmark(name, tmp_path, **options)
    task = FGRPOTask(benchmark=bench, seed=0)
    assert [len(task.pools(s)) for s in ("train", "dev", "test")] == [40, 10, 20]


def test_paper_profile_orders_lastfm_by_tag_time_and_its_prompt_says_so(tmp_path, data_dir):
    """Last.fm has no listening times; at profile=paper a user's artists come in the order of their first
    tag (rankrl.data.recsys), and the prompt says what the order is. The CPU and smoke rows keep play
    counts."""
    import shutil

    from rankrl.data import load_benchmark
    from rankrl.tasks.fgrpo import FGRPOTask, factorized_messages

    orders = {
        p: compose(
            "train", ["experiment=fgrpo/fgrpo", f"profile={p}", "benchmark=lastfm"]
        ).task.benchmark_options
        for p in ("paper", "cpu", "smoke")
    }
    assert [orders[p].order for p in ("paper", "cpu", "smoke")] == ["tags", "plays", "plays"]
    folder = tmp_path / "lastfm-hetrec2011"
    folder.mkdir()
    shutil.copyfile(data_dir / "lastfm-hetrec2011" / "artists.dat", folder / "artists.dat")
    rows = "".join(f"{u}\t{50 + a}\t1\t{(10 - a) * 86_400_000}\n" for u in (2, 3) for a in range(6))
    (folder / "user_taggedartists-timestamps.dat").write_text("userID\tartistID\ttagID\ttimestamp\n" + rows)
    bench = load_benchmark("lastfm", tmp_path, **OmegaConf.to_container(orders["paper"]))
    (pool,) = FGRPOTask(benchmark=bench).pools("test", 1)
    prompt = factorized_messages(pool)[1]["content"]
    assert prompt.startswith("Artists the user tagged, oldest first:\n")
    assert "the artist the user will tag next" in prompt
    assert bench.qrels[pool.uid] == {"50": 1}  # tagged last (day 10 - 0)
    cpu = load_benchmark("lastfm", data_dir, **OmegaConf.to_container(orders["cpu"]))
    (cpu_pool,) = FGRPOTask(benchmark=cpu).pools("test", 1)
    assert factorized_messages(cpu_pool)[1]["content"].startswith(
        "Artists the user listened to, least played"
    )
