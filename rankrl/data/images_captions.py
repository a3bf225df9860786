"""Captions of CIRR's reference images, written once by an open image-to-text model, for GRAPE's CIRR rows.

    python -m rankrl.data.images_captions --data-dir data                 # BLIP-2 (OPT-2.7B), on a GPU
    python -m rankrl.data.images_captions --data-dir data --model <hub name or folder> --batch-size 64

CIRR's query is a reference photo plus a modification text. GRAPE's rewriter here is a text LLM served by the
rollout engines, which take text only, so the reference photo enters its prompt as a caption
(``rankrl.tasks.grape``, prompt kind ``composed``): this module writes them, ``{image id: caption}``, to
``<data>/cirr/reference_captions.json`` for every reference image of the CIRR splits present (train when its
captions are there, dev, test1), greedily (the same captions on every machine with the same weights). An
existing file is kept; ``--force`` writes it again.

The captioner is BLIP-2 with OPT-2.7B (``Salesforce/blip2-opt-2.7b``, Li et al. 2023), loaded by its hub name
through transformers' ``AutoModelForImageTextToText``: any image-to-text checkpoint of that class can take its
place (``--model``). Captioning the reference image, letting an LLM compose the target's description from it
and the modification text, and retrieving with CLIP is how CIReVL (Karthik et al., ICLR 2024) does
training-free composed retrieval; GRAPE's paper does not say how its rewriter sees the reference image.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rankrl.data.common import require
from rankrl.data.images import CIRR_DIR, load_cirr
from rankrl.data.records import Benchmark

log = logging.getLogger(__name__)

DEFAULT_CAPTIONER = "Salesforce/blip2-opt-2.7b"
CAPTIONS_FILE = "reference_captions.json"
CIRR_IMAGES_HINT = (
    "CIRR's images are NLVR2's, distributed by the CIRR authors (github.com/Cuberick-Orion/CIRR): unpack "
    "them under cirr/images/ as split.rc2.*.json lays them out (train/<n>/..., dev/..., test1/...)"
)


def reference_images(benchmark: Benchmark) -> dict[str, Path]:
    """Every reference image of the benchmark's queries, ``{image id: file}``, sorted by id."""
    found = {
        q.extra["reference_image"]: Path(q.extra["reference_image_path"]) for q in benchmark.queries.values()
    }
    return dict(sorted(found.items()))


def caption_images(
    paths: Sequence[Path],
    model_name: str,
    batch_size: int = 32,
    max_new_tokens: int = 30,
    device: str | None = None,
) -> list[str]:
    """One greedy caption per image, in order, by the image-to-text model ``model_name`` (a hub name or a
    folder); on the GPU when there is one, in bfloat16 there."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        processor = AutoProcessor.from_pretrained(model_name)
        model = AutoModelForImageTextToText.from_pretrained(model_name, dtype=dtype).to(device).eval()
    except OSError as err:
        raise OSError(
            f"captioner {model_name!r} is neither a folder nor in the Hugging Face cache: where the hub is "
            f"reachable, `python -m rankrl.hub_fetch hub/{model_name}` fetches it (make reproduce-grape "
            f"PROFILE=paper does it first), or pass --model <folder> ({err})"
        ) from None
    captions: list[str] = []
    for start in range(0, len(paths), batch_size):
        batch = paths[start : start + batch_size]
        images = [Image.open(p).convert("RGB") for p in batch]
        inputs = processor(images=images, return_tensors="pt").to(device)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(dtype)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        # the decoder's output may start with the prompt it was given (image tokens, BOS): special tokens
        # are dropped, and a prompt of text ids would be cut by its length
        prompt_len = inputs["input_ids"].shape[1] if "input_ids" in inputs else 0
        texts = processor.batch_decode(out[:, prompt_len:], skip_special_tokens=True)
        captions += [" ".join(t.split()) for t in texts]
        log.info("captioned %d / %d images", len(captions), len(paths))
    return captions


def write_reference_captions(
    data_dir: str | Path,
    model: str = DEFAULT_CAPTIONER,
    out: str | Path | None = None,
    image_root: str | Path | None = None,
    batch_size: int = 32,
    max_new_tokens: int = 30,
    force: bool = False,
) -> Path:
    """Caption every CIRR reference image (see the module docstring); returns the captions file."""
    out = Path(out) if out is not None else Path(data_dir) / CIRR_DIR / CAPTIONS_FILE
    if out.is_file() and not force:
        log.info("%s exists: kept (--force writes it again)", out)
        return out
    images = reference_images(load_cirr(Path(data_dir), image_root=image_root))
    for path in images.values():  # every image before the model loads: a missing one stops in a second
        require(path, "cirr", CIRR_IMAGES_HINT)
    captions = caption_images(list(images.values()), model, batch_size, max_new_tokens)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dict(zip(images, captions)), ensure_ascii=False, indent=0) + "\n")
    tmp.replace(out)  # a killed run leaves no half-written file for the rows to read
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rankrl.data.images_captions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data-dir", default="data", help="the data folder (cirr/ inside it)")
    parser.add_argument(
        "--model", default=DEFAULT_CAPTIONER, help="an image-to-text model: hub name or folder"
    )
    parser.add_argument("--out", default=None, help="default: <data-dir>/cirr/reference_captions.json")
    parser.add_argument("--image-root", default=None, help="default: <data-dir>/cirr/images")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=30)
    parser.add_argument("--force", action="store_true", help="write the file again when it exists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    kwargs: dict[str, Any] = vars(args)
    try:
        path = write_reference_captions(kwargs.pop("data_dir"), **kwargs)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
