"""CIRR's reference captions (rankrl.data.images_captions): the real transformers path (processor, BLIP-2's
generate, decoding) on a tiny random BLIP-2 built here, over PNGs in CIRR's layout; the CIRR prompt reads
them. The real captioner (Salesforce/blip2-opt-2.7b) is loaded by hub name on GPU machines only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rankrl.data.errors import MissingDataError
from rankrl.data.images_captions import DEFAULT_CAPTIONER, main, write_reference_captions
from rankrl.tasks.grape import GrapeTask

SMOLLM2 = Path(__file__).resolve().parents[2] / ".cache" / "models" / "smollm2-135m"


@pytest.fixture(scope="module")
def tiny_blip2(tmp_path_factory, model_dir: Path) -> Path:
    """A randomly initialised BLIP-2 (ViT, Q-Former, OPT decoder, one layer each) with SmolLM2's tokenizer."""
    from transformers import (
        AutoTokenizer,
        Blip2Config,
        Blip2ForConditionalGeneration,
        Blip2Processor,
        Blip2QFormerConfig,
        Blip2VisionConfig,
        BlipImageProcessor,
        OPTConfig,
    )

    tokenizer = AutoTokenizer.from_pretrained(model_dir / "smollm2-135m")
    processor = Blip2Processor(
        BlipImageProcessor(size={"height": 32, "width": 32}), tokenizer, num_query_tokens=4
    )
    image_token = processor.tokenizer.convert_tokens_to_ids(str(processor.image_token))
    small = {"num_hidden_layers": 1, "num_attention_heads": 2}
    config = Blip2Config(
        vision_config=Blip2VisionConfig(
            hidden_size=32, intermediate_size=64, image_size=32, patch_size=8, **small
        ).to_dict(),
        qformer_config=Blip2QFormerConfig(
            hidden_size=32, intermediate_size=64, encoder_hidden_size=32, **small
        ).to_dict(),
        text_config=OPTConfig(
            vocab_size=len(processor.tokenizer),
            hidden_size=32,
            ffn_dim=64,
            word_embed_proj_dim=32,
            max_position_embeddings=128,
            bos_token_id=tokenizer.bos_token_id or 0,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id or 0,
            **small,
        ).to_dict(),
        num_query_tokens=4,
        image_token_index=image_token,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-blip2")
    Blip2ForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def _cirr(root: Path, n_images: int = 3) -> dict[str, str]:
    """CIRR's validation files for four queries over ``n_images`` photographs (three references)."""
    folder = root / "cirr"
    (folder / "images" / "dev").mkdir(parents=True)
    rng = np.random.default_rng(0)
    split = {}
    for i in range(n_images):
        image_id = f"dev-{i}-0-img0"
        split[image_id] = f"./dev/{image_id}.png"
        Image.fromarray(rng.integers(0, 255, (24 + i, 30, 3), dtype=np.uint8)).save(
            folder / "images" / split[image_id]
        )
    pairs = [(0, 1), (1, 2), (2, 0), (0, 2)]
    captions = [
        {
            "pairid": k,
            "reference": f"dev-{a}-0-img0",
            "target_hard": f"dev-{b}-0-img0",
            "caption": f"change {k}",
            "img_set": {"members": list(split)},
        }
        for k, (a, b) in enumerate(pairs)
    ]
    (folder / "cap.rc2.val.json").write_text(json.dumps(captions))
    (folder / "split.rc2.val.json").write_text(json.dumps(split))
    return split


def test_every_reference_image_gets_a_caption_the_cirr_prompt_reads(tmp_path: Path, tiny_blip2: Path):
    _cirr(tmp_path)
    path = write_reference_captions(tmp_path, model=str(tiny_blip2), batch_size=2, max_new_tokens=4)
    assert path == tmp_path / "cirr" / "reference_captions.json"
    captions = json.loads(path.read_text())
    assert sorted(captions) == ["dev-0-0-img0", "dev-1-0-img0", "dev-2-0-img0"]  # each reference once
    assert all(isinstance(c, str) and "<image>" not in c for c in captions.values())
    # greedy: the same captions again, in batches of 3 instead of 2; and a kept file is not rewritten
    again = write_reference_captions(
        tmp_path, model=str(tiny_blip2), out=tmp_path / "again.json", batch_size=3, max_new_tokens=4
    )
    assert json.loads(again.read_text()) == captions
    stamp = path.stat().st_mtime_ns
    write_reference_captions(tmp_path, model="no/such-model")  # kept: the model is not even loaded
    assert path.stat().st_mtime_ns == stamp
    clip = {
        "_target_": "rankrl.retrieval.clip.ClipRetriever",
        "arch": "ViT-B-16",
    }  # built on first use: never
    task = GrapeTask("cirr", tmp_path, retriever=clip, reference_captions=path)
    query = task.benchmark("cirr").queries["0"]
    prompt = task.messages(query)[-1]["content"]
    assert f"Reference photo: {captions['dev-0-0-img0']}\nChange: change 0" in prompt


def test_a_missing_image_stops_before_the_model_loads(tmp_path: Path, capsys):
    split = _cirr(tmp_path)
    (tmp_path / "cirr" / "images" / split["dev-1-0-img0"]).unlink()
    with pytest.raises(MissingDataError, match="NLVR2"):
        write_reference_captions(tmp_path, model="no/such-model")
    assert main(["--data-dir", str(tmp_path), "--model", "no/such-model"]) == 1
    assert "error: missing data file" in capsys.readouterr().err
    assert not (tmp_path / "cirr" / "reference_captions.json").exists()


def test_without_captions_a_cirr_prompt_names_the_command_that_writes_them(tmp_path: Path):
    _cirr(tmp_path)
    clip = {"_target_": "rankrl.retrieval.clip.ClipRetriever", "arch": "ViT-B-16"}
    task = GrapeTask(
        "cirr", tmp_path, retriever=clip, reference_captions=tmp_path / "cirr" / "reference_captions.json"
    )
    with pytest.raises(MissingDataError, match="python -m rankrl.data.images_captions"):
        task.messages(task.benchmark("cirr").queries["0"])


def test_the_default_captioner_is_blip2():
    assert DEFAULT_CAPTIONER == "Salesforce/blip2-opt-2.7b"
