"""GRAPE's multilingual and long-text image benchmarks: XM3600 and Wikipedia (WIT) images.

Neither has a train/dev/test split for retrieval, so images are split by a seeded shuffle
(default 80/10/10) and every caption or text follows its image; each split retrieves from its own
gallery (``rankrl.data.split_corpus``).

- XM3600 (Crossmodal-3600, google.github.io/crossmodal-3600): 3,600 Open Images photos with
  captions in 36 languages. ``xm3600/captions.jsonl`` has one line per image:
  ``{"image/key": ..., "<lang>": {"caption": [...], ...}, ...}``; images are
  ``xm3600/images/<key>.jpg`` (``images.tgz``). Query ids are ``<key>/<lang>/<n>``.
- ``wiki-image``: long Wikipedia text -> its image, built from the Wikipedia-based Image Text
  dataset (WIT, github.com/google-research-datasets/wit). Every ``*.tsv`` / ``*.tsv.gz`` shard in
  ``wiki-image/`` is read; a query is the section text around an image (``context_section_description``,
  else the page description), in one language. GRAPE does not publish its Wikipedia subset, so this
  is our construction. WIT ships image URLs, not images: the retriever expects each image at
  ``wiki-image/images/<docid><ext>`` (``extra['image_url']`` says where to fetch it).
"""

from __future__ import annotations

import csv
import hashlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from rankrl.data.common import iter_jsonl, open_text, parsing, require, split_ids
from rankrl.data.errors import MissingDataError
from rankrl.data.images import image_document
from rankrl.data.records import Benchmark, Query

DEFAULT_FRACTIONS = {"train": 0.8, "dev": 0.1, "test": 0.1}
XM3600_DIR = "xm3600"
WIKI_IMAGE_DIR = "wiki-image"
WIT_TEXT_FIELDS = ("context_section_description", "context_page_description")


def load_xm3600(
    data_dir: Path,
    languages: Sequence[str] | None = None,
    fractions: Mapping[str, float] = DEFAULT_FRACTIONS,
    seed: int = 0,
    image_root: str | Path | None = None,
) -> Benchmark:
    """XM3600 captions (all languages, or ``languages``) -> their images."""
    folder = Path(data_dir) / XM3600_DIR
    path = require(folder / "captions.jsonl", "xm3600")
    root = Path(image_root) if image_root is not None else folder / "images"
    captions: dict[str, list[tuple[str, str, str]]] = {}  # image key -> (qid, language, caption)
    for row in iter_jsonl(path):
        with parsing(path, f"image {row.get('image/key')!r}"):
            key = str(row["image/key"])
            langs = [k for k in row if k != "image/key"] if languages is None else languages
            captions[key] = [
                (f"{key}/{lang}/{n}", lang, text)
                for lang in langs
                if lang in row
                for n, text in enumerate(row[lang]["caption"])
            ]
    image_split = _split_of(split_ids(sorted(captions), fractions, seed))
    corpus = {key: image_document(key, root / f"{key}.jpg", image_split[key]) for key in captions}
    queries: dict[str, Query] = {}
    splits: dict[str, list[str]] = {name: [] for name in fractions}
    for key, rows in captions.items():
        for qid, lang, text in rows:
            queries[qid] = Query(qid, text, {"language": lang, "image_id": key, "split": image_split[key]})
            splits[image_split[key]].append(qid)
    qrels = {qid: {q.extra["image_id"]: 1} for qid, q in queries.items()}
    return Benchmark("xm3600", queries, corpus, qrels, splits)


def load_wiki_image(
    data_dir: Path,
    language: str = "en",
    max_queries: int | None = None,
    min_words: int = 20,
    fractions: Mapping[str, float] = DEFAULT_FRACTIONS,
    seed: int = 0,
    image_root: str | Path | None = None,
) -> Benchmark:
    """Long Wikipedia texts -> their images, from WIT TSV shards in ``wiki-image/``.

    Args:
        language: WIT ``language`` column to keep.
        max_queries: stop after this many (page, image) pairs, in shard order (None: all).
        min_words: skip texts shorter than this (the benchmark is about long queries).
        fractions, seed: the seeded split of images.
    """
    folder = Path(data_dir) / WIKI_IMAGE_DIR
    root = Path(image_root) if image_root is not None else folder / "images"
    images: dict[str, str] = {}  # image docid -> its URL
    queries: dict[str, Query] = {}
    for qid, docid, row in _wit_rows(_wit_shards(folder), language, min_words):
        if max_queries is not None and len(queries) >= max_queries:
            break
        images.setdefault(docid, row["image_url"])
        extra = {"image_id": docid, "page_url": row["page_url"], "page_title": row["page_title"]}
        queries.setdefault(qid, Query(qid, row[WIT_TEXT_FIELDS[0]] or row[WIT_TEXT_FIELDS[1]], extra))
    image_split = _split_of(split_ids(list(images), fractions, seed))
    corpus = {
        docid: image_document(docid, root / f"{docid}{_image_suffix(url)}", image_split[docid], image_url=url)
        for docid, url in images.items()
    }
    splits: dict[str, list[str]] = {name: [] for name in fractions}
    for qid, query in queries.items():
        splits[image_split[query.extra["image_id"]]].append(qid)
    qrels = {qid: {q.extra["image_id"]: 1} for qid, q in queries.items()}
    return Benchmark("wiki-image", queries, corpus, qrels, splits)


def _wit_shards(folder: Path) -> list[Path]:
    """The WIT ``*.tsv`` / ``*.tsv.gz`` files of a folder, in name order."""
    shards = sorted(p for p in folder.glob("*.tsv*") if p.name.endswith((".tsv", ".tsv.gz")))
    if not shards:
        raise MissingDataError(
            folder / "wit_v1.val.all-00000-of-00005.tsv.gz",
            "wiki-image",
            "WIT shards come from storage.googleapis.com/gresearch/wit/ "
            "(see github.com/google-research-datasets/wit); any number of them may sit in the folder",
        )
    return shards


def _wit_rows(shards: list[Path], language: str, min_words: int) -> Iterator[tuple[str, str, dict]]:
    """Yield ``(query id, image docid, row)`` for the usable rows of the WIT shards, in order."""
    csv.field_size_limit(sys.maxsize)  # section texts exceed csv's 128 KB default now and then
    needed = {"language", "page_url", "image_url", "page_title", *WIT_TEXT_FIELDS}
    for shard in shards:
        with open_text(shard) as f:
            reader = csv.DictReader(f, delimiter="\t")
            with parsing(shard, "WIT header"):
                missing = needed - set(reader.fieldnames or [])
                if missing:
                    raise KeyError(f"columns {sorted(missing)}")
            with parsing(shard, "WIT row"):
                for row in reader:
                    text = row[WIT_TEXT_FIELDS[0]] or row[WIT_TEXT_FIELDS[1]] or ""
                    if row["language"] != language or len(text.split()) < min_words or not row["image_url"]:
                        continue
                    yield _hash(row["page_url"] + "\t" + row["image_url"]), _hash(row["image_url"]), row


def _image_suffix(url: str) -> str:
    """The image file extension of a URL (lower case), ``.jpg`` when it has none we know."""
    suffix = Path(url).suffix.lower()
    return suffix if suffix in (".jpg", ".jpeg", ".png", ".gif", ".svg", ".webp") else ".jpg"


def _hash(text: str) -> str:
    """A short stable id for a URL (WIT has no ids)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def _split_of(splits: dict[str, list[str]]) -> dict[str, str]:
    """Invert ``{split: ids}`` into ``{id: split}``."""
    return {i: name for name, ids in splits.items() for i in ids}
