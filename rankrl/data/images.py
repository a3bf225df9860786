"""Text-to-image retrieval benchmarks of GRAPE: COCO-CN, CIRR, Flickr30k-CN and CVLUE.

Queries are captions (CIRR: a modification text plus a reference image); documents are images,
identified by the dataset's image id, with ``extra['image_path']`` (under ``image_root``, default
``<data_dir>/<folder>/images``) and ``extra['split']``. Image files are never opened here: the
annotations load on machines that have no images, and the retriever reports a missing image when it
encodes one. Each split retrieves from its own gallery (``rankrl.data.split_corpus``), as in the
datasets' own protocols. Split names are ``train``/``dev``/``test`` throughout (the datasets'
``val``/``valid`` become ``dev``).

Where the images come from (none of them are in the shared data copy):
- COCO-CN: MS-COCO 2014 (images.cocodataset.org/zips/train2014.zip and val2014.zip), unpacked to
  ``images/train2014/`` and ``images/val2014/``.
- CIRR: NLVR2 images as CIRR distributes them (github.com/Cuberick-Orion/CIRR), laid out as in
  ``split.rc2.*.json`` (``train/<n>/...png``, ``dev/...png``, ``test1/...png``).
- Flickr30k-CN: ``python -m rankrl.data.prepare --only flickr30k-cn`` writes ``images/<id>.jpg``
  from the base64 images inside Chinese-CLIP's ``Flickr30k-CN.zip``.
- CVLUE: granted on request by its authors (github.com/WangYuxuan93/CVLUE); unpack under ``images/``.
"""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rankrl.data.common import iter_jsonl, parsing, read_json, require
from rankrl.data.errors import MalformedDataError
from rankrl.data.records import Benchmark, Document, Query

COCO_CN_DIR = "coco-cn"
COCO_CN_ARCHIVE = "coco-cn-version1805.tar.gz"
COCO_CN_CAPTIONS = {"human": "imageid.caption.txt", "translated": "imageid.manually-translated-caption.txt"}
COCO_CN_SPLITS = {"train": "coco-cn_train.txt", "dev": "coco-cn_val.txt", "test": "coco-cn_test.txt"}
CIRR_DIR = "cirr"
CIRR_SPLITS = {"train": "train", "dev": "val", "test": "test1"}  # our name -> CIRR's file infix
FLICKR30K_CN_DIR = "flickr30k-cn"
FLICKR30K_CN_SPLITS = {"train": "train", "dev": "valid", "test": "test"}  # our name -> file prefix
CVLUE_DIR = "cvlue"
CVLUE_SPLITS = {"train": "IC_train.json", "dev": "IC_val.json", "test": "IC_test.json"}


def image_document(docid: str, image_path: Path, split: str, **extra: Any) -> Document:
    """An image as a corpus item: no text, its path and split in ``extra``."""
    return Document(docid, "", extra={"image_path": str(image_path), "split": split, **extra})


def _root(folder: Path, image_root: str | Path | None) -> Path:
    return Path(image_root) if image_root is not None else folder / "images"


def load_coco_cn(data_dir: Path, captions: str = "human", image_root: str | Path | None = None) -> Benchmark:
    """COCO-CN Chinese captions -> COCO images, read straight from ``coco-cn/coco-cn-version1805.tar.gz``.

    Args:
        data_dir: the data folder (an unpacked ``coco-cn/coco-cn-version1805/`` works too).
        captions: ``human`` (22,218 written captions, all splits) or ``translated`` (5,000 manual
            translations of English captions, test images only).
        image_root: where ``train2014/`` and ``val2014/`` image folders live.
    """
    if captions not in COCO_CN_CAPTIONS:
        raise ValueError(f"unknown COCO-CN captions {captions!r}; valid: {sorted(COCO_CN_CAPTIONS)}")
    folder = Path(data_dir) / COCO_CN_DIR
    wanted = [*COCO_CN_SPLITS.values(), COCO_CN_CAPTIONS[captions], "imageid.tags.txt"]
    source, texts = _coco_cn_texts(folder, wanted)
    split_of = {
        line.strip(): split
        for split, f in COCO_CN_SPLITS.items()
        for line in texts[f].splitlines()
        if line.strip()
    }
    tags = {}
    for line in texts["imageid.tags.txt"].splitlines():
        if line.strip():
            image_id, *image_tags = line.split()
            tags[image_id] = image_tags
    root = _root(folder, image_root)
    corpus = {
        i: image_document(i, root / _coco_subdir(i) / f"{i}.jpg", s, tags=tags.get(i, []))
        for i, s in split_of.items()
    }
    queries: dict[str, Query] = {}
    splits: dict[str, list[str]] = {split: [] for split in COCO_CN_SPLITS}
    for lineno, line in enumerate(texts[COCO_CN_CAPTIONS[captions]].splitlines(), 1):
        if not line.strip():
            continue
        with parsing(source, f"{COCO_CN_CAPTIONS[captions]} line {lineno}"):
            qid, text = line.split(None, 1)  # tab in one caption file, a space in the other
            image_id = qid.split("#")[0]
            split = split_of[image_id]
        queries[qid] = Query(qid, text.strip(), {"image_id": image_id, "split": split})
        splits[split].append(qid)
    qrels = {qid: {q.extra["image_id"]: 1} for qid, q in queries.items()}
    return Benchmark("coco-cn", queries, corpus, qrels, {s: q for s, q in splits.items() if q})


def _coco_subdir(image_id: str) -> str:
    """COCO's folder for an id like ``COCO_val2014_000000043734``."""
    return "val2014" if "_val2014_" in image_id else "train2014"


def _coco_cn_texts(folder: Path, names: Sequence[str]) -> tuple[Path, dict[str, str]]:
    """The named text files of COCO-CN, from the unpacked folder or else from inside the archive."""
    unpacked = folder / COCO_CN_ARCHIVE.removesuffix(".tar.gz")
    if all((unpacked / n).is_file() for n in names):
        return unpacked, {n: _read_text(unpacked / n) for n in names}
    archive = require(folder / COCO_CN_ARCHIVE, "coco-cn")
    found: dict[str, str] = {}
    with parsing(archive, "tar.gz archive"), tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            base = Path(member.name).name
            if member.isfile() and base in names and not base.startswith("._"):
                found[base] = tar.extractfile(member).read().decode("utf-8")
    missing = [n for n in names if n not in found]
    if missing:
        raise MalformedDataError(archive, f"archive lacks {missing}")
    return archive, found


def _read_text(path: Path) -> str:
    with parsing(path):
        return path.read_text(encoding="utf-8")


def load_cirr(
    data_dir: Path, splits: Sequence[str] | None = None, image_root: str | Path | None = None
) -> Benchmark:
    """CIRR composed image retrieval from ``cirr/cap.rc2.<split>.json`` and ``split.rc2.<split>.json``.

    Args:
        data_dir: the data folder.
        splits: any of ``train``, ``dev`` (CIRR's val), ``test`` (CIRR's test1: no public targets,
            so no qrels). None loads every split whose caption file is present (dev is required).
        image_root: the folder that ``split.rc2.*.json`` paths are relative to.

    Each query's text is the modification caption; ``extra`` has ``reference_image`` (an image id
    of the same split), ``reference_image_path`` and ``image_set`` (the 6 images of CIRR's subset
    setting). CIRR's protocol removes the reference image from the ranking before scoring.
    """
    folder = Path(data_dir) / CIRR_DIR
    if splits is None:
        splits = [s for s, f in CIRR_SPLITS.items() if (folder / f"cap.rc2.{f}.json").is_file()] or ["dev"]
    unknown = set(splits) - set(CIRR_SPLITS)
    if unknown:
        raise ValueError(f"unknown CIRR splits {sorted(unknown)}; valid: {list(CIRR_SPLITS)}")
    root = _root(folder, image_root)
    queries: dict[str, Query] = {}
    corpus: dict[str, Document] = {}
    qrels: dict[str, dict[str, int]] = {}
    split_ids: dict[str, list[str]] = {}
    for split in splits:
        captions_file = require(folder / f"cap.rc2.{CIRR_SPLITS[split]}.json", "cirr")
        images_file = require(folder / f"split.rc2.{CIRR_SPLITS[split]}.json", "cirr")
        with parsing(images_file, "image split"):
            corpus.update((i, image_document(i, root / p, split)) for i, p in read_json(images_file).items())
        split_ids[split] = []
        with parsing(captions_file, "caption"):
            for c in read_json(captions_file):
                qid, reference = str(c["pairid"]), c["reference"]
                extra = {
                    "reference_image": reference,
                    "reference_image_path": corpus[reference].extra["image_path"],
                    "image_set": list(c["img_set"]["members"]),
                    "split": split,
                }
                queries[qid] = Query(qid, c["caption"], extra)
                split_ids[split].append(qid)
                if "target_hard" in c:
                    qrels[qid] = {c["target_hard"]: 1}
    return Benchmark("cirr", queries, corpus, qrels, split_ids)


def load_flickr30k_cn(data_dir: Path, image_root: str | Path | None = None) -> Benchmark:
    """Flickr30k-CN in Chinese-CLIP's layout: ``flickr30k-cn/{train,valid,test}_texts.jsonl``.

    Each line is ``{"text_id", "text", "image_ids"}``; images are ``<image_root>/<image_id>.jpg``
    (the Flickr30k file names). Query ids are ``<split>-<text_id>``.
    """
    folder = Path(data_dir) / FLICKR30K_CN_DIR
    root = _root(folder, image_root)
    queries: dict[str, Query] = {}
    corpus: dict[str, Document] = {}
    qrels: dict[str, dict[str, int]] = {}
    splits: dict[str, list[str]] = {}
    for split, prefix in FLICKR30K_CN_SPLITS.items():
        path = require(folder / f"{prefix}_texts.jsonl", "flickr30k-cn")
        splits[split] = []
        for row in iter_jsonl(path):
            with parsing(path, f"text {row.get('text_id')!r}"):
                qid, images = f"{split}-{row['text_id']}", [str(i) for i in row["image_ids"]]
                queries[qid] = Query(qid, row["text"], {"split": split})
            corpus.update((i, image_document(i, root / f"{i}.jpg", split)) for i in images)
            qrels[qid] = {i: 1 for i in images}
            splits[split].append(qid)
    return Benchmark("flickr30k-cn", queries, corpus, qrels, splits)


def load_cvlue(data_dir: Path, image_root: str | Path | None = None) -> Benchmark:
    """CVLUE image-text retrieval annotations ``cvlue/IC_{train,val,test}.json``.

    Entries are ``{"image": <relative path>, "caption": str}`` (one per caption) or, in the
    evaluation layout, ``{"image": ..., "caption": [str, ...]}``. The relative path is the image id.
    Query ids are ``<split>-<running number>``.
    """
    folder = Path(data_dir) / CVLUE_DIR
    root = _root(folder, image_root)
    queries: dict[str, Query] = {}
    corpus: dict[str, Document] = {}
    qrels: dict[str, dict[str, int]] = {}
    splits: dict[str, list[str]] = {}
    for split, name in CVLUE_SPLITS.items():
        path = require(
            folder / name, "cvlue", "CVLUE images are granted on request, see github.com/WangYuxuan93/CVLUE"
        )
        splits[split] = []
        with parsing(path, "annotation"):
            for entry in read_json(path):
                image = entry["image"]
                captions = entry["caption"] if isinstance(entry["caption"], list) else [entry["caption"]]
                corpus.setdefault(image, image_document(image, root / image, split))
                for caption in captions:
                    qid = f"{split}-{len(splits[split])}"
                    queries[qid] = Query(qid, str(caption), {"split": split})
                    qrels[qid] = {image: 1}
                    splits[split].append(qid)
    return Benchmark("cvlue", queries, corpus, qrels, splits)
