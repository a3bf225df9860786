"""A stand-in image benchmark for the smoke of GRAPE's paper path, in Flickr30k-CN's layout.

The build machines have none of GRAPE's images. scikit-image's wheel ships real photographs; ten of them,
each with a caption written for this purpose, become ``<out>/flickr30k-cn/{train,valid,test}_texts.jsonl`` and
``<out>/flickr30k-cn/images/<name>.jpg``, which ``rankrl.data.images.load_flickr30k_cn`` reads as it reads
the real set. For checking that the image path runs (``make smoke-grape``), never for numbers.

CLI: ``python -m rankrl.data.smoke --out <data dir>``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rankrl.data.images import FLICKR30K_CN_DIR, FLICKR30K_CN_SPLITS

PHOTOS = {  # scikit-image's sample photographs, with a caption each; 5 train, 5 test
    "astronaut": ("an astronaut in a space suit with a flag", "train"),
    "chelsea": ("a tabby cat looking at the camera", "train"),
    "coffee": ("a cup of coffee on a saucer", "train"),
    "rocket": ("a rocket on its launch pad", "train"),
    "hubble_deep_field": ("galaxies in the deep night sky", "train"),
    "immunohistochemistry": ("stained tissue under a microscope", "test"),
    "retina": ("a photograph of the back of an eye", "test"),
    "camera": ("a man with a camera on a tripod", "test"),
    "coins": ("old coins on a table", "test"),
    "moon": ("the surface of the moon", "test"),
}


def write_photo_benchmark(out: Path) -> Path:
    """Write the stand-in Flickr30k-CN folder under ``out`` (idempotent); returns it."""
    import skimage.data
    from PIL import Image

    folder = Path(out) / FLICKR30K_CN_DIR
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict]] = {split: [] for split in FLICKR30K_CN_SPLITS}
    for k, (name, (caption, split)) in enumerate(PHOTOS.items()):
        image = folder / "images" / f"{name}.jpg"
        if not image.is_file():
            Image.fromarray(getattr(skimage.data, name)()).convert("RGB").save(image)
        rows[split].append({"text_id": k, "text": caption, "image_ids": [name]})
    for split, prefix in FLICKR30K_CN_SPLITS.items():
        (folder / f"{prefix}_texts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[split]))
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rankrl.data.smoke", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a data folder (not the real one)")
    print(write_photo_benchmark(parser.parse_args(argv).out))


if __name__ == "__main__":
    main()
