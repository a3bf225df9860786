"""Relative gains (rankrl.report.gains): ours, the mean over seeds, beside the paper's published gain."""

from __future__ import annotations

import pandas as pd

from rankrl.report.collect import COLUMNS
from rankrl.report.gains import relative_gains


def test_relative_gains_put_ours_beside_the_papers():
    def run(experiment, value, model="smollm2-135m", seed=0):
        return {
            **dict.fromkeys(COLUMNS),
            "experiment": experiment,
            "benchmark": "movielens-100k",
            "metric": "R@3",
            "model": model,
            "scale": "cpu",
            "value": value,
            "seed": seed,
        }

    runs = [run("f/fgrpo", 0.2), run("f/fgrpo", 0.4, seed=1), run("f/sft", 0.2), run("f/fgrpo", 0.5, "big")]
    runs = pd.DataFrame(runs, columns=COLUMNS)  # F-GRPO over two seeds: mean 0.3
    comparisons = [
        {
            "benchmark": "movielens-100k",
            "metric": "R@3",
            "method": "F-GRPO",
            "over": "SFT",
            "paper": 82.9,
            "paper_model": "qwen3-4b",
            "ours": "f/fgrpo",
            "baseline": "f/sft",
        },
        {
            "benchmark": "lastfm",
            "metric": "R@3",
            "method": "F-GRPO",
            "over": "SFT",
            "paper": None,
            "ours": "f/fgrpo",
            "baseline": "f/sft",
        },
    ]
    table = relative_gains(runs, comparisons)
    assert table[["model", "ours", "paper"]].values.tolist() == [
        ["smollm2-135m", "+50.0%", "+82.9% (P, qwen3-4b)"],
        ["-", "missing", "-"],
    ]
